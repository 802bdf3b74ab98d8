// Direct NCHW convolution for few input channels (the stems: 3 -> 64 at 7x7/2, 3 -> 32 at 3x3/2).
// im2col is a poor fit there: K = Cin*KH*KW is short, so packing the im2col panels costs as much as
// the GEMM. Here each output row is computed from stride-phase-split copies of its KH input rows
// (so the pixels a tap reads are contiguous whatever the stride), as CR output channels (8, or 4 with
// AVX2) x XB vectors of output pixels in registers; weights are broadcast from a [co/8][ci][ky][kx][8]
// packing.
// Vectors are planes::VecWide (plane_rows.h): 16 lanes when compiled for AVX-512, 8 with AVX2.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "plane_rows.h"
#include "weight_blocks.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/pool.h"
#if defined(__AVX512F__)
#include "tessel/rt/vmath512.h"
#endif

namespace tessel::rt {
namespace {

using T = planes::VecWide;
using V = T::V;
constexpr int L = T::L;

constexpr int CB = 8;  // output channels per packed weight block
// Output channels per register block: all 8 of a weight block with AVX-512 (8 x 3 = 24 accumulators of 32
// registers), half of one with AVX2 (4 x 3 = 12 of 16: with 8 the 24 accumulators, 3 inputs and a weight
// took 28 of 16 ymm registers and spilled, 63 GFLOP/s on ResNet's 7x7/2 stem, Zen 5 AVX2 build).
constexpr int CR = L == 16 ? 8 : 4;
constexpr int XB = 3;  // pixel vectors per register block: CR * XB accumulators

// Where one register block's results go: CR output-channel rows of one output row.
struct BlockOut {
  float* out;           // channel co0, row oy
  const float* res;     // same position in the residual, or null
  const float* bias;    // bias[co0], or null
  int64_t plane, ow;    // channel stride and row length of the output
  int nc;               // channels of the block that exist
  const planes::Store<T>* store;  // ReLU / Clip in registers (others: apply_activation on the row, below)
};

// Activations other than ReLU and Clip are applied to whole rows after the blocks (a call inside a
// block would make the compiler keep its accumulators on the stack).
inline bool act_in_registers(const Epilogue& ep) {
  return ep.act == Activation::None || ep.act == Activation::Relu || ep.act == Activation::Clip;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Geometry of the phase-split rows of one output row.
struct RowPlan {
  int64_t ow_pad;      // output width rounded up to whole vectors
  int64_t phase_len;   // floats per phase row
  int64_t row_floats;  // floats per (ci, ky) row: stride * phase_len
};

RowPlan make_row_plan(const Conv2dShape& s) {
  RowPlan p;
  p.ow_pad = ceil_div(s.out_w(), L) * L;
  // Largest padded-row index read: (ow_pad - 1) * stride + (KW - 1) * dilation.
  const int64_t span = (p.ow_pad - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1;
  p.phase_len = ceil_div(span, s.stride_w) + L;
  p.row_floats = s.stride_w * p.phase_len;
  return p;
}

// Writes input row `src` (in_w values), zero padded, split into stride phases into dst (row_floats
// floats): phase q, slot t holds padded-row element t * sw + q, i.e. input column t * sw + q - pad_left.
void split_row(const Conv2dShape& s, const RowPlan& p, const float* src, float* dst) {
  const int64_t sw = s.stride_w, W = s.in_w, pl = s.pad_left;
  std::memset(dst, 0, static_cast<size_t>(p.row_floats) * sizeof(float));
  if (sw == 1) {
    std::memcpy(dst + pl, src, static_cast<size_t>(W) * sizeof(float));
    return;
  }
#if defined(__AVX512F__)
  if (sw == 2) {
    // 16 slots of both phases from 32 consecutive padded elements: evens to phase 0, odds to phase 1.
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    auto load = [&](int64_t c) {  // input columns c .. c + 15, zero outside the row
      return _mm512_maskz_loadu_ps(vrange_mask512(c, W), src + c);
    };
    for (int64_t t = 0; t + 16 <= p.phase_len; t += 16) {
      const int64_t c = 2 * t - pl;
      if (c >= W) break;
      const __m512 a = load(c), b = load(c + 16);
      _mm512_storeu_ps(dst + t, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(dst + p.phase_len + t, _mm512_permutex2var_ps(a, odd, b));
    }
    // The last partial 16 slots (phase_len is not a multiple of 16) element by element.
    for (int64_t t = p.phase_len / 16 * 16; t < p.phase_len; ++t)
      for (int64_t q = 0; q < 2; ++q) {
        const int64_t c = 2 * t + q - pl;
        if (c >= 0 && c < W) dst[q * p.phase_len + t] = src[c];
      }
    return;
  }
#else
  if (sw == 2) {
    // 8 slots of both phases from 16 consecutive padded elements (T::deinterleave). Element-wise this split
    // took about a fifth of MobileNetV2's 3x3/2 stem (AVX2, Zen 2).
    auto load = [&](int64_t c) {  // input columns c .. c + 7, zero outside the row
      return _mm256_maskload_ps(src + c, vrange_mask(c, W));
    };
    int64_t t = 0;
    for (; t + 8 <= p.phase_len; t += 8) {
      const int64_t c = 2 * t - pl;
      if (c >= W) break;
      V even, odd;
      T::deinterleave(load(c), load(c + 8), even, odd);
      T::storeu(dst + t, even);
      T::storeu(dst + p.phase_len + t, odd);
    }
    for (t = p.phase_len / 8 * 8; t < p.phase_len; ++t)  // the last partial 8 slots
      for (int64_t q = 0; q < 2; ++q) {
        const int64_t c = 2 * t + q - pl;
        if (c >= 0 && c < W) dst[q * p.phase_len + t] = src[c];
      }
    return;
  }
#endif
  for (int64_t q = 0; q < sw; ++q) {
    float* phase = dst + q * p.phase_len;
    const int64_t t0 = std::max<int64_t>(0, ceil_div(pl - q, sw));
    const int64_t t1 = std::min(p.phase_len, ceil_div(W + pl - q, sw));
    const float* col = src + t0 * sw + q - pl;
    for (int64_t t = t0; t < t1; ++t, col += sw) phase[t] = *col;
  }
}

// The phase-split input rows of one thread's run of output rows: each input row is split once and
// kept in a ring while the output rows that read it (KH of them at stride 1) are computed.
class RowCache {
 public:
  RowCache(const Conv2dShape& s, const RowPlan& p, const float* in, AlignedBuffer& buf)
      : s_(s), p_(p), in_(in), slots_((s.kernel_h - 1) * s.dilation_h + 1) {
    float* base = buf.ensure(static_cast<size_t>((s.in_channels * slots_ + 1) * p.row_floats));
    zero_ = base;
    std::memset(zero_, 0, static_cast<size_t>(p.row_floats) * sizeof(float));
    rows_ = base + p.row_floats;
    tags_.assign(static_cast<size_t>(s.in_channels * slots_), -1);
  }
  // ptrs[ci * KH + ky]: the split row read by tap row ky of output row oy.
  void rows_for(int64_t oy, const float** ptrs) {
    for (int64_t ky = 0; ky < s_.kernel_h; ++ky) {
      const int64_t iy = oy * s_.stride_h - s_.pad_top + ky * s_.dilation_h;
      for (int64_t ci = 0; ci < s_.in_channels; ++ci) {
        const float*& ptr = ptrs[ci * s_.kernel_h + ky];
        if (iy < 0 || iy >= s_.in_h) {
          ptr = zero_;
          continue;
        }
        const int64_t slot = ci * slots_ + iy % slots_;
        float* row = rows_ + slot * p_.row_floats;
        if (tags_[slot] != iy) {
          split_row(s_, p_, in_ + (ci * s_.in_h + iy) * s_.in_w, row);
          tags_[slot] = iy;
        }
        ptr = row;
      }
    }
  }

 private:
  const Conv2dShape& s_;
  const RowPlan& p_;
  const float* in_;
  int64_t slots_;  // rows one output row spans: no two of them share a slot
  float* zero_;
  float* rows_;
  std::vector<int64_t> tags_;  // input row held by each slot
};

// One register block: NX (<= XB) pixel vectors starting at x0, CR channels of packed block wp (its first
// channel at wp[0]; a tap's CB weights are CB floats apart). KW > 0: the kernel width as a constant, so that
// the taps of a row are unrolled with their offsets in registers (ResNet's 7x7 and the 3x3 stems); 0: any.
// NROWS > 0: the (input channel, kernel row) count as a constant too, every tap unrolled (the 3x3 stems' 9 rows).
template <int NX, int KW, int NROWS = 0>
void block(const Conv2dShape& s, const int64_t* kx_off, const float* const* rows, const float* wp, int64_t x0,
           const BlockOut& o) {
  V acc[CR][NX];
  for (int c = 0; c < CR; ++c)
    for (int x = 0; x < NX; ++x) acc[c][x] = T::zero();
  const int64_t n_rows = NROWS > 0 ? NROWS : s.in_channels * s.kernel_h, kw = KW > 0 ? KW : s.kernel_w;
  int64_t off[KW > 0 ? KW : 1];
  if constexpr (KW > 0)
    for (int kx = 0; kx < KW; ++kx) off[kx] = kx_off[kx];
#pragma GCC unroll 9
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = rows[r] + x0;
#pragma GCC unroll 7
    for (int64_t kx = 0; kx < kw; ++kx, wp += CB) {
      const float* src = row + (KW > 0 ? off[kx] : kx_off[kx]);
      V xin[NX];
      for (int x = 0; x < NX; ++x) xin[x] = T::loadu(src + x * L);
#pragma GCC unroll 8
      for (int c = 0; c < CR; ++c) {
        const V w = T::set1(wp[c]);
        for (int x = 0; x < NX; ++x) acc[c][x] = T::fmadd(w, xin[x], acc[c][x]);
      }
    }
  }
  // The common case (a whole block of channels, every vector inside the row) as straight-line code: no lane count
  // or channel test per vector, and the output's fields in locals (stores through `o`'s pointers could otherwise
  // alias `o` itself, so every field was reloaded per vector, and the accumulators went to the stack first); the
  // store had taken as many instructions as the 27 taps of a 3x3 stem.
  const planes::Store<T> store = *o.store;
  if (o.nc == CR && x0 + NX * L <= o.ow) {
    float* const out = o.out + x0;
    const float* const res = o.res ? o.res + x0 : nullptr;
    const float* const bias = o.bias;
    const int64_t plane = o.plane;
    const typename T::Mask all = T::mask((1u << L) - 1u);  // unused by the whole-vector store
#pragma GCC unroll 8
    for (int c = 0; c < CR; ++c) {
      const V b = bias ? T::set1(bias[c]) : T::zero();
#pragma GCC unroll 3
      for (int x = 0; x < NX; ++x)
        store.template put<false>(out + c * plane + x * L, res ? res + c * plane + x * L : nullptr,
                                  T::add(acc[c][x], b), all);
    }
    return;
  }
  // Edge blocks (a partial channel block, the row's last vectors).
#pragma GCC unroll 8
  for (int c = 0; c < CR; ++c) {
    if (c >= o.nc) break;
    const V b = o.bias ? T::set1(o.bias[c]) : T::zero();
#pragma GCC unroll 3
    for (int x = 0; x < NX; ++x) {
      const int64_t pos = c * o.plane + x0 + x * L;
      const int n = static_cast<int>(std::min<int64_t>(L, o.ow - (x0 + x * L)));
      const typename T::Mask m = T::mask((1u << std::max(n, 0)) - 1u);
      const V v = T::add(acc[c][x], b);
      if (n == L)
        store.template put<false>(o.out + pos, o.res ? o.res + pos : nullptr, v, m);
      else if (n > 0)
        store.template put<true>(o.out + pos, o.res ? o.res + pos : nullptr, v, m);
    }
  }
}

using BlockFn = void (*)(const Conv2dShape&, const int64_t*, const float* const*, const float*, int64_t,
                         const BlockOut&);
// The blocks of 3, 2 and 1 vectors for the shape's kernel width.
struct Blocks {
  BlockFn b3, b2, b1;
};
template <int KW, int NROWS = 0>
constexpr Blocks blocks_for() {
  return {block<3, KW, NROWS>, block<2, KW, NROWS>, block<1, KW, NROWS>};
}
// Unrolled taps with AVX-512 only: Zen 5 (AMD EPYC family 26, 1 thread), ResNet's 7x7/2 stem 1303 -> 1259 us,
// 3x3/2 3->64 357 -> 335; with AVX2 (16 registers) the same unrolling took 12-13 % longer.
Blocks blocks_for(const Conv2dShape& s) {
  static_assert(XB == 3);
  if (L == 16 && s.kernel_w == 3 && s.in_channels * s.kernel_h == 9) return blocks_for<3, 9>();
  if (L == 16 && s.kernel_w == 3) return blocks_for<3>();
  if (L == 16 && s.kernel_w == 7 && s.in_channels * s.kernel_h == 21) return blocks_for<7, 21>();
  if (L == 16 && s.kernel_w == 7) return blocks_for<7>();
  return blocks_for<0>();
}

}  // namespace

bool conv2d_nchw_direct_small_cin_applicable(const Conv2dShape& s) {
  return s.groups == 1 && s.in_channels <= 4 && !(s.kernel_h == 1 && s.kernel_w == 1);
}

size_t conv2d_nchw_direct_small_cin_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>(
      detail::channel_blocked_size(s.out_channels, s.in_channels * s.kernel_h * s.kernel_w, CB));
}

void conv2d_nchw_direct_small_cin_pack(const Conv2dShape& s, const float* weights, float* packed) {
  detail::pack_channel_blocked(weights, s.out_channels, s.in_channels * s.kernel_h * s.kernel_w, CB, packed);
}

namespace {

// Where tap kx's pixels start in a (ci, ky) phase-split row (phase and slot of kx * dilation).
struct TapOffsets {
  explicit TapOffsets(const Conv2dShape& s, const RowPlan& p) : off(static_cast<size_t>(s.kernel_w)) {
    for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
      const int64_t o = kx * s.dilation_w;
      off[kx] = (o % s.stride_w) * p.phase_len + o / s.stride_w;
    }
  }
  std::vector<int64_t> off;
};

// Output row oy of every channel: channel c goes to row0 + c * plane (its residual at res0 + c * plane).
void conv_row(const Conv2dShape& s, const RowPlan& p, RowCache& cache, const TapOffsets& offs,
              std::vector<const float*>& rows, const float* packed, const Epilogue& ep, int64_t oy, float* row0,
              const float* res0, int64_t plane) {
  const int64_t taps = s.in_channels * s.kernel_h * s.kernel_w;
  const int64_t n_vec = p.ow_pad / L, OW = s.out_w();
  // A lone last vector (7 = 3 + 3 + 1 on ResNet's 112-pixel rows) broadcasts CR weights for CR FMAs per tap;
  // it goes with the block before it as two blocks of 2 (3 + 2 + 2). ResNet's 7x7/2 stem on Zen 5 (AMD EPYC
  // family 26, AVX-512, 1 thread): the block of 1 ran at 130 GFLOP/s against 186 for the blocks of 3.
  const int64_t pairs_from = n_vec % XB == 1 && n_vec > XB ? n_vec - (XB + 1) : n_vec;
  const Blocks b = blocks_for(s);
  const planes::Store<T> store = planes::Store<T>::of(ep);
  cache.rows_for(oy, rows.data());
  for (int64_t rb = 0; rb < ceil_div(s.out_channels, CR); ++rb) {  // register blocks of CR channels
    const int64_t c0 = rb * CR;
    const float* wp = packed + rb / (CB / CR) * taps * CB + rb % (CB / CR) * CR;
    const int64_t pos = c0 * plane;
    const BlockOut o{row0 + pos, res0 ? res0 + pos : nullptr, ep.bias ? ep.bias + c0 : nullptr, plane, OW,
                     static_cast<int>(std::min<int64_t>(CR, s.out_channels - c0)), &store};
    int64_t v = 0;
    for (; v + XB <= pairs_from; v += XB) b.b3(s, offs.off.data(), rows.data(), wp, v * L, o);
    for (; v + 2 <= n_vec; v += 2) b.b2(s, offs.off.data(), rows.data(), wp, v * L, o);
    if (v < n_vec) b.b1(s, offs.off.data(), rows.data(), wp, v * L, o);
    if (!act_in_registers(ep))
      for (int c = 0; c < o.nc; ++c) apply_activation(o.out + c * o.plane, OW, ep);
  }
}

// Max over the pooling window's columns of one -inf padded row: dst[x] = max_k row[x * stride + k].
void pool_columns(const Pool2dShape& ps, const float* row, int64_t PW, float* dst) {
#if defined(__AVX512F__)
  if (ps.stride_w == 2 && ps.kernel_w == 3) {
    // Evens, odds and evens shifted by one of 32 consecutive elements: permutes of two unaligned loads.
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t x = 0; x < PW; x += 16) {
      const float* r = row + 2 * x;
      const __m512 a = _mm512_loadu_ps(r), b = _mm512_loadu_ps(r + 16);
      const __m512 a2 = _mm512_loadu_ps(r + 2), b2 = _mm512_loadu_ps(r + 18);
      const __m512 m = T::max(T::max(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b)),
                              _mm512_permutex2var_ps(a2, even, b2));
      T::store_n(dst + x, m, static_cast<int>(std::min<int64_t>(16, PW - x)));
    }
    return;
  }
#else
  if (ps.stride_w == 2 && ps.kernel_w == 3) {
    // The same with 8 lanes: in-lane shuffles take evens/odds of two vectors in the order
    // 0 2 8 10 4 6 12 14; the max is element-wise, so one lane permute at the end restores the order.
    for (int64_t x = 0; x < PW; x += 8) {
      const float* r = row + 2 * x;
      const __m256 a = _mm256_loadu_ps(r), b = _mm256_loadu_ps(r + 8);
      const __m256 a2 = _mm256_loadu_ps(r + 2), b2 = _mm256_loadu_ps(r + 10);
      const __m256 m = T::max(T::max(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))),
                              _mm256_shuffle_ps(a2, b2, _MM_SHUFFLE(2, 0, 2, 0)));
      const __m256 ordered = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(m), _MM_SHUFFLE(3, 1, 2, 0)));
      T::store_n(dst + x, ordered, static_cast<int>(std::min<int64_t>(8, PW - x)));
    }
    return;
  }
