// Element-wise unary math operators: abs/neg/sign, rounding, exponentials, trigonometry, erf, IsNaN/IsInf.
#include <cmath>
#include <type_traits>

#include "elementwise_engine.h"

namespace tessel {
namespace {

using elementwise::inferPredicate;
using elementwise::inferUnary;
using elementwise::predicateKernelWith;
using elementwise::TypeSet;
using elementwise::unaryKernel;

/// Defines a float-only unary op y = fn(x) with `flops` per element.
#define TESSEL_FLOAT_UNARY(Op, version, flops, doc, ...)                                                  \
  TESSEL_REGISTER_OP(Op) {                                                                               \
    return OpDef(#Op).inputs(1).outputs(1).since(version).describe(doc)                                  \
        .traits({OpTrait::Elementwise})                                                                  \
        .infer(inferUnary(TypeSet::Float))                                                               \
        .kernel(unaryKernel<TypeSet::Float>(__VA_ARGS__))                                                \
        .cost(costPerElement(flops));                                                                    \
  }

TESSEL_FLOAT_UNARY(Sqrt, 6, 1, "y = sqrt(x)", [](auto x) { return std::sqrt(x); })
TESSEL_FLOAT_UNARY(Exp, 6, 8, "y = e^x", [](auto x) { return std::exp(x); })
TESSEL_FLOAT_UNARY(Log, 6, 8, "y = ln(x)", [](auto x) { return std::log(x); })
TESSEL_FLOAT_UNARY(Reciprocal, 6, 1, "y = 1 / x", [](auto x) { return decltype(x)(1) / x; })
TESSEL_FLOAT_UNARY(Ceil, 6, 1, "y = ceil(x)", [](auto x) { return std::ceil(x); })
TESSEL_FLOAT_UNARY(Floor, 6, 1, "y = floor(x)", [](auto x) { return std::floor(x); })
// nearbyint in the default rounding mode rounds halves to even, as ONNX Round requires.
TESSEL_FLOAT_UNARY(Round, 11, 1, "y = x rounded to the nearest integer, halves to even",
                   [](auto x) { return std::nearbyint(x); })
TESSEL_FLOAT_UNARY(Erf, 9, 16, "y = erf(x)", [](auto x) { return std::erf(x); })
TESSEL_FLOAT_UNARY(Sin, 7, 8, "y = sin(x)", [](auto x) { return std::sin(x); })
TESSEL_FLOAT_UNARY(Cos, 7, 8, "y = cos(x)", [](auto x) { return std::cos(x); })
TESSEL_FLOAT_UNARY(Tan, 7, 8, "y = tan(x)", [](auto x) { return std::tan(x); })
TESSEL_FLOAT_UNARY(Asin, 7, 8, "y = arcsin(x)", [](auto x) { return std::asin(x); })
TESSEL_FLOAT_UNARY(Acos, 7, 8, "y = arccos(x)", [](auto x) { return std::acos(x); })
TESSEL_FLOAT_UNARY(Atan, 7, 8, "y = arctan(x)", [](auto x) { return std::atan(x); })
TESSEL_FLOAT_UNARY(Sinh, 9, 8, "y = sinh(x)", [](auto x) { return std::sinh(x); })
TESSEL_FLOAT_UNARY(Cosh, 9, 8, "y = cosh(x)", [](auto x) { return std::cosh(x); })
TESSEL_FLOAT_UNARY(Asinh, 9, 8, "y = arsinh(x)", [](auto x) { return std::asinh(x); })
TESSEL_FLOAT_UNARY(Acosh, 9, 8, "y = arcosh(x)", [](auto x) { return std::acosh(x); })
TESSEL_FLOAT_UNARY(Atanh, 9, 8, "y = artanh(x)", [](auto x) { return std::atanh(x); })

#undef TESSEL_FLOAT_UNARY

TESSEL_REGISTER_OP(Abs) {
  return OpDef("Abs").inputs(1).outputs(1).since(6).describe("y = |x|")
      .traits({OpTrait::Elementwise})
      .infer(inferUnary(TypeSet::Numeric))
      .kernel(unaryKernel<TypeSet::Numeric>([](auto x) {
        using C = decltype(x);
        if constexpr (std::is_unsigned_v<C>) return x;
        else return x < C(0) ? C(-x) : x;
      }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Neg) {
  return OpDef("Neg").inputs(1).outputs(1).since(6).describe("y = -x")
      .traits({OpTrait::Elementwise})
      .infer(inferUnary(TypeSet::Signed))
      .kernel(unaryKernel<TypeSet::Signed>([](auto x) {
        if constexpr (std::is_same_v<decltype(x), bool>) return x;  // never reached: bool is not Signed
        else return decltype(x)(-x);
      }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Sign) {
  return OpDef("Sign").inputs(1).outputs(1).since(9).describe("y = -1, 0 or 1 by the sign of x (NaN stays NaN)")
      .traits({OpTrait::Elementwise})
      .infer(inferUnary(TypeSet::Numeric))
      .kernel(unaryKernel<TypeSet::Numeric>([](auto x) {
        using C = decltype(x);
        if constexpr (std::is_same_v<C, bool>) return x;
        else if constexpr (std::is_unsigned_v<C>) return C(x > C(0) ? 1 : 0);
        else if constexpr (std::is_floating_point_v<C>) return std::isnan(x) ? x : C((x > 0) - (x < 0));
        else return C((x > 0) - (x < 0));
      }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(IsNaN) {
  return OpDef("IsNaN").inputs(1).outputs(1).since(9).describe("y = (x is NaN)")
      .traits({OpTrait::Elementwise})
      .infer(inferPredicate(TypeSet::Float))
      .kernel(predicateKernelWith<TypeSet::Float>([](const KernelContext&) {
        return [](auto x) { return std::isnan(x); };
      }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(IsInf) {
  return OpDef("IsInf").inputs(1).outputs(1).since(10)
      .attr("detect_negative", AttrKind::Int, int64_t{1})
      .attr("detect_positive", AttrKind::Int, int64_t{1})
      .describe("y = (x is +inf and detect_positive) or (x is -inf and detect_negative)")
      .traits({OpTrait::Elementwise})
      .infer(inferPredicate(TypeSet::Float))
      .kernel(predicateKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        bool negative = ctx.attrInt("detect_negative") != 0, positive = ctx.attrInt("detect_positive") != 0;
        return [negative, positive](auto x) { return std::isinf(x) && (x > 0 ? positive : negative); };
      }))
      .cost(costPerElement(1));
}

}  // namespace
}  // namespace tessel
