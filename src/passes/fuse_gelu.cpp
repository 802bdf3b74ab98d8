// Pass fuse-gelu: the decomposed GELUs exporters emit become one Gelu node: the erf form
// x * 0.5 * (1 + Erf(x / sqrt 2)) (Div by sqrt 2 or Mul by 1/sqrt 2) -> Gelu, and the tanh approximation
// x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) (x^3 as Pow(x, 3), x * (x * x) or (x * x) * x)
// -> Gelu{approximate="tanh"}; the outer product in either association ((x * (1 + .)) * 0.5 or (x * 0.5) * (1 + .)).
// Every intermediate must be read only inside its pattern. The tanh form is recombined only when option
// `fuse-gelu.tanh` is 1, by default for the npu target (its vector unit has gelu_tanh; the cpu runtime's gelu
// epilogue is the erf form, and the decomposed tanh form compiles there as fused element-wise code).
#include <cmath>
#include <optional>

#include "rewrite.h"
#include "tessel/ops/decompositions.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

using passes::isStd;
using passes::near;
using passes::otherOperand;
using passes::producerReadOnlyBy;
using passes::scalarConstant;

/// For a binary `op` node reading `x` and a scalar constant near `c` (either order): true.
bool isScalarOp(const Node* n, const char* op, const Value* x, double c) {
  return isStd(n, op) && near(scalarConstant(otherOperand(n, x)), c);
}

/// The outer part shared by both forms, from `phi` (the Erf or Tanh node, whose input chain `inner` reads x):
/// x * 0.5 * (1 + phi). Replaces the whole chain by Gelu(x); false when it does not match.
bool fuseOuter(Graph& graph, Node* phi, Value* x, std::vector<Node*> inner, const std::string& approximate) {
  Node* plusOne = passes::soleUser(phi->output(0));
  if (!isScalarOp(plusOne, "Add", phi->output(0), 1.0)) return false;
  Node* mul = passes::soleUser(plusOne->output(0));
  if (!isStd(mul, "Mul")) return false;
  Value* factor = otherOperand(mul, plusOne->output(0));
  std::vector<Node*> chain;
  if (factor == x) {  // (x * (1 + phi)) * 0.5
    Node* half = passes::soleUser(mul->output(0));
    if (!isScalarOp(half, "Mul", mul->output(0), 0.5)) return false;
    chain = inner;
    chain.insert(chain.end(), {phi, plusOne, mul, half});
  } else {  // (x * 0.5) * (1 + phi)
    Node* half = factor ? producerReadOnlyBy(factor, "Mul", mul) : nullptr;
    if (!half || !isScalarOp(half, "Mul", x, 0.5)) return false;
    chain = {half};
    chain.insert(chain.end(), inner.begin(), inner.end());
    chain.insert(chain.end(), {phi, plusOne, mul});
  }
  if (chain.back()->output(0)->type != x->type) return false;
  Node* gelu = passes::replaceChain(graph, chain, kGeluOp, "", {x}, graph.uniqueName(phi->name() + ".gelu"));
  gelu->setAttr("approximate", approximate);
  return true;
}

/// Erf(x / sqrt 2) or Erf(x * 1/sqrt 2) around `erf`.
bool fuseErfGelu(Graph& graph, Node* erf) {
  Node* scaleDown = erf->input(0)->producer();
  if (!scaleDown || passes::soleUser(erf->input(0)) != erf || !passes::isStaticF32(erf->output(0))) return false;
  Value* x = scaleDown->input(0);
  const bool scaled = (isStd(scaleDown, "Div") && near(scalarConstant(scaleDown->input(1)), std::sqrt(2.0))) ||
                      (isStd(scaleDown, "Mul") && near(scalarConstant(scaleDown->input(1)), std::sqrt(0.5)));
  if (!scaled || x->type != erf->output(0)->type) return false;
  return fuseOuter(graph, erf, x, {scaleDown}, "none");
}

/// The nodes computing x^3 as `cube` (read only by `reader`): Pow(x, 3), x * (x * x) or (x * x) * x; empty if not.
std::vector<Node*> cubeOf(const Value* cube, const Value* x, const Node* reader) {
  if (Node* pow = producerReadOnlyBy(cube, "Pow", reader))
    return pow->input(0) == x && near(scalarConstant(pow->input(1)), 3.0) ? std::vector<Node*>{pow} : std::vector<Node*>{};
  Node* outer = producerReadOnlyBy(cube, "Mul", reader);
  if (!outer) return {};
  Value* square = otherOperand(outer, x);
  Node* sq = square ? producerReadOnlyBy(square, "Mul", outer) : nullptr;
  if (!sq || sq->input(0) != x || sq->input(1) != x) return {};
  return {sq, outer};
}

/// Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) around `tanh`.
bool fuseTanhGelu(Graph& graph, Node* tanh) {
  Value* arg = tanh->input(0);
  Node* scale = producerReadOnlyBy(arg, "Mul", tanh);
  if (!scale || !passes::isStaticF32(tanh->output(0))) return false;
  Value* sum = nullptr;
  for (int i = 0; i < 2 && !sum; ++i)
    if (near(scalarConstant(scale->input(static_cast<size_t>(1 - i))), std::sqrt(2.0 / M_PI))) sum = scale->input(static_cast<size_t>(i));
  Node* add = sum ? producerReadOnlyBy(sum, "Add", scale) : nullptr;
  if (!add) return false;
  for (int i = 0; i < 2; ++i) {  // x + 0.044715 x^3 in either order
    Value* x = add->input(static_cast<size_t>(i));
    Value* term = add->input(static_cast<size_t>(1 - i));
    Node* kappa = producerReadOnlyBy(term, "Mul", add);
    if (!kappa || x->type != tanh->output(0)->type) continue;
    for (int j = 0; j < 2; ++j) {
      if (!near(scalarConstant(kappa->input(static_cast<size_t>(1 - j))), 0.044715)) continue;
      std::vector<Node*> inner = cubeOf(kappa->input(static_cast<size_t>(j)), x, kappa);
      if (inner.empty()) continue;
      inner.insert(inner.end(), {kappa, add, scale});
      return fuseOuter(graph, tanh, x, inner, "tanh");
    }
  }
  return false;
}

class FuseGeluPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    Graph& graph = *model.graph;
    const bool tanhForm = options.get("fuse-gelu.tanh", options.target == "npu" ? "1" : "0") == "1";
    bool changed = false;
    // Each rewrite removes nodes, so candidates are collected per form and found again by name when reached.
    for (auto [op, fuse] : {std::pair{"Erf", &fuseErfGelu}, {kGeluTanhCoreOp, &fuseTanhGelu}}) {
      if (fuse == &fuseTanhGelu && !tanhForm) continue;
      changed |= passes::rewriteEach(graph, op, fuse);
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_gelu, "fuse-gelu",
                     "Erf GELU -> Gelu; tanh GELU -> Gelu{approximate=tanh} (option fuse-gelu.tanh, default on for npu)",
                     [] { return std::make_unique<FuseGeluPass>(); });

}  // namespace tessel
