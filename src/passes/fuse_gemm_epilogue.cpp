// Pass fuse-gemm-epilogue: float Gemm becomes tessel.FusedGemm, absorbing a following bias Add (per
// column), a residual Add of the output's shape and an activation.
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

class FuseGemmEpiloguePass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    std::vector<Node*> gemms;
    for (const auto& n : graph.nodes())
      if (n->opType() == "Gemm" && n->domain().empty() && passes::isStaticF32(n->output(0))) gemms.push_back(n.get());
    for (Node* gemm : gemms) {
      const bool hadC = gemm->hasInput(2);
      // A bias Add may only merge into C when C is not scaled by beta.
      const bool allowBias = !hadC || gemm->attrFloat("beta") == 1.0f;
      passes::EpilogueMatch m = passes::matchEpilogue(graph, gemm, gemm->input(2), 1, allowBias);
      Node* fused = passes::emitFused(graph, m, "FusedGemm");
      if (!hadC && fused->hasInput(2)) fused->setAttr("beta", 1.0f);
    }
    return !gemms.empty();
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_gemm_epilogue, "fuse-gemm-epilogue",
                     "turn Gemm into tessel.FusedGemm with bias, residual Add and activation in the epilogue",
                     [] { return std::make_unique<FuseGemmEpiloguePass>(); });

}  // namespace tessel
