// Implicit im2col shared by the GEMM-based convolutions: the columns of col[K x OH*OW] (K = Cin_g * KH *
// KW) for a run of consecutive output pixels, written row by row into a panel of a given width.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "tessel/rt/conv.h"
#include "tessel/rt/vmath.h"

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

/// The input of one group split by stride phase and zero-padded, so that every column of col[K x OH*OW]
/// is a run of consecutive floats: tap (ky, kx) of output (oh, ow) is phase (ky % sh, kx % sw) at row
/// oh + ky / sh, column ow + kx / sw, and a panel of consecutive output pixels is one run per output row
/// it touches (one for a 1x1 stride-2 conv, whose single phase is as wide as the output). Strides 1-2, no
/// dilation. Packing a panel from it is a few vector loads and blends per reduction step instead of
/// pack_im2col_panel's bounds checks and strided gathers, which took 20 % of ResNet-50's 3x3/2 through
/// im2col with AVX2 (Zen 5). Planes are [channel][phase][rows][cols], with 16 floats of margin at both ends
/// of the buffer: the vector loads of a run read up to 15 floats outside it (those lanes are blended away).
class Im2colPhases {
 public:
  static bool applicable(const Conv2dShape& s) {
    return s.dilation_h == 1 && s.dilation_w == 1 && s.stride_h >= 1 && s.stride_h <= 2 && s.stride_w >= 1 &&
           s.stride_w <= 2;
  }
  /// Floats of the buffer build() needs.
  static size_t buffer_floats(const Conv2dShape& s) {
    const Layout l = layout(s);
    return static_cast<size_t>(s.in_per_group() * l.chan_stride + 2 * kMargin);
  }
  /// Builds the planes of input channels [c0, c1) of the group at `in_group` into `buf` (buffer_floats).
  static void build(const Conv2dShape& s, const float* in_group, int64_t c0, int64_t c1, float* buf) {
    const Layout l = layout(s);
    const int64_t H = s.in_h, W = s.in_w, sh = s.stride_h, sw = s.stride_w;
    for (int64_t c = c0; c < c1; ++c) {
      const float* src_plane = in_group + c * H * W;
      for (int64_t a = 0; a < sh; ++a)
        for (int64_t b = 0; b < sw; ++b) {
          const int64_t ph = a * sw + b;
          if (l.phase_index[ph] < 0) continue;
          for (int64_t i = 0; i < l.rows; ++i) {
            float* d = buf + kMargin + c * l.chan_stride + l.phase_index[ph] * l.plane + i * l.cols;
            const int64_t y = i * sh + a - s.pad_top;
            if (y < 0 || y >= H) {
              std::fill(d, d + l.cols, 0.0f);
              continue;
            }
            fill_row(src_plane + y * W, W, b - s.pad_left, sw, l.cols, d);
          }
        }
    }
  }
  /// A 1x1 kernel's planes are col itself, [Cin][OH * OW] from here (a stride-2 1x1 conv is a GEMM on them).
  static const float* col(const float* buf) { return buf + kMargin; }
  /// Writes dst[k * width + j] = col[k][j0 + j] for k in [0, K) and j < nr, zero for j in [nr, width)
  /// (nr <= width, width 6, 8 or 16), from planes built for every channel.
  static void pack(const Conv2dShape& s, const float* buf, int64_t j0, int nr, int width, float* dst) {
    const Layout l = layout(s);
    // The runs of the panel (one per output row it touches; runs contiguous in the planes merged) as a
    // plane offset per lane: lane j of run r reads shift[r] + j, for lanes [col[r], col[r] + len[r]).
    int64_t shift[16];
    int col[17], n_runs = 0;
    const int64_t OW = s.out_w();
    for (int j = 0; j < nr;) {
      const int64_t p = j0 + j, oh = p / OW, ow = p % OW;
      const int len = static_cast<int>(std::min<int64_t>(nr - j, OW - ow));
      const int64_t sft = oh * l.cols + ow - j;
      if (n_runs == 0 || shift[n_runs - 1] != sft) shift[n_runs] = sft, col[n_runs++] = j;
      j += len;
    }
    col[n_runs] = nr;
    // Per run and half: the lanes it fills, as blend masks.
    const int halves = (width + 7) / 8;
    __m256 lanes[16][2];
    for (int r = 0; r < n_runs; ++r)
      for (int h = 0; h < halves; ++h) {
        const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i in_run = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(col[r]), idx),
                                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(col[r + 1]), idx));
        lanes[r][h] = _mm256_castsi256_ps(in_run);
      }
    const bool whole = n_runs == 1 && nr == width && width % 8 == 0;  // one run fills every lane
    const int64_t taps = s.kernel_h * s.kernel_w, K = s.in_per_group() * taps;
    const __m256i last_row = vtail_mask(width - 8 * (halves - 1));
    const int64_t cin = s.in_per_group();
    float* row = dst;
    int64_t k = 0;
    for (int64_t c = 0; c < cin; ++c) {
      for (int64_t ky = 0; ky < s.kernel_h; ++ky)
        for (int64_t kx = 0; kx < s.kernel_w; ++kx, ++k, row += width) {
          const float* src = buf + kMargin + c * l.chan_stride +
                             l.phase_index[ky % s.stride_h * s.stride_w + kx % s.stride_w] * l.plane +
                             ky / s.stride_h * l.cols + kx / s.stride_w;
          for (int h = 0; h < halves; ++h) {
            __m256 v;
            if (whole) {
              v = _mm256_loadu_ps(src + shift[0] + 8 * h);
            } else {
              v = _mm256_setzero_ps();
              for (int r = 0; r < n_runs; ++r)
                v = _mm256_blendv_ps(v, _mm256_loadu_ps(src + shift[r] + 8 * h), lanes[r][h]);
            }
            // A 6-wide row's store runs 2 floats into the next row, which is written after it; the last row's
            // tail is masked.
            if (h == halves - 1 && k == K - 1)
              _mm256_maskstore_ps(row + 8 * h, last_row, v);
            else
              _mm256_storeu_ps(row + 8 * h, v);
          }
        }
    }
  }

 private:
  static constexpr int64_t kMargin = 16;
  struct Layout {
    int64_t rows, cols, plane, chan_stride;
    int phase_index[4];  // phase a * sw + b -> its plane among the channel's, -1 when no tap reads it
  };
  static Layout layout(const Conv2dShape& s) {
    Layout l;
    const int64_t sh = s.stride_h, sw = s.stride_w;
    std::fill(l.phase_index, l.phase_index + 4, -1);
    int count = 0;
    for (int64_t ky = 0; ky < s.kernel_h; ++ky)
      for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
        int& i = l.phase_index[ky % sh * sw + kx % sw];
        if (i < 0) i = count++;
      }
    l.rows = s.out_h() + (s.kernel_h - 1) / sh;
    l.cols = s.out_w() + (s.kernel_w - 1) / sw;
    l.plane = l.rows * l.cols;
    l.chan_stride = count * l.plane;
    return l;
  }
  // d[j] = src[x0 + j * sw] for j < n, zero where that column is outside [0, W).
  static void fill_row(const float* src, int64_t W, int64_t x0, int64_t sw, int64_t n, float* d) {
    int64_t j = 0;
    // Columns before the row start and the vector loop's range: every load of 8 (stride 1) or 16 (stride 2)
    // columns lies inside [0, W).
    for (; j < n && x0 + j * sw < 0; ++j) d[j] = 0.0f;
    if (sw == 1) {
      for (; j + 8 <= n && x0 + j + 8 <= W; j += 8) _mm256_storeu_ps(d + j, _mm256_loadu_ps(src + x0 + j));
    } else {
      for (; j + 8 <= n && x0 + 2 * j + 16 <= W; j += 8) {
        const __m256 lo = _mm256_loadu_ps(src + x0 + 2 * j), hi = _mm256_loadu_ps(src + x0 + 2 * j + 8);
        const __m256 even = _mm256_shuffle_ps(lo, hi, 0x88);  // lo 0 2 hi 0 2 | lo 4 6 hi 4 6
        _mm256_storeu_ps(d + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
      }
    }
    for (; j < n; ++j) {
      const int64_t x = x0 + j * sw;
      d[j] = x >= 0 && x < W ? src[x] : 0.0f;
    }
  }
};

}  // namespace tessel::rt::detail
