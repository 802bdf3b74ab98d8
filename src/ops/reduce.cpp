// Reductions over axes (ReduceSum, ReduceMean, ReduceMax, ... ReduceLogSumExp) and the running sum CumSum.
#include <cmath>
#include <limits>
#include <set>

#include "tessel/ops/upgrade.h"
#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

enum class ReduceKind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

/// Accumulator of exact kinds (sum, product, max...): double for floats, 64-bit for integers so that
/// int64 sums stay exact.
template <class T>
using exact_acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double,
                                       std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>,
                                                          uint64_t, int64_t>>;

template <class T, class V>
T convertTo(V v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

/// The axes a reduction node reduces: from input 1 (opset 13/18 form) or the legacy `axes` attribute.
/// nullopt when the axes input exists but is not known (compile time only).
std::optional<std::vector<int64_t>> reductionAxes(const Node& node, const Tensor* axesInput, bool hasAxesInput) {
  if (hasAxesInput) {
    if (!axesInput) return std::nullopt;
    if (!isInteger(axesInput->dtype()))
      throw UserError(fmt::format("{}: axes input must be int64, found {}", node.describe(),
                                  dtypeName(axesInput->dtype())));
    return axesInput->toInt64Vector();
  }
  if (node.hasAttr("axes")) return node.attrInts("axes");
  return std::vector<int64_t>{};
}

/// Which axes of a rank-`rank` input are reduced. Empty `axes` reduces everything unless
/// noop_with_empty_axes is set (then nothing is reduced).
std::vector<bool> reducedMask(const std::vector<int64_t>& axes, int64_t rank, bool noopWithEmptyAxes,
                              const Node& node) {
  std::vector<bool> mask(rank, axes.empty() && !noopWithEmptyAxes);
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, rank, node);
    if (mask[n]) throw UserError(fmt::format("{}: axis {} is listed twice in axes", node.describe(), a));
    mask[n] = true;
  }
  return mask;
}

void inferReduce(InferContext& ctx) {
  const Node& node = ctx.node();
  const TensorType& in = ctx.inputType(0);
  bool keep = node.attrInt("keepdims") != 0;
  if (ctx.hasInput(1) && ctx.inputType(1).dtype != DType::Int64)
    ctx.fail("axes input must be int64, found {}", dtypeName(ctx.inputType(1).dtype));
  auto axes = reductionAxes(node, ctx.inputValue(1), ctx.hasInput(1));
  if (!in.hasRank()) return ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
  if (!axes) {
    // Unknown axes: with keepdims the rank survives, extents do not.
    if (keep) return ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>(in.rank(), Dim::unknown())));
    return ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
  }
  auto mask = reducedMask(*axes, static_cast<int64_t>(in.rank()), node.attrInt("noop_with_empty_axes") != 0, node);
  std::vector<Dim> dims;
  for (size_t i = 0; i < in.rank(); ++i) {
    if (!mask[i]) dims.push_back((*in.dims)[i]);
    else if (keep) dims.push_back(Dim::known(1));
  }
  ctx.setOutputType(0, TensorType(in.dtype, dims));
}

/// Calls fn(inputIndex, outputIndex) for every element of `shape`, where the output index advances by
/// `mappedStrides[a]` along axis a (0 along reduced axes).
template <class Fn>
void forEachMapped(const Shape& shape, const std::vector<int64_t>& mappedStrides, Fn&& fn) {
  int64_t n = shapeSize(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, off);
    for (size_t a = shape.size(); a-- > 0;) {
      if (++idx[a] < shape[a]) {
        off += mappedStrides[a];
        break;
      }
      off -= mappedStrides[a] * (shape[a] - 1);
      idx[a] = 0;
    }
  }
}

/// Accumulates f(acc, x) of every input element into its output slot.
template <class T, class Acc, class Combine>
std::vector<Acc> accumulate(const Tensor& in, const std::vector<int64_t>& mapped, int64_t outN, Acc init,
                            Combine&& combine) {
  std::vector<Acc> acc(outN, init);
  const T* x = in.data<T>();
  forEachMapped(in.shape(), mapped, [&](int64_t i, int64_t o) { acc[o] = combine(acc[o], x[i], o); });
  return acc;
}

/// Identity of max (high=false) or min (high=true): -inf/+inf for floats, the type's limits for integers.
template <class Acc, class C>
Acc extremeStart(bool high) {
  if constexpr (std::is_floating_point_v<Acc>)
    return high ? std::numeric_limits<Acc>::infinity() : -std::numeric_limits<Acc>::infinity();
  else
    return high ? static_cast<Acc>(std::numeric_limits<C>::max()) : static_cast<Acc>(std::numeric_limits<C>::lowest());
}

