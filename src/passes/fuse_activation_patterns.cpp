// Pass fuse-activation-patterns: activations exporters spell as several nodes become the one node the targets
// have an instruction or epilogue for (the decomposed forms are defined beside the ops, tessel/ops/decompositions.h):
// x * HardSigmoid(x) with HardSwish's constants -> HardSwish(x). The intermediate must be read only by the pattern.
#include "rewrite.h"
#include "tessel/ops/decompositions.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

class FuseActivationPatternsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    bool changed = false;
    const std::vector<std::string> results = passes::singleResultNames(graph);  // each rewrite removes nodes
    for (const std::string& name : results) {
      Value* v = graph.findValue(name);
      Node* mul = v ? v->producer() : nullptr;
      Node* inner = mul ? hardSwishDecomposition(*mul) : nullptr;
      if (!inner || passes::isGraphOutput(inner->output(0))) continue;
      passes::replaceChain(graph, {inner, mul}, kHardSwishOp, "", {inner->input(0)}, mul->name());
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_activation_patterns, "fuse-activation-patterns",
                     "x * HardSigmoid(x) (alpha 1/6, beta 1/2) -> HardSwish(x)",
                     [] { return std::make_unique<FuseActivationPatternsPass>(); });

}  // namespace tessel
