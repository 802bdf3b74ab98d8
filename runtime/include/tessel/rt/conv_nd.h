// Convolution shapes over 1, 2 or 3 spatial axes (leading axes of extent 1) and the transposed convolution
// the cpu target runs for ConvTranspose: a direct scatter loop, groups, dilations and pads included.
#pragma once

#include <cstdint>

namespace tessel::rt {

struct ConvNdShape {
  int64_t batch = 1, in_channels = 1, out_channels = 1, groups = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1},
          dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
};

/// y[N, M, out] = bias[M] (0 when null) + the transposed convolution of x[N, C, in] with w[C, M/groups, k]:
/// input position i with kernel tap k lands on output i * stride + k * dilation - pad (dropped outside).
template <class T>
void conv_transpose_nd(const ConvNdShape& p, const T* x, const T* w, const T* bias, T* y) {
  const int64_t in_size = p.in[0] * p.in[1] * p.in[2], out_size = p.out[0] * p.out[1] * p.out[2];
  const int64_t k_size = p.kernel[0] * p.kernel[1] * p.kernel[2];
  const int64_t cg = p.in_channels / p.groups, mg = p.out_channels / p.groups;
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t m = 0; m < p.out_channels; ++m)
      for (int64_t o = 0; o < out_size; ++o) y[(n * p.out_channels + m) * out_size + o] = bias ? bias[m] : T(0);
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t c = 0; c < p.in_channels; ++c) {
      const int64_t g = c / cg;
      const T* plane = x + (n * p.in_channels + c) * in_size;
      for (int64_t m = 0; m < mg; ++m) {
        const T* wk = w + (c * mg + m) * k_size;
        T* dst = y + (n * p.out_channels + g * mg + m) * out_size;
        for (int64_t k0 = 0; k0 < p.kernel[0]; ++k0)
          for (int64_t k1 = 0; k1 < p.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < p.kernel[2]; ++k2) {
              const T wv = wk[(k0 * p.kernel[1] + k1) * p.kernel[2] + k2];
              for (int64_t i0 = 0; i0 < p.in[0]; ++i0) {
                const int64_t o0 = i0 * p.stride[0] + k0 * p.dilation[0] - p.pad[0];
                if (o0 < 0 || o0 >= p.out[0]) continue;
                for (int64_t i1 = 0; i1 < p.in[1]; ++i1) {
                  const int64_t o1 = i1 * p.stride[1] + k1 * p.dilation[1] - p.pad[1];
                  if (o1 < 0 || o1 >= p.out[1]) continue;
                  const T* src = plane + (i0 * p.in[1] + i1) * p.in[2];
                  T* row = dst + (o0 * p.out[1] + o1) * p.out[2];
                  for (int64_t i2 = 0; i2 < p.in[2]; ++i2) {
                    const int64_t o2 = i2 * p.stride[2] + k2 * p.dilation[2] - p.pad[2];
                    if (o2 >= 0 && o2 < p.out[2]) row[o2] += src[i2] * wv;
                  }
                }
              }
            }
      }
    }
}

}  // namespace tessel::rt
