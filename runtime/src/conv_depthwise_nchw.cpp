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

// One input row (or nullptr for a padding row) -> one padded, phase-split scratch row.
void fill_phased_row(const Conv2dShape& s, const PhasedPlane& g, const float* src, float* dst) {
  const int64_t sw = s.stride_w, pl = s.pad_left, W = s.in_w;
  if (src == nullptr) {
    std::memset(dst, 0, g.row_stride * sizeof(float));
    return;
  }
  if (sw == 1) {  // [zeros | row | zeros], only the columns the taps can reach
    const int64_t lead = std::min(pl, g.phase_w);
    const int64_t first = std::max<int64_t>(0, -pl);  // negative pads drop input columns
    const int64_t count = std::max<int64_t>(0, std::min(W - first, g.phase_w - lead));
    std::memset(dst, 0, lead * sizeof(float));
    std::memcpy(dst + lead, src + first, count * sizeof(float));
    std::memset(dst + lead + count, 0, (g.phase_w - lead - count) * sizeof(float));
    return;
  }
  std::memset(dst, 0, g.row_stride * sizeof(float));
  int64_t c = std::max<int64_t>(0, -pl);
  if (sw == 2 && pl >= 0) {  // 16 inputs -> 8 to each phase; input column c is padded column c + pl
    float* even = dst + (pl % 2) * g.phase_w;       // phase of the even-offset columns c, c + 2, ...
    float* odd = dst + ((pl + 1) % 2) * g.phase_w;  // phase of c + 1, c + 3, ...
    for (; c + 16 <= W && (c + 1 + pl) / 2 + 8 <= g.phase_w; c += 16) {
      const __m256 a = _mm256_loadu_ps(src + c), b = _mm256_loadu_ps(src + c + 8);
      const __m256 ev = _mm256_castpd_ps(
          _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
      const __m256 od = _mm256_castpd_ps(
          _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
      _mm256_storeu_ps(even + (c + pl) / 2, ev);
      _mm256_storeu_ps(odd + (c + 1 + pl) / 2, od);
    }
  }
  for (; c < W; ++c) {
    const int64_t j = (c + pl) / sw;
    if (j >= g.phase_w) break;
    dst[((c + pl) % sw) * g.phase_w + j] = src[c];
  }
}

// NV output vectors of one output row, stored as conv + bias (tail-masked past OW); TAPS > 0 fixes
// the tap count so the weights live in registers.
template <int TAPS, int NV>
inline void depthwise_vectors(const float* row_base, const int64_t* offs, const __m256* w, int taps,
                              float* out, int64_t ow, int64_t OW, __m256 bias) {
  __m256 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = bias;
  const int n = TAPS > 0 ? TAPS : taps;
#pragma GCC unroll 9
  for (int t = 0; t < n; ++t) {
    const float* p = row_base + offs[t] + ow;
    for (int v = 0; v < NV; ++v) acc[v] = _mm256_fmadd_ps(_mm256_loadu_ps(p + 8 * v), w[t], acc[v]);
  }
  for (int v = 0; v < NV; ++v) {
    const int64_t o = ow + 8 * v;
    if (o + 8 <= OW)
      _mm256_storeu_ps(out + o, acc[v]);
    else
      _mm256_maskstore_ps(out + o, vtail_mask(static_cast<int>(OW - o)), acc[v]);
  }
}

// Whole output plane of one channel from its phased scratch plane.
template <int TAPS>
void depthwise_plane(const Conv2dShape& s, const PhasedPlane& g, const float* scratch, const float* weights,
                     float* out, const float* res, float bias_value, const Epilogue& ep) {
  const int64_t OH = s.out_h(), OW = s.out_w();
  const int taps = static_cast<int>(s.kernel_h * s.kernel_w);
  // Tap offsets into the scratch plane and broadcast weights: fixed-size locals (registers after
  // unrolling) when TAPS is known, heap arrays otherwise.
  constexpr int kFixed = TAPS > 0 ? TAPS : 1;
  int64_t offs_fixed[kFixed];
  __m256 w_fixed[kFixed];
  std::vector<int64_t> offs_any(TAPS > 0 ? 0 : taps);
  std::vector<VectorSlot> w_any(TAPS > 0 ? 0 : taps);
  int64_t* offs = TAPS > 0 ? offs_fixed : offs_any.data();
  __m256* w = TAPS > 0 ? w_fixed : &w_any.data()->v;
  for (int64_t ky = 0, t = 0; ky < s.kernel_h; ++ky)
    for (int64_t kx = 0; kx < s.kernel_w; ++kx, ++t) {
      const int64_t dx = kx * s.dilation_w;
      offs[t] = ky * s.dilation_h * g.row_stride + (dx % s.stride_w) * g.phase_w + dx / s.stride_w;
      w[t] = _mm256_set1_ps(weights[t]);
    }
  const __m256 bias = _mm256_set1_ps(bias_value);
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* row_base = scratch + oh * s.stride_h * g.row_stride;
    float* o = out + oh * OW;
    int64_t ow = 0;
    for (; ow + 32 <= OW; ow += 32) depthwise_vectors<TAPS, 4>(row_base, offs, w, taps, o, ow, OW, bias);
    for (; ow + 16 <= OW; ow += 16) depthwise_vectors<TAPS, 2>(row_base, offs, w, taps, o, ow, OW, bias);
    for (; ow < OW; ow += 8) depthwise_vectors<TAPS, 1>(row_base, offs, w, taps, o, ow, OW, bias);
  }
  apply_residual_activation(out, res, OH * OW, ep);  // the plane is still in L1/L2
}

}  // namespace

void conv2d_nchw_depthwise_avx2(const Conv2dShape& s, const float* in, const float* weights, float* out,
                                const Epilogue& ep, ThreadPool* pool) {
  const int64_t C = s.in_channels, OH = s.out_h(), OW = s.out_w(), taps = s.kernel_h * s.kernel_w;
  const PhasedPlane g = phased_plane_geometry(s);
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
        depthwise_plane<9>(s, g, scratch, w, o, res, bias, ep);
      else
        depthwise_plane<0>(s, g, scratch, w, o, res, bias, ep);
    }
  });
}

}  // namespace tessel::rt
