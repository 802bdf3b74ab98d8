// Inline AVX2+FMA vector math (exp, log, tanh, erf, sigmoid, gelu, ...) for kernels and generated code.
// Include only from code compiled with -mavx2 -mfma. Measured maximum errors on [-20, 20] (log: on
// [1e-30, 1e30]) are checked by tests/unit/rt_eltwise_test.cpp:
//   vexp: relative <= 3e-7 (2.5 ulp);  vlog: absolute <= 4e-7 on [1e-3, 1e3] (about 1 ulp of the result);
//   vtanh: absolute <= 3e-7;  vsigmoid: absolute <= 2e-7;  verf: absolute <= 4e-7;  vgelu: absolute <= 1e-6 on [-6, 6].
#pragma once

#include <immintrin.h>

namespace tessel::rt {

/// e^x (Cephes range reduction: x = n ln2 + r, degree-6 polynomial for e^r, scaled by 2^n).
inline __m256 vexp(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447505531f);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so r is exact to float precision (Cody-Waite).
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  __m256i n = _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127));
  return _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
}

/// Natural log (Cephes logf: frexp, degree-8 polynomial). log(0) = -inf, log(x<0) = NaN.
inline __m256 vlog(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 invalid = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  __m256 is_zero = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ);
  __m256 is_inf = _mm256_cmp_ps(x, _mm256_set1_ps(__builtin_inff()), _CMP_EQ_OQ);
  x = _mm256_max_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x00800000)));  // flush denormals
  __m256i bits = _mm256_castps_si256(x);
  __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126));
  // Mantissa in [0.5, 1).
  x = _mm256_or_ps(_mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x007fffff))),
                   _mm256_set1_ps(0.5f));
  __m256 ef = _mm256_cvtepi32_ps(e);
  __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
  __m256 tmp = _mm256_and_ps(x, small);
  x = _mm256_sub_ps(x, one);
  ef = _mm256_sub_ps(ef, _mm256_and_ps(one, small));
  x = _mm256_add_ps(x, tmp);
  __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(7.0376836292e-2f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.1514610310e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.1676998740e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.2420140846e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.4249322787e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.6668057665e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(2.0000714765e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-2.4999993993e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(3.3333331174e-1f));
  y = _mm256_mul_ps(_mm256_mul_ps(y, x), z);
  y = _mm256_fmadd_ps(ef, _mm256_set1_ps(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5f), y);
  x = _mm256_add_ps(x, y);
  x = _mm256_fmadd_ps(ef, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_blendv_ps(x, _mm256_set1_ps(-__builtin_inff()), is_zero);
  x = _mm256_blendv_ps(x, _mm256_set1_ps(__builtin_inff()), is_inf);
  return _mm256_or_ps(x, invalid);  // all-ones bits = NaN
}

/// Odd polynomial / even polynomial evaluation shared by vtanh and verf: x * P(x^2) / Q(x^2).
namespace detail {
/// c[0] x^(N-1) + ... + c[N-1] by Horner's rule.
template <int N>
inline __m256 horner(__m256 x, const float (&c)[N]) {
  __m256 y = _mm256_set1_ps(c[0]);
  for (int i = 1; i < N; ++i) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(c[i]));
  return y;
}

template <int NP, int NQ>
inline __m256 odd_rational(__m256 x, const float (&p)[NP], const float (&q)[NQ]) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  return _mm256_div_ps(_mm256_mul_ps(x, horner(x2, p)), horner(x2, q));
}

// Coefficients, highest power first, shared with vmath512.h's 16-lane versions (one copy of each polynomial).
/// tanh: x * P(x^2) / Q(x^2), the rational 13/6 minimax approximation on [-7.9, 7.9] (as in Eigen).
inline constexpr float kTanhP[] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                                   5.12229709037114e-08f,  1.48572235717979e-05f, 6.37261928875436e-04f,
                                   4.89352455891786e-03f};
inline constexpr float kTanhQ[] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                                   4.89352518554385e-03f};
/// erf: x * P(x^2) / Q(x^2), the rational 13/8 approximation on [-4, 4] (as in Eigen).
inline constexpr float kErfP[] = {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                                  -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                                  -1.60960333262415e-02f};
inline constexpr float kErfQ[] = {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                                  -7.37332916720468e-03f, -1.42647390514189e-02f};
/// 2^f for |f| <= 1/2: the sigmoid's degree-5 near-minimax polynomial (relative error 7.5e-8).
inline constexpr float kExp2Half[] = {1.32765e-3f, 9.67554e-3f, 5.550713e-2f, 2.402212e-1f, 6.9314697e-1f, 1.00000007f};
}  // namespace detail

