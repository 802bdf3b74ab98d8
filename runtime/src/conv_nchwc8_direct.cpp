// Direct convolution in NCHWc8 (groups == 1): 2 output-channel blocks x 6 pixels of ymm accumulators.
// The reduction over (input block, kernel row, kernel column) runs from a per-row table of valid taps,
// so the micro-kernel is one flat loop whose accumulators stay in registers; padding taps are dropped
// from the table instead of being tested in the loop. 1x1 stride-1 unpadded convs are run as one long
// row over the flattened H*W map (no short-row remainders on 7x7 / 14x14 maps).
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"

namespace tessel::rt {
namespace {

constexpr int kPixels = 6;

// One tap of the reduction: where its input vectors and its 8x8 weight blocks start.
struct Tap {
  int64_t in_off;  // floats from the image start to input (block cb, row ih, column kx * dil) at ow0 = 0
  int64_t w_off;   // floats from the output block's weights to this tap's [ci][co] 8x8 block
};

struct DirectCtx {
  const Conv2dShape& s;  // possibly the flattened 1x1 shape
  const float* in;       // one image, NCHWc8
  const float* w;        // packed [ob][cb][ky][kx][ci][co]
  float* out;            // one image, NCHWc8
  const float* res;
  const Epilogue& ep;
  int64_t in_blocks, out_blocks, oh_count, ow_count;
  int64_t w_block_stride;  // floats between consecutive output blocks' weights
};

// Taps of output row oh (and, when ow >= 0, only those whose column is inside the input for pixel ow).
int build_taps(const DirectCtx& c, int64_t oh, int64_t ow, std::vector<Tap>& taps) {
  const Conv2dShape& s = c.s;
  const int64_t plane = s.in_h * s.in_w * 8;
  taps.clear();
  for (int64_t cb = 0; cb < c.in_blocks; ++cb)
    for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
      const int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
      if (ih < 0 || ih >= s.in_h) continue;
      for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
        if (ow >= 0) {
          const int64_t iw = ow * s.stride_w - s.pad_left + kx * s.dilation_w;
          if (iw < 0 || iw >= s.in_w) continue;
        }
        taps.push_back({cb * plane + (ih * s.in_w + kx * s.dilation_w) * 8,
                        ((cb * s.kernel_h + ky) * s.kernel_w + kx) * 64});
      }
    }
  return static_cast<int>(taps.size());
}

// NB (1 or 2) output blocks (ob..ob+NB-1) x NW consecutive pixels of one output row starting at ow0.
// Kept out of line so that its 12 accumulators get the whole register file.
template <int NB, int NW>
__attribute__((noinline)) void direct_tile(const DirectCtx& c, const Tap* taps, int n_taps, int64_t ob, int64_t oh, int64_t ow0) {
  const Conv2dShape& s = c.s;
  const int64_t pix = s.stride_w * 8;
  const int64_t col0 = (ow0 * s.stride_w - s.pad_left) * 8;  // added to in_off: stays inside the image
  const float* w_ob = c.w + ob * c.w_block_stride;
  __m256 acc[NB][NW];
  for (int b = 0; b < NB; ++b)
    for (int j = 0; j < NW; ++j) acc[b][j] = _mm256_setzero_ps();
  for (int t = 0; t < n_taps; ++t) {
    // One pointer per pixel, so every broadcast below is pointer + constant (few live registers).
    const float* xp[NW];
    xp[0] = c.in + (taps[t].in_off + col0);
    for (int j = 1; j < NW; ++j) xp[j] = xp[j - 1] + pix;
    const float* wt0 = w_ob + taps[t].w_off;
    const float* wt1 = wt0 + (NB > 1 ? c.w_block_stride : 0);
#pragma GCC unroll 8
    for (int ci = 0; ci < 8; ++ci) {
      __m256 w[NB];
      w[0] = _mm256_load_ps(wt0 + ci * 8);
      if constexpr (NB > 1) w[1] = _mm256_load_ps(wt1 + ci * 8);
      for (int j = 0; j < NW; ++j) {
        const __m256 xv = _mm256_broadcast_ss(xp[j] + ci);
        for (int b = 0; b < NB; ++b) acc[b][j] = _mm256_fmadd_ps(xv, w[b], acc[b][j]);
      }
    }
  }
  for (int b = 0; b < NB; ++b) {
    const int64_t o = ob + b;
    const int valid = static_cast<int>(std::min<int64_t>(8, s.out_channels - o * 8));
    const __m256 bias = c.ep.bias ? _mm256_maskload_ps(c.ep.bias + o * 8, vtail_mask(valid)) : _mm256_setzero_ps();
    for (int j = 0; j < NW; ++j) {
      const int64_t off = ((o * c.oh_count + oh) * c.ow_count + ow0 + j) * 8;
      __m256 v = _mm256_add_ps(acc[b][j], bias);
      if (c.res) v = _mm256_add_ps(v, _mm256_loadu_ps(c.res + off));
      _mm256_storeu_ps(c.out + off, activate(v, c.ep));
    }
  }
}

