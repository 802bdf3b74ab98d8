// Element type conversion: Cast (target given by the `to` attribute) and CastLike (target = a tensor's type).
#include <cstring>

#include "elementwise_engine.h"

namespace tessel {
namespace {

/// The DType named by Cast's `to` attribute; UserError naming the node when it is not a tensor type.
DType castTarget(const Node& node) {
  int64_t to = node.attrInt("to");
  bool known = to >= static_cast<int64_t>(DType::Float32) && to <= static_cast<int64_t>(DType::BFloat16);
  if (!known)
    throw UserError(fmt::format("{}: attribute 'to' is {}, which is not a supported element type (1..16)",
                                node.describe(), to));
  return static_cast<DType>(to);
}

/// f32 -> bf16 by dropping the low 16 bits. ONNX 1.12's Cast reference data (test_cast_FLOAT_to_BFLOAT16)
/// truncates; later ONNX releases round to nearest even, which Tessel's bfloat16 type does elsewhere.
Tensor truncateToBFloat16(const Tensor& x) {
  Tensor y(DType::BFloat16, x.shape());
  const float* src = x.data<float>();
  bfloat16* dst = y.data<bfloat16>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof bits);
    dst[i] = bfloat16::fromBits(static_cast<uint16_t>(bits >> 16));
  }
  return y;
}

/// Converts with ONNX Cast semantics (numbers <-> strings included); complex types are rejected.
Tensor convert(const KernelContext& ctx, const Tensor& x, DType to) {
  auto supported = [](DType t) { return t != DType::Complex64 && t != DType::Complex128; };
  if (!supported(x.dtype()) || !supported(to))
    ctx.fail("cannot cast {} to {}: complex types are not supported", dtypeName(x.dtype()), dtypeName(to));
  if (x.dtype() == DType::Float32 && to == DType::BFloat16) return truncateToBFloat16(x);
  try {
    return x.castTo(to);
  } catch (const UserError& e) {  // e.g. a string that is not a number: say which node
    ctx.fail("{}", e.what());
  }
}

TESSEL_REGISTER_OP(Cast) {
  return OpDef("Cast").inputs(1).outputs(1).since(6)
      .requiredAttr("to", AttrKind::Int)
      .describe("y = x converted to the element type `to` (numbers and strings)")
      .traits({OpTrait::Elementwise, OpTrait::NoOpOnSameType})
      .infer([](InferContext& ctx) {
        ctx.setOutputType(0, TensorType(castTarget(ctx.node()), ctx.inputType(0).dims));
      })
      .kernel([](KernelContext& ctx) { ctx.setOutput(0, convert(ctx, ctx.input(0), castTarget(ctx.node()))); })
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(CastLike) {
  return OpDef("CastLike").inputs(2).outputs(1).since(15)
      .describe("y = x converted to the element type of target_type")
      .traits({OpTrait::Elementwise})
      .infer([](InferContext& ctx) {
        ctx.setOutputType(0, TensorType(ctx.inputType(1).dtype, ctx.inputType(0).dims));
      })
      .kernel([](KernelContext& ctx) { ctx.setOutput(0, convert(ctx, ctx.input(0), ctx.input(1).dtype())); })
      .cost(costPerElement(1));
}

}  // namespace
}  // namespace tessel
