// Depthwise convolution (channel multiplier 1) in NCHW and NCHWc8, and the NCHW <-> NCHWc8 reorders.
#include <immintrin.h>

#include <algorithm>

#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"

namespace tessel::rt {
namespace {

// Range [lo, hi) of output columns whose taps are all inside the input row (no padding reads).
void interior_columns(const Conv2dShape& s, int64_t ow_count, int64_t* lo, int64_t* hi) {
  const int64_t span = s.dilation_w * (s.kernel_w - 1);
  *lo = std::min(ow_count, (s.pad_left + s.stride_w - 1) / s.stride_w);
  int64_t last_ok = (s.in_w - 1 - span + s.pad_left);  // ow * sw <= last_ok
  *hi = last_ok < 0 ? *lo : std::min(ow_count, last_ok / s.stride_w + 1);
  *hi = std::max(*hi, *lo);
}

// One output row of one NCHW channel.
void depthwise_row_nchw(const Conv2dShape& s, const float* plane, const float* w, int64_t oh, float* out,
                        int64_t lo, int64_t hi) {
  const int64_t OW = s.out_w(), W = s.in_w, sw = s.stride_w;
  auto scalar_at = [&](int64_t ow) {
    float acc = 0.0f;
    for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
      int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
      if (ih < 0 || ih >= s.in_h) continue;
      for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
        int64_t iw = ow * sw - s.pad_left + kx * s.dilation_w;
        if (iw >= 0 && iw < W) acc += plane[ih * W + iw] * w[ky * s.kernel_w + kx];
      }
    }
    return acc;
  };
  for (int64_t ow = 0; ow < lo; ++ow) out[ow] = scalar_at(ow);
  int64_t ow = lo;
  if (sw == 1 || sw == 2) {
    for (; ow + 8 <= hi; ow += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
        int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
        if (ih < 0 || ih >= s.in_h) continue;
        const float* src = plane + ih * W + ow * sw - s.pad_left;
        for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
          const float* p = src + kx * s.dilation_w;
          __m256 x;
          if (sw == 1) {
            x = _mm256_loadu_ps(p);
          } else {  // even lanes of 16 consecutive values
            __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
            x = _mm256_castpd_ps(_mm256_permute4x64_pd(
                _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
          }
          acc = _mm256_fmadd_ps(x, _mm256_set1_ps(w[ky * s.kernel_w + kx]), acc);
        }
      }
      _mm256_storeu_ps(out + ow, acc);
    }
  }
  for (; ow < OW; ++ow) out[ow] = scalar_at(ow);
}

}  // namespace

void conv2d_nchw_depthwise_avx2(const Conv2dShape& s, const float* in, const float* weights, float* out,
                                const Epilogue& ep, ThreadPool* pool) {
  const int64_t C = s.in_channels, OH = s.out_h(), OW = s.out_w();
  int64_t lo, hi;
  interior_columns(s, OW, &lo, &hi);
  // Stride-2 vector loads read one input past the last tap: keep that one inside the row too.
  if (s.stride_w == 2) {
    const int64_t last_ok = s.in_w - 2 - s.dilation_w * (s.kernel_w - 1) + s.pad_left;
    hi = last_ok < 0 ? lo : std::max(lo, std::min(hi, last_ok / 2 + 1));
  }
  parallel_for(pool, s.batch * C, [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      const int64_t c = nc % C;
      const float* plane = in + nc * s.in_h * s.in_w;
      float* o = out + nc * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) depthwise_row_nchw(s, plane, weights + c * s.kernel_h * s.kernel_w, oh, o + oh * OW, lo, hi);
      Epilogue e1 = ep;
      if (e1.bias) e1.bias += c;
      if (e1.residual) e1.residual += nc * OH * OW;
      apply_epilogue_planar(o, 1, OH * OW, e1);
    }
  });
}

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