#endif
  for (int64_t x = 0; x < PW; ++x) {
    const float* r = row + x * ps.stride_w;
    float m = r[0];
    for (int64_t k = 1; k < ps.kernel_w; ++k) m = std::max(m, r[k]);
    dst[x] = m;
  }
}

}  // namespace

void conv2d_nchw_direct_small_cin(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                  const Epilogue& ep, ThreadPool* pool) {
  const RowPlan p = make_row_plan(s);
  const int64_t OH = s.out_h(), OW = s.out_w();
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* in_n = in + n * s.in_channels * s.in_h * s.in_w;
    float* out_n = out + n * s.out_channels * OH * OW;
    const float* res_n = ep.residual ? ep.residual + n * s.out_channels * OH * OW : nullptr;
    parallel_for(pool, OH, [&](int64_t y0, int64_t y1) {
      static thread_local AlignedBuffer rows_buf;
      RowCache cache(s, p, in_n, rows_buf);
      std::vector<const float*> rows(static_cast<size_t>(s.in_channels * s.kernel_h));
      const TapOffsets offs(s, p);
      for (int64_t oy = y0; oy < y1; ++oy)
        conv_row(s, p, cache, offs, rows, packed, ep, oy, out_n + oy * OW, res_n ? res_n + oy * OW : nullptr,
                 OH * OW);
    });
  }
}

