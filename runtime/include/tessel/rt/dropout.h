// Dropout with ONNX's reference mask: with a seed, the draws of numpy's np.random.seed(seed);
// np.random.uniform(size=x.shape) (std::mt19937 and numpy's 53-bit doubles), as the reference interpreter
// draws them.
#pragma once

#include <cstdint>
#include <random>

namespace tessel::rt {

/// A uniform [0, 1) double drawn like numpy's legacy RandomState.random_sample (53 bits from two words).
template <class Engine>
double numpy_uniform(Engine& engine) {
  const uint32_t a = static_cast<uint32_t>(engine()) >> 5, b = static_cast<uint32_t>(engine()) >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

/// y = x (mask all true) unless training with a ratio > 0; then y = x / (1 - ratio) where the seeded draw
/// is >= ratio, 0 elsewhere (mask: kept). `mask` may be null. False when ratio is outside [0, 1) in training.
template <class T>
bool dropout_seeded(const T* x, T* y, uint8_t* mask, int64_t n, double ratio, bool training, uint32_t seed) {
  if (!training || ratio == 0) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    if (mask)
      for (int64_t i = 0; i < n; ++i) mask[i] = 1;
    return true;
  }
  if (ratio < 0 || ratio >= 1) return false;
  std::mt19937 engine(seed);
  const double scale = 1.0 / (1.0 - ratio);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = numpy_uniform(engine) >= ratio;
    y[i] = keep ? static_cast<T>(x[i] * static_cast<T>(scale)) : T(0);
    if (mask) mask[i] = keep;
  }
  return true;
}

}  // namespace tessel::rt
