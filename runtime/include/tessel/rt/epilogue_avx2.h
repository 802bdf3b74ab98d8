// Vector application of an Epilogue's activation (inline, AVX2+FMA), used inside kernels' stores.
#pragma once

#include <immintrin.h>

#include "tessel/rt/epilogue.h"
#include "tessel/rt/vmath.h"

namespace tessel::rt {

/// act(v) for the activation and parameters of `ep`.
inline __m256 activate(__m256 v, const Epilogue& ep) {
  switch (ep.act) {
    case Activation::None: return v;
    case Activation::Relu: return _mm256_max_ps(v, _mm256_setzero_ps());
    case Activation::Clip:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.alpha)), _mm256_set1_ps(ep.beta));
    case Activation::LeakyRelu: {
      __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
      return _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(ep.alpha)), neg);
    }
    case Activation::Sigmoid: return vsigmoid(v);
    case Activation::HardSigmoid: return vhardsigmoid(v, ep.alpha, ep.beta);
    case Activation::HardSwish: return vhardswish(v);
    case Activation::Silu: return vsilu(v);
    case Activation::Gelu: return vgelu(v);
    case Activation::Tanh: return vtanh(v);
  }
  return v;
}

}  // namespace tessel::rt
