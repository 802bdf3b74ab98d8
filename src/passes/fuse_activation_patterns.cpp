// Pass fuse-activation-patterns: activations exporters spell as several nodes become the one node the targets
// have an instruction or epilogue for: x * HardSigmoid(x) (alpha 1/6, beta 1/2, as torch exports hardswish
// below opset 14) -> HardSwish(x). The HardSigmoid must be read only by the Mul.
#include <cmath>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

bool near(float v, double expected) { return std::abs(v - expected) <= 1e-6 * std::abs(expected); }

/// The HardSigmoid(x) of x * HardSigmoid(x) at `mul`, when it has HardSwish's constants and only `mul` reads it.
Node* hardSigmoidOfSameInput(const Node& mul) {
  if (!isOp(mul, "Mul") || mul.numInputs() != 2) return nullptr;
  for (int side = 0; side < 2; ++side) {
    Value* x = mul.input(side);
    Node* hs = mul.input(1 - side) ? mul.input(1 - side)->producer() : nullptr;
    if (!hs || !isOp(*hs, "HardSigmoid") || hs->input(0) != x || passes::soleUser(hs->output(0)) != &mul) continue;
    const float alpha = hs->hasAttr("alpha") ? hs->attrFloat("alpha") : 0.2f;
    const float beta = hs->hasAttr("beta") ? hs->attrFloat("beta") : 0.5f;
    if (near(alpha, 1.0 / 6.0) && near(beta, 0.5) && x->type == mul.output(0)->type) return hs;
  }
  return nullptr;
}

class FuseActivationPatternsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    bool changed = false;
    std::vector<std::string> muls;  // by result name: each rewrite removes nodes
    for (const auto& n : graph.nodes())
      if (isOp(*n, "Mul") && n->output(0)) muls.push_back(n->output(0)->name());
    for (const std::string& name : muls) {
      Value* v = graph.findValue(name);
      Node* mul = v ? v->producer() : nullptr;
      Node* hs = mul ? hardSigmoidOfSameInput(*mul) : nullptr;
      if (!hs) continue;
      passes::replaceChain(graph, {hs, mul}, "HardSwish", "", {hs->input(0)}, mul->name());
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