template <class T>
void reduceTyped(ReduceKind kind, const Tensor& in, Tensor& out, const std::vector<int64_t>& mapped, int64_t count) {
  using C = compute_t<T>;
  using Acc = exact_acc_t<T>;
  int64_t outN = out.numel();
  T* y = out.data<T>();
  auto store = [&](const auto& acc, auto&& finish) {
    for (int64_t o = 0; o < outN; ++o) y[o] = convertTo<T>(finish(acc[o]));
  };
  auto same = [](auto v) { return v; };
  auto absOf = [](Acc v) { return v < Acc(0) ? Acc(0) - v : v; };
  switch (kind) {
    case ReduceKind::Sum:
      return store(accumulate<T>(in, mapped, outN, Acc(0), [](Acc a, T x, int64_t) { return a + Acc(C(x)); }), same);
    case ReduceKind::SumSquare:
      return store(accumulate<T>(in, mapped, outN, Acc(0), [](Acc a, T x, int64_t) { return a + Acc(C(x)) * Acc(C(x)); }), same);
    case ReduceKind::L1:
      return store(accumulate<T>(in, mapped, outN, Acc(0), [&](Acc a, T x, int64_t) { return a + absOf(Acc(C(x))); }), same);
    case ReduceKind::Prod:
      return store(accumulate<T>(in, mapped, outN, Acc(1), [](Acc a, T x, int64_t) { return a * Acc(C(x)); }), same);
    case ReduceKind::Max: {
      Acc lowest = extremeStart<Acc, C>(false);
      // NaN propagates, as numpy's maximum does.
      return store(accumulate<T>(in, mapped, outN, lowest, [](Acc a, T x, int64_t) {
        Acc v = Acc(C(x));
        return (v > a || v != v) ? v : a;
      }), same);
    }
    case ReduceKind::Min: {
      Acc highest = extremeStart<Acc, C>(true);
      return store(accumulate<T>(in, mapped, outN, highest, [](Acc a, T x, int64_t) {
        Acc v = Acc(C(x));
        return (v < a || v != v) ? v : a;
      }), same);
    }
    case ReduceKind::Mean:
      return store(accumulate<T>(in, mapped, outN, 0.0, [](double a, T x, int64_t) { return a + double(C(x)); }),
                   [&](double s) { return s / static_cast<double>(count); });
    case ReduceKind::L2:
      return store(accumulate<T>(in, mapped, outN, 0.0, [](double a, T x, int64_t) { return a + double(C(x)) * double(C(x)); }),
                   [](double s) { return std::sqrt(s); });
    case ReduceKind::LogSum:
      return store(accumulate<T>(in, mapped, outN, 0.0, [](double a, T x, int64_t) { return a + double(C(x)); }),
                   [](double s) { return std::log(s); });
    case ReduceKind::LogSumExp: {
      // Subtract the per-slot maximum first so large inputs do not overflow exp.
      auto maxes = accumulate<T>(in, mapped, outN, -std::numeric_limits<double>::infinity(),
                                 [](double a, T x, int64_t) { return std::max(a, double(C(x))); });
      auto sums = accumulate<T>(in, mapped, outN, 0.0, [&](double a, T x, int64_t o) {
        return std::isinf(maxes[o]) ? a + std::exp(double(C(x))) : a + std::exp(double(C(x)) - maxes[o]);
      });
      for (int64_t o = 0; o < outN; ++o)
        y[o] = convertTo<T>(std::isinf(maxes[o]) ? std::log(sums[o]) : maxes[o] + std::log(sums[o]));
      return;
    }
  }
}

void reduceKernel(KernelContext& ctx, ReduceKind kind) {
  const Node& node = ctx.node();
  const Tensor& in = ctx.input(0);
  auto axes = *reductionAxes(node, ctx.hasInput(1) ? &ctx.input(1) : nullptr, ctx.hasInput(1));
  int64_t rank = static_cast<int64_t>(in.rank());
  auto mask = reducedMask(axes, rank, node.attrInt("noop_with_empty_axes") != 0, node);
  bool keep = node.attrInt("keepdims") != 0;
  Shape keptShape, outShape;
  int64_t count = 1;
  for (int64_t a = 0; a < rank; ++a) {
    keptShape.push_back(mask[a] ? 1 : in.shape()[a]);
    if (mask[a]) count *= in.shape()[a];
    if (!mask[a] || keep) outShape.push_back(keptShape.back());
  }
  std::vector<int64_t> mapped = contiguousStrides(keptShape);
  for (int64_t a = 0; a < rank; ++a)
    if (mask[a]) mapped[a] = 0;
  Tensor& out = ctx.allocateOutput(0, in.dtype(), outShape);
  dispatchNumeric(in.dtype(), node.describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduceTyped<T>(kind, in, out, mapped, count);
  });
}

/// Legacy forms carry `axes` as an attribute; the canonical form (ReduceSum-13, all Reduce*-18) is an input.
void upgradeReduce(UpgradeContext& ctx) {
  moveIntsAttrToInput(ctx, "axes", 1);
}

Cost reduceCost(const Node& node, double flopsPerElement) {
  Cost c = movementCost(node);
  if (Value* in = node.input(0); in && in->type.isStatic())
    c.flops = flopsPerElement * static_cast<double>(in->type.staticSize());
  return c;
}

