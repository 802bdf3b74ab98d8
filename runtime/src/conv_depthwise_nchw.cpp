// Depthwise convolution (channel multiplier 1) in NCHW: each channel plane is first copied into a
// zero-padded, stride-phase-split scratch plane, so every tap of every output vector is one
// unit-stride load (no border cases, no stride-2 shuffles in the hot loop); the epilogue is fused.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"

namespace tessel::rt {
namespace {

// A vector register value as a plain struct (std::vector<__m256> drops the alignment attribute).
struct VectorSlot {
  __m256 v;
};

// Scratch layout: padded row r (input row r - pad_top) holds `stride_w` phases of phase_w floats;
// phase p, index j is padded column j * stride_w + p (input column j * stride_w + p - pad_left).
struct PhasedPlane {
  int64_t rows = 0, phase_w = 0, row_stride = 0;
};

PhasedPlane phased_plane_geometry(const Conv2dShape& s) {
  PhasedPlane g;
  const int64_t ow_vec = (s.out_w() + 7) / 8 * 8;
  g.rows = (s.out_h() - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
  g.phase_w = (ow_vec + (s.kernel_w - 1) * s.dilation_w / s.stride_w + 8) / 8 * 8;
  g.row_stride = g.phase_w * s.stride_w;
  return g;
}

// Lanes whose column index (first + lane * step) lies in [0, W).
inline __m256i valid_columns(int64_t first, int step, int64_t W) {
  const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)),
                                       _mm256_mullo_epi32(_mm256_set1_epi32(step), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  const __m256i ge0 = _mm256_cmpgt_epi32(col, _mm256_set1_epi32(-1));
  const __m256i ltw = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(W)), col);
  return _mm256_and_si256(ge0, ltw);
}

// One input row (or nullptr for a padding row) -> one padded, phase-split scratch row, 8 columns at
// a time with masked loads at the borders (no libc calls: rows of 7x7 maps are only a few vectors).
void fill_phased_row(const Conv2dShape& s, const PhasedPlane& g, const float* src, float* dst) {
  const int64_t sw = s.stride_w, pl = s.pad_left, W = s.in_w;
  if (src == nullptr) {
    for (int64_t j = 0; j < g.row_stride; j += 8) _mm256_store_ps(dst + j, _mm256_setzero_ps());
    return;
  }
  for (int64_t j0 = 0; j0 < g.phase_w && sw == 2; j0 += 8) {
    // Interior chunks of stride 2: 16 inputs give both phases with one pair of loads.
    const int64_t first = j0 * 2 - pl;
    if (first < 0 || first + 16 > W) continue;
    const __m256 a = _mm256_loadu_ps(src + first), b = _mm256_loadu_ps(src + first + 8);
    _mm256_store_ps(dst + j0, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                  _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8)));
    _mm256_store_ps(dst + g.phase_w + j0, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                              _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8)));
  }
  for (int64_t p = 0; p < sw; ++p) {
    float* d = dst + p * g.phase_w;
    for (int64_t j0 = 0; j0 < g.phase_w; j0 += 8) {
      if (sw == 2 && j0 * 2 - pl >= 0 && j0 * 2 - pl + 16 <= W) continue;  // done above
      const int64_t first = j0 * sw + p - pl;  // input column of lane 0
      if (sw == 1) {
        // Masked-off lanes are never read (maskload does not touch them), so src + first may point
        // outside the row there.
        const __m256i m = first >= 0 && first + 8 <= W ? _mm256_set1_epi32(-1) : valid_columns(first, 1, W);
        _mm256_store_ps(d + j0, _mm256_maskload_ps(src + first, m));
      } else if (sw == 2) {  // border chunk: masked loads, lanes outside the row are zero
        const __m256 a = _mm256_maskload_ps(src + first, valid_columns(first, 1, W));
        const __m256 b = _mm256_maskload_ps(src + first + 8, valid_columns(first + 8, 1, W));
        _mm256_store_ps(d + j0, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                    _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8)));
      } else {
        for (int64_t l = 0; l < 8; ++l) {
          const int64_t col = first + l * sw;
          d[j0 + l] = col >= 0 && col < W ? src[col] : 0.0f;
        }
      }
    }
  }
}

// NV output vectors of R consecutive output rows, stored as conv + bias (tail-masked past OW); TAPS > 0
// fixes the tap count so the weights live in registers. R > 1 gives narrow maps (7x7, 14x14) enough
// independent accumulators to hide the FMA latency.
template <int TAPS, int NV, int R>
inline void depthwise_vectors(const float* row_base, int64_t row_step, const int64_t* offs, const __m256* w,
                              int taps, float* out, int64_t ow, int64_t OW, __m256 bias) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = bias;
  const int n = TAPS > 0 ? TAPS : taps;
