// Inline AVX-512 vector math: the 16-lane counterparts of vmath.h (same polynomials, same documented
// errors, checked by tests/unit/rt_eltwise_test.cpp in the AVX-512 build), used by the kernels of the AVX-512
// runtime for activations in their stores. The one difference: sigmoid and SiLU take 1 / (1 + e^-x) from the
// 14-bit reciprocal estimate refined by one Newton step (about 1 ulp) instead of a division, which on 512-bit
// registers costs more than the exponential.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include "tessel/rt/epilogue.h"
#include "tessel/rt/vmath.h"

// GCC 12's own intrinsic headers (_mm512_undefined_* pass-through operands) trip -Wmaybe-uninitialized wherever these
// functions are inlined; nothing here is uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace tessel::rt {

namespace detail {
/// c[0] x^(N-1) + ... + c[N-1] by Horner's rule (vmath.h's horner on 16 lanes).
template <int N>
inline __m512 horner512(__m512 x, const float (&c)[N]) {
  __m512 y = _mm512_set1_ps(c[0]);
  for (int i = 1; i < N; ++i) y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(c[i]));
  return y;
}
}  // namespace detail

/// e^x (vexp's Cephes range reduction and polynomial; 2^n by `vscalefps`).
inline __m512 vexp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3365447505531f)), _mm512_set1_ps(88.3762626647949f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, fx);  // y * 2^fx in one instruction (convert, add, shift and multiply before)
}

/// 1 / d for d >= 1: the 14-bit estimate and one Newton step, r (2 - d r).
inline __m512 vrecip512(__m512 d) {
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/// 1 / (1 + e^-x), with vmath.h's vsigmoid reduction: e^-x = 2^t, t = -x log2(e) clamped to [-126, 126] (so
/// 1 + 2^t stays finite for the reciprocal's Newton step; NaN passes through), t = n + f with |f| <= 1/2, 2^f the
/// same degree-5 polynomial, and 2^n applied by `vscalefps` (one instruction for vexp512's convert, add, shift
/// and multiply). 15 vector operations against the 23 of 1 / (1 + vexp512(-x)); SiLU in an L2-resident loop 21 ->
/// 14 cycles per 16 lanes on Zen 4. SiLU epilogues after EfficientNet-B0's 1x1 convolutions took about as long as
/// the convolutions (0.51 ms of 0.93 for 16 -> 96 channels on 112x112, Zen 4, 1 thread; 0.35 ms now).
inline __m512 vsigmoid512(__m512 x) {
  __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(-1.44269504088896341f));
  // max/min return their second operand when either is NaN: t second keeps a NaN.
  t = _mm512_min_ps(_mm512_set1_ps(126.0f), _mm512_max_ps(_mm512_set1_ps(-126.0f), t));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  return vrecip512(_mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_scalef_ps(detail::horner512(f, detail::kExp2Half), n)));
}

/// x * sigmoid(x) (SiLU / Swish).
inline __m512 vsilu512(__m512 x) { return _mm512_mul_ps(x, vsigmoid512(x)); }

namespace detail {
template <int NP, int NQ>
inline __m512 odd_rational512(__m512 x, const float (&p)[NP], const float (&q)[NQ]) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  return _mm512_div_ps(_mm512_mul_ps(x, horner512(x2, p)), horner512(x2, q));
}
}  // namespace detail

/// tanh(x): vtanh's rational 13/6 approximation, saturating beyond 7.9; x itself below 4e-4.
inline __m512 vtanh512(__m512 x) {
  const __m512 clamp = _mm512_set1_ps(7.90531110763549805f);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_sub_ps(_mm512_setzero_ps(), clamp)), clamp);
  const __m512 r = detail::odd_rational512(xc, detail::kTanhP, detail::kTanhQ);
  const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(4e-4f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(tiny, r, x);
}

/// erf(x): verf's rational 13/8 approximation on [-4, 4], +-1 beyond.
inline __m512 verf512(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-4.0f)), _mm512_set1_ps(4.0f));
  return detail::odd_rational512(xc, detail::kErfP, detail::kErfQ);
}

/// GELU with the exact erf form: 0.5 x (1 + erf(x / sqrt 2)).
inline __m512 vgelu512(__m512 x) {
  const __m512 e = verf512(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
  return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), _mm512_add_ps(e, _mm512_set1_ps(1.0f)));
}

/// max(0, min(1, alpha x + beta)).
inline __m512 vhardsigmoid512(__m512 x, float alpha, float beta) {
  const __m512 y = _mm512_fmadd_ps(x, _mm512_set1_ps(alpha), _mm512_set1_ps(beta));
  return _mm512_min_ps(_mm512_max_ps(y, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
}

/// x * hardsigmoid(x; 1/6, 1/2) (ONNX HardSwish).
inline __m512 vhardswish512(__m512 x) { return _mm512_mul_ps(x, vhardsigmoid512(x, 1.0f / 6.0f, 0.5f)); }

/// act(v) for the activation and parameters of `ep` (epilogue_avx2.h's activate() on 16 lanes).
inline __m512 activate512(__m512 v, const Epilogue& ep) {
  switch (ep.act) {
    case Activation::None: return v;
    case Activation::Relu: return _mm512_max_ps(v, _mm512_setzero_ps());
    case Activation::Clip: return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ep.alpha)), _mm512_set1_ps(ep.beta));
    case Activation::LeakyRelu: {
      const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
      return _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(ep.alpha));
    }
    case Activation::Sigmoid: return vsigmoid512(v);
    case Activation::HardSigmoid: return vhardsigmoid512(v, ep.alpha, ep.beta);
    case Activation::HardSwish: return vhardswish512(v);
    case Activation::Silu: return vsilu512(v);
    case Activation::Gelu: return vgelu512(v);
    case Activation::Tanh: return vtanh512(v);
  }
  return v;
}

/// Mask of the first n (0..16) lanes.
inline __mmask16 vtail_mask512(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

/// Mask of the lanes l (of 16) with 0 <= x0 + l < w: the columns x0 .. x0 + 15 that lie inside a row of w.
inline __mmask16 vrange_mask512(int64_t x0, int64_t w) {
  const __m512i x = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(x0)),
                                     _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  return _mm512_mask_cmplt_epi32_mask(_mm512_cmpge_epi32_mask(x, _mm512_setzero_si512()), x,
                                      _mm512_set1_epi32(static_cast<int>(w)));
}

}  // namespace tessel::rt
#pragma GCC diagnostic pop
#endif
