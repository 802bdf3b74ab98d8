// Pass pool-before-activation: MaxPool(act(x)) -> act(MaxPool(x)) for a unary element-wise op that never
// decreases (OpTrait::NonDecreasing: Relu, Clip, Sigmoid, Tanh, Softplus, Softsign). For such an f,
// max_i f(x_i) = f(max_i x_i) exactly (f of the same element), and a max pool's padding is never the maximum of a
// window that holds an image element. The activation then runs on the pooled map, a
// quarter of the elements behind a stride-2 pool (a CNN's stem: conv -> ReLU -> 3x3/2 max pool). In the npu
// pipeline, where the activation is one vector pass of its own over the convolution's result; the CPU fuses it
// into the convolution's store for free and keeps the original order.
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// Whether `n` is a unary element-wise function that never decreases (the registry's NonDecreasing), its other
/// inputs (Clip's bounds) constants: the node moves behind the pool.
bool monotoneActivation(const Node& n) {
  if (!n.domain().empty() || n.numOutputs() != 1 || !hasTrait(n, OpTrait::NonDecreasing)) return false;
  for (size_t i = 1; i < n.numInputs(); ++i)
    if (n.input(i) && !passes::constantData(n.input(i))) return false;
  return true;
}

class PoolBeforeActivationPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    bool changed = false;
    for (Node* pool : passes::nodeSnapshot(graph)) {
      if (!isOp(*pool, "MaxPool") || !pool->domain().empty()) continue;
      if (pool->numOutputs() > 1 && pool->output(1)) continue;  // the Indices output would change meaning
      Node* act = pool->input(0) ? pool->input(0)->producer() : nullptr;
      if (!act || !monotoneActivation(*act) || passes::soleUser(act->output(0)) != pool) continue;
      if (!passes::isStaticF32(act->input(0)) || !passes::isStaticF32(pool->output(0))) continue;
      // The pool now reads the activation's input; the activation, renamed into the pool's place, its result.
      passes::movePoolBefore(graph, act, pool, pool->output(0)->type);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(pool_before_activation, "pool-before-activation",
                     "MaxPool(act(x)) -> act(MaxPool(x)) for element-wise ops that never decrease "
                     "(OpTrait::NonDecreasing): the activation runs on the pooled map; in the npu pipeline",
                     [] { return std::make_unique<PoolBeforeActivationPass>(); });

}  // namespace tessel
