// Pass pool-before-pointwise-conv: AveragePool(Conv1x1(x)) -> Conv1x1(AveragePool(x)). A 1x1 convolution with
// stride 1 and no padding is the same linear map at every pixel, and an average pool without padding averages
// pixels with weights that sum to one, so the two commute exactly (the bias too: avg(Wx + b) = W avg(x) + b); the
// convolution then runs on the pooled map, a quarter of the pixels behind DenseNet's 2x2/2 transition pools.
// Pools with padding are left alone (a padded zero would be averaged before the bias is added, not after), as is
// ceil_mode (a partial window at the border).
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

bool allZero(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
}

/// A Conv that maps each pixel on its own: 1x1 kernel, stride 1, no padding, weights (and bias) constant.
bool pointwise(const Node& conv) {
  if (!isOp(conv, "Conv") || !conv.domain().empty() || conv.numOutputs() != 1 || !passes::constantData(conv.input(1)))
    return false;
  if (conv.numInputs() > 2 && conv.input(2) && !passes::constantData(conv.input(2))) return false;
  const Shape w = conv.input(1)->type.isStatic() ? conv.input(1)->type.staticShape() : Shape{};
  if (w.size() != 4 || w[2] != 1 || w[3] != 1) return false;
  const std::vector<int64_t> strides = passes::intsOr(conv, "strides", {1, 1});
  return std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; }) &&
         allZero(passes::intsOr(conv, "pads", {0, 0, 0, 0})) &&
         (!conv.hasAttr("auto_pad") || conv.attrString("auto_pad") == "NOTSET" || conv.attrString("auto_pad") == "VALID");
}

/// An AveragePool whose windows never hold padding: no pads, no auto_pad, no ceil_mode.
bool unpaddedAverage(const Node& pool) {
  if (!isOp(pool, "AveragePool") || !pool.domain().empty()) return false;
  if (pool.hasAttr("ceil_mode") && pool.attrInt("ceil_mode") != 0) return false;
  if (pool.hasAttr("auto_pad") && pool.attrString("auto_pad") != "NOTSET" && pool.attrString("auto_pad") != "VALID") return false;
  return allZero(passes::intsOr(pool, "pads", {0, 0, 0, 0}));
}

class PoolBeforePointwiseConvPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    bool changed = false;
    for (Node* pool : passes::nodeSnapshot(graph)) {
      if (!unpaddedAverage(*pool)) continue;
      Node* conv = pool->input(0) ? pool->input(0)->producer() : nullptr;
      if (!conv || !pointwise(*conv) || passes::soleUser(conv->output(0)) != pool) continue;
      if (!passes::isStaticF32(conv->input(0)) || !passes::isStaticF32(pool->output(0))) continue;
      // The pool now reads the convolution's input (its channels); the convolution moves into the pool's place.
      const Shape x = conv->input(0)->type.staticShape(), y = pool->output(0)->type.staticShape();
      passes::movePoolBefore(graph, conv, pool, TensorType::fromShape(DType::Float32, {y[0], x[1], y[2], y[3]}));
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(pool_before_pointwise_conv, "pool-before-pointwise-conv",
                     "AveragePool(Conv1x1(x)) -> Conv1x1(AveragePool(x)) for unpadded pools and stride-1 unpadded 1x1 "
                     "convolutions (exact: both are linear per pixel): the convolution runs on the pooled map",
                     [] { return std::make_unique<PoolBeforePointwiseConvPass>(); });

}  // namespace tessel
