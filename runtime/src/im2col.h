// Implicit im2col shared by the GEMM-based convolutions: the columns of col[K x OH*OW] (K = Cin_g * KH *
// KW) for a run of consecutive output pixels, written row by row into a panel of a given width.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tessel/rt/conv.h"

namespace tessel::rt::detail {

/// Writes dst[k * width + j] = col[k][j0 + j] for every k in [0, K) and j < nr (nr <= width <= 16), and
/// zero for j in [nr, width). `in_group` is the first input plane of the group.
inline void pack_im2col_panel(const Conv2dShape& s, const float* in_group, int64_t j0, int nr, int width,
                              float* dst) {
  // Cut the pixels into runs along one output row.
  struct Run { int64_t oh, ow, len, col; };
  Run runs[16];
  int n_runs = 0;
  const int64_t ow_count = s.out_w();
  for (int64_t j = 0; j < nr;) {
    const int64_t p = j0 + j, oh = p / ow_count, ow = p % ow_count;
    const int64_t len = std::min<int64_t>(nr - j, ow_count - ow);
    runs[n_runs++] = {oh, ow, len, j};
    j += len;
  }
  const int64_t H = s.in_h, W = s.in_w, sh = s.stride_h, sw = s.stride_w;
  float* row = dst;
  for (int64_t c = 0; c < s.in_per_group(); ++c) {
    const float* plane = in_group + c * H * W;
    for (int64_t ky = 0; ky < s.kernel_h; ++ky)
      for (int64_t kx = 0; kx < s.kernel_w; ++kx, row += width) {
        for (int r = 0; r < n_runs; ++r) {
          const Run& run = runs[r];
          float* d = row + run.col;
          const int64_t ih = run.oh * sh - s.pad_top + ky * s.dilation_h;
          if (ih < 0 || ih >= H) {
            std::fill(d, d + run.len, 0.0f);
            continue;
          }
          const float* src = plane + ih * W;
          const int64_t base = run.ow * sw - s.pad_left + kx * s.dilation_w;  // iw of t = 0
          int64_t lo = base >= 0 ? 0 : (-base + sw - 1) / sw;
          int64_t hi = base >= W ? 0 : std::min(run.len, (W - 1 - base) / sw + 1);
          lo = std::min(lo, run.len);
          hi = std::max(hi, lo);
          std::fill(d, d + lo, 0.0f);
          if (sw == 1) {
            std::memcpy(d + lo, src + base + lo, (hi - lo) * sizeof(float));
          } else {
            for (int64_t t = lo; t < hi; ++t) d[t] = src[base + t * sw];
          }
          std::fill(d + hi, d + run.len, 0.0f);
        }
        std::fill(row + nr, row + width, 0.0f);
      }
  }
}

}  // namespace tessel::rt::detail
