// The fused epilogue every producing kernel applies while the output is in registers: per-channel
// bias, a residual addend (added before the activation, as ResNet's Add->Relu) and an activation.
#pragma once

#include <cstdint>

namespace tessel::rt {

/// Activation kinds a kernel can fuse, as one list X(enumerator): the enum below and the names the cpu code
/// generator spells in generated code both come from it. Parameters live in Epilogue::alpha / beta:
///   Clip         min(max(x, alpha), beta); Relu6 is Clip(0, 6)
///   LeakyRelu    x >= 0 ? x : alpha x
///   HardSigmoid  max(0, min(1, alpha x + beta))
///   HardSwish    x * HardSigmoid(x; 1/6, 1/2)
///   Silu         x * sigmoid(x)
///   Gelu         0.5 x (1 + erf(x / sqrt 2))
#define TESSEL_RT_ACTIVATIONS(X) \
  X(None)                        \
  X(Relu)                        \
  X(Clip)                        \
  X(LeakyRelu)                   \
  X(Sigmoid)                     \
  X(HardSigmoid)                 \
  X(HardSwish)                   \
  X(Silu)                        \
  X(Gelu)                        \
  X(Tanh)

enum class Activation : uint8_t {
#define TESSEL_RT_ACTIVATION_ENUMERATOR(name) name,
  TESSEL_RT_ACTIVATIONS(TESSEL_RT_ACTIVATION_ENUMERATOR)
#undef TESSEL_RT_ACTIVATION_ENUMERATOR
};

/// What to do to each output value y[c, p] after accumulation:
///   y = act(y + bias[c] + residual[c, p]).
/// In convolutions c is the output channel; in GEMM the axis is chosen by bias_per_column.
struct Epilogue {
  const float* bias = nullptr;      ///< per output channel, or null
  const float* residual = nullptr;  ///< same shape and layout as the output, or null
  int64_t residual_ld = 0;          ///< GEMM only: row stride of residual (0 = same as the output)
  Activation act = Activation::None;
  float alpha = 0.0f;               ///< Clip min, LeakyRelu slope, HardSigmoid alpha
  float beta = 0.0f;                ///< Clip max, HardSigmoid beta
  bool bias_per_column = false;     ///< GEMM only: bias indexed by column n (FC) instead of row m

  /// Convenience constructors for the common cases.
  static Epilogue none() { return {}; }
  static Epilogue with_act(Activation a, float alpha = 0.0f, float beta = 0.0f) {
    Epilogue e;
    e.act = a;
    e.alpha = alpha;
    e.beta = beta;
    return e;
  }
  static Epilogue relu6() { return with_act(Activation::Clip, 0.0f, 6.0f); }

  /// True when the epilogue changes nothing.
  bool is_identity() const { return bias == nullptr && residual == nullptr && act == Activation::None; }
};

/// The epilogue of a slice of an NCHW conv output that starts at output channel `channel0` and element `offset`
/// (an image, a group, a band of rows), for a GEMM writing it: bias and residual advanced, the residual read at the
/// GEMM's ldc, bias per row.
inline Epilogue slice_epilogue(const Epilogue& ep, int64_t channel0, int64_t offset) {
  Epilogue e = ep;
  if (e.bias) e.bias += channel0;
  if (e.residual) e.residual += offset;
  e.residual_ld = 0;
  e.bias_per_column = false;
  return e;
}

/// Printable name of an activation ("relu", "clip", ...).
const char* activation_name(Activation a);

/// Applies an activation to n contiguous floats in place (vectorised).
void apply_activation(float* data, int64_t n, const Epilogue& ep);

/// Adds `residual` (null: nothing) to n contiguous floats in place, then applies ep's activation
/// (ep.bias is ignored: kernels add it in registers). The activation switch is hoisted out of the loop.
void apply_residual_activation(float* data, const float* residual, int64_t n, const Epilogue& ep);

/// Applies a whole epilogue to an NCHW-like buffer: `channels` rows of `plane` contiguous values each.
void apply_epilogue_planar(float* data, int64_t channels, int64_t plane, const Epilogue& ep);

}  // namespace tessel::rt
