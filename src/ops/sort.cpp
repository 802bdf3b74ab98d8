// Order-based operators: TopK (stable ties, as ONNX specifies) and ArgMax/ArgMin (first or last extremum).
#include <algorithm>
#include <numeric>

#include "tessel/ops/upgrade.h"
#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

/// The input viewed as [outer, len, inner] around one axis.
struct AxisLayout {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisLayout axisLayout(const Shape& shape, int64_t axis) {
  AxisLayout l;
  for (int64_t a = 0; a < static_cast<int64_t>(shape.size()); ++a) {
    if (a < axis) l.outer *= shape[a];
    else if (a == axis) l.len = shape[a];
    else l.inner *= shape[a];
  }
  return l;
}

// ---------------------------------------------------------------- ArgMax / ArgMin

void inferArgExtremum(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!in.hasRank()) return ctx.setOutputType(0, TensorType(DType::Int64, std::nullopt));
  int64_t axis = normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(in.rank()), ctx.node());
  bool keep = ctx.node().attrInt("keepdims") != 0;
  std::vector<Dim> dims;
  for (int64_t a = 0; a < static_cast<int64_t>(in.rank()); ++a) {
    if (a != axis) dims.push_back((*in.dims)[a]);
    else if (keep) dims.push_back(Dim::known(1));
  }
  ctx.setOutputType(0, TensorType(DType::Int64, dims));
}

void argExtremumKernel(KernelContext& ctx, bool findMax) {
  const Tensor& x = ctx.input(0);
  int64_t axis = normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node());
  bool keep = ctx.attrInt("keepdims") != 0, last = ctx.attrInt("select_last_index") != 0;
  Shape outShape;
  for (int64_t a = 0; a < static_cast<int64_t>(x.rank()); ++a) {
    if (a != axis) outShape.push_back(x.shape()[a]);
    else if (keep) outShape.push_back(1);
  }
  AxisLayout l = axisLayout(x.shape(), axis);
  if (l.len == 0 && l.outer * l.inner > 0) ctx.fail("cannot take the arg{} of an empty axis", findMax ? "max" : "min");
  Tensor& y = ctx.allocateOutput(0, DType::Int64, outShape);
  int64_t* out = y.data<int64_t>();
  dispatchNumeric(x.dtype(), ctx.node().describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* xs = x.data<T>();
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i = 0; i < l.inner; ++i) {
        int64_t best = 0;
        C bestValue = C(xs[o * l.len * l.inner + i]);
        for (int64_t k = 1; k < l.len; ++k) {
          C v = C(xs[(o * l.len + k) * l.inner + i]);
          bool better = findMax ? v > bestValue : v < bestValue;
          if (better || (last && v == bestValue)) {
            best = k;
            bestValue = v;
          }
        }
        out[o * l.inner + i] = best;
      }
  });
}

OpDef argExtremumOp(const char* name, bool findMax) {
  return OpDef(name)
      .inputs(1)
      .outputs(1)
      .since(1)
      .attr("axis", AttrKind::Int, int64_t{0})
      .attr("keepdims", AttrKind::Int, int64_t{1})
      .attr("select_last_index", AttrKind::Int, int64_t{0})
      .describe(findMax ? "index of the maximum along axis (first, or last with select_last_index)"
                        : "index of the minimum along axis (first, or last with select_last_index)")
      .infer(inferArgExtremum)
      .kernel([findMax](KernelContext& ctx) { argExtremumKernel(ctx, findMax); })
      .cost([](const Node& n) {
        Cost c = movementCost(n);
        if (Value* in = n.input(0); in && in->type.isStatic()) c.flops = static_cast<double>(in->type.staticSize());
        return c;
      });
}

// ---------------------------------------------------------------- TopK

/// K from the second input: a 1-element int64 tensor, 0 <= K <= extent of the axis.
int64_t topKCount(const Tensor& k, const Node& node) {
  if (k.dtype() != DType::Int64 || k.numel() != 1)
    throw UserError(fmt::format("{}: K must be a 1-element int64 tensor, found {}", node.describe(), k.summary(2)));
  int64_t value = k.toInt64Vector()[0];
  if (value < 0) throw UserError(fmt::format("{}: K must be non-negative, found {}", node.describe(), value));
  return value;
}

