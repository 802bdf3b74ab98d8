// Activation functions: Relu and its relatives, sigmoid-like curves, Gelu/Mish, PRelu and Clip.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tessel/ops/decompositions.h"
#include "tessel/ops/upgrade.h"
#include "elementwise_engine.h"

namespace tessel {
namespace {

using namespace elementwise;

/// softplus(x) = ln(1 + e^x), written to neither overflow for large x nor lose small results.
template <class C>
C softplus(C x) {
  return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// ---- how fused epilogues (tessel.FusedConv / FusedGemm) apply the activations that allow it; the
// formulas are the fused ops' float reference epilogue.

/// activation_params read from float attributes (their defaults when unset).
EpilogueParamsFn attrParams(std::vector<const char*> names) {
  return [names](const Node& n, const ConstantReader&) -> std::optional<std::vector<float>> {
    std::vector<float> p;
    for (const char* a : names) p.push_back(n.attrFloat(a));
    return p;
  };
}

/// Only the exact (erf) form fuses; the tanh approximation does not.
std::optional<std::vector<float>> geluParams(const Node& n, const ConstantReader&) {
  if (n.attrString("approximate") != "none") return std::nullopt;
  return std::vector<float>{};
}

/// [min, max] from constant scalar inputs (infinite when absent); nullopt when a bound is computed.
std::optional<std::vector<float>> clipParams(const Node& n, const ConstantReader& constant) {
  std::vector<float> p = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  for (size_t i = 1; i <= 2; ++i) {
    if (!n.hasInput(i)) continue;
    const Tensor* bound = constant(n.input(i));
    if (!bound || bound->numel() != 1) return std::nullopt;
    p[i - 1] = static_cast<float>(bound->elementAsDouble(0));
  }
  return p;
}

TESSEL_REGISTER_OP(Relu) {
  return OpDef("Relu").inputs(1).outputs(1).since(6).describe("y = max(x, 0)")
      .traits({OpTrait::Elementwise, OpTrait::NonDecreasing})
      .fusibleEpilogue({0, {}, [](float x, const std::vector<float>&) { return x > 0.0f ? x : 0.0f; }})
      .infer(inferUnary(TypeSet::Signed))
      .kernel(unaryKernel<TypeSet::Signed>([](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(LeakyRelu) {
  return OpDef("LeakyRelu").inputs(1).outputs(1).since(6)
      .attr("alpha", AttrKind::Float, 0.01f)
      .describe("y = x if x >= 0 else alpha * x")
      .traits({OpTrait::Elementwise})
      .fusibleEpilogue({1, attrParams({"alpha"}), [](float x, const std::vector<float>& p) { return x >= 0.0f ? x : p[0] * x; }})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        float alpha = ctx.attrFloat("alpha");
        return [alpha](auto x) { return x >= 0 ? x : static_cast<decltype(x)>(alpha) * x; };
      }))
      .cost(costPerElement(2));
}

TESSEL_REGISTER_OP(ThresholdedRelu) {
  return OpDef("ThresholdedRelu").inputs(1).outputs(1).since(10)
      .attr("alpha", AttrKind::Float, 1.0f)
      .describe("y = x if x > alpha else 0")
      .traits({OpTrait::Elementwise, OpTrait::Activation})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        float alpha = ctx.attrFloat("alpha");
        return [alpha](auto x) { return x > static_cast<decltype(x)>(alpha) ? x : decltype(x)(0); };
      }))
      .cost(costPerElement(1));
}

TESSEL_REGISTER_OP(Elu) {
  return OpDef("Elu").inputs(1).outputs(1).since(6)
      .attr("alpha", AttrKind::Float, 1.0f)
      .describe("y = x if x >= 0 else alpha * (e^x - 1)")
      .traits({OpTrait::Elementwise, OpTrait::Activation})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        float alpha = ctx.attrFloat("alpha");
        return [alpha](auto x) { return x >= 0 ? x : static_cast<decltype(x)>(alpha) * std::expm1(x); };
      }))
      .cost(costPerElement(10));
}

TESSEL_REGISTER_OP(Celu) {
  return OpDef("Celu").inputs(1).outputs(1).since(12)
      .attr("alpha", AttrKind::Float, 1.0f)
      .describe("y = max(0, x) + min(0, alpha * (e^(x / alpha) - 1))")
      .traits({OpTrait::Elementwise, OpTrait::Activation})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        float alpha = ctx.attrFloat("alpha");
        if (alpha == 0.f) ctx.fail("attribute 'alpha' must be non-zero");
        return [alpha](auto x) {
          using C = decltype(x);
          const C a = static_cast<C>(alpha);
          return std::max(C(0), x) + std::min(C(0), a * std::expm1(x / a));
        };
      }))
      .cost(costPerElement(12));
}

