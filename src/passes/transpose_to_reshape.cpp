// Pass transpose-to-reshape: a Transpose that moves only axes of size 1 keeps every element where it was in
// memory (the other axes keep their order), so it is a Reshape: a view on the npu target and no copy on the cpu.
// Transformer exports are full of them: torchvision's ViT turns [1, 197, 768] into [197, 1, 768] and back around
// every attention block (24 copies of 600 KB per inference).
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// Whether `perm` applied to `shape` only moves axes of size 1 (the others stay in increasing order).
bool movesOnlyUnitAxes(const Shape& shape, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t a : perm) {
    if (a < 0 || a >= static_cast<int64_t>(shape.size())) return false;
    if (shape[static_cast<size_t>(a)] == 1) continue;
    if (a < last) return false;
    last = a;
  }
  return true;
}

bool rewrite(Graph& graph, Node* n) {
  if (!passes::isStd(n, "Transpose") || !n->input(0)->type.isStatic() || !n->output(0)->type.isStatic()) return false;
  const Shape in = n->input(0)->type.staticShape();
  std::vector<int64_t> perm;
  if (n->hasAttr("perm")) {
    perm = n->attrInts("perm");
  } else {  // the default reverses the axes
    for (int64_t a = static_cast<int64_t>(in.size()) - 1; a >= 0; --a) perm.push_back(a);
  }
  if (perm.size() != in.size() || !movesOnlyUnitAxes(in, perm)) return false;
  const Shape out = n->output(0)->type.staticShape();
  Value* shape = graph.addConstant(graph.uniqueName(n->name() + ".shape"),
                                   Tensor::fromVector<int64_t>({static_cast<int64_t>(out.size())}, out));
  const std::string name = n->name();
  passes::replaceChain(graph, {n}, "Reshape", "", {n->input(0), shape}, name);
  return true;
}

class TransposeToReshapePass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override { return passes::rewriteEach(*model.graph, "Transpose", &rewrite); }
};

}  // namespace

TESSEL_REGISTER_PASS(transpose_to_reshape, "transpose-to-reshape",
                     "a Transpose that moves only axes of size 1 -> Reshape (no data moves)",
                     [] { return std::make_unique<TransposeToReshapePass>(); });

}  // namespace tessel
