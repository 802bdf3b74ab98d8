// Pass channel-shuffle-to-gather: the channel shuffle exporters spell as Reshape [N, C, H, W] -> [N, g, C/g, H, W],
// Transpose perm [0, 2, 1, 3, 4], Reshape -> [N, C, H, W] (ShuffleNet) becomes one Gather along the channels with
// constant indices: output channel j * g + i reads input channel i * C/g + j. A target that keeps tensors
// channels-last (the NPU) moves those channels by DMA; the 5-D intermediate it cannot store never exists.
// The two intermediates must be read only by the pattern.
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// The groups g of a channel shuffle ending at `last` (the second Reshape), with the chain in `chain`; 0 if none.
int64_t shuffleGroups(Node* last, std::vector<Node*>& chain) {
  if (!isOp(*last, "Reshape") || !last->domain().empty() || !last->output(0)) return 0;
  Node* transpose = last->input(0)->producer();
  if (!transpose || !isOp(*transpose, "Transpose") || passes::soleUser(transpose->output(0)) != last) return 0;
  if (!transpose->hasAttr("perm") || transpose->attrInts("perm") != std::vector<int64_t>{0, 2, 1, 3, 4}) return 0;
  Node* split = transpose->input(0)->producer();
  if (!split || !isOp(*split, "Reshape") || passes::soleUser(split->output(0)) != transpose) return 0;
  const Value* x = split->input(0);
  if (!passes::isStaticF32(x) || !passes::isStaticF32(split->output(0)) || !passes::isStaticF32(last->output(0)))
    return 0;
  const Shape in = x->type.staticShape(), mid = split->output(0)->type.staticShape(),
              out = last->output(0)->type.staticShape();
  if (in.size() != 4 || mid.size() != 5 || out != in) return 0;
  if (mid[0] != in[0] || mid[1] * mid[2] != in[1] || mid[3] != in[2] || mid[4] != in[3] || mid[1] < 2) return 0;
  chain = {split, transpose, last};
  return mid[1];
}

class ChannelShuffleToGatherPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    const std::vector<std::string> results = passes::singleResultNames(graph);  // each rewrite removes nodes
    bool changed = false;
    for (const std::string& name : results) {
      Value* v = graph.findValue(name);
      Node* last = v ? v->producer() : nullptr;
      std::vector<Node*> chain;
      const int64_t g = last ? shuffleGroups(last, chain) : 0;
      if (g == 0) continue;
      Value* x = chain.front()->input(0);
      const int64_t C = x->type.staticShape()[1], perGroup = C / g;
      std::vector<int64_t> idx(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) idx[static_cast<size_t>(c)] = (c % g) * perGroup + c / g;
      Value* indices = graph.addConstant(graph.uniqueName(name + "_shuffle"), Tensor::fromVector<int64_t>({C}, idx));
      Node* gather = passes::replaceChain(graph, chain, "Gather", "", {x, indices}, last->name());
      gather->setAttr("axis", int64_t{1});
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(channel_shuffle_to_gather, "channel-shuffle-to-gather",
                     "Reshape [N,C,H,W]->[N,g,C/g,H,W], Transpose [0,2,1,3,4], Reshape back -> Gather of channels "
                     "(constant indices)",
                     [] { return std::make_unique<ChannelShuffleToGatherPass>(); });

}  // namespace tessel
