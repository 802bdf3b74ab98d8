// Depthwise convolution (channel multiplier 1) in NCHWc8 (channels in lanes), and the NCHW <-> NCHWc8 reorders.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "plane_rows.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"

namespace tessel::rt {
namespace {

// A vector register value as a plain struct (std::vector<__m256> drops the alignment attribute).
struct VectorSlot {
  __m256 v;
};

// Range [lo, hi) of output columns whose taps are all inside the input row (no padding reads).
void interior_columns(const Conv2dShape& s, int64_t ow_count, int64_t* lo, int64_t* hi) {
  const int64_t span = s.dilation_w * (s.kernel_w - 1);
  *lo = std::min(ow_count, (s.pad_left + s.stride_w - 1) / s.stride_w);
  int64_t last_ok = (s.in_w - 1 - span + s.pad_left);  // ow * sw <= last_ok
  *hi = last_ok < 0 ? *lo : std::min(ow_count, last_ok / s.stride_w + 1);
  *hi = std::max(*hi, *lo);
}

// Everything one NCHWc8 output row needs besides its pointers.
struct DepthwiseC8Ctx {
  const Conv2dShape& s;
  const Epilogue& ep;
  int64_t ow_count, lo, hi;  // [lo, hi): output columns whose taps are all inside the input row
};

// NW output pixels (ow0 + j) of one row of one channel block, stored as conv + bias (the row's
// residual and activation are applied afterwards in one pass). K > 0 fixes a KxK kernel with dilation 1
// and stride SW, so every load is a constant offset from one row pointer and the weights stay in
// registers; K == 0 is the general case. CHECK substitutes zeros for taps in the left/right padding.
template <int K, int SW, int NW, bool CHECK>
inline void depthwise_c8_pixels(const DepthwiseC8Ctx& c, const float* src, const __m256* w, int64_t ky0,
                                int64_t ky1, int64_t ih0, int64_t ow0, float* dst, __m256 bias) {
  const Conv2dShape& s = c.s;
  const int64_t KH = K > 0 ? K : s.kernel_h, KW = K > 0 ? K : s.kernel_w, W = s.in_w;
  const int64_t sw = K > 0 ? SW : s.stride_w, dh = K > 0 ? 1 : s.dilation_h, dw = K > 0 ? 1 : s.dilation_w;
  alignas(32) static const float zeros[8] = {};
  __m256 acc[NW];
  for (int j = 0; j < NW; ++j) acc[j] = bias;
#pragma GCC unroll 8
  for (int64_t ky = 0; ky < KH; ++ky) {
    if (ky < ky0 || ky >= ky1) continue;
    const int64_t iw0 = ow0 * sw - s.pad_left;
    const float* row = src + (ih0 + ky * dh) * W * 8;
#pragma GCC unroll 8
    for (int64_t kx = 0; kx < KW; ++kx) {
      const __m256 wv = w[ky * KW + kx];
      for (int j = 0; j < NW; ++j) {
        const int64_t iw = iw0 + kx * dw + j * sw;
        const float* p = row + iw * 8;
        if (CHECK && (iw < 0 || iw >= W)) p = zeros;
        acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(p), wv, acc[j]);
      }
    }
  }
  for (int j = 0; j < NW; ++j) _mm256_storeu_ps(dst + (ow0 + j) * 8, acc[j]);
}

// One output row (all OW pixels) of one channel block: conv + bias, then residual and activation.
template <int K, int SW>
void depthwise_c8_row(const DepthwiseC8Ctx& c, const float* src, const float* packed_w, int64_t oh, float* dst,
                      const float* res, __m256 bias) {
  const Conv2dShape& s = c.s;
  const int taps = static_cast<int>(s.kernel_h * s.kernel_w);
  constexpr int kFixed = K > 0 ? K * K : 1;
  __m256 w_fixed[kFixed];
  std::vector<VectorSlot> w_any(K > 0 ? 0 : taps);
  __m256* w = K > 0 ? w_fixed : &w_any.data()->v;
  for (int t = 0; t < taps; ++t) w[t] = _mm256_load_ps(packed_w + t * 8);
  // Kernel rows that land inside the input for this output row.
  const int64_t ih0 = oh * s.stride_h - s.pad_top;
  int64_t ky0 = 0, ky1 = s.kernel_h;
  while (ky0 < ky1 && ih0 + ky0 * s.dilation_h < 0) ++ky0;
  while (ky1 > ky0 && ih0 + (ky1 - 1) * s.dilation_h >= s.in_h) --ky1;
  // 6-pixel tiles over the whole row; tiles touching the left/right padding take the checked loads
  // (at full width: a 1-pixel border loop would be FMA-latency bound, as slow as 6 pixels).
  for (int64_t ow = 0; ow < c.ow_count; ow += 6) {
    const int64_t nw = std::min<int64_t>(6, c.ow_count - ow);
    const bool inside = ow >= c.lo && ow + nw <= c.hi;
    switch (nw) {
      case 6:
        if (inside)
          depthwise_c8_pixels<K, SW, 6, false>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        else
          depthwise_c8_pixels<K, SW, 6, true>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        break;
      case 5:
        if (inside)
          depthwise_c8_pixels<K, SW, 5, false>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        else
          depthwise_c8_pixels<K, SW, 5, true>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        break;
      case 4:
        if (inside)
          depthwise_c8_pixels<K, SW, 4, false>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        else
          depthwise_c8_pixels<K, SW, 4, true>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        break;
      case 3:
        if (inside)
          depthwise_c8_pixels<K, SW, 3, false>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        else
          depthwise_c8_pixels<K, SW, 3, true>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        break;
      case 2:
        if (inside)
          depthwise_c8_pixels<K, SW, 2, false>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        else
          depthwise_c8_pixels<K, SW, 2, true>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        break;
      default:
        if (inside)
          depthwise_c8_pixels<K, SW, 1, false>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        else
          depthwise_c8_pixels<K, SW, 1, true>(c, src, w, ky0, ky1, ih0, ow, dst, bias);
        break;
    }
  }
  apply_residual_activation(dst, res, c.ow_count * 8, c.ep);
}

}  // namespace

