// Pooling kernels.
//
// NCHW max/average pooling with row stride 1 or 2 (every MaxPool/AveragePool of the torchvision models):
// each channel plane streams through a ring of padded scratch rows (padding -inf for max, 0 for
// average; stride 2 split into even/odd column phases, plane_rows.h), so every tap of a window is one
// unit-stride vector load and a row of output vectors is reduced in registers; averages divide by the
// clipped window sizes, a per-row times a per-column count. Other shapes and the NCHWc8 variants:
// windows clipped to the input once per output pixel, then reduced. MaxPool with column stride 2 and average
// pooling 2x2/2 without padding have paths of their own that read the plane once (maxpool_s2, avgpool_2x2s2).
#include "tessel/rt/pool.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "plane_rows.h"
#include "tessel/rt/aligned_buffer.h"
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

// ---- fast path (row stride 1 or 2) ----

// Per-call constants: scratch-row geometry, tap offsets, and for averages the clipped window extent of
// every output column (as floats, padded to whole vectors) and output row.
struct PoolPlan {
  planes::RowGeometry g;
  std::vector<int64_t> taps;  // kernel_w offsets into a scratch row
  std::vector<float> col_count, row_count;
};

// Window extent counted by the average's divisor along one axis (never 0: a window with no input has a
// zero sum, so any non-zero divisor gives the reference's 0).
inline float count_of(const Window& w, bool include_pad) {
  return float(std::max<int64_t>(1, include_pad ? w.padded_extent : w.end - w.begin));
}

// NV output vectors starting at column ow of output row oh: max or sum over the window, then the
// average's division; the last vector stores last_n lanes. KW > 0 fixes the window width (unrolled
// taps). Taps alternate between two accumulators per vector, so the 4-cycle add/max latency is not
// paid once per tap when a row has only one or two vectors.
template <class T, bool IS_MAX, int NV, int KW>
inline void pool_vectors(const float* const* rows, int64_t kh, const PoolPlan& plan, int64_t ow, int last_n,
                         typename T::V row_count, float* out) {
  using V = typename T::V;
  constexpr int L = T::L;
  auto op = [](V a, V b) { return IS_MAX ? T::max(a, b) : T::add(a, b); };
  const V init = T::set1(IS_MAX ? -std::numeric_limits<float>::infinity() : 0.0f);
  V a0[NV], a1[NV];
  for (int v = 0; v < NV; ++v) a0[v] = a1[v] = init;
  const int64_t kw = KW > 0 ? KW : static_cast<int64_t>(plan.taps.size());
  const int64_t* taps = plan.taps.data();
  for (int64_t ky = 0; ky < kh; ++ky) {
    const float* row = rows[ky] + ow;
    int64_t kx = 0;
#pragma GCC unroll 4
    for (; kx + 1 < kw; kx += 2) {
      const float* p = row + taps[kx];
      const float* q = row + taps[kx + 1];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        a0[v] = op(a0[v], T::loadu(p + v * L));
        a1[v] = op(a1[v], T::loadu(q + v * L));
      }
    }
    if (kx < kw)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) a0[v] = op(a0[v], T::loadu(row + taps[kx] + v * L));
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    V r = op(a0[v], a1[v]);
    if constexpr (!IS_MAX) r = T::div(r, T::mul(row_count, T::loadu(plan.col_count.data() + ow + v * L)));
    T::store_n(out + ow + v * L, r, v == NV - 1 ? last_n : L);
  }
}

template <class T, bool IS_MAX, int KW>
inline void pool_row(const float* const* rows, int64_t kh, const PoolPlan& plan, int64_t OW,
                     typename T::V row_count, float* o) {
  constexpr int L = T::L;
  for (int64_t ow = 0; ow < OW;) {
    const int64_t nv = std::min<int64_t>((OW - ow + L - 1) / L, 4);
    const int last_n = static_cast<int>(std::min<int64_t>(L, OW - ow - (nv - 1) * L));
    switch (nv) {
      case 4: pool_vectors<T, IS_MAX, 4, KW>(rows, kh, plan, ow, last_n, row_count, o); break;
      case 3: pool_vectors<T, IS_MAX, 3, KW>(rows, kh, plan, ow, last_n, row_count, o); break;
      case 2: pool_vectors<T, IS_MAX, 2, KW>(rows, kh, plan, ow, last_n, row_count, o); break;
      default: pool_vectors<T, IS_MAX, 1, KW>(rows, kh, plan, ow, last_n, row_count, o); break;
    }
    ow += nv * L;
  }
}

