// Pooling over 1, 2 or 3 spatial axes of any element type, with dilations, either padding and the flat
// Indices output of MaxPool, for what the 2-D NCHW kernels (pool.h) do not cover (the cpu target's
// lower_pool.cpp; same semantics as the reference interpreter's pooling).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace tessel::rt {

enum class PoolNdKind { Max, Average, Lp };

/// A pooling window problem with the spatial part normalised to three axes (leading axes of extent 1).
struct PoolNdShape {
  int64_t planes = 1;  ///< N * C
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1},
          dilation[3] = {1, 1, 1}, pad_begin[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

/// Runs one pooling kind over every plane, accumulating in Acc (sums in double); Indices (flat over the whole
/// input, row-major or with column_major the plane's column-major offset, MaxPool storage_order 1) when
/// `indices` is set. Average divides by the window's valid elements, or with count_include_pad by those
/// inside the padded input.
template <class T, class Acc>
void pool_nd(const PoolNdShape& p, PoolNdKind kind, const T* x, T* y, int64_t* indices, bool count_include_pad,
             double lp_power, bool column_major) {
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const T* src = x + plane * p.in_size();
    int64_t o = plane * p.out_size();
    for (int64_t o0 = 0; o0 < p.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < p.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < p.out[2]; ++o2, ++o) {
          const int64_t start[3] = {o0 * p.stride[0] - p.pad_begin[0], o1 * p.stride[1] - p.pad_begin[1],
                                    o2 * p.stride[2] - p.pad_begin[2]};
          Acc best = std::numeric_limits<Acc>::lowest();
          int64_t best_at = -1, valid = 0, padded = 0;
          double sum = 0;
          for (int64_t k0 = 0; k0 < p.kernel[0]; ++k0)
            for (int64_t k1 = 0; k1 < p.kernel[1]; ++k1)
              for (int64_t k2 = 0; k2 < p.kernel[2]; ++k2) {
                const int64_t i0 = start[0] + k0 * p.dilation[0], i1 = start[1] + k1 * p.dilation[1],
                              i2 = start[2] + k2 * p.dilation[2];
                padded += i0 < p.in[0] + p.pad_end[0] && i1 < p.in[1] + p.pad_end[1] && i2 < p.in[2] + p.pad_end[2];
                if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= p.in[0] || i1 >= p.in[1] || i2 >= p.in[2]) continue;
                ++valid;
                const Acc v = static_cast<Acc>(src[(i0 * p.in[1] + i1) * p.in[2] + i2]);
                if (kind == PoolNdKind::Max) {
                  if (best_at < 0 || v > best) {
                    best = v;
                    best_at = plane * p.in_size() + (column_major ? i0 + i1 * p.in[0] + i2 * p.in[0] * p.in[1]
                                                                  : (i0 * p.in[1] + i1) * p.in[2] + i2);
                  }
                } else if (kind == PoolNdKind::Average) {
                  sum += static_cast<double>(v);
                } else {
                  sum += std::pow(std::fabs(static_cast<double>(v)), lp_power);
                }
              }
          if (kind == PoolNdKind::Max) {
            y[o] = static_cast<T>(best);
            if (indices) indices[o] = best_at;
          } else if (kind == PoolNdKind::Average) {
            const int64_t divisor = count_include_pad ? padded : valid;
            y[o] = static_cast<T>(static_cast<Acc>(divisor > 0 ? sum / static_cast<double>(divisor) : 0.0));
          } else {
            y[o] = static_cast<T>(static_cast<Acc>(std::pow(sum, 1.0 / lp_power)));
          }
        }
  }
}

}  // namespace tessel::rt
