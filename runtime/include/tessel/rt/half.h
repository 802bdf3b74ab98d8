// 16-bit float conversions for generated code, which stores float16 and bfloat16 tensors as uint16_t bits:
// IEEE binary16 and bfloat16 to and from float, rounding to nearest even (NaNs become quiet NaNs).
#pragma once

#include <cstdint>
#include <cstring>

namespace tessel::rt {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  const float sub = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24, exact
  return sign ? -sub : sub;
}

inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to or beyond infinity
  if (a < 0x38800000u) {  // a half subnormal (or zero): round mant24 * 2^(e-150) to a multiple of 2^-24
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(a >> 23);
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((a >> 23) - 112) << 10 | ((a & 0x7fffffu) >> 13);
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// f32 -> bf16 by dropping the low 16 bits (ONNX 1.12's Cast reference data truncates).
inline uint16_t float_to_bf16_truncate(float f) { return static_cast<uint16_t>(float_bits(f) >> 16); }

}  // namespace tessel::rt