template <class T, bool IS_MAX>
void pool_plane(const Pool2dShape& s, const PoolPlan& plan, const float* plane, float* ring, float* out) {
  const int64_t OH = s.out_h(), OW = s.out_w(), kh = s.kernel_h, sh = s.stride_h;
  planes::RowRing<T> rr{plan.g, plane, s.in_h, s.pad_top, ring,
                        IS_MAX ? -std::numeric_limits<float>::infinity() : 0.0f};
  const float* rows[planes::RowGeometry::kRingRows];
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t r0 = oh * sh;
    // Filled one output row ahead: a load straddling two vector stores still in the store buffer
    // cannot be forwarded and would stall until they commit.
    rr.ensure(r0 + kh + sh);
    for (int64_t ky = 0; ky < kh; ++ky) rows[ky] = rr.row(r0 + ky);
    const typename T::V row_count = T::set1(IS_MAX ? 1.0f : plan.row_count[oh]);
    if (s.kernel_w == 3)
      pool_row<T, IS_MAX, 3>(rows, kh, plan, OW, row_count, out + oh * OW);
    else
      pool_row<T, IS_MAX, 0>(rows, kh, plan, OW, row_count, out + oh * OW);
  }
}

template <class T, bool IS_MAX>
void pool_run(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  constexpr int L = T::L;
  const int64_t OH = s.out_h(), OW = s.out_w();
  PoolPlan plan{planes::RowGeometry(s.kernel_w, s.stride_w, s.pad_left, s.in_w, OW, L), {}, {}, {}};
  for (int64_t kx = 0; kx < s.kernel_w; ++kx) plan.taps.push_back(plan.g.tap_offset(kx));
  if (!IS_MAX) {
    plan.col_count.assign((OW + L - 1) / L * L, 1.0f);
    for (int64_t ow = 0; ow < OW; ++ow)
      plan.col_count[ow] = count_of(window(ow, s.kernel_w, s.stride_w, s.pad_left, s.pad_right, s.in_w), s.count_include_pad);
    for (int64_t oh = 0; oh < OH; ++oh)
      plan.row_count.push_back(
          count_of(window(oh, s.kernel_h, s.stride_h, s.pad_top, s.pad_bottom, s.in_h), s.count_include_pad));
  }
  parallel_for(pool, s.batch * s.channels, [&](int64_t b, int64_t e) {
    static thread_local AlignedBuffer ring_buffer;
    float* ring = planes::ring_storage(ring_buffer, plan.g);
    for (int64_t p = b; p < e; ++p) pool_plane<T, IS_MAX>(s, plan, in + p * s.in_h * s.in_w, ring, out + p * OH * OW);
  });
}

// The ring holds kernel_h rows plus one output row of look-ahead.
bool pool_fast_path(const Pool2dShape& s) {
  return (s.stride_w == 1 || s.stride_w == 2) && s.stride_h >= 1 &&
         s.kernel_h + s.stride_h <= planes::RowGeometry::kRingRows && s.kernel_w <= 64 && s.out_h() > 0 &&
         s.out_w() > 0;
}

template <bool IS_MAX>
void pool_fast(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
#if defined(__AVX512F__)
  if (s.out_w() > 8) return pool_run<planes::Vec16, IS_MAX>(s, in, out, pool);  // narrow maps: 8 lanes waste less
#endif
  pool_run<planes::Vec8, IS_MAX>(s, in, out, pool);
}

#if defined(__AVX512F__)
// Max pooling with column stride 2 and a 2- or 3-wide window (the network stems' and SqueezeNet's
// MaxPools), 16 output columns per zmm: every input row is reduced along the row once (even and odd
// columns separated by two-register permutes, out-of-row columns loaded as -inf), then each output row
// is the max of its window's reduced rows. Against the ring path it reads each input value once and
// needs no scratch copy of the rows: on 13x13 outputs (SqueezeNet's last MaxPool) the ring path spent
// 5x ONNX Runtime's time.
// GCC 12's own intrinsic headers trip -Wmaybe-uninitialized on the masked max/loads; nothing here is.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
bool maxpool_s2_applicable(const Pool2dShape& s) {
  return s.stride_w == 2 && (s.kernel_w == 2 || s.kernel_w == 3) && s.out_h() > 0 && s.out_w() > 0 &&
         s.out_w() <= 1024;
}