TESSEL_REGISTER_OP(Selu) {
  return OpDef("Selu").inputs(1).outputs(1).since(6)
      .attr("alpha", AttrKind::Float, 1.67326319217681884765625f)
      .attr("gamma", AttrKind::Float, 1.05070102214813232421875f)
      .describe("y = gamma * (x if x > 0 else alpha * (e^x - 1))")
      .traits({OpTrait::Elementwise, OpTrait::Activation})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        float alpha = ctx.attrFloat("alpha"), gamma = ctx.attrFloat("gamma");
        return [alpha, gamma](auto x) {
          using C = decltype(x);
          return static_cast<C>(gamma) * (x > 0 ? x : static_cast<C>(alpha) * std::expm1(x));
        };
      }))
      .cost(costPerElement(12));
}

TESSEL_REGISTER_OP(Sigmoid) {
  return OpDef("Sigmoid").inputs(1).outputs(1).since(6).describe("y = 1 / (1 + e^-x)")
      .traits({OpTrait::Elementwise, OpTrait::NonDecreasing})
      .fusibleEpilogue({0, {}, [](float x, const std::vector<float>&) { return 1.0f / (1.0f + std::exp(-x)); }})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernel<TypeSet::Float>([](auto x) {
        using C = decltype(x);
        if (x >= 0) return C(1) / (C(1) + std::exp(-x));
        C e = std::exp(x);  // no overflow for very negative x
        return e / (C(1) + e);
      }))
      .cost(costPerElement(10));
}

TESSEL_REGISTER_OP(HardSigmoid) {
  return OpDef("HardSigmoid").inputs(1).outputs(1).since(6)
      .attr("alpha", AttrKind::Float, 0.2f)
      .attr("beta", AttrKind::Float, 0.5f)
      .describe("y = clamp(alpha * x + beta, 0, 1)")
      .traits({OpTrait::Elementwise})
      .fusibleEpilogue({2, attrParams({"alpha", "beta"}), [](float x, const std::vector<float>& p) {
                          return std::max(0.0f, std::min(1.0f, p[0] * x + p[1]));
                        }})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        float alpha = ctx.attrFloat("alpha"), beta = ctx.attrFloat("beta");
        return [alpha, beta](auto x) {
          using C = decltype(x);
          return std::clamp(static_cast<C>(alpha) * x + static_cast<C>(beta), C(0), C(1));
        };
      }))
      .cost(costPerElement(4));
}

TESSEL_REGISTER_OP(HardSwish) {
  return OpDef("HardSwish").inputs(1).outputs(1).since(14).describe("y = x * clamp(x / 6 + 1/2, 0, 1)")
      .traits({OpTrait::Elementwise})
      .fusibleEpilogue({0, {}, [](float x, const std::vector<float>&) {
                          return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
                        }})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernel<TypeSet::Float>([](auto x) {
        using C = decltype(x);
        return x * std::clamp(x / C(6) + C(0.5), C(0), C(1));
      }))
      .cost(costPerElement(5));
}

TESSEL_REGISTER_OP(Tanh) {
  return OpDef("Tanh").inputs(1).outputs(1).since(6).describe("y = tanh(x)")
      .traits({OpTrait::Elementwise, OpTrait::NonDecreasing})
      .fusibleEpilogue({0, {}, [](float x, const std::vector<float>&) { return std::tanh(x); }})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernel<TypeSet::Float>([](auto x) { return std::tanh(x); }))
      .cost(costPerElement(10));
}

TESSEL_REGISTER_OP(Softplus) {
  return OpDef("Softplus").inputs(1).outputs(1).since(1).describe("y = ln(1 + e^x)")
      .traits({OpTrait::Elementwise, OpTrait::Activation, OpTrait::NonDecreasing})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernel<TypeSet::Float>([](auto x) { return softplus(x); }))
      .cost(costPerElement(10));
}

