// Statistics-based normalisation: LayerNormalization (opset 17, optional Mean/InvStdDev outputs),
// MeanVarianceNormalization and GroupNormalization (opset 18 semantics).
#include <cmath>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

template <class T>
void writeDoubles(Tensor& t, const std::vector<double>& values) {
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = T(static_cast<compute_t<T>>(values[i]));
}

/// `param` (broadcastable to `target`, unidirectionally) expanded to target's element count, as doubles.
std::vector<double> expandTo(const Tensor& param, const Shape& target, const Node& node, const char* what) {
  bool fits = param.rank() <= target.size();
  for (size_t a = 0; fits && a < param.rank(); ++a) {
    int64_t p = param.shape()[a], t = target[target.size() - param.rank() + a];
    fits = p == t || p == 1;
  }
  if (!fits)
    throw UserError(fmt::format("{}: {} of shape {} does not broadcast to {}", node.describe(), what,
                                shapeToString(param.shape()), shapeToString(target)));
  std::vector<double> src = param.toDoubleVector();
  std::vector<int64_t> strides = broadcastStrides(param.shape(), target);
  std::vector<double> out(shapeSize(target));
  std::vector<int64_t> idx(target.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t off = 0;
    for (size_t a = 0; a < target.size(); ++a) off += idx[a] * strides[a];
    out[i] = src[off];
    for (size_t a = target.size(); a-- > 0;) {
      if (++idx[a] < target[a]) break;
      idx[a] = 0;
    }
  }
  return out;
}

// ---------------------------------------------------------------- LayerNormalization

DType stashType(const Node& node) {
  auto t = static_cast<DType>(node.attrInt("stash_type"));
  if (!isFloat(t))
    throw UserError(fmt::format("{}: stash_type must be a floating-point type id, found {}", node.describe(),
                                node.attrInt("stash_type")));
  return t;
}

void inferLayerNorm(InferContext& ctx) {
  const TensorType& x = ctx.inputType(0);
  if (x.dtype != DType::Undefined && !isFloat(x.dtype)) ctx.fail("X must be floating point, found {}", dtypeName(x.dtype));
  DType stash = stashType(ctx.node());
  ctx.setOutputType(0, x);
  if (!x.hasRank()) {
    ctx.setOutputType(1, TensorType(stash, std::nullopt));
    ctx.setOutputType(2, TensorType(stash, std::nullopt));
    return;
  }
  int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = normalizeAxis(ctx.node().attrInt("axis"), rank, ctx.node());
  std::vector<Dim> statDims = *x.dims;
  for (int64_t a = axis; a < rank; ++a) statDims[a] = Dim::known(1);
  ctx.setOutputType(1, TensorType(stash, statDims));
  ctx.setOutputType(2, TensorType(stash, statDims));
}

void layerNormKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.input(0);
  int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = normalizeAxis(ctx.attrInt("axis"), rank, node);
  double epsilon = ctx.attrFloat("epsilon");
  Shape normShape(x.shape().begin() + axis, x.shape().end()), statShape = x.shape();
  for (int64_t a = axis; a < rank; ++a) statShape[a] = 1;
  int64_t inner = shapeSize(normShape), outer = inner == 0 ? 0 : x.numel() / inner;
  std::vector<double> scale = expandTo(ctx.input(1), normShape, node, "Scale");
  std::vector<double> bias = ctx.hasInput(2) ? expandTo(ctx.input(2), normShape, node, "B") : std::vector<double>(inner, 0.0);
  std::vector<double> xs = x.toDoubleVector(), ys(xs.size()), means(outer), invStd(outer);
  for (int64_t o = 0; o < outer; ++o) {
    const double* row = xs.data() + o * inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mean += row[i];
    mean /= static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(inner);
    means[o] = mean;
    invStd[o] = 1.0 / std::sqrt(var + epsilon);
    for (int64_t i = 0; i < inner; ++i) ys[o * inner + i] = (row[i] - mean) * invStd[o] * scale[i] + bias[i];
  }
  dispatchFloat(x.dtype(), node.describe(), [&](auto tag) {
    writeDoubles<typename decltype(tag)::type>(ctx.allocateOutput(0, x.dtype(), x.shape()), ys);
  });
  DType stash = stashType(node);
  dispatchFloat(stash, node.describe(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    if (ctx.outputRequested(1)) writeDoubles<S>(ctx.allocateOutput(1, stash, statShape), means);
    if (ctx.outputRequested(2)) writeDoubles<S>(ctx.allocateOutput(2, stash, statShape), invStd);
  });
}

// ---------------------------------------------------------------- MeanVarianceNormalization

void inferFloatSameAsInput(InferContext& ctx) {
  const TensorType& x = ctx.inputType(0);
  if (x.dtype != DType::Undefined && !isFloat(x.dtype)) ctx.fail("X must be floating point, found {}", dtypeName(x.dtype));
  ctx.setOutputType(0, x);
}

void inferMvn(InferContext& ctx) {
  const TensorType& x = ctx.inputType(0);
  if (x.hasRank())
    for (int64_t a : ctx.node().attrInts("axes")) normalizeAxis(a, static_cast<int64_t>(x.rank()), ctx.node());
  inferFloatSameAsInput(ctx);
}

