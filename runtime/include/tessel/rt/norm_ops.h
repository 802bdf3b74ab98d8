// Normalisation and sequence kernels for generated code, computed in double as the reference interpreter
// does: InstanceNormalization, LRN (across channels), ReverseSequence.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessel::rt {

/// InstanceNormalization of x [batch, channels, inner]: per (n, c) plane, scale[c] * (x - mean) / sqrt(var + eps)
/// + bias[c].
template <class T>
void instance_norm(const T* x, const T* scale, const T* bias, T* y, int64_t batch, int64_t channels, int64_t inner,
                   double eps) {
  for (int64_t nc = 0; nc < batch * channels; ++nc) {
    const int64_t c = nc % channels;
    const T* src = x + nc * inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mean += static_cast<double>(src[i]);
    mean /= static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) var += (static_cast<double>(src[i]) - mean) * (static_cast<double>(src[i]) - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i)
      y[nc * inner + i] = static_cast<T>(static_cast<double>(scale[c]) * (static_cast<double>(src[i]) - mean) * inv +
                                         static_cast<double>(bias[c]));
  }
}

/// LRN across channels of x [batch, channels, inner]: x / (bias + alpha / size * sum of squares over the
/// window of `size` channels around c)^beta.
template <class T>
void lrn(const T* x, T* y, int64_t batch, int64_t channels, int64_t inner, int64_t size, double alpha, double beta,
         double bias) {
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        double squares = 0;
        for (int64_t k = std::max<int64_t>(0, c - before); k <= std::min(channels - 1, c + after); ++k) {
          const double v = static_cast<double>(x[(n * channels + k) * inner + i]);
          squares += v * v;
        }
        const int64_t at = (n * channels + c) * inner + i;
        y[at] = static_cast<T>(static_cast<double>(x[at]) /
                               std::pow(bias + alpha / static_cast<double>(size) * squares, beta));
      }
}

/// ReverseSequence of x viewed as [time, batch, inner_bytes] (time_major) or [batch, time, inner_bytes]: the
/// first lengths[b] steps of batch entry b reversed, the rest copied. False on a length outside [0, time].
template <class L>
bool reverse_sequence(const void* x, void* y, const L* lengths, int64_t time, int64_t batch, int64_t inner_bytes,
                      bool time_major) {
  const char* src = static_cast<const char*>(x);
  char* dst = static_cast<char*>(y);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = static_cast<int64_t>(lengths[b]);
    if (len < 0 || len > time) return false;
    for (int64_t t = 0; t < time; ++t) {
      const int64_t from = t < len ? len - 1 - t : t;
      auto at = [&](int64_t s) { return (time_major ? s * batch + b : b * time + s) * inner_bytes; };
      std::memcpy(dst + at(t), src + at(from), static_cast<size_t>(inner_bytes));
    }
  }
  return true;
}

}  // namespace tessel::rt
