// Pooling kernels: windows are clipped to the input once per output pixel, then reduced.
#include "tessel/rt/pool.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "tessel/rt/vmath.h"

namespace tessel::rt {
namespace {

// The clipped window of output index o along one axis, and the count_include_pad divisor extent.
struct Window {
  int64_t begin, end, padded_extent;
};
inline Window window(int64_t o, int64_t k, int64_t s, int64_t p0, int64_t p1, int64_t in) {
  const int64_t start = o * s - p0;
  const int64_t padded_end = std::min(start + k, in + p1);
  return {std::max<int64_t>(start, 0), std::min(start + k, in), padded_end - start};
}

template <typename Body>
void for_each_output(const Pool2dShape& s, int64_t planes, ThreadPool* pool, Body body) {
  const int64_t OH = s.out_h(), OW = s.out_w();
  parallel_for(pool, planes, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p)
      for (int64_t oh = 0; oh < OH; ++oh) {
        const Window wy = window(oh, s.kernel_h, s.stride_h, s.pad_top, s.pad_bottom, s.in_h);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const Window wx = window(ow, s.kernel_w, s.stride_w, s.pad_left, s.pad_right, s.in_w);
          body(p, oh * OW + ow, wy, wx);
        }
      }
  });
}

inline float divisor(const Pool2dShape& s, const Window& wy, const Window& wx) {
  if (s.count_include_pad) return float(wy.padded_extent * wx.padded_extent);
  return float(std::max<int64_t>(1, (wy.end - wy.begin) * (wx.end - wx.begin)));
}

}  // namespace

void maxpool2d_nchw(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  const int64_t plane = s.in_h * s.in_w, oplane = s.out_h() * s.out_w();
  for_each_output(s, s.batch * s.channels, pool, [&](int64_t p, int64_t o, const Window& wy, const Window& wx) {
    const float* src = in + p * plane;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t y = wy.begin; y < wy.end; ++y)
      for (int64_t x = wx.begin; x < wx.end; ++x) m = std::max(m, src[y * s.in_w + x]);
    out[p * oplane + o] = m;
  });
}

void avgpool2d_nchw(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  const int64_t plane = s.in_h * s.in_w, oplane = s.out_h() * s.out_w();
  for_each_output(s, s.batch * s.channels, pool, [&](int64_t p, int64_t o, const Window& wy, const Window& wx) {
    const float* src = in + p * plane;
    float sum = 0.0f;
    for (int64_t y = wy.begin; y < wy.end; ++y)
      for (int64_t x = wx.begin; x < wx.end; ++x) sum += src[y * s.in_w + x];
    out[p * oplane + o] = sum / divisor(s, wy, wx);
  });
}

void maxpool2d_nchwc8(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  const int64_t plane = s.in_h * s.in_w * 8, oplane = s.out_h() * s.out_w() * 8;
  const int64_t blocks = s.batch * ((s.channels + 7) / 8);
  for_each_output(s, blocks, pool, [&](int64_t p, int64_t o, const Window& wy, const Window& wx) {
    const float* src = in + p * plane;
    __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t y = wy.begin; y < wy.end; ++y)
      for (int64_t x = wx.begin; x < wx.end; ++x) m = _mm256_max_ps(m, _mm256_loadu_ps(src + (y * s.in_w + x) * 8));
    _mm256_storeu_ps(out + p * oplane + o * 8, m);
  });
}

void avgpool2d_nchwc8(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  const int64_t plane = s.in_h * s.in_w * 8, oplane = s.out_h() * s.out_w() * 8;
  const int64_t blocks = s.batch * ((s.channels + 7) / 8);
  for_each_output(s, blocks, pool, [&](int64_t p, int64_t o, const Window& wy, const Window& wx) {
    const float* src = in + p * plane;
    __m256 sum = _mm256_setzero_ps();
    for (int64_t y = wy.begin; y < wy.end; ++y)
      for (int64_t x = wx.begin; x < wx.end; ++x) sum = _mm256_add_ps(sum, _mm256_loadu_ps(src + (y * s.in_w + x) * 8));
    _mm256_storeu_ps(out + p * oplane + o * 8, _mm256_div_ps(sum, _mm256_set1_ps(divisor(s, wy, wx))));
  });
}

void global_avgpool_nchw(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                         ThreadPool* pool) {
  parallel_for(pool, batch * channels, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = in + p * hw;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0;
      int64_t i = 0;
      for (; i + 16 <= hw; i += 16) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(src + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(src + i + 8));
      }
      float sum = vreduce_add(_mm256_add_ps(s0, s1));
      for (; i < hw; ++i) sum += src[i];
      out[p] = sum / float(hw);
    }
  });
}

void global_avgpool_nchwc8(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                           ThreadPool* pool) {
  parallel_for(pool, batch * ((channels + 7) / 8), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = in + p * hw * 8;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0;
      int64_t i = 0;
      for (; i + 2 <= hw; i += 2) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(src + i * 8));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(src + i * 8 + 8));
      }
      if (i < hw) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(src + i * 8));
      _mm256_storeu_ps(out + p * 8, _mm256_div_ps(_mm256_add_ps(s0, s1), _mm256_set1_ps(float(hw))));
    }
  });
}

}  // namespace tessel::rt
