// Classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (weights, ignore_index, reductions).
#include <cmath>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

enum class Reduction { None, Sum, Mean };

Reduction parseReduction(const Node& node) {
  std::string r = node.attrString("reduction");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "mean") return Reduction::Mean;
  throw UserError(fmt::format("{}: reduction must be 'none', 'sum' or 'mean', found '{}'", node.describe(), r));
}

/// Checks scores [N, C, d1..dk], target [N, d1..dk] and weight [C]; sets the loss (and log_prob) types.
void inferLoss(InferContext& ctx, bool withLogProb) {
  const Node& node = ctx.node();
  Reduction reduction = parseReduction(node);
  const TensorType& scores = ctx.inputType(0);
  const TensorType& target = ctx.inputType(1);
  if (scores.dtype != DType::Undefined && !isFloat(scores.dtype))
    ctx.fail("input scores must be floating point, found {}", dtypeName(scores.dtype));
  if (target.dtype != DType::Int32 && target.dtype != DType::Int64)
    ctx.fail("target must be int32 or int64, found {}", dtypeName(target.dtype));
  if (scores.hasRank() && scores.rank() < 2) ctx.fail("input scores must have shape [N, C, ...], found {}", scores.toString());
  if (scores.hasRank() && target.hasRank()) {
    if (target.rank() + 1 != scores.rank())
      ctx.fail("target {} must have the shape of the scores {} without the class axis", target.toString(),
               scores.toString());
    for (size_t a = 0; a < target.rank(); ++a) {
      const Dim& t = (*target.dims)[a];
      const Dim& s = (*scores.dims)[a == 0 ? 0 : a + 1];
      if (t.isKnown() && s.isKnown() && t.value != s.value)
        ctx.fail("target {} must have the shape of the scores {} without the class axis", target.toString(),
                 scores.toString());
    }
  }
  if (ctx.hasInput(2)) {
    const TensorType& weight = ctx.inputType(2);
    if (weight.hasRank() && weight.rank() != 1) ctx.fail("weight must be 1-D [C], found {}", weight.toString());
    if (weight.dtype != scores.dtype)
      ctx.fail("weight type {} differs from the scores type {}", dtypeName(weight.dtype), dtypeName(scores.dtype));
  }
  if (reduction == Reduction::None) {
    std::optional<std::vector<Dim>> dims = target.dims;
    ctx.setOutputType(0, TensorType(scores.dtype, dims));
  } else {
    ctx.setOutputType(0, TensorType(scores.dtype, std::vector<Dim>{}));
  }
  if (withLogProb && ctx.hasOutput(1)) ctx.setOutputType(1, scores);
}

/// log-softmax along axis 1 of [N, C, D] data, computed in double.
std::vector<double> logSoftmaxClasses(const std::vector<double>& x, int64_t n, int64_t c, int64_t d) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < c; ++k) m = std::max(m, x[(i * c + k) * d + j]);
      double sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(x[(i * c + k) * d + j] - m);
      double logSum = std::log(sum);
      for (int64_t k = 0; k < c; ++k) out[(i * c + k) * d + j] = x[(i * c + k) * d + j] - m - logSum;
    }
  return out;
}

template <class T>
void writeDoubles(Tensor& t, const std::vector<double>& values) {
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = T(static_cast<compute_t<T>>(values[i]));
}

/// Both losses: loss[n, d] = -logProb[n, target[n, d], d] * weight[target[n, d]], ignored targets weigh 0;
/// 'mean' divides by the sum of the weights of the targets that count.
void lossKernel(KernelContext& ctx, bool softmaxFirst) {
  const Node& node = ctx.node();
  const Tensor& scores = ctx.input(0);
  const Tensor& target = ctx.input(1);
  Reduction reduction = parseReduction(node);
  if (scores.rank() < 2 || target.rank() + 1 != scores.rank())
    ctx.fail("expected scores [N, C, ...] and target [N, ...], found {} and {}", shapeToString(scores.shape()),
             shapeToString(target.shape()));
  int64_t n = scores.shape()[0], c = scores.shape()[1];
  int64_t d = c == 0 || n == 0 ? 0 : scores.numel() / (n * c);
  if (target.numel() != n * d) ctx.fail("target {} does not match scores {}", shapeToString(target.shape()), shapeToString(scores.shape()));
  std::vector<double> x = scores.toDoubleVector();
  if (softmaxFirst) x = logSoftmaxClasses(x, n, c, d);
  std::vector<int64_t> labels = target.toInt64Vector();
  std::vector<double> weights;
  if (ctx.hasInput(2)) {
    weights = ctx.input(2).toDoubleVector();
    if (static_cast<int64_t>(weights.size()) != c) ctx.fail("weight has {} elements, expected C = {}", weights.size(), c);
  }
  std::optional<int64_t> ignore;
  if (ctx.hasAttr("ignore_index")) ignore = ctx.attrInt("ignore_index");
  std::vector<double> loss(n * d, 0.0);
  double weightSum = 0, lossSum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      int64_t label = labels[i * d + j];
      if (ignore && label == *ignore) continue;
      if (label < 0 || label >= c) ctx.fail("target value {} is outside the class range [0, {})", label, c);
      double w = weights.empty() ? 1.0 : weights[label];
      loss[i * d + j] = -x[(i * c + label) * d + j] * w;
      weightSum += w;
      lossSum += loss[i * d + j];
    }
  DType dt = scores.dtype();
  dispatchFloat(dt, node.describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (reduction == Reduction::None) {
      writeDoubles<T>(ctx.allocateOutput(0, dt, target.shape()), loss);
    } else {
      double value = reduction == Reduction::Sum ? lossSum : lossSum / weightSum;
      writeDoubles<T>(ctx.allocateOutput(0, dt, {}), {value});
    }
    if (softmaxFirst && ctx.numOutputs() > 1 && ctx.outputRequested(1))
      writeDoubles<T>(ctx.allocateOutput(1, dt, scores.shape()), x);
  });
}

Cost lossCost(const Node& node, double flopsPerElement) {
  Cost c = movementCost(node);
  if (Value* in = node.input(0); in && in->type.isStatic())
    c.flops = flopsPerElement * static_cast<double>(in->type.staticSize());
  return c;
}

}  // namespace

TESSEL_REGISTER_OP(NegativeLogLikelihoodLoss) {
  return OpDef("NegativeLogLikelihoodLoss")
      .inputs(2, 3)
      .outputs(1)
      .since(12)
      .attr("reduction", AttrKind::String, std::string("mean"))
      .optionalAttr("ignore_index", AttrKind::Int)
      .describe("-input[n, target[n, d], d] * weight[target], reduced by none/sum/weighted mean")
      .infer([](InferContext& ctx) { inferLoss(ctx, false); })
      .kernel([](KernelContext& ctx) { lossKernel(ctx, false); })
      .cost([](const Node& n) { return lossCost(n, 0.1); });
}

TESSEL_REGISTER_OP(SoftmaxCrossEntropyLoss) {
  return OpDef("SoftmaxCrossEntropyLoss")
      .inputs(2, 3)
      .outputs(1, 2)
      .since(12)
      .attr("reduction", AttrKind::String, std::string("mean"))
      .optionalAttr("ignore_index", AttrKind::Int)
      .describe("negative log-likelihood of log-softmax(scores) along the class axis; optional log_prob output")
      .infer([](InferContext& ctx) { inferLoss(ctx, true); })
      .kernel([](KernelContext& ctx) { lossKernel(ctx, true); })
      .cost([](const Node& n) { return lossCost(n, 5); });
}

}  // namespace tessel