void conv2d_nchwc8_depthwise_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                  const Epilogue& ep, ThreadPool* pool) {
  const int64_t blocks = (s.in_channels + 7) / 8, OH = s.out_h(), OW = s.out_w(), H = s.in_h, W = s.in_w;
  const int64_t taps = s.kernel_h * s.kernel_w;
  int64_t lo, hi;
  interior_columns(s, OW, &lo, &hi);
  parallel_for(pool, s.batch * blocks, [&](int64_t b, int64_t e) {
    for (int64_t nb = b; nb < e; ++nb) {
      const int64_t cb = nb % blocks;
      const float* src = in + nb * H * W * 8;
      const float* w = packed + cb * taps * 8;
      float* dst = out + nb * OH * OW * 8;
      const float* res = ep.residual ? ep.residual + nb * OH * OW * 8 : nullptr;
      const int valid = static_cast<int>(std::min<int64_t>(8, s.in_channels - cb * 8));
      const __m256 bias = ep.bias ? _mm256_maskload_ps(ep.bias + cb * 8, vtail_mask(valid)) : _mm256_setzero_ps();
      for (int64_t oh = 0; oh < OH; ++oh) {
        auto finish = [&](int64_t ow, __m256 acc) {
          acc = _mm256_add_ps(acc, bias);
          if (res) acc = _mm256_add_ps(acc, _mm256_loadu_ps(res + (oh * OW + ow) * 8));
          _mm256_storeu_ps(dst + (oh * OW + ow) * 8, activate(acc, ep));
        };
        auto one_pixel = [&](int64_t ow, bool check_w) {
          __m256 acc = _mm256_setzero_ps();
          for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
            int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
              int64_t iw = ow * s.stride_w - s.pad_left + kx * s.dilation_w;
              if (check_w && (iw < 0 || iw >= W)) continue;
              acc = _mm256_fmadd_ps(_mm256_loadu_ps(src + (ih * W + iw) * 8),
                                    _mm256_load_ps(w + (ky * s.kernel_w + kx) * 8), acc);
            }
          }
          finish(ow, acc);
        };
        for (int64_t ow = 0; ow < lo; ++ow) one_pixel(ow, true);
        int64_t ow = lo;
        for (; ow + 4 <= hi; ow += 4) {  // 4 independent accumulators hide the FMA latency
          __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
          const int64_t step = s.stride_w * 8;
          for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
            int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
            if (ih < 0 || ih >= H) continue;
            const float* row = src + (ih * W + ow * s.stride_w - s.pad_left) * 8;
            for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
              const float* p = row + kx * s.dilation_w * 8;
              const __m256 wv = _mm256_load_ps(w + (ky * s.kernel_w + kx) * 8);
              a0 = _mm256_fmadd_ps(_mm256_loadu_ps(p), wv, a0);
              a1 = _mm256_fmadd_ps(_mm256_loadu_ps(p + step), wv, a1);
              a2 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 2 * step), wv, a2);
              a3 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 3 * step), wv, a3);
            }
          }
          finish(ow, a0);
          finish(ow + 1, a1);
          finish(ow + 2, a2);
          finish(ow + 3, a3);
        }
        for (; ow < hi; ++ow) one_pixel(ow, false);
        for (; ow < OW; ++ow) one_pixel(ow, true);
      }
    }
  });
}

void reorder_nchw_to_nchwc8(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                            ThreadPool* pool) {
  const int64_t blocks = (channels + 7) / 8;
  parallel_for(pool, batch * blocks, [&](int64_t b, int64_t e) {
    for (int64_t nb = b; nb < e; ++nb) {
      const int64_t n = nb / blocks, cb = nb % blocks;
      const int valid = static_cast<int>(std::min<int64_t>(8, channels - cb * 8));
      const float* src = in + (n * channels + cb * 8) * hw;
      float* dst = out + nb * hw * 8;
      for (int64_t p = 0; p < hw; ++p)
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
      for (int l = 0; l < valid; ++l)
        for (int64_t p = 0; p < hw; ++p) dst[l * hw + p] = src[p * 8 + l];
    }
  });
}

}  // namespace tessel::rt
