// IEEE half (float16) and bfloat16 storage types that convert to and from float.
#pragma once

#include <cstdint>
#include <cstring>

namespace tessel {

/// IEEE 754 binary16. Arithmetic happens in float through the implicit conversions.
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  float16(float f) : bits(fromFloat(f)) {}  // NOLINT: implicit by design
  operator float() const { return toFloat(bits); }
  static float16 fromBits(uint16_t b) { float16 h; h.bits = b; return h; }
  static uint16_t fromFloat(float f);
  static float toFloat(uint16_t h);
};

/// bfloat16: the upper 16 bits of a float32, rounded to nearest even.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float f) : bits(fromFloat(f)) {}  // NOLINT: implicit by design
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static bfloat16 fromBits(uint16_t b) { bfloat16 h; h.bits = b; return h; }
  static uint16_t fromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding) >> 16);
  }
};

inline uint16_t float16::fromFloat(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x47800000u) {                                              // overflow -> inf (or exact 65520+)
    if (absx == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // Round to nearest even: values >= 65520 round to inf.
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (absx < 0x38800000u) {  // subnormal or zero in half
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);  // half subnormal = mant24 * 2^(E-126) * 2^-24
    uint32_t halfMant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (halfMant & 1u))) ++halfMant;
    return static_cast<uint16_t>(sign | halfMant);
  }
  uint32_t exp = (absx >> 23) - 112;
  uint32_t mant = absx & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

inline float float16::toFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
      out = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace tessel