bool conv2d_nchw_direct_small_cin_maxpool_applicable(const Conv2dShape& s, const Pool2dShape& ps) {
  return conv2d_nchw_direct_small_cin_applicable(s) && ps.batch == s.batch && ps.channels == s.out_channels &&
         ps.in_h == s.out_h() && ps.in_w == s.out_w() && ps.kernel_h >= 1 && ps.kernel_w >= 1 &&
         ps.stride_h >= 1 && ps.stride_w >= 1 && ps.out_h() >= 1 && ps.out_w() >= 1;
}

void conv2d_nchw_direct_small_cin_maxpool(const Conv2dShape& s, const Pool2dShape& ps, const float* in,
                                          const float* packed, float* out, const Epilogue& ep, ThreadPool* pool) {
  const RowPlan p = make_row_plan(s);
  const int64_t OH = s.out_h(), OW = s.out_w(), PH = ps.out_h(), PW = ps.out_w(), C = s.out_channels;
  const int64_t slots = ps.kernel_h;  // the conv rows of one pooling window, in a ring
  const int64_t slot_floats = C * p.ow_pad;
  // A conv row of one channel, max-reduced over the window's rows, at offset pad_left of a -inf row long
  // enough for every window column and the column pass's 2 x 16 + 2 lane reads past the last output.
  const int64_t line = std::max(ps.pad_left + p.ow_pad, (PW + 16) * ps.stride_w + ps.kernel_w) + 2 * 16;
  // Contiguous slabs of pooling rows (each recomputes the conv rows it shares with the slab before):
  // two per thread, so a slower thread is not left with half of the work.
  const int64_t slabs = std::min<int64_t>(PH, thread_count(pool) > 1 ? 2 * thread_count(pool) : 1);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* in_n = in + n * s.in_channels * s.in_h * s.in_w;
    float* out_n = out + n * C * PH * PW;
    parallel_for(pool, slabs, [&](int64_t b0, int64_t b1) {
      static thread_local AlignedBuffer rows_buf, ring_buf, line_buf;
      RowCache cache(s, p, in_n, rows_buf);
      std::vector<const float*> rows(static_cast<size_t>(s.in_channels * s.kernel_h));
      const TapOffsets offs(s, p);
      float* ring = ring_buf.ensure(static_cast<size_t>(slots * slot_floats));
      float* tmp = line_buf.ensure(static_cast<size_t>(line));
      std::fill(tmp, tmp + line, neg_inf);
      std::vector<int64_t> tags(static_cast<size_t>(slots), -1);
      std::vector<const float*> win(static_cast<size_t>(slots));
      for (int64_t slab = b0; slab < b1; ++slab)
        for (int64_t py = slab * PH / slabs; py < (slab + 1) * PH / slabs; ++py) {
          const int64_t r0 = py * ps.stride_h - ps.pad_top;
          const int64_t ya = std::max<int64_t>(r0, 0), yb = std::min(r0 + ps.kernel_h, OH);
          int nwin = 0;
          for (int64_t oy = ya; oy < yb; ++oy) {
            const int64_t slot = oy % slots;
            float* dst = ring + slot * slot_floats;
            if (tags[slot] != oy) {
              conv_row(s, p, cache, offs, rows, packed, ep, oy, dst, nullptr, p.ow_pad);
              tags[slot] = oy;
            }
            win[nwin++] = dst;
          }
          for (int64_t c = 0; c < C; ++c) {
            float* o = out_n + (c * PH + py) * PW;
            if (nwin == 0) {  // the window lies in the padding: no input, -inf as in the reference
              std::fill(o, o + PW, neg_inf);
              continue;
            }
            float* t = tmp + ps.pad_left;
            for (int64_t x = 0; x < p.ow_pad; x += L) {
              V m = T::loadu(win[0] + c * p.ow_pad + x);
              for (int r = 1; r < nwin; ++r) m = T::max(m, T::loadu(win[r] + c * p.ow_pad + x));
              T::storeu(t + x, m);
            }
            std::fill(t + OW, tmp + line, neg_inf);  // lanes past the row's end held other values
            pool_columns(ps, tmp, PW, o);
          }
        }
    });
  }
}

}  // namespace tessel::rt
