// Weights packed in output-channel blocks: [Cout / B][K][B], zero-padded to whole blocks, so a kernel
// that holds B output channels in vector lanes reads one contiguous row of B weights per reduction step.
#pragma once

#include <cstdint>

namespace tessel::rt::detail {

/// Floats of the packing for `out_channels` rows of K weights in blocks of `block`.
inline int64_t channel_blocked_size(int64_t out_channels, int64_t K, int64_t block) {
  return (out_channels + block - 1) / block * block * K;
}

/// packed[(cb * K + k) * block + l] = weights[(cb * block + l) * K + k] (ONNX [Cout][K] rows), 0 past Cout.
inline void pack_channel_blocked(const float* weights, int64_t out_channels, int64_t K, int64_t block,
                                 float* packed) {
  for (int64_t cb = 0; cb < (out_channels + block - 1) / block; ++cb)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t l = 0; l < block; ++l) {
        const int64_t m = cb * block + l;
        packed[(cb * K + k) * block + l] = m < out_channels ? weights[m * K + k] : 0.0f;
      }
}

}  // namespace tessel::rt::detail