TESSEL_REGISTER_OP(Softsign) {
  return OpDef("Softsign").inputs(1).outputs(1).since(1).describe("y = x / (1 + |x|)")
      .traits({OpTrait::Elementwise, OpTrait::Activation, OpTrait::NonDecreasing})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernel<TypeSet::Float>([](auto x) { return x / (decltype(x)(1) + std::abs(x)); }))
      .cost(costPerElement(3));
}

TESSEL_REGISTER_OP(Mish) {
  return OpDef("Mish").inputs(1).outputs(1).since(18).describe("y = x * tanh(ln(1 + e^x))")
      .traits({OpTrait::Elementwise, OpTrait::Activation})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernel<TypeSet::Float>([](auto x) { return x * std::tanh(softplus(x)); }))
      .cost(costPerElement(20));
}

TESSEL_REGISTER_OP(Gelu) {
  return OpDef("Gelu").inputs(1).outputs(1).since(20)
      .attr("approximate", AttrKind::String, std::string("none"))
      .describe("y = x * Phi(x) (approximate='tanh': the tanh approximation)")
      .traits({OpTrait::Elementwise})
      .fusibleEpilogue({0, geluParams, [](float x, const std::vector<float>&) {
                          return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f)));
                        }})
      .infer(inferUnary(TypeSet::Float))
      .kernel(unaryKernelWith<TypeSet::Float>([](const KernelContext& ctx) {
        std::string mode = ctx.attrString("approximate");
        if (mode != "none" && mode != "tanh")
          ctx.fail("attribute 'approximate' is '{}'; expected \"none\" or \"tanh\"", mode);
        bool useTanh = mode == "tanh";
        return [useTanh](auto x) {
          using C = decltype(x);
          if (useTanh) {
            const C k = static_cast<C>(0.7978845608028654);  // sqrt(2 / pi)
            return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
          }
          return C(0.5) * x * (C(1) + std::erf(x / static_cast<C>(1.4142135623730951)));
        };
      }))
      .cost(costPerElement(20));
}

TESSEL_REGISTER_OP(Shrink) {
  return OpDef("Shrink").inputs(1).outputs(1).since(9)
      .attr("bias", AttrKind::Float, 0.0f)
      .attr("lambd", AttrKind::Float, 0.5f)
      .describe("y = x + bias if x < -lambd; x - bias if x > lambd; else 0")
      .traits({OpTrait::Elementwise, OpTrait::Activation})
      .infer(inferUnary(TypeSet::Numeric))
      .kernel(unaryKernelWith<TypeSet::Numeric>([](const KernelContext& ctx) {
        double bias = ctx.attrFloat("bias"), lambd = ctx.attrFloat("lambd");
        return [bias, lambd](auto x) {
          using C = decltype(x);
          double v = static_cast<double>(x);
          if (v < -lambd) return static_cast<C>(v + bias);
          if (v > lambd) return static_cast<C>(v - bias);
          return C(0);
        };
      }))
      .cost(costPerElement(2));
}

// ---------------------------------------------------------------------------------------- PRelu

void inferPRelu(InferContext& ctx) {
  checkInputType(ctx, 0, TypeSet::Numeric);
  const TensorType& x = ctx.inputType(0);
  // The slope broadcasts to x (unidirectionally): the broadcast must not grow x.
  auto dims = broadcastDims(x.dims, ctx.inputType(1).dims, ctx.node());
  if (dims && x.dims && dims->size() != x.dims->size())
    ctx.fail("slope of rank {} does not broadcast to the input of rank {}", ctx.inputType(1).rank(), x.rank());
  ctx.setOutputType(0, x);
}

void preluKernel(KernelContext& ctx) {
  requireSameTypes(ctx);
  const Tensor& x = ctx.input(0);
  const Tensor& slope = ctx.input(1);
  if (broadcastInputShapes(ctx) != x.shape())
    ctx.fail("slope of shape {} does not broadcast to the input shape {}", shapeToString(slope.shape()),
             shapeToString(x.shape()));
  dispatchTypeSet<TypeSet::Numeric>(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
    mapBinary<T, T, T>(x, slope, y, [](auto v, auto s) { return v < decltype(v)(0) ? s * v : v; });
  });
}

TESSEL_REGISTER_OP(PRelu) {
  return OpDef("PRelu").inputs(2).outputs(1).since(7)
      .describe("y = x if x >= 0 else slope * x (slope broadcasts to x)")
      .traits({OpTrait::Elementwise, OpTrait::Activation})
      .infer(inferPRelu)
      .kernel(preluKernel)
      .cost(costPerElement(2));
}