#pragma GCC unroll 9
  for (int t = 0; t < n; ++t) {
    const float* p = row_base + offs[t] + ow;
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v)
        acc[r][v] = _mm256_fmadd_ps(_mm256_loadu_ps(p + r * row_step + 8 * v), w[t], acc[r][v]);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      const int64_t o = ow + 8 * v;
      if (o + 8 <= OW)
        _mm256_storeu_ps(out + r * OW + o, acc[r][v]);
      else
        _mm256_maskstore_ps(out + r * OW + o, vtail_mask(static_cast<int>(OW - o)), acc[r][v]);
    }
}

// Whole output plane of one channel from its phased scratch plane.
template <int TAPS>
void depthwise_plane(const Conv2dShape& s, const PhasedPlane& g, const float* scratch, const float* weights,
                     const int64_t* offs, float* out, const float* res, float bias_value, const Epilogue& ep) {
  const int64_t OH = s.out_h(), OW = s.out_w();
  const int taps = static_cast<int>(s.kernel_h * s.kernel_w);
  // Broadcast weights: fixed-size locals (registers after unrolling) when TAPS is known.
  constexpr int kFixed = TAPS > 0 ? TAPS : 1;
  __m256 w_fixed[kFixed];
  std::vector<VectorSlot> w_any(TAPS > 0 ? 0 : taps);
  __m256* w = TAPS > 0 ? w_fixed : &w_any.data()->v;
  for (int t = 0; t < taps; ++t) w[t] = _mm256_set1_ps(weights[t]);
  const __m256 bias = _mm256_set1_ps(bias_value);
  const int64_t row_step = s.stride_h * g.row_stride;
  int64_t oh = 0;
  if (OW <= 8) {  // 4 rows x 1 vector
    for (; oh + 4 <= OH; oh += 4)
      depthwise_vectors<TAPS, 1, 4>(scratch + oh * row_step, row_step, offs, w, taps, out + oh * OW, 0, OW, bias);
  } else if (OW <= 16) {  // 2 rows x 2 vectors
    for (; oh + 2 <= OH; oh += 2)
      depthwise_vectors<TAPS, 2, 2>(scratch + oh * row_step, row_step, offs, w, taps, out + oh * OW, 0, OW, bias);
  }
  for (; oh < OH; ++oh) {
    const float* row_base = scratch + oh * row_step;
    float* o = out + oh * OW;
    int64_t ow = 0;
    for (; ow + 32 <= OW; ow += 32) depthwise_vectors<TAPS, 4, 1>(row_base, row_step, offs, w, taps, o, ow, OW, bias);
    for (; ow + 16 <= OW; ow += 16) depthwise_vectors<TAPS, 2, 1>(row_base, row_step, offs, w, taps, o, ow, OW, bias);
    for (; ow < OW; ow += 8) depthwise_vectors<TAPS, 1, 1>(row_base, row_step, offs, w, taps, o, ow, OW, bias);
  }
  apply_residual_activation(out, res, OH * OW, ep);  // the plane is still in L1/L2
}

}  // namespace

void conv2d_nchw_depthwise_avx2(const Conv2dShape& s, const float* in, const float* weights, float* out,
                                const Epilogue& ep, ThreadPool* pool) {
  const int64_t C = s.in_channels, OH = s.out_h(), OW = s.out_w(), taps = s.kernel_h * s.kernel_w;
  const PhasedPlane g = phased_plane_geometry(s);
  // Tap offsets into the scratch plane (the same for every channel).
  std::vector<int64_t> offs(taps);
  for (int64_t ky = 0, t = 0; ky < s.kernel_h; ++ky)
    for (int64_t kx = 0; kx < s.kernel_w; ++kx, ++t) {
      const int64_t dx = kx * s.dilation_w;
      offs[t] = ky * s.dilation_h * g.row_stride + (dx % s.stride_w) * g.phase_w + dx / s.stride_w;
    }
  parallel_for(pool, s.batch * C, [&](int64_t b, int64_t e) {
    static thread_local AlignedBuffer scratch_buffer;
    float* scratch = scratch_buffer.ensure(static_cast<size_t>(g.rows * g.row_stride + 8));
    for (int64_t nc = b; nc < e; ++nc) {
      const int64_t c = nc % C;
      const float* plane = in + nc * s.in_h * s.in_w;
      for (int64_t r = 0; r < g.rows; ++r) {
        const int64_t ih = r - s.pad_top;
        fill_phased_row(s, g, ih >= 0 && ih < s.in_h ? plane + ih * s.in_w : nullptr, scratch + r * g.row_stride);
      }
      float* o = out + nc * OH * OW;
      const float* res = ep.residual ? ep.residual + nc * OH * OW : nullptr;
      const float bias = ep.bias ? ep.bias[c] : 0.0f;
      const float* w = weights + c * taps;
      if (taps == 9)
        depthwise_plane<9>(s, g, scratch, w, offs.data(), o, res, bias, ep);
      else
        depthwise_plane<0>(s, g, scratch, w, offs.data(), o, res, bias, ep);
    }
  });
}

}  // namespace tessel::rt
