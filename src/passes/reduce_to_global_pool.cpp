// Pass reduce-to-global-pool: ReduceMean / ReduceMax over both spatial axes of an NCHW tensor is a global pool
// (MnasNet and others export their head's pooling as ReduceMean(axes=[2, 3], keepdims=0)). The rewrite gives
// GlobalAveragePool / GlobalMaxPool, followed by a Flatten when keepdims is 0, which every target has.
#include <algorithm>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// The reduced axes of a Reduce* node, normalised to [0, rank), sorted; nullopt when they are not known.
std::optional<std::vector<int64_t>> reducedAxes(const Node& n, int64_t rank) {
  std::vector<int64_t> axes;
  if (n.hasAttr("axes")) {
    axes = n.attrInts("axes");
  } else if (n.hasInput(1)) {
    const Tensor* t = passes::constantData(n.input(1));
    if (!t) return std::nullopt;
    axes = t->toInt64Vector();
  }
  if (axes.empty()) {
    // No axes: every axis, unless noop_with_empty_axes makes the node an identity.
    if (n.hasAttr("noop_with_empty_axes") && n.attrInt("noop_with_empty_axes") != 0) return std::nullopt;
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  return axes;
}

/// The global pool a node computes, or "".
std::string globalPoolOf(const Node& n) {
  if (!n.domain().empty() || !n.output(0) || !passes::isStaticF32(n.input(0))) return "";
  const char* pool = isOp(n, "ReduceMean") ? "GlobalAveragePool" : isOp(n, "ReduceMax") ? "GlobalMaxPool" : nullptr;
  if (!pool || n.input(0)->type.rank() != 4) return "";
  const auto axes = reducedAxes(n, 4);
  return axes && *axes == std::vector<int64_t>{2, 3} ? pool : "";
}

class ReduceToGlobalPoolPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    const std::vector<Node*> order = passes::nodeSnapshot(graph);
    bool changed = false;
    for (Node* n : order) {
      const std::string pool = globalPoolOf(*n);
      if (pool.empty()) continue;
      Value* x = n->input(0);
      const bool keepDims = !n->hasAttr("keepdims") || n->attrInt("keepdims") != 0;
      const std::string name = n->name();
      if (keepDims) {
        passes::replaceChain(graph, {n}, pool, "", {x}, name);
      } else {
        Shape pooledShape = x->type.staticShape();
        pooledShape[2] = pooledShape[3] = 1;
        const std::string pooledName = graph.uniqueName(n->output(0)->name() + "_pooled");
        Node* p = graph.insertNodeBefore(n, pool, {x}, {pooledName}, graph.uniqueName(name + "_pool"));
        p->output(0)->type = TensorType::fromShape(DType::Float32, pooledShape);
        Node* flat = passes::replaceChain(graph, {n}, "Flatten", "", {p->output(0)}, name);
        flat->setAttr("axis", int64_t{1});
      }
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(reduce_to_global_pool, "reduce-to-global-pool",
                     "ReduceMean / ReduceMax over H and W of an NCHW tensor -> GlobalAveragePool / GlobalMaxPool "
                     "(+ Flatten when keepdims=0)",
                     [] { return std::make_unique<ReduceToGlobalPoolPass>(); });

}  // namespace tessel