size_t conv2d_nchwc8_depthwise_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>((s.in_channels + 7) / 8 * 8 * s.kernel_h * s.kernel_w);
}

void conv2d_nchwc8_depthwise_pack(const Conv2dShape& s, const float* weights, float* packed) {
  const int64_t taps = s.kernel_h * s.kernel_w, blocks = (s.in_channels + 7) / 8;
  for (int64_t cb = 0; cb < blocks; ++cb)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t l = 0; l < 8; ++l) {
        int64_t c = cb * 8 + l;
        packed[(cb * taps + t) * 8 + l] = c < s.in_channels ? weights[c * taps + t] : 0.0f;
      }
}

namespace {

// Kernel row dispatch: 3x3 dilation-1 stride-1/2 rows have compile-time taps.
void depthwise_c8_row_any(const DepthwiseC8Ctx& c, const float* src, const float* w, int64_t oh, float* dst,
                          const float* res, __m256 bias) {
  const Conv2dShape& s = c.s;
  const bool undilated = s.dilation_h == 1 && s.dilation_w == 1;
  const bool fast3x3 = s.kernel_h == 3 && s.kernel_w == 3 && undilated;
  const bool fast5x5 = s.kernel_h == 5 && s.kernel_w == 5 && undilated;
  if (fast3x3 && s.stride_w == 1)
    depthwise_c8_row<3, 1>(c, src, w, oh, dst, res, bias);
  else if (fast3x3 && s.stride_w == 2)
    depthwise_c8_row<3, 2>(c, src, w, oh, dst, res, bias);
  else if (fast5x5 && s.stride_w == 1)
    depthwise_c8_row<5, 1>(c, src, w, oh, dst, res, bias);
  else if (fast5x5 && s.stride_w == 2)
    depthwise_c8_row<5, 2>(c, src, w, oh, dst, res, bias);
  else
    depthwise_c8_row<0, 0>(c, src, w, oh, dst, res, bias);
}

inline __m256 block_bias(const Conv2dShape& s, const Epilogue& ep, int64_t cb) {
  const int valid = static_cast<int>(std::min<int64_t>(8, s.in_channels - cb * 8));
  return ep.bias ? _mm256_maskload_ps(ep.bias + cb * 8, vtail_mask(valid)) : _mm256_setzero_ps();
}

// Narrow maps (7x7, 14x14): most 6-pixel tiles would touch the padding, so each channel block is first
// copied into a zero-padded scratch plane and then convolved with padding 0 (no checked loads).
void depthwise_c8_padded_planes(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                const Epilogue& ep, ThreadPool* pool) {
  const int64_t blocks = (s.in_channels + 7) / 8, OH = s.out_h(), OW = s.out_w(), taps = s.kernel_h * s.kernel_w;
  Conv2dShape ps = s;  // the padded plane's geometry: same output size
  ps.in_h = s.in_h + s.pad_top + s.pad_bottom;
  ps.in_w = s.in_w + s.pad_left + s.pad_right;
  ps.pad_top = ps.pad_left = ps.pad_bottom = ps.pad_right = 0;
  DepthwiseC8Ctx c{ps, ep, OW, 0, 0};
  interior_columns(ps, OW, &c.lo, &c.hi);
  parallel_for(pool, s.batch * blocks, [&](int64_t b, int64_t e) {
    static thread_local AlignedBuffer scratch_buffer;
    float* padded = scratch_buffer.ensure(static_cast<size_t>(ps.in_h * ps.in_w * 8));
    std::memset(padded, 0, ps.in_h * ps.in_w * 8 * sizeof(float));  // borders stay zero across blocks
    for (int64_t nb = b; nb < e; ++nb) {
      const float* src = in + nb * s.in_h * s.in_w * 8;
      for (int64_t ih = 0; ih < s.in_h; ++ih)
        std::memcpy(padded + ((ih + s.pad_top) * ps.in_w + s.pad_left) * 8, src + ih * s.in_w * 8,
                    s.in_w * 8 * sizeof(float));
      const int64_t cb = nb % blocks;
      const __m256 bias = block_bias(s, ep, cb);
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t off = (nb * OH + oh) * OW * 8;
        depthwise_c8_row_any(c, padded, packed + cb * taps * 8, oh, out + off, ep.residual ? ep.residual + off : nullptr,
                             bias);
      }
    }
  });
}

}  // namespace