/// Y = (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over `axes`, exactly as ONNX's function body.
void mvnKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.input(0);
  int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> reduced(rank, false);
  for (int64_t a : ctx.attrInts("axes")) reduced[normalizeAxis(a, rank, node)] = true;
  Shape statShape = x.shape();
  int64_t count = 1;
  for (int64_t a = 0; a < rank; ++a)
    if (reduced[a]) {
      count *= statShape[a];
      statShape[a] = 1;
    }
  std::vector<int64_t> statStrides = contiguousStrides(statShape);
  for (int64_t a = 0; a < rank; ++a)
    if (reduced[a]) statStrides[a] = 0;
  // Map every element to its statistics slot once.
  std::vector<int64_t> slot(x.numel());
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t off = 0;
    for (int64_t a = 0; a < rank; ++a) off += idx[a] * statStrides[a];
    slot[i] = off;
    for (int64_t a = rank; a-- > 0;) {
      if (++idx[a] < x.shape()[a]) break;
      idx[a] = 0;
    }
  }
  std::vector<double> xs = x.toDoubleVector(), sum(shapeSize(statShape), 0.0), sumSq(sum.size(), 0.0);
  for (size_t i = 0; i < xs.size(); ++i) {
    sum[slot[i]] += xs[i];
    sumSq[slot[i]] += xs[i] * xs[i];
  }
  std::vector<double> ys(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    double mean = sum[slot[i]] / static_cast<double>(count);
    double var = sumSq[slot[i]] / static_cast<double>(count) - mean * mean;
    ys[i] = (xs[i] - mean) / (std::sqrt(std::max(var, 0.0)) + 1e-9);
  }
  dispatchFloat(x.dtype(), node.describe(), [&](auto tag) {
    writeDoubles<typename decltype(tag)::type>(ctx.allocateOutput(0, x.dtype(), x.shape()), ys);
  });
}

// ---------------------------------------------------------------- GroupNormalization

/// X [N, C, ...] split into num_groups groups of channels; each group of each sample is normalised, then
/// scaled and shifted per group (opset 18's scale/bias have one entry per group).
void groupNormKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = ctx.input(0);
  int64_t groups = ctx.attrInt("num_groups");
  if (x.rank() < 2) ctx.fail("X must have shape [N, C, ...], found {}", shapeToString(x.shape()));
  int64_t n = x.shape()[0], c = x.shape()[1];
  if (groups <= 0 || c % groups != 0) ctx.fail("num_groups = {} must be positive and divide C = {}", groups, c);
  std::vector<double> scale = ctx.input(1).toDoubleVector(), bias = ctx.input(2).toDoubleVector();
  if (static_cast<int64_t>(scale.size()) != groups || static_cast<int64_t>(bias.size()) != groups)
    ctx.fail("scale and bias must have num_groups = {} elements, found {} and {}", groups, scale.size(), bias.size());
  int64_t groupSize = n * c == 0 ? 0 : x.numel() / (n * groups);
  double epsilon = ctx.attrFloat("epsilon");
  std::vector<double> xs = x.toDoubleVector(), ys(xs.size());
  for (int64_t s = 0; s < n * groups; ++s) {
    const double* g = xs.data() + s * groupSize;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < groupSize; ++i) mean += g[i];
    mean /= static_cast<double>(groupSize);
    for (int64_t i = 0; i < groupSize; ++i) var += (g[i] - mean) * (g[i] - mean);
    var /= static_cast<double>(groupSize);
    double inv = 1.0 / std::sqrt(var + epsilon);
    int64_t group = s % groups;
    for (int64_t i = 0; i < groupSize; ++i) ys[s * groupSize + i] = (g[i] - mean) * inv * scale[group] + bias[group];
  }
  dispatchFloat(x.dtype(), node.describe(), [&](auto tag) {
    writeDoubles<typename decltype(tag)::type>(ctx.allocateOutput(0, x.dtype(), x.shape()), ys);
  });
}

}  // namespace

TESSEL_REGISTER_OP(LayerNormalization) {
  return OpDef("LayerNormalization")
      .inputs(2, 3)
      .outputs(1, 3)
      .since(17)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .attr("stash_type", AttrKind::Int, int64_t{1})
      .describe("(x - mean) / sqrt(var + epsilon) * Scale + B over the axes from `axis` on")
      .infer(inferLayerNorm)
      .kernel(layerNormKernel)
      .cost(costPerElement(8));
}

TESSEL_REGISTER_OP(MeanVarianceNormalization) {
  return OpDef("MeanVarianceNormalization")
      .inputs(1)
      .outputs(1)
      .since(9)
      .attr("axes", AttrKind::Ints, std::vector<int64_t>{0, 2, 3})
      .describe("(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over axes")
      .infer(inferMvn)
      .kernel(mvnKernel)
      .cost(costPerElement(7));
}

TESSEL_REGISTER_OP(GroupNormalization) {
  return OpDef("GroupNormalization")
      .inputs(3)
      .outputs(1)
      .since(18)
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .requiredAttr("num_groups", AttrKind::Int)
      .describe("per-sample, per-group normalisation of channel groups, then per-group scale and bias")
      .infer(inferFloatSameAsInput)
      .kernel(groupNormKernel)
      .cost(costPerElement(8));
}

}  // namespace tessel