// ---------------------------------------------------------------------------------------- Clip

void clipKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  for (size_t i = 1; i < 3; ++i)
    if (ctx.hasInput(i) && ctx.input(i).numel() != 1)
      ctx.fail("input {} ({}) must be a scalar, got shape {}", i, i == 1 ? "min" : "max",
               shapeToString(ctx.input(i).shape()));
  dispatchTypeSet<TypeSet::Numeric>(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    // Bounds converted to x's type (an upgraded Clip-6 may carry f32 bounds for an f16 input).
    // A Clip-6 node that skipped the upgrade still carries its bounds as attributes.
    auto bound = [&](size_t i, const char* legacyAttr, C fallback) {
      if (ctx.hasInput(i)) return load(ctx.input(i).castTo(x.dtype()).template data<T>()[0]);
      if (ctx.hasAttr(legacyAttr))
        return load(Tensor::scalar<float>(ctx.attrFloat(legacyAttr)).castTo(x.dtype()).template data<T>()[0]);
      return fallback;
    };
    const C lo = bound(1, "min", std::numeric_limits<C>::lowest());
    const C hi = bound(2, "max", std::numeric_limits<C>::max());
    Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
    // min(max(x, lo), hi): when lo > hi every element becomes hi, as numpy.clip does; NaN stays NaN.
    mapUnary<T, T>(x, y, [lo, hi](C v) {
      C r = v < lo ? lo : v;
      return r > hi ? hi : r;
    });
  });
}

void inferClip(InferContext& ctx) {
  checkInputType(ctx, 0, TypeSet::Numeric);
  for (size_t i = 1; i < 3; ++i)
    if (ctx.hasInput(i) && ctx.inputType(i).hasRank() && ctx.inputType(i).rank() > 1)
      ctx.fail("input {} ({}) must be a scalar, got rank {}", i, i == 1 ? "min" : "max", ctx.inputType(i).rank());
  ctx.setOutputType(0, ctx.inputType(0));
}

/// Clip before opset 11 took its bounds as float attributes; they become constant inputs.
void upgradeClip(UpgradeContext& ctx) {
  if (ctx.opsetVersion >= 11) return;
  Node& node = ctx.node;
  DType dtype = node.input(0) && node.input(0)->type.dtype != DType::Undefined ? node.input(0)->type.dtype
                                                                                 : DType::Float32;
  for (auto [name, index] : {std::pair<const char*, size_t>{"min", 1}, {"max", 2}})
    if (node.hasAttr(name)) moveAttrToInput(ctx, name, index, Tensor::scalar<float>(node.attrFloat(name)).castTo(dtype));
  node.trimInputs();
}

TESSEL_REGISTER_OP(Clip) {
  return OpDef("Clip").inputs(1, 3).outputs(1).since(6)
      .optionalAttr("min", AttrKind::Float)  // Clip-6 only; moved to an input by the upgrade
      .optionalAttr("max", AttrKind::Float)
      .describe("y = min(max(x, min), max); absent bounds do not clip")
      .traits({OpTrait::Elementwise, OpTrait::NonDecreasing})
      .fusibleEpilogue({2, clipParams, [](float x, const std::vector<float>& p) { return std::min(std::max(x, p[0]), p[1]); }})
      .infer(inferClip)
      .kernel(clipKernel)
      .cost(costPerElement(2))
      .upgrade(upgradeClip);
}

}  // namespace
Node* hardSwishDecomposition(const Node& mul) {
  if (!isOp(mul, "Mul") || mul.numInputs() != 2 || !mul.output(0)) return nullptr;
  auto near = [](float v, double expected) { return std::abs(v - expected) <= 1e-6 * std::abs(expected); };
  for (int side = 0; side < 2; ++side) {
    Value* x = mul.input(side);
    Node* hs = mul.input(1 - side) ? mul.input(1 - side)->producer() : nullptr;
    if (!hs || !isOp(*hs, "HardSigmoid") || hs->input(0) != x || hs->output(0)->uses().size() != 1) continue;
    const float alpha = hs->hasAttr("alpha") ? hs->attrFloat("alpha") : 0.2f;
    const float beta = hs->hasAttr("beta") ? hs->attrFloat("beta") : 0.5f;
    if (near(alpha, 1.0 / 6.0) && near(beta, 0.5) && x->type == mul.output(0)->type) return hs;
  }
  return nullptr;
}

}  // namespace tessel
