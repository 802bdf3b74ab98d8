// Pass eliminate-identity: removes nodes that return their input unchanged: Identity, inference Dropout,
// ops the registry marks NoOpOnSameType whose type does not change (Cast, Reshape, Expand, ...), an identity
// Transpose, an operand combined with its op's neutral element (x+0, x*1), a one-input Concat and a Pad whose
// pads are all zero (torchvision's DenseNet exports one before every transition AveragePool).
#include <algorithm>
#include <numeric>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

bool constantAllEqual(const Value* v, double value) {
  const Tensor* t = passes::constantData(v);
  if (!t || t->numel() == 0) return false;
  for (int64_t i = 0; i < t->numel(); ++i)
    if (t->elementAsDouble(i) != value) return false;
  return true;
}

bool sameType(const Value* a, const Value* b) { return a && b && a->type.isStatic() && a->type == b->type; }

/// The input an identity-like node passes through unchanged, or nullptr.
Value* passThrough(const Node& n) {
  if (!n.domain().empty() || !n.output(0)) return nullptr;
  Value* x = n.input(0);
  Value* y = n.output(0);
  if (isOp(n, "Identity")) return x;
  if (isOp(n, "Dropout")) {
    if (n.output(1) && (n.output(1)->hasUses() || passes::isGraphOutput(n.output(1)))) return nullptr;
    if (n.hasAttr("training_mode") && n.attrInt("training_mode") != 0) return nullptr;
    if (n.hasInput(2) && !constantAllEqual(n.input(2), 0.0)) return nullptr;
    return x;
  }
  if (hasTrait(n, OpTrait::NoOpOnSameType)) return sameType(x, y) ? x : nullptr;
  if (isOp(n, "Transpose")) {
    if (!x || !x->type.hasRank()) return nullptr;
    std::vector<int64_t> perm = n.hasAttr("perm") ? n.attrInts("perm") : std::vector<int64_t>{};
    std::vector<int64_t> iota(perm.size());
    std::iota(iota.begin(), iota.end(), 0);
    return !perm.empty() && perm == iota ? x : nullptr;
  }
  if (isOp(n, "Concat") && n.numInputs() == 1) return x;
  if (isOp(n, "Pad")) {
    // Opset >= 11 gives the pads as input 1, older opsets as an attribute; all zero pads in any mode copy.
    bool zeroPads = false;
    if (n.hasInput(1)) {
      zeroPads = constantAllEqual(n.input(1), 0.0);
    } else if (n.hasAttr("pads")) {
      const std::vector<int64_t> pads = n.attrInts("pads");  // by value: one vector for begin and end
      zeroPads = std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
    }
    return zeroPads && sameType(x, y) ? x : nullptr;
  }
  // The neutral element on the right (x + 0, x - 0, x * 1, x / 1), or on the left for commutative ops.
  const OpDef* def = n.def();
  if (!def || !def->neutralElement || n.numInputs() != 2) return nullptr;
  const double neutral = *def->neutralElement;
  if (constantAllEqual(n.input(1), neutral) && sameType(n.input(0), y)) return n.input(0);
  if (def->has(OpTrait::Commutative) && constantAllEqual(n.input(0), neutral) && sameType(n.input(1), y))
    return n.input(1);
  return nullptr;
}

class EliminateIdentityPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    const std::vector<Node*> order = passes::nodeSnapshot(graph);
    bool changed = false;
    for (Node* n : order) {
      Value* source = passThrough(*n);
      if (source && passes::replaceValue(graph, n->output(0), source)) changed = true;
    }
    if (changed) graph.removeUnusedValues();
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(eliminate_identity, "eliminate-identity",
                     "remove Identity, inference Dropout, no-op Cast/Reshape/Transpose/Pad and x+0 / x*1",
                     [] { return std::make_unique<EliminateIdentityPass>(); });

}  // namespace tessel
