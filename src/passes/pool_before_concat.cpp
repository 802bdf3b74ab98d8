// Pass pool-before-concat: MaxPool(Concat(a, b, ...) along channels) -> Concat(MaxPool(a), MaxPool(b), ...). A pool
// works on each channel alone, so pooling each part and concatenating the pooled parts is the same map. SqueezeNet's
// fire modules end in a Concat of two convolutions' results that a 3x3/2 max pool reads: pooled per part, each pool
// reads one convolution's result alone, which the NPU can then pool in that convolution's accumulator tiles
// (NodeTiling::maxPool), and the concatenation holds the pooled map (a quarter of the pixels). Runs before
// pool-before-activation, which then moves each part's activation behind its pool. In the npu pipeline.
#include <set>
#include <string>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

class PoolBeforeConcatPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    bool changed = false;
    for (Node* pool : passes::nodeSnapshot(graph)) {
      if (!isOp(*pool, "MaxPool") || !pool->domain().empty()) continue;
      if (pool->numOutputs() > 1 && pool->output(1)) continue;  // the Indices output would change meaning
      Node* cat = pool->input(0) ? pool->input(0)->producer() : nullptr;
      if (!passes::isStd(cat, "Concat") || passes::soleUser(cat->output(0)) != pool) continue;
      if (!passes::isStaticF32(pool->output(0)) || !passes::isStaticF32(cat->output(0))) continue;
      const Shape pooledShape = pool->output(0)->type.staticShape();
      if (pooledShape.size() != 4) continue;
      const int64_t axis = cat->attrInt("axis");
      if (axis != 1 && axis != -3) continue;
      bool parts = true;
      for (const Value* v : cat->inputs()) parts = parts && v && passes::isStaticF32(v);
      if (!parts) continue;
      std::set<std::string> names;  // node names in use (the parts need names of their own)
      for (const auto& n : graph.nodes()) names.insert(n->name());
      std::vector<Value*> pooled;
      for (Value* v : cat->inputs()) {
        std::string name = pool->name() + "_part" + std::to_string(pooled.size());
        while (names.count(name)) name += "_";
        names.insert(name);
        Node* p = graph.insertNodeBefore(pool, "MaxPool", {v}, {graph.uniqueName(pool->output(0)->name() + "_part")}, name);
        for (const auto& [k, a] : pool->attrs()) p->setAttr(k, a);
        Shape s = pooledShape;
        s[1] = v->type.staticShape()[1];
        p->output(0)->type = TensorType::fromShape(DType::Float32, s);
        pooled.push_back(p->output(0));
      }
      const std::string name = cat->name();
      Node* joined = passes::replaceChain(graph, {cat, pool}, "Concat", "", pooled, name);
      joined->setAttr("axis", int64_t{1});
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(pool_before_concat, "pool-before-concat",
                     "MaxPool(Concat(a, b, ...) along channels) -> Concat(MaxPool(a), MaxPool(b), ...): each part pooled "
                     "alone, so a convolution producing it can pool its own tiles; in the npu pipeline",
                     [] { return std::make_unique<PoolBeforeConcatPass>(); });

}  // namespace tessel
