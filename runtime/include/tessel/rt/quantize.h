// Linear quantisation for generated code: QuantizeLinear, DequantizeLinear (per tensor or along an axis:
// element i uses parameter (i / inner) % extent) and DynamicQuantizeLinear, rounding half to even as ONNX.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tessel::rt {

/// v rounded half to even and clamped to Q's range.
template <class Q>
Q saturate_round(double v) {
  const double r = std::clamp(std::nearbyint(v), static_cast<double>(std::numeric_limits<Q>::min()),
                              static_cast<double>(std::numeric_limits<Q>::max()));
  return static_cast<Q>(r);
}

/// y = saturate(round(x / scale) + zero_point); zero_point may be null (0).
template <class Q>
void quantize_linear(const float* x, int64_t n, const float* scale, const Q* zero_point, int64_t inner, int64_t extent,
                     Q* y) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = extent > 1 ? (i / inner) % extent : 0;
    const double zero = zero_point ? static_cast<double>(zero_point[p]) : 0.0;
    y[i] = saturate_round<Q>(std::nearbyint(x[i] / scale[p]) + zero);
  }
}

/// y = (x - zero_point) * scale in float; zero_point may be null (0).
template <class Q>
void dequantize_linear(const Q* x, int64_t n, const float* scale, const Q* zero_point, int64_t inner, int64_t extent,
                       float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = extent > 1 ? (i / inner) % extent : 0;
    const double zero = zero_point ? static_cast<double>(zero_point[p]) : 0.0;
    y[i] = static_cast<float>(static_cast<double>(x[i]) - zero) * scale[p];
  }
}

/// DynamicQuantizeLinear: uint8 y with the scale and zero point of x's range widened to include 0.
inline void dynamic_quantize_linear(const float* x, int64_t n, uint8_t* y, float* scale, uint8_t* zero_point) {
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  const float s = (hi - lo) / 255.0f;
  const uint8_t zero = s == 0 ? uint8_t{0} : saturate_round<uint8_t>(std::nearbyint(0.0f - lo / s));
  for (int64_t i = 0; i < n; ++i) y[i] = s == 0 ? zero : saturate_round<uint8_t>(std::nearbyint(x[i] / s) + zero);
  *scale = s;
  *zero_point = zero;
}

}  // namespace tessel::rt
