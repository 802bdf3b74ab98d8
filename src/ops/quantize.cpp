// Linear quantisation: QuantizeLinear, DequantizeLinear (per-tensor and per-axis), DynamicQuantizeLinear.
#include "nn_common.h"

namespace tessel {
namespace {

using namespace nn;

/// Maps a flat element index of x to the index of its scale / zero point (per-tensor or along `axis`).
struct QuantParamIndex {
  int64_t inner = 1, extent = 1;
  bool perAxis = false;
  int64_t operator()(int64_t i) const { return perAxis ? (i / inner) % extent : 0; }
};

QuantParamIndex quantParamIndex(const KernelContext& ctx, const Tensor& x, const Tensor& scale) {
  QuantParamIndex q;
  if (scale.rank() == 0 || (scale.rank() == 1 && scale.numel() == 1 && x.rank() == 0)) return q;
  if (scale.rank() != 1) ctx.fail("scale must be a scalar or 1-D, has shape {}", shapeToString(scale.shape()));
  const int64_t axis = normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node());
  if (scale.numel() == 1 && x.dim(axis) != 1) return q;  // a one-element 1-D scale applies to everything
  if (scale.numel() != x.dim(axis))
    ctx.fail("scale has {} values but axis {} of the input has extent {}", scale.numel(), axis, x.dim(axis));
  q.perAxis = true;
  q.extent = x.dim(axis);
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.rank(); ++d) q.inner *= x.dim(static_cast<int64_t>(d));
  return q;
}

void checkZeroPointShape(const KernelContext& ctx, size_t idx, const Tensor& scale) {
  if (ctx.hasInput(idx) && ctx.input(idx).numel() != scale.numel())
    ctx.fail("zero point has {} values but scale has {}", ctx.input(idx).numel(), scale.numel());
}

void quantizeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  checkZeroPointShape(ctx, 2, scale);
  QuantParamIndex at = quantParamIndex(ctx, x, scale);
  const DType outType = ctx.hasInput(2) ? ctx.input(2).dtype() : DType::UInt8;
  std::vector<float> xs = toComputeVector<float>(x), scales = toComputeVector<float>(scale);
  std::vector<double> zeros = ctx.hasInput(2) ? ctx.input(2).toDoubleVector() : std::vector<double>(scales.size(), 0.0);
  Tensor& y = ctx.allocateOutput(0, outType, x.shape());
  dispatchNumeric(outType, "QuantizeLinear zero point", [&](auto tag) {
    using Q = typename decltype(tag)::type;
    if constexpr (std::is_same_v<Q, uint8_t> || std::is_same_v<Q, int8_t>) {
      for (int64_t i = 0; i < x.numel(); ++i) {
        const size_t p = static_cast<size_t>(at(i));
        y.data<Q>()[i] = saturateRound<Q>(std::nearbyint(xs[static_cast<size_t>(i)] / scales[p]) + zeros[p]);
      }
    } else {
      ctx.fail("the zero point must be uint8 or int8, is {}", dtypeName(outType));
    }
  });
}

void dequantizeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  checkZeroPointShape(ctx, 2, scale);
  if (ctx.hasInput(2) && ctx.input(2).dtype() != x.dtype())
    ctx.fail("zero point is {} but x is {}; they must match", dtypeName(ctx.input(2).dtype()), dtypeName(x.dtype()));
  QuantParamIndex at = quantParamIndex(ctx, x, scale);
  std::vector<double> xs = x.toDoubleVector();
  std::vector<float> scales = toComputeVector<float>(scale);
  std::vector<double> zeros = ctx.hasInput(2) ? ctx.input(2).toDoubleVector() : std::vector<double>(scales.size(), 0.0);
  Tensor& y = ctx.allocateOutput(0, isFloat(scale.dtype()) ? scale.dtype() : DType::Float32, x.shape());
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const size_t p = static_cast<size_t>(at(static_cast<int64_t>(i)));
    out[i] = static_cast<float>(xs[i] - zeros[p]) * scales[p];
  }
  dispatchFloat(y.dtype(), "DequantizeLinear output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    storeFromCompute<T>(y, out);
  });
}

void dynamicQuantizeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<float> xs = toComputeVector<float>(x);
  float lo = 0, hi = 0;  // the range always includes 0 so that 0 is exactly representable
  for (float v : xs) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const float scale = (hi - lo) / 255.0f;
  const uint8_t zero = scale == 0 ? uint8_t{0} : saturateRound<uint8_t>(std::nearbyint(0.0f - lo / scale));
  Tensor& y = ctx.allocateOutput(0, DType::UInt8, x.shape());
  for (size_t i = 0; i < xs.size(); ++i)
    y.data<uint8_t>()[i] = scale == 0 ? zero : saturateRound<uint8_t>(std::nearbyint(xs[i] / scale) + zero);
  ctx.setOutput(1, Tensor::scalar<float>(scale));
  ctx.setOutput(2, Tensor::scalar<uint8_t>(zero));
}

Cost quantCost(const Node& node) { return costPerElement(2)(node); }

}  // namespace

TESSEL_REGISTER_OP(QuantizeLinear) {
  return OpDef("QuantizeLinear")
      .inputs(2, 3)
      .outputs(1)
      .since(10)
      .attr("axis", AttrKind::Int, int64_t{1})
      .describe("y = saturate(round_half_even(x / y_scale) + y_zero_point), per tensor or along `axis`")
      .infer([](InferContext& ctx) {
        DType out = ctx.hasInput(2) ? ctx.inputType(2).dtype : DType::UInt8;
        if (out != DType::UInt8 && out != DType::Int8) ctx.fail("y_zero_point must be uint8 or int8, is {}", dtypeName(out));
        ctx.setOutputType(0, TensorType(out, ctx.inputType(0).dims));
      })
      .kernel(quantizeKernel)
      .cost(quantCost);
}

TESSEL_REGISTER_OP(DequantizeLinear) {
  return OpDef("DequantizeLinear")
      .inputs(2, 3)
      .outputs(1)
      .since(10)
      .attr("axis", AttrKind::Int, int64_t{1})
      .describe("y = (x - x_zero_point) * x_scale, per tensor or along `axis`")
      .infer([](InferContext& ctx) {
        DType s = ctx.inputType(1).dtype;
        ctx.setOutputType(0, TensorType(isFloat(s) ? s : DType::Float32, ctx.inputType(0).dims));
      })
      .kernel(dequantizeKernel)
      .cost(quantCost);
}

TESSEL_REGISTER_OP(DynamicQuantizeLinear) {
  return OpDef("DynamicQuantizeLinear")
      .inputs(1)
      .outputs(3)
      .since(11)
      .describe("uint8 quantisation with scale and zero point computed from the input's range (including 0)")
      .infer([](InferContext& ctx) {
        if (ctx.inputType(0).dtype != DType::Float32) ctx.fail("input must be f32, is {}", dtypeName(ctx.inputType(0).dtype));
        ctx.setOutputType(0, TensorType(DType::UInt8, ctx.inputType(0).dims));
        ctx.setOutputType(1, TensorType::fromShape(DType::Float32, {}));
        ctx.setOutputType(2, TensorType::fromShape(DType::UInt8, {}));
      })
      .kernel(dynamicQuantizeKernel)
      .cost([](const Node& node) { return costPerElement(4)(node); });
}

}  // namespace tessel