/// tanh(x): rational 13/6 minimax approximation on [-7.9, 7.9] (as in Eigen), saturating beyond.
inline __m256 vtanh(__m256 x) {
  const __m256 clamp = _mm256_set1_ps(7.90531110763549805f);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_sub_ps(_mm256_setzero_ps(), clamp)), clamp);
  __m256 r = detail::odd_rational(xc, detail::kTanhP, detail::kTanhQ);
  // Below 4e-4, tanh(x) == x to float precision.
  __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(4e-4f),
                              _CMP_LT_OQ);
  return _mm256_blendv_ps(r, x, tiny);
}

/// erf(x): rational 13/8 approximation on [-4, 4] (as in Eigen), +-1 beyond.
inline __m256 verf(__m256 x) {
  const __m256 clamp = _mm256_set1_ps(4.0f);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-4.0f)), clamp);
  return detail::odd_rational(xc, detail::kErfP, detail::kErfQ);
}

/// 1 / (1 + e^-x), with e^-x = 2^t, t = -x log2(e) clamped to [-126, 126], split as n + f (|f| <= 1/2) by
/// the 1.5 * 2^23 rounding trick; 2^f is a degree-5 near-minimax polynomial (relative error 7.5e-8, 2.3e-7
/// evaluated in float), 2^n goes into the exponent bits. 17 vector operations against vexp's 24: on Zen 2
/// (AVX2) SiLU took 0.68 ns per element through vexp, about as long as EfficientNet-B0's convolutions around
/// it. The error of t itself (up to 126 x 6e-8) only matters where e^-x is far from 1 and the sigmoid
/// saturates, so the absolute error stays within 2e-7.
inline __m256 vsigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), magic = _mm256_set1_ps(12582912.0f);
  __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(-1.44269504088896341f));
  // max/min return their second operand when either is NaN: t second keeps a NaN.
  t = _mm256_min_ps(_mm256_set1_ps(126.0f), _mm256_max_ps(_mm256_set1_ps(-126.0f), t));
  const __m256 r = _mm256_add_ps(t, magic);  // 1.5 * 2^23 + round(t)
  const __m256 f = _mm256_sub_ps(t, _mm256_sub_ps(r, magic));
  const __m256 p = detail::horner(f, detail::kExp2Half);
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(r), _mm256_set1_epi32(127 - 0x4B400000)), 23);
  return _mm256_div_ps(one, _mm256_add_ps(one, _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n))));
}

/// x * sigmoid(x) (SiLU / Swish).
inline __m256 vsilu(__m256 x) { return _mm256_mul_ps(x, vsigmoid(x)); }

/// GELU with the exact erf form: 0.5 x (1 + erf(x / sqrt 2)).
inline __m256 vgelu(__m256 x) {
  __m256 e = verf(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
  return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.5f)), _mm256_add_ps(e, _mm256_set1_ps(1.0f)));
}

/// max(0, min(1, alpha x + beta)).
inline __m256 vhardsigmoid(__m256 x, float alpha, float beta) {
  __m256 y = _mm256_fmadd_ps(x, _mm256_set1_ps(alpha), _mm256_set1_ps(beta));
  return _mm256_min_ps(_mm256_max_ps(y, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
}

/// x * hardsigmoid(x; 1/6, 1/2) (ONNX HardSwish).
inline __m256 vhardswish(__m256 x) { return _mm256_mul_ps(x, vhardsigmoid(x, 1.0f / 6.0f, 0.5f)); }

/// Horizontal sum of the 8 lanes.
inline float vreduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Horizontal max of the 8 lanes.
inline float vreduce_max(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Lane mask selecting the first n (0..8) lanes, for _mm256_maskload_ps / _mm256_maskstore_ps.
inline __m256i vtail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// Lane mask of the lanes l (of 8) with 0 <= x0 + l < w: the columns x0 .. x0 + 7 that lie inside a row of
/// w (masked-off lanes of _mm256_maskload_ps are not read, so x0 may be negative or past the row).
inline __m256i vrange_mask(int64_t x0, int64_t w) {
  const __m256i x = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(x0)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), x),
                             _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(w)), x));
}

}  // namespace tessel::rt
