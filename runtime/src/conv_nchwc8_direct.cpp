// Direct convolution in NCHWc8 (groups == 1): 2 output-channel blocks x 6 pixels of accumulators.
#include <immintrin.h>

#include <algorithm>

#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"

namespace tessel::rt {
namespace {

constexpr int kPixels = 6;

struct DirectCtx {
  const Conv2dShape& s;
  const float* in;  // one image, NCHWc8
  const float* w;   // packed [ob][cb][ky][kx][ci][co]
  float* out;       // one image, NCHWc8
  const float* res;
  const Epilogue& ep;
  int64_t in_blocks, out_blocks, oh_count, ow_count;
};

// Accumulates NB output blocks x NW pixels (ow0 + j) of output row oh; CHECK guards the input columns.
template <int NB, int NW, bool CHECK>
void direct_tile(const DirectCtx& c, int64_t ob, int64_t oh, int64_t ow0) {
  const Conv2dShape& s = c.s;
  const int64_t taps = s.kernel_h * s.kernel_w, block_stride = c.in_blocks * taps * 64;
  __m256 acc[NB][NW];
  for (int b = 0; b < NB; ++b)
    for (int j = 0; j < NW; ++j) acc[b][j] = _mm256_setzero_ps();
  for (int64_t cb = 0; cb < c.in_blocks; ++cb) {
    const float* plane = c.in + cb * s.in_h * s.in_w * 8;
    for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
      const int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
      if (ih < 0 || ih >= s.in_h) continue;
      const float* row = plane + ih * s.in_w * 8;
      for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
        const float* wv = c.w + ((ob * c.in_blocks + cb) * taps + ky * s.kernel_w + kx) * 64;
        const int64_t iw0 = ow0 * s.stride_w - s.pad_left + kx * s.dilation_w;
        for (int ci = 0; ci < 8; ++ci) {
          __m256 w[NB];
          for (int b = 0; b < NB; ++b) w[b] = _mm256_load_ps(wv + b * block_stride + ci * 8);
          for (int j = 0; j < NW; ++j) {
            const int64_t iw = iw0 + j * s.stride_w;
            if (CHECK && (iw < 0 || iw >= s.in_w)) continue;
            const __m256 x = _mm256_broadcast_ss(row + iw * 8 + ci);
            for (int b = 0; b < NB; ++b) acc[b][j] = _mm256_fmadd_ps(x, w[b], acc[b][j]);
          }
        }
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

template <int NB>
void direct_row(const DirectCtx& c, int64_t ob, int64_t oh, int64_t lo, int64_t hi) {
  int64_t ow = 0;
  for (; ow < lo; ++ow) direct_tile<NB, 1, true>(c, ob, oh, ow);
  for (; ow + kPixels <= hi; ow += kPixels) direct_tile<NB, kPixels, false>(c, ob, oh, ow);
  for (; ow < c.ow_count; ++ow) direct_tile<NB, 1, true>(c, ob, oh, ow);
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

void conv2d_nchwc8_direct_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                               const Epilogue& ep, ThreadPool* pool) {
  const int64_t in_blocks = (s.in_channels + 7) / 8, out_blocks = (s.out_channels + 7) / 8;
  const int64_t OH = s.out_h(), OW = s.out_w();
  // Output columns whose taps never touch the padding.
  const int64_t span = s.dilation_w * (s.kernel_w - 1);
  const int64_t lo = std::min(OW, (s.pad_left + s.stride_w - 1) / s.stride_w);
  const int64_t last_ok = s.in_w - 1 - span + s.pad_left;
  const int64_t hi = last_ok < 0 ? lo : std::max(lo, std::min(OW, last_ok / s.stride_w + 1));
  const int64_t pairs = (out_blocks + 1) / 2;
  parallel_for(pool, s.batch * pairs * OH, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t n = task / (pairs * OH), ob = (task / OH) % pairs * 2, oh = task % OH;
      const int64_t out_img = n * out_blocks * OH * OW * 8;
      DirectCtx c{s, in + n * in_blocks * s.in_h * s.in_w * 8, packed, out + out_img,
                  ep.residual ? ep.residual + out_img : nullptr, ep, in_blocks, out_blocks, OH, OW};
      if (ob + 1 < out_blocks)
        direct_row<2>(c, ob, oh, lo, hi);
      else
        direct_row<1>(c, ob, oh, lo, hi);
    }
  });
}

}  // namespace tessel::rt