void maxpool_s2_plane(const Pool2dShape& s, const float* plane, float* rows, float* out) {
  const int64_t H = s.in_h, W = s.in_w, OH = s.out_h(), OW = s.out_w(), OWp = (OW + 15) / 16 * 16;
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i width = _mm512_set1_epi32(static_cast<int>(W));
  // Per 16-output chunk: the four loads' first columns and in-row lanes (the same on every row).
  const int64_t chunks = OWp / 16;
  struct Load {
    int64_t col;
    __mmask16 in_row;
  };
  Load loads[4 * 64];  // up to 1024 output columns
  for (int64_t q = 0; q < chunks; ++q)
    for (int i = 0; i < 4; ++i) {
      const int64_t c = 32 * q - s.pad_left + (i & 1) * 16 + (i >> 1) * 2;  // a, b, a + 2, b + 2
      const __m512i cols = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(c)), lanes);
      loads[4 * q + i] = {c, _mm512_mask_cmplt_epi32_mask(_mm512_cmpge_epi32_mask(cols, _mm512_setzero_si512()),
                                                          cols, width)};
    }
  for (int64_t ih = 0; ih < H; ++ih) {
    const float* row = plane + ih * W;
    float* r = rows + ih * OWp;
    for (int64_t q = 0; q < chunks; ++q) {
      const Load* l = loads + 4 * q;
      const __m512 a = _mm512_mask_loadu_ps(ninf, l[0].in_row, row + l[0].col);
      const __m512 b = _mm512_mask_loadu_ps(ninf, l[1].in_row, row + l[1].col);
      __m512 m = _mm512_max_ps(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
      if (s.kernel_w == 3)
        m = _mm512_max_ps(m, _mm512_permutex2var_ps(_mm512_mask_loadu_ps(ninf, l[2].in_row, row + l[2].col), even,
                                                     _mm512_mask_loadu_ps(ninf, l[3].in_row, row + l[3].col)));
      _mm512_store_ps(r + 16 * q, m);
    }
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t r0 = oh * s.stride_h - s.pad_top;
    const int64_t lo = std::max<int64_t>(r0, 0), hi = std::min(r0 + s.kernel_h, H);
    for (int64_t ow = 0; ow < OW; ow += 16) {
      __m512 m = ninf;
      for (int64_t ih = lo; ih < hi; ++ih) m = _mm512_max_ps(m, _mm512_load_ps(rows + ih * OWp + ow));
      const int64_t n = std::min<int64_t>(16, OW - ow);
      _mm512_mask_storeu_ps(out + oh * OW + ow, static_cast<__mmask16>((1u << n) - 1), m);
    }
  }
}

void maxpool_s2(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  const int64_t OWp = (s.out_w() + 15) / 16 * 16;
  parallel_for(pool, s.batch * s.channels, [&](int64_t b, int64_t e) {
    static thread_local AlignedBuffer rows_buffer;
    float* rows = rows_buffer.ensure(static_cast<size_t>(s.in_h * OWp));
    for (int64_t p = b; p < e; ++p)
      maxpool_s2_plane(s, in + p * s.in_h * s.in_w, rows, out + p * s.out_h() * s.out_w());
  });
}
#pragma GCC diagnostic pop
#else
// The same with 8 lanes (AVX2): in-lane shuffles separate the evens and odds of two vectors in the order
// 0 2 8 10 4 6 12 14; the max is element-wise, so one 64-bit lane permute per reduced row restores the
// order. Out-of-row columns are loaded masked and replaced by -inf. On Zen 2 (1 thread) the ring path took
// 277 us for SqueezeNet's 128-channel 55x55 -> 27x27 MaxPool, 5x ONNX Runtime's time.
bool maxpool_s2_applicable(const Pool2dShape& s) {
  return s.stride_w == 2 && (s.kernel_w == 2 || s.kernel_w == 3) && s.out_h() > 0 && s.out_w() > 0;
}