void inferTopK(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (ctx.inputType(1).dtype != DType::Int64) ctx.fail("K must be int64, found {}", dtypeName(ctx.inputType(1).dtype));
  if (!in.hasRank()) {
    ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
    ctx.setOutputType(1, TensorType(DType::Int64, std::nullopt));
    return;
  }
  int64_t axis = normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(in.rank()), ctx.node());
  std::vector<Dim> dims = *in.dims;
  if (const Tensor* k = ctx.inputValue(1)) {
    int64_t count = topKCount(*k, ctx.node());
    if (dims[axis].isKnown() && count > dims[axis].value)
      ctx.fail("K = {} exceeds the extent {} of axis {}", count, dims[axis].value, axis);
    dims[axis] = Dim::known(count);
  } else {
    dims[axis] = Dim::unknown();
  }
  ctx.setOutputType(0, TensorType(in.dtype, dims));
  ctx.setOutputType(1, TensorType(DType::Int64, dims));
}

void topKKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node());
  int64_t k = topKCount(ctx.input(1), ctx.node());
  if (k > x.shape()[axis]) ctx.fail("K = {} exceeds the extent {} of axis {}", k, x.shape()[axis], axis);
  bool largest = ctx.attrInt("largest") != 0;
  Shape outShape = x.shape();
  outShape[axis] = k;
  AxisLayout l = axisLayout(x.shape(), axis);
  Tensor& values = ctx.allocateOutput(0, x.dtype(), outShape);
  Tensor& indices = ctx.allocateOutput(1, DType::Int64, outShape);
  int64_t* idxOut = indices.data<int64_t>();
  dispatchNumeric(x.dtype(), ctx.node().describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* xs = x.data<T>();
    T* vs = values.data<T>();
    std::vector<int64_t> order(l.len);
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i = 0; i < l.inner; ++i) {
        auto at = [&](int64_t j) { return C(xs[(o * l.len + j) * l.inner + i]); };
        std::iota(order.begin(), order.end(), 0);
        // Stable sort: equal values keep ascending index order, as ONNX requires.
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return largest ? at(a) > at(b) : at(a) < at(b); });
        for (int64_t j = 0; j < k; ++j) {
          int64_t dst = (o * k + j) * l.inner + i;
          vs[dst] = xs[(o * l.len + order[j]) * l.inner + i];
          idxOut[dst] = order[j];
        }
      }
  });
}

/// TopK-1 carried K as the attribute `k`; later versions take it as an input.
void upgradeTopK(UpgradeContext& ctx) {
  if (ctx.node.hasAttr("k")) moveAttrToInput(ctx, "k", 1, Tensor::fromVector<int64_t>({1}, {ctx.node.attrInt("k")}));
}

}  // namespace

TESSEL_REGISTER_OP(ArgMax) { return argExtremumOp("ArgMax", true); }
TESSEL_REGISTER_OP(ArgMin) { return argExtremumOp("ArgMin", false); }

TESSEL_REGISTER_OP(TopK) {
  return OpDef("TopK")
      .inputs(1, 2)
      .outputs(2)
      .since(1)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("largest", AttrKind::Int, int64_t{1})
      .attr("sorted", AttrKind::Int, int64_t{1})
      .optionalAttr("k", AttrKind::Int)
      .describe("the K largest (or smallest) elements along axis and their indices, ties by lower index")
      .infer(inferTopK)
      .kernel(topKKernel)
      .cost([](const Node& n) {
        Cost c = movementCost(n);
        if (Value* in = n.input(0); in && in->type.isStatic()) {
          double size = static_cast<double>(in->type.staticSize());
          c.flops = size * std::max(1.0, std::log2(size));
        }
        return c;
      })
      .upgrade(upgradeTopK);
}

}  // namespace tessel
