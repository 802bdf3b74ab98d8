// Out-of-line epilogue helpers: activation names and whole-buffer epilogue application.
#include "tessel/rt/epilogue.h"

#include "tessel/rt/epilogue_avx2.h"
#include "tessel/rt/vmath512.h"

namespace tessel::rt {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None: return "none";
    case Activation::Relu: return "relu";
    case Activation::Clip: return "clip";
    case Activation::LeakyRelu: return "leaky_relu";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::HardSigmoid: return "hardsigmoid";
    case Activation::HardSwish: return "hardswish";
    case Activation::Silu: return "silu";
    case Activation::Gelu: return "gelu";
    case Activation::Tanh: return "tanh";
  }
  return "?";
}

void apply_activation(float* data, int64_t n, const Epilogue& ep) {
  if (ep.act == Activation::None) return;
#if defined(__AVX512F__)
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = vtail_mask512(n - i);
    _mm512_mask_storeu_ps(data + i, m, activate512(_mm512_maskz_loadu_ps(m, data + i), ep));
  }
#else
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(data + i, activate(_mm256_loadu_ps(data + i), ep));
  if (i < n) {
    __m256i m = vtail_mask(static_cast<int>(n - i));
    _mm256_maskstore_ps(data + i, m, activate(_mm256_maskload_ps(data + i, m), ep));
  }
#endif
}

namespace {

// data[i] = act(data[i] + residual[i]) with the activation as a compile-time functor.
template <typename Act>
void residual_activation_loop(float* data, const float* residual, int64_t n, Act act) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(data + i);
    if (residual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + i));
    _mm256_storeu_ps(data + i, act(v));
  }
  if (i < n) {
    const __m256i m = vtail_mask(static_cast<int>(n - i));
    __m256 v = _mm256_maskload_ps(data + i, m);
    if (residual) v = _mm256_add_ps(v, _mm256_maskload_ps(residual + i, m));
    _mm256_maskstore_ps(data + i, m, act(v));
  }
}

}  // namespace

void apply_residual_activation(float* data, const float* residual, int64_t n, const Epilogue& ep) {
  switch (ep.act) {
    case Activation::None:
      if (residual) residual_activation_loop(data, residual, n, [](__m256 v) { return v; });
      return;
    case Activation::Relu:
      residual_activation_loop(data, residual, n, [](__m256 v) { return _mm256_max_ps(v, _mm256_setzero_ps()); });
      return;
    case Activation::Clip: {
      const __m256 lo = _mm256_set1_ps(ep.alpha), hi = _mm256_set1_ps(ep.beta);
      residual_activation_loop(data, residual, n, [=](__m256 v) { return _mm256_min_ps(_mm256_max_ps(v, lo), hi); });
      return;
    }
    default:
#if defined(__AVX512F__)
      // 16 lanes for the transcendental activations (SiLU, Sigmoid, ...: the arithmetic, not memory, bounds them).
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = vtail_mask512(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, data + i);
        if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, residual + i));
        _mm512_mask_storeu_ps(data + i, m, activate512(v, ep));
      }
#else
      residual_activation_loop(data, residual, n, [&](__m256 v) { return activate(v, ep); });
#endif
      return;
  }
}

void apply_epilogue_planar(float* data, int64_t channels, int64_t plane, const Epilogue& ep) {
  if (ep.is_identity()) return;
  for (int64_t c = 0; c < channels; ++c) {
    float* row = data + c * plane;
    const float* res = ep.residual ? ep.residual + c * plane : nullptr;
#if defined(__AVX512F__)
    const __m512 b16 = _mm512_set1_ps(ep.bias ? ep.bias[c] : 0.0f);
    for (int64_t i = 0; i < plane; i += 16) {
      const __mmask16 m = vtail_mask512(plane - i);
      __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, row + i), b16);
      if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + i));
      _mm512_mask_storeu_ps(row + i, m, activate512(v, ep));
    }
#else
    __m256 b = _mm256_set1_ps(ep.bias ? ep.bias[c] : 0.0f);
    int64_t i = 0;
    for (; i < plane; i += 8) {
      int left = static_cast<int>(plane - i < 8 ? plane - i : 8);
      __m256i m = vtail_mask(left);
      __m256 v = _mm256_add_ps(_mm256_maskload_ps(row + i, m), b);
      if (res) v = _mm256_add_ps(v, _mm256_maskload_ps(res + i, m));
      _mm256_maskstore_ps(row + i, m, activate(v, ep));
    }
#endif
  }
}

}  // namespace tessel::rt
