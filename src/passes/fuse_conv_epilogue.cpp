// Pass fuse-conv-epilogue: every 2-D float Conv becomes tessel.FusedConv, absorbing a following per-channel
// bias Add, a residual Add (ResNet's skip connection) and an activation into the kernel's epilogue.
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

bool isFusableConv(const Node& n) {
  return isOp(n, "Conv") && n.numOutputs() == 1 && passes::isStaticF32(n.input(0)) &&
         n.input(0)->type.rank() == 4 && passes::isStaticF32(n.output(0));
}

class FuseConvEpiloguePass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    std::vector<Node*> convs;
    for (const auto& n : graph.nodes())
      if (isFusableConv(*n)) convs.push_back(n.get());
    for (Node* conv : convs) {
      passes::EpilogueMatch m = passes::matchEpilogue(graph, conv, conv->input(2), 1);
      passes::emitFused(graph, m, "FusedConv");
    }
    return !convs.empty();
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_conv_epilogue, "fuse-conv-epilogue",
                     "turn 2-D Conv into tessel.FusedConv with bias, residual Add and activation in the epilogue",
                     [] { return std::make_unique<FuseConvEpiloguePass>(); });

}  // namespace tessel