void conv2d_nchwc8_depthwise_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                  const Epilogue& ep, ThreadPool* pool) {
  const int64_t blocks = (s.in_channels + 7) / 8, OH = s.out_h(), OW = s.out_w();
  const int64_t taps = s.kernel_h * s.kernel_w;
  if (OW <= 16) {
    depthwise_c8_padded_planes(s, in, packed, out, ep, pool);
    return;
  }
  DepthwiseC8Ctx c{s, ep, OW, 0, 0};
  interior_columns(s, OW, &c.lo, &c.hi);
  parallel_for(pool, s.batch * blocks * OH, [&](int64_t b, int64_t e) {
    int64_t nb = b / OH, oh = b % OH;  // advanced incrementally: no divisions per row
    for (int64_t task = b; task < e; ++task) {
      const int64_t cb = nb % blocks;
      const float* src = in + nb * s.in_h * s.in_w * 8;
      const int64_t off = (nb * OH + oh) * OW * 8;
      depthwise_c8_row_any(c, src, packed + cb * taps * 8, oh, out + off, ep.residual ? ep.residual + off : nullptr,
                           block_bias(s, ep, cb));
      if (++oh == OH) {
        oh = 0;
        ++nb;
      }
    }
  });
}

// Both reorders move 8 channels x 8 pixels at a time through an in-register 8 x 8 transpose (a
// channel block of 8 rows of 8 pixels <-> 8 pixels of 8 channels); missing channels of the last block are
// zero rows going in and dropped coming out, tail pixels go one by one.
void reorder_nchw_to_nchwc8(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                            ThreadPool* pool) {
  const int64_t blocks = (channels + 7) / 8;
  parallel_for(pool, batch * blocks, [&](int64_t b, int64_t e) {
    for (int64_t nb = b; nb < e; ++nb) {
      const int64_t n = nb / blocks, cb = nb % blocks;
      const int valid = static_cast<int>(std::min<int64_t>(8, channels - cb * 8));
      const float* src = in + (n * channels + cb * 8) * hw;
      float* dst = out + nb * hw * 8;
      int64_t p = 0;
      for (; p + 8 <= hw; p += 8) {
        __m256 r[8];
        for (int l = 0; l < 8; ++l) r[l] = l < valid ? _mm256_loadu_ps(src + l * hw + p) : _mm256_setzero_ps();
        planes::Vec8::transpose(r);
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (p + j) * 8, r[j]);
      }
      for (; p < hw; ++p)
        for (int l = 0; l < 8; ++l) dst[p * 8 + l] = l < valid ? src[l * hw + p] : 0.0f;
    }
  });
}

void reorder_nchwc8_to_nchw(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                            ThreadPool* pool) {
  const int64_t blocks = (channels + 7) / 8;
  parallel_for(pool, batch * blocks, [&](int64_t b, int64_t e) {
    for (int64_t nb = b; nb < e; ++nb) {
      const int64_t n = nb / blocks, cb = nb % blocks;
      const int valid = static_cast<int>(std::min<int64_t>(8, channels - cb * 8));
      const float* src = in + nb * hw * 8;
      float* dst = out + (n * channels + cb * 8) * hw;
      int64_t p = 0;
      for (; p + 8 <= hw; p += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + (p + j) * 8);
        planes::Vec8::transpose(r);
        for (int l = 0; l < valid; ++l) _mm256_storeu_ps(dst + l * hw + p, r[l]);
      }
      for (; p < hw; ++p)
        for (int l = 0; l < valid; ++l) dst[l * hw + p] = src[p * 8 + l];
    }
  });
}

}  // namespace tessel::rt