// Output columns [lo, hi) whose taps never touch the left/right padding.
void interior_columns(const Conv2dShape& s, int64_t* lo, int64_t* hi) {
  const int64_t OW = s.out_w(), span = s.dilation_w * (s.kernel_w - 1);
  *lo = std::min(OW, (s.pad_left + s.stride_w - 1) / s.stride_w);
  const int64_t last_ok = s.in_w - 1 - span + s.pad_left;
  *hi = last_ok < 0 ? *lo : std::max(*lo, std::min(OW, last_ok / s.stride_w + 1));
}

// Pixels [p0, p1) of output row oh for output blocks ob (and ob + 1 when NB == 2).
template <int NB>
void direct_row_range(const DirectCtx& c, int64_t ob, int64_t oh, int64_t p0, int64_t p1, int64_t lo,
                      int64_t hi, std::vector<Tap>& taps) {
  int64_t ow = p0;
  for (; ow < std::min(lo, p1); ++ow) {  // left border: per-pixel tap tables
    const int n = build_taps(c, oh, ow, taps);
    direct_tile<NB, 1>(c, taps.data(), n, ob, oh, ow);
  }
  const int64_t mid_end = std::min(hi, p1);
  if (ow < mid_end) {
    const int n = build_taps(c, oh, -1, taps);
    for (; ow + kPixels <= mid_end; ow += kPixels) direct_tile<NB, kPixels>(c, taps.data(), n, ob, oh, ow);
    switch (mid_end - ow) {
      case 5: direct_tile<NB, 5>(c, taps.data(), n, ob, oh, ow); break;
      case 4: direct_tile<NB, 4>(c, taps.data(), n, ob, oh, ow); break;
      case 3: direct_tile<NB, 3>(c, taps.data(), n, ob, oh, ow); break;
      case 2: direct_tile<NB, 2>(c, taps.data(), n, ob, oh, ow); break;
      case 1: direct_tile<NB, 1>(c, taps.data(), n, ob, oh, ow); break;
      default: break;
    }
    ow = mid_end;
  }
  for (; ow < p1; ++ow) {  // right border
    const int n = build_taps(c, oh, ow, taps);
    direct_tile<NB, 1>(c, taps.data(), n, ob, oh, ow);
  }
}

}  // namespace

size_t conv2d_nchwc8_direct_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>((s.out_channels + 7) / 8 * (s.in_channels + 7) / 8 * s.kernel_h * s.kernel_w * 64);
}

void conv2d_nchwc8_direct_pack(const Conv2dShape& s, const float* weights, float* packed) {
  const int64_t ob_count = (s.out_channels + 7) / 8, cb_count = (s.in_channels + 7) / 8;
  const int64_t taps = s.kernel_h * s.kernel_w;
  for (int64_t ob = 0; ob < ob_count; ++ob)
    for (int64_t cb = 0; cb < cb_count; ++cb)
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t ci = 0; ci < 8; ++ci)
          for (int64_t co = 0; co < 8; ++co) {
            const int64_t o = ob * 8 + co, i = cb * 8 + ci;
            const bool real = o < s.out_channels && i < s.in_channels;
            packed[(((ob * cb_count + cb) * taps + t) * 8 + ci) * 8 + co] =
                real ? weights[(o * s.in_channels + i) * taps + t] : 0.0f;
          }
}

void conv2d_nchwc8_direct_avx2(const Conv2dShape& shape, const float* in, const float* packed, float* out,
                               const Epilogue& ep, ThreadPool* pool) {
  // A 1x1 stride-1 unpadded conv is the same computation on one row of H*W pixels.
  Conv2dShape s = shape;
  const bool flat = s.is_pointwise();
  if (flat) {
    s.in_w *= s.in_h;
    s.in_h = 1;
  }
  const int64_t in_blocks = (s.in_channels + 7) / 8, out_blocks = (s.out_channels + 7) / 8;
  const int64_t OH = s.out_h(), OW = s.out_w();
  int64_t lo, hi;
  interior_columns(s, &lo, &hi);
  // Work items: (image, output-block pair, row, column chunk); long flattened rows are chunked so that
  // both threads get work on small channel counts.
  const int64_t pairs = (out_blocks + 1) / 2;
  const int64_t chunk = flat ? std::max<int64_t>(kPixels * 8, (OW + 7) / 8 / kPixels * kPixels) : OW;
  const int64_t chunks = (OW + chunk - 1) / chunk;
  const int64_t w_block_stride = in_blocks * s.kernel_h * s.kernel_w * 64;
  parallel_for(pool, s.batch * pairs * OH * chunks, [&](int64_t b, int64_t e) {
    static thread_local std::vector<Tap> taps;
    for (int64_t task = b; task < e; ++task) {
      const int64_t ch = task % chunks, oh = task / chunks % OH, ob = task / (chunks * OH) % pairs * 2;
      const int64_t n = task / (chunks * OH * pairs);
      const int64_t out_img = n * out_blocks * OH * OW * 8;
      DirectCtx c{s, in + n * in_blocks * s.in_h * s.in_w * 8, packed, out + out_img,
                  ep.residual ? ep.residual + out_img : nullptr, ep, in_blocks, out_blocks, OH, OW, w_block_stride};
      const int64_t p0 = ch * chunk, p1 = std::min(OW, p0 + chunk);
      if (ob + 1 < out_blocks)
        direct_row_range<2>(c, ob, oh, p0, p1, lo, hi, taps);
      else
        direct_row_range<1>(c, ob, oh, p0, p1, lo, hi, taps);
    }
  });
}

}  // namespace tessel::rt