OpDef reduceOp(const char* name, ReduceKind kind, double flopsPerElement, const char* doc) {
  return OpDef(name)
      .inputs(1, 2)
      .outputs(1)
      .since(1)
      .attr("keepdims", AttrKind::Int, int64_t{1})
      .attr("noop_with_empty_axes", AttrKind::Int, int64_t{0})
      .optionalAttr("axes", AttrKind::Ints)
      .describe(doc)
      .infer(inferReduce)
      .kernel([kind](KernelContext& ctx) { reduceKernel(ctx, kind); })
      .cost([flopsPerElement](const Node& n) { return reduceCost(n, flopsPerElement); })
      .upgrade(upgradeReduce);
}

// ---------------------------------------------------------------- CumSum

int64_t cumSumAxis(const Tensor& axis, const Node& node, int64_t rank) {
  if (!isInteger(axis.dtype()) || axis.numel() != 1)
    throw UserError(fmt::format("{}: axis input must be an int32/int64 scalar, found {}", node.describe(),
                                axis.summary(2)));
  return normalizeAxis(axis.toInt64Vector()[0], rank, node);
}

void inferCumSum(InferContext& ctx) {
  const TensorType& axisType = ctx.inputType(1);
  if (axisType.dtype != DType::Int32 && axisType.dtype != DType::Int64)
    ctx.fail("axis input must be int32 or int64, found {}", dtypeName(axisType.dtype));
  if (axisType.hasRank() && axisType.rank() > 1) ctx.fail("axis input must be a scalar or 1-D, found {}", axisType.toString());
  const TensorType& in = ctx.inputType(0);
  if (const Tensor* axis = ctx.inputValue(1); axis && in.hasRank()) cumSumAxis(*axis, ctx.node(), in.rank());
  ctx.setOutputType(0, in);
}

void cumSumKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = cumSumAxis(ctx.input(1), ctx.node(), x.rank());
  bool exclusive = ctx.attrInt("exclusive") != 0, reverse = ctx.attrInt("reverse") != 0;
  int64_t len = x.rank() == 0 ? 1 : x.shape()[axis];
  int64_t inner = 1;
  for (size_t a = axis + 1; a < x.rank(); ++a) inner *= x.shape()[a];
  int64_t outer = len * inner == 0 ? 0 : x.numel() / (len * inner);
  Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
  dispatchNumeric(x.dtype(), ctx.node().describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = exact_acc_t<T>;
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        Acc running = 0;
        for (int64_t step = 0; step < len; ++step) {
          int64_t k = reverse ? len - 1 - step : step;
          int64_t at = (o * len + k) * inner + i;
          Acc v = Acc(compute_t<T>(xs[at]));
          if (!exclusive) running += v;
          ys[at] = convertTo<T>(running);
          if (exclusive) running += v;
        }
      }
  });
}

}  // namespace

TESSEL_REGISTER_OP(ReduceSum) { return reduceOp("ReduceSum", ReduceKind::Sum, 1, "sum over axes"); }
TESSEL_REGISTER_OP(ReduceMean) { return reduceOp("ReduceMean", ReduceKind::Mean, 1, "mean over axes"); }
TESSEL_REGISTER_OP(ReduceMax) { return reduceOp("ReduceMax", ReduceKind::Max, 1, "maximum over axes"); }
TESSEL_REGISTER_OP(ReduceMin) { return reduceOp("ReduceMin", ReduceKind::Min, 1, "minimum over axes"); }
TESSEL_REGISTER_OP(ReduceProd) { return reduceOp("ReduceProd", ReduceKind::Prod, 1, "product over axes"); }
TESSEL_REGISTER_OP(ReduceL1) { return reduceOp("ReduceL1", ReduceKind::L1, 2, "sum of |x| over axes"); }
TESSEL_REGISTER_OP(ReduceL2) { return reduceOp("ReduceL2", ReduceKind::L2, 2, "sqrt(sum of x^2) over axes"); }
TESSEL_REGISTER_OP(ReduceLogSum) { return reduceOp("ReduceLogSum", ReduceKind::LogSum, 1, "log(sum of x) over axes"); }
TESSEL_REGISTER_OP(ReduceLogSumExp) {
  return reduceOp("ReduceLogSumExp", ReduceKind::LogSumExp, 4, "log(sum of exp(x)) over axes, computed stably");
}
TESSEL_REGISTER_OP(ReduceSumSquare) {
  return reduceOp("ReduceSumSquare", ReduceKind::SumSquare, 2, "sum of x^2 over axes");
}

TESSEL_REGISTER_OP(CumSum) {
  return OpDef("CumSum")
      .inputs(2)
      .outputs(1)
      .since(11)
      .attr("exclusive", AttrKind::Int, int64_t{0})
      .attr("reverse", AttrKind::Int, int64_t{0})
      .describe("running sum along an axis (optionally exclusive and/or reversed)")
      .infer(inferCumSum)
      .kernel(cumSumKernel)
      .cost(costPerElement(1));
}

}  // namespace tessel