void maxpool_s2_plane(const Pool2dShape& s, const float* plane, float* rows, float* out) {
  const int64_t H = s.in_h, W = s.in_w, OH = s.out_h(), OW = s.out_w(), OWp = (OW + 7) / 8 * 8;
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  auto load = [&](const float* row, int64_t c) {  // columns c .. c + 7, -inf outside the row
    const __m256i m = vrange_mask(c, W);
    return _mm256_blendv_ps(ninf, _mm256_maskload_ps(row + c, m), _mm256_castsi256_ps(m));
  };
  auto order = [](__m256 v) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
  };
  for (int64_t ih = 0; ih < H; ++ih) {
    const float* row = plane + ih * W;
    float* r = rows + ih * OWp;
    for (int64_t ow = 0; ow < OWp; ow += 8) {
      const int64_t c = 2 * ow - s.pad_left;
      const bool inside = c >= 0 && c + 18 <= W;  // plain loads for all four vectors
      const __m256 a = inside ? _mm256_loadu_ps(row + c) : load(row, c);
      const __m256 b = inside ? _mm256_loadu_ps(row + c + 8) : load(row, c + 8);
      __m256 m = _mm256_max_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
      if (s.kernel_w == 3) {
        const __m256 a2 = inside ? _mm256_loadu_ps(row + c + 2) : load(row, c + 2);
        const __m256 b2 = inside ? _mm256_loadu_ps(row + c + 10) : load(row, c + 10);
        m = _mm256_max_ps(m, _mm256_shuffle_ps(a2, b2, _MM_SHUFFLE(2, 0, 2, 0)));
      }
      _mm256_store_ps(r + ow, order(m));
    }
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t r0 = oh * s.stride_h - s.pad_top;
    const int64_t lo = std::max<int64_t>(r0, 0), hi = std::min(r0 + s.kernel_h, H);
    for (int64_t ow = 0; ow < OW; ow += 8) {
      __m256 m = ninf;
      for (int64_t ih = lo; ih < hi; ++ih) m = _mm256_max_ps(m, _mm256_load_ps(rows + ih * OWp + ow));
      const int64_t n = std::min<int64_t>(8, OW - ow);
      if (n == 8)
        _mm256_storeu_ps(out + oh * OW + ow, m);
      else
        _mm256_maskstore_ps(out + oh * OW + ow, vtail_mask(static_cast<int>(n)), m);
    }
  }
}

void maxpool_s2(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  const int64_t OWp = (s.out_w() + 7) / 8 * 8;
  parallel_for(pool, s.batch * s.channels, [&](int64_t b, int64_t e) {
    static thread_local AlignedBuffer rows_buffer;
    float* rows = rows_buffer.ensure(static_cast<size_t>(s.in_h * OWp));
    for (int64_t p = b; p < e; ++p)
      maxpool_s2_plane(s, in + p * s.in_h * s.in_w, rows, out + p * s.out_h() * s.out_w());
  });
}
#endif

// Average pooling 2x2 with stride 2 and no padding (DenseNet's transitions): each output row is the sum of two
// input rows' column pairs times 1/4, every input value read once straight from the plane (the ring path copies
// each row into padded column phases first). Windows that would be clipped (odd sizes in ceil mode) go there.
bool avgpool_2x2s2_applicable(const Pool2dShape& s) {
  return s.kernel_h == 2 && s.kernel_w == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_top == 0 &&
         s.pad_left == 0 && s.pad_bottom == 0 && s.pad_right == 0 && s.out_h() > 0 && s.out_w() > 0 &&
         2 * s.out_h() <= s.in_h && 2 * s.out_w() <= s.in_w;
}

template <class T>
void avgpool_2x2s2_plane(const Pool2dShape& s, const float* plane, float* out) {
  constexpr int L = T::L;
  const int64_t W = s.in_w, OH = s.out_h(), OW = s.out_w();
  const typename T::V quarter = T::set1(0.25f);
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = plane + 2 * oh * W;
    const float* r1 = r0 + W;
    for (int64_t ow = 0; ow < OW; ow += L) {
      // n outputs from the 2n input columns c .. c + 2n - 1: na of them in the first vector, nb in the second.
      const int n = static_cast<int>(std::min<int64_t>(L, OW - ow)), na = std::min(L, 2 * n), nb = 2 * n - na;
      const int64_t c = 2 * ow;
      const typename T::V a = T::add(T::load_n(r0 + c, na), T::load_n(r1 + c, na));
      const typename T::V b = nb > 0 ? T::add(T::load_n(r0 + c + L, nb), T::load_n(r1 + c + L, nb)) : T::zero();
      typename T::V even, odd;
      T::deinterleave(a, b, even, odd);
      T::store_n(out + oh * OW + ow, T::mul(T::add(even, odd), quarter), n);
    }
  }
}

void avgpool_2x2s2(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  parallel_for(pool, s.batch * s.channels, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* plane = in + p * s.in_h * s.in_w;
      float* o = out + p * s.out_h() * s.out_w();
#if defined(__AVX512F__)
      if (s.out_w() > 8) {  // narrow maps: 8 lanes waste less (as pool_fast)
        avgpool_2x2s2_plane<planes::Vec16>(s, plane, o);
        continue;
      }
#endif
      avgpool_2x2s2_plane<planes::Vec8>(s, plane, o);
    }
  });
}

}  // namespace

void maxpool2d_nchw(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool) {
  if (maxpool_s2_applicable(s)) return maxpool_s2(s, in, out, pool);
  if (pool_fast_path(s)) return pool_fast<true>(s, in, out, pool);
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
  if (avgpool_2x2s2_applicable(s)) return avgpool_2x2s2(s, in, out, pool);
  if (pool_fast_path(s)) return pool_fast<false>(s, in, out, pool);
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
