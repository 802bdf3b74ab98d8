// Depthwise convolution (channel multiplier 1) in NCHW, the epilogue fused.
//
// 3x3, dilation 1, stride 1 or 2 (the MobileNet layers): each channel plane is read in place, in
// column tiles of up to 4 vectors (16 lanes with AVX-512, 8 with AVX2), accumulators and the 9 weights
// in registers, each input vector loaded once. Stride 1: a tile rolls down the plane with three sets
// of accumulators (input row i feeds output rows i, i - 1 and i - 2; the last is then stored and its
// registers restart as row i + 1). Stride 2: blocks of 4 output rows (9 input rows), each pair of
// loaded vectors split into even/odd columns in registers. Borders: lane-masked loads at the row ends,
// a zero row above and below. Bias, residual and Relu/Clip are applied in the store; other
// activations in one pass over the finished plane (still in L1). This machine sustains about one
// 64-byte load per cycle, so nothing is copied into padded scratch first.
//
// 5x5 stride 2 (AVX-512, outputs wider than one vector: EfficientNet's and MnasNet's 56 -> 28 layers): the
// stride-2 blocks above with the three loads of each vector split into even and odd columns and shifted
// into the 5 taps; the 25 weights are read from memory (they do not fit the registers beside the taps).
//
// Other kernel sizes, strides and dilations: the whole plane is copied into a padded, phase-split
// scratch plane and each output vector sums its taps (generic path below).
//
// Small maps (at most 28 output columns) with kernel width 3 or 5 at stride 1 or 2, undilated (MnasNet's
// and EfficientNet's 5x5 layers, every layer on 7x7): 16 channels (8 with AVX2) in the lanes instead of
// 14 or 28 pixels, by 16x16 transposes into a padded [row][column][16] scratch and back in the store
// (dw_lanes_stream). The 3x3 path above keeps the 3x3 maps 9 to 28 wide with AVX-512 and 15 to 28 wide
// with AVX2, where it measures faster; other small maps (dilated, stride 3, ...) take dw_lanes_run.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <cstring>
#include <limits>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"
#if defined(__AVX512F__)
#include "tessel/rt/vmath512.h"
#endif
#include "plane_rows.h"

namespace tessel::rt {
namespace {

// ---- 3x3, stride 1 or 2, dilation 1 ----

using planes::Store;

// The output columns of a row in tiles of up to kMaxNV vectors (the same tiles for every row block;
// a 56-wide row is one tile of 4 x 16 lanes with AVX-512). The input rows are read in place: the first
// and last vector of a tile may reach past the row's ends and then load through lane masks (lanes
// whose column is inside the row); the vectors between never do (tiles are cut so).
//   stride 1: vector v loads columns j + kx - pad_left for its outputs j (kx = 0, 1, 2);
//   stride 2: vector v loads A_v, B_v = columns 2j - pad_left (2L of them), deinterleaved into the
//   kx = 0 (even) and kx = 1 (odd) taps; kx = 2 is the even vector shifted by one lane with lane 0 of
//   A_{v+1} shifted in (the tile loads A_NV too).
// bits_first / bits_last: the masks of the first / last vector's loads (stride 1: kx = 0, 1, 2;
// stride 2: A, B, A_next). With 16 lanes, stride 1 loads only the kx = 1 vectors X_v and builds kx = 0
// and 2 by one-lane shifts with X_{v-1} and X_{v+1} (half the loads, for shuffles on a port loads do
// not use); bits_prev / bits_next mask the tile's extra loads X_{-1} and X_NV.
template <class T>
constexpr int kMaxNV = T::L == 16 ? 4 : 2;  // accumulators + 9 weights fit 32 zmm; AVX2 has 16 ymm
// 5x5 stride 2: R x NV accumulators and the 5 tap vectors of each of the NV vectors (weights from memory).
template <class T>
constexpr int kMaxNV5 = T::L == 16 ? 2 : 1;

struct ColumnTile {
  int64_t ow;
  int nv, last_n;  // vectors; valid output lanes of the last one
  bool masked;
  uint32_t bits_first[3], bits_last[3];
  uint32_t bits_prev, bits_next;
};

std::vector<ColumnTile> column_tiles(int64_t OW, int L, int max_nv, int S, int64_t pad_left, int64_t W) {
  const uint32_t all = (1u << L) - 1u;
  // Masks of the three loads of vector v (stride 2: A_v, B_v, A_{v+1}).
  auto loads = [&](int64_t ow, int v, uint32_t (&bits)[3]) {
    for (int k = 0; k < 3; ++k) {
      const int64_t first = S == 1 ? ow + v * L + k - pad_left : 2 * (ow + v * L) - pad_left + k * L;
      bits[k] = planes::lanes_inside(first, W, L);
    }
  };
  std::vector<ColumnTile> tiles;
  for (int64_t ow = 0; ow < OW;) {
    ColumnTile t{};
    t.ow = ow;
    t.nv = static_cast<int>(std::min<int64_t>((OW - ow + L - 1) / L, max_nv));
    // A vector before the last that needs a mask ends the tile.
    for (int v = 1; v < t.nv - 1; ++v) {
      uint32_t bits[3];
      loads(ow, v, bits);
      if (bits[0] != all || bits[1] != all || bits[2] != all) t.nv = v + 1;
    }
    t.last_n = static_cast<int>(std::min<int64_t>(L, OW - ow - (t.nv - 1) * L));
    loads(ow, 0, t.bits_first);
    loads(ow, t.nv - 1, t.bits_last);
    for (int k = 0; k < 3; ++k) t.masked |= t.bits_first[k] != all || t.bits_last[k] != all;
    if (S == 1) {
      t.bits_prev = planes::lanes_inside(ow - L + 1 - pad_left, W, L);
      t.bits_next = planes::lanes_inside(ow + t.nv * L + 1 - pad_left, W, L);
      t.masked |= t.bits_prev != all || t.bits_next != all;
    }
    tiles.push_back(t);
    ow += t.nv * L;
  }
  return tiles;
}

// Adds the taps of input row i (kx = 0, 1, 2 in x0, x1, x2) to every output row r of a stride-2 block
// whose window covers it (ky = i - 2 r).
template <class T, int R, int NV>
inline void dw3x3_s2_accumulate(int i, int v, typename T::V x0, typename T::V x1, typename T::V x2,
                             const typename T::V* w, typename T::V (&acc)[R][NV]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const int ky = i - r * 2;
    if (ky >= 0 && ky < 3) {
      acc[r][v] = T::fmadd(x0, w[ky * 3], acc[r][v]);
      acc[r][v] = T::fmadd(x1, w[ky * 3 + 1], acc[r][v]);
      acc[r][v] = T::fmadd(x2, w[ky * 3 + 2], acc[r][v]);
    }
  }
}

// The same for 5x5 (ky = i - 2 r in [0, 5)): taps kx = 2, 3, 4 are the even columns, the odd ones and the even ones
// shifted by one column with the first lanes of A_{v+1} (an). The 25 weights are memory operands of the FMAs.
template <class T, int R, int NV>
inline void dw5x5_s2_accumulate(int i, int v, typename T::V even, typename T::V odd, typename T::V an,
                                const typename T::V* w, typename T::V (&acc)[R][NV]) {
  const typename T::V x[5] = {even, odd, T::shift_in(even, an), T::shift_in_odd(odd, an), T::shift2_in(even, an)};
  __asm__("" : "+r"(w));  // not kept in registers across input rows
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const int ky = i - r * 2;
    if (ky < 0 || ky >= 5) continue;
#pragma GCC unroll 5
    for (int kx = 0; kx < 5; ++kx) acc[r][v] = T::fmadd(x[kx], w[ky * 5 + kx], acc[r][v]);
  }
}

// Keeps a loaded vector in a register: folded into each FMA as a memory operand it would be loaded
// once per output row using it (loads are the scarce resource here).
template <class V>
inline V in_register(V x) {
  __asm__("" : "+v"(x));
  return x;
}

// Stride 2, K = 3 or 5: R output rows x NV vectors of tile t. rows[i] is input row (first row of the block)
// * 2 + i - pad_top, or a zero row above/below the input; col0 = -pad_left. The three loads of a vector (A_v,
// B_v and A_{v+1}: 2L + L columns) hold the K taps of its L outputs at stride 2 for K up to 5: even and odd
// columns, each shifted once more with A_{v+1}'s first lanes, and the even ones twice. K = 3 keeps its 9
// weights in registers; K = 5 takes its 25 weights as memory operands of the FMAs (they do not fit the
// registers beside the accumulators and taps). Both add each vector's taps as they are made (for K = 5, making
// the taps of both vectors first and sharing each weight load between them measured 3-8 % slower: spills).
template <class T, int K, int R, int NV, bool MASKED>
inline void dw_s2_tile(const float* const* rows, int64_t col0, const typename T::V* w, typename T::V bias,
                       const ColumnTile& t, float* out, const float* res, int64_t OW, const Store<T>& store) {
  using V = typename T::V;
  using Mask = typename T::Mask;
  constexpr int L = T::L, NR = (R - 1) * 2 + K;
  Mask mf[3], ml[3];
  if constexpr (MASKED)
    for (int k = 0; k < 3; ++k) {
      mf[k] = T::mask(t.bits_first[k]);
      ml[k] = T::mask(t.bits_last[k]);
    }
  // Load k of vector v (masked when it is the first or last vector of a masked tile).
  auto load = [&](const float* p, int v, int k) {
    if (MASKED && v == 0) return T::maskz_load(p, mf[k]);
    if (MASKED && v == NV - 1) return T::maskz_load(p, ml[k]);
    return T::loadu(p);
  };
  V acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = bias;
#pragma GCC unroll 16
  for (int i = 0; i < NR; ++i) {
    const float* b = rows[i] + col0 + 2 * t.ow;
    V a = in_register(load(b, 0, 0));  // A_v, carried from the previous vector's A_{v+1}
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const V bv = in_register(load(b + 2 * v * L + L, v, 1));
      // A_{v+1}: the next vector's first load, or the tile's extra load A_NV (the last vector's mask 2).
      const V an = in_register(v + 1 < NV ? load(b + 2 * (v + 1) * L, v + 1, 0)
                                          : (MASKED ? T::maskz_load(b + 2 * NV * L, ml[2]) : T::loadu(b + 2 * NV * L)));
      V even, odd;
      T::deinterleave(a, bv, even, odd);
      if constexpr (K == 5)
        dw5x5_s2_accumulate<T, R, NV>(i, v, even, odd, an, w, acc);
      else
        dw3x3_s2_accumulate<T, R, NV>(i, v, even, odd, T::shift_in(even, an), w, acc);
      a = an;
    }
  }
  const bool partial = t.last_n < L;
  const Mask mstore = T::mask((1u << t.last_n) - 1u);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* o = out + r * OW + t.ow;
    const float* rr = res ? res + r * OW + t.ow : nullptr;
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) store.template put<false>(o + v * L, rr ? rr + v * L : nullptr, acc[r][v], mstore);
    if (partial)
      store.template put<true>(o + (NV - 1) * L, rr ? rr + (NV - 1) * L : nullptr, acc[r][NV - 1], mstore);
    else
      store.template put<false>(o + (NV - 1) * L, rr ? rr + (NV - 1) * L : nullptr, acc[r][NV - 1], mstore);
  }
}

template <class T, int K, int R, bool MASKED>
inline void dw_s2_tile_nv(const float* const* rows, int64_t col0, const typename T::V* w, typename T::V bias,
                          const ColumnTile& t, float* out, const float* res, int64_t OW, const Store<T>& store) {
  constexpr int M = K == 3 ? kMaxNV<T> : kMaxNV5<T>;
  switch (t.nv) {
    case 4: dw_s2_tile<T, K, R, (M >= 4 ? 4 : 1), MASKED>(rows, col0, w, bias, t, out, res, OW, store); break;
    case 3: dw_s2_tile<T, K, R, (M >= 3 ? 3 : 1), MASKED>(rows, col0, w, bias, t, out, res, OW, store); break;
    case 2: dw_s2_tile<T, K, R, (M >= 2 ? 2 : 1), MASKED>(rows, col0, w, bias, t, out, res, OW, store); break;
    default: dw_s2_tile<T, K, R, 1, MASKED>(rows, col0, w, bias, t, out, res, OW, store); break;
  }
}

// Stride 2: R output rows, every column tile.
template <class T, int K, int R>
inline void dw_s2_rows(const float* const* rows, int64_t col0, const typename T::V* w, typename T::V bias,
                       const std::vector<ColumnTile>& tiles, float* out, const float* res, int64_t OW,
                       const Store<T>& store) {
  for (const ColumnTile& t : tiles) {
    if (t.masked)
      dw_s2_tile_nv<T, K, R, true>(rows, col0, w, bias, t, out, res, OW, store);
    else
      dw_s2_tile_nv<T, K, R, false>(rows, col0, w, bias, t, out, res, OW, store);
  }
}

// Stride 1, one column tile down the whole plane with rolling accumulators: input row i (padded
// coordinates) adds its taps to output rows i (ky = 0), i - 1 (ky = 1) and i - 2 (ky = 2); output row
// i - 2 is then complete, is stored, and its registers start output row i + 1. Every input vector is
// loaded once, three sets of NV accumulators are always in flight, and there are no block edges.
template <class T, int NV, bool MASKED>
inline void dw3x3_s1_rolling(const Conv2dShape& s, const ColumnTile& t, const float* plane, const float* zero_row,
                             const typename T::V* w, typename T::V bias, float* out, const float* res,
                             const Store<T>& store) {
  using V = typename T::V;
  using Mask = typename T::Mask;
  constexpr int L = T::L;
  const int64_t OH = s.out_h(), OW = s.out_w(), col = t.ow - s.pad_left;
  Mask mf[3], ml[3], mprev{}, mnext{};
  if constexpr (MASKED) {
    for (int k = 0; k < 3; ++k) {
      mf[k] = T::mask(t.bits_first[k]);
      ml[k] = T::mask(t.bits_last[k]);
    }
    mprev = T::mask(t.bits_prev);
    mnext = T::mask(t.bits_next);
  }
  auto load = [&](const float* p, int v, int k) {
    if (MASKED && v == 0) return T::maskz_load(p, mf[k]);
    if (MASKED && v == NV - 1) return T::maskz_load(p, ml[k]);
    return T::loadu(p);
  };
  const bool partial = t.last_n < L;
  const Mask mstore = T::mask((1u << t.last_n) - 1u);
  // Row i: a = output row i, b = i - 1, c = i - 2 (stored, then reset for row i + 1).
  auto row = [&](int64_t i, V(&a)[NV], V(&b)[NV], V(&c)[NV]) __attribute__((always_inline)) {
    const int64_t ih = i - s.pad_top;
    const float* r = (ih >= 0 && ih < s.in_h ? plane + ih * s.in_w : zero_row) + col;
    auto taps = [&](int v, V x0, V x1, V x2) __attribute__((always_inline)) {
      a[v] = T::fmadd(x0, w[0], a[v]);
      b[v] = T::fmadd(x0, w[3], b[v]);
      c[v] = T::fmadd(x0, w[6], c[v]);
      a[v] = T::fmadd(x1, w[1], a[v]);
      b[v] = T::fmadd(x1, w[4], b[v]);
      c[v] = T::fmadd(x1, w[7], c[v]);
      a[v] = T::fmadd(x2, w[2], a[v]);
      b[v] = T::fmadd(x2, w[5], b[v]);
      c[v] = T::fmadd(x2, w[8], c[v]);
    };
    if constexpr (T::L == 16 && NV >= 2) {
      const float* x = r + 1;  // X_v (the kx = 1 vectors) at x + v * L
      V prev = in_register(MASKED ? T::maskz_load(x - L, mprev) : T::loadu(x - L));
      V cur = in_register(load(x, 0, 1));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const V next = in_register(v + 1 < NV ? load(x + (v + 1) * L, v + 1, 1)
                                              : (MASKED ? T::maskz_load(x + NV * L, mnext) : T::loadu(x + NV * L)));
        taps(v, T::template alignr<L - 1>(cur, prev), cur, T::template alignr<1>(next, cur));
        prev = cur;
        cur = next;
      }
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        taps(v, in_register(load(r + v * L, v, 0)), in_register(load(r + v * L + 1, v, 1)),
             in_register(load(r + v * L + 2, v, 2)));
    }
    if (i >= 2) {
      float* o = out + (i - 2) * OW + t.ow;
      const float* rr = res ? res + (i - 2) * OW + t.ow : nullptr;
#pragma GCC unroll 4
      for (int v = 0; v < NV - 1; ++v) store.template put<false>(o + v * L, rr ? rr + v * L : nullptr, c[v], mstore);
      if (partial)
        store.template put<true>(o + (NV - 1) * L, rr ? rr + (NV - 1) * L : nullptr, c[NV - 1], mstore);
      else
        store.template put<false>(o + (NV - 1) * L, rr ? rr + (NV - 1) * L : nullptr, c[NV - 1], mstore);
    }
    for (int v = 0; v < NV; ++v) c[v] = bias;
  };
  V A[NV], B[NV], C[NV];
  for (int v = 0; v < NV; ++v) A[v] = B[v] = C[v] = bias;
  const int64_t n = OH + 2;  // padded input rows 0 .. OH + 1
  for (int64_t i = 0; i < n; i += 3) {
    row(i, A, B, C);
    if (i + 1 >= n) break;
    row(i + 1, C, A, B);
    if (i + 2 >= n) break;
    row(i + 2, B, C, A);
  }
}

template <class T, bool MASKED>
void dw3x3_s1_tile(const Conv2dShape& s, const ColumnTile& t, const float* plane, const float* zero_row,
                   const typename T::V* w, typename T::V bias, float* out, const float* res, const Store<T>& store) {
  constexpr int M = kMaxNV<T>;
  switch (t.nv) {
    case 4: dw3x3_s1_rolling<T, (M >= 4 ? 4 : 1), MASKED>(s, t, plane, zero_row, w, bias, out, res, store); break;
    case 3: dw3x3_s1_rolling<T, (M >= 3 ? 3 : 1), MASKED>(s, t, plane, zero_row, w, bias, out, res, store); break;
    case 2: dw3x3_s1_rolling<T, 2, MASKED>(s, t, plane, zero_row, w, bias, out, res, store); break;
    default: dw3x3_s1_rolling<T, 1, MASKED>(s, t, plane, zero_row, w, bias, out, res, store); break;
  }
}

// One channel plane of a K x K kernel (K = 3, or 5 at stride 2). Stride 1: each column tile rolls down the
// plane. Stride 2: blocks of 4 output rows, then 2, then 1 (2 * 3 + K input rows for 4 outputs). Padding rows
// read a zero row.
template <class T, int K, int S>
void dw_plane(const Conv2dShape& s, const std::vector<ColumnTile>& tiles, const float* plane, const float* zero_row,
              const float* wk, float bias_value, float* out, const float* res, const Store<T>& store) {
  using V = typename T::V;
  static_assert(K == 3 || S == 2, "5x5 only at stride 2");
  const int64_t OH = s.out_h(), OW = s.out_w();
  V w[K * K];
  for (int t = 0; t < K * K; ++t) w[t] = T::set1(wk[t]);
  const V bias = T::set1(bias_value);
  if constexpr (S == 1) {
    for (const ColumnTile& t : tiles) {
      if (t.masked)
        dw3x3_s1_tile<T, true>(s, t, plane, zero_row, w, bias, out, res, store);
      else
        dw3x3_s1_tile<T, false>(s, t, plane, zero_row, w, bias, out, res, store);
    }
  } else {
    const float* rows[(4 - 1) * 2 + K];
    auto block = [&](int64_t oh, int R) {
      for (int64_t i = 0; i < (R - 1) * 2 + K; ++i) {
        const int64_t ih = oh * 2 + i - s.pad_top;
        rows[i] = ih >= 0 && ih < s.in_h ? plane + ih * s.in_w : zero_row;
      }
    };
    const int64_t col0 = -s.pad_left;
    int64_t oh = 0;
    for (; oh + 4 <= OH; oh += 4) {
      block(oh, 4);
      dw_s2_rows<T, K, 4>(rows, col0, w, bias, tiles, out + oh * OW, res ? res + oh * OW : nullptr, OW, store);
    }
    if (oh + 2 <= OH) {
      block(oh, 2);
      dw_s2_rows<T, K, 2>(rows, col0, w, bias, tiles, out + oh * OW, res ? res + oh * OW : nullptr, OW, store);
      oh += 2;
    }
    if (oh < OH) {
      block(oh, 1);
      dw_s2_rows<T, K, 1>(rows, col0, w, bias, tiles, out + oh * OW, res ? res + oh * OW : nullptr, OW, store);
    }
  }
}

template <class T, int K>
void dw_rows_run(const Conv2dShape& s, const float* in, const float* weights, float* out, const Epilogue& ep,
                 ThreadPool* pool) {
  const int64_t C = s.in_channels, OHW = s.out_h() * s.out_w();
  const int S = static_cast<int>(s.stride_w);
  const std::vector<ColumnTile> tiles =
      column_tiles(s.out_w(), T::L, K == 3 ? kMaxNV<T> : kMaxNV5<T>, S, s.pad_left, s.in_w);
  const Store<T> store = Store<T>::of(ep);
  const bool deferred = store.deferred;
  parallel_for(pool, s.batch * C, [&](int64_t b, int64_t e) {
    // Padding rows: only lanes inside [0, in_w) are read, and they must be zero.
    static thread_local AlignedBuffer zero_buffer;
    if (zero_buffer.size() < static_cast<size_t>(s.in_w)) {
      zero_buffer.resize(s.in_w);
      zero_buffer.zero();
    }
    const float* zero_row = zero_buffer.data();
    for (int64_t nc = b; nc < e; ++nc) {
      const int64_t c = nc % C;
      const float* plane = in + nc * s.in_h * s.in_w;
      float* o = out + nc * OHW;
      const float* res = ep.residual ? ep.residual + nc * OHW : nullptr;
      const float bias = ep.bias ? ep.bias[c] : 0.0f;
      if (S == 1)  // K == 3: 5x5 kernels run here at stride 2 only
        dw_plane<T, 3, 1>(s, tiles, plane, zero_row, weights + c * 9, bias, o, deferred ? nullptr : res, store);
      else
        dw_plane<T, K, 2>(s, tiles, plane, zero_row, weights + c * K * K, bias, o, deferred ? nullptr : res, store);
      if (deferred) apply_residual_activation(o, res, OHW, ep);  // the plane is still in L1
    }
  });
}

[[maybe_unused]] bool is_5x5_s2(const Conv2dShape& s) {
  return s.kernel_h == 5 && s.kernel_w == 5 && s.dilation_h == 1 && s.dilation_w == 1 && s.stride_h == 2 &&
         s.stride_w == 2;
}

bool is_fast_3x3(const Conv2dShape& s) {
  return s.kernel_h == 3 && s.kernel_w == 3 && s.dilation_h == 1 && s.dilation_w == 1 && s.stride_h == s.stride_w &&
         (s.stride_w == 1 || s.stride_w == 2);
}

// ---- generic path ----

// Scratch layout: padded row r (input row r - pad_top) holds `stride_w` phases of phase_w floats;
// phase p, index j is padded column j * stride_w + p (input column j * stride_w + p - pad_left).
struct PhasedPlane {
  int64_t rows = 0, phase_w = 0, row_stride = 0;
};

// Output vectors of `lanes` floats; phase_w a multiple of them (and so of the 8-float fill chunks).
PhasedPlane phased_plane_geometry(const Conv2dShape& s, int lanes) {
  PhasedPlane g;
  const int64_t ow_vec = (s.out_w() + lanes - 1) / lanes * lanes;
  g.rows = (s.out_h() - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1;
  g.phase_w = (ow_vec + (s.kernel_w - 1) * s.dilation_w / s.stride_w + lanes) / lanes * lanes;
  g.row_stride = g.phase_w * s.stride_w;
  return g;
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
        const __m256i m = first >= 0 && first + 8 <= W ? _mm256_set1_epi32(-1) : vrange_mask(first, W);
        _mm256_store_ps(d + j0, _mm256_maskload_ps(src + first, m));
      } else if (sw == 2) {  // border chunk: masked loads, lanes outside the row are zero
        const __m256 a = _mm256_maskload_ps(src + first, vrange_mask(first, W));
        const __m256 b = _mm256_maskload_ps(src + first + 8, vrange_mask(first + 8, W));
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
template <class T, int TAPS, int NV, int R>
inline void depthwise_vectors(const float* row_base, int64_t row_step, const int64_t* offs, const typename T::V* w,
                              int taps, float* out, int64_t ow, int64_t OW, typename T::V bias) {
  constexpr int L = T::L;
  typename T::V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = bias;
  const int n = TAPS > 0 ? TAPS : taps;
#pragma GCC unroll 25
  for (int t = 0; t < n; ++t) {
    const float* p = row_base + offs[t] + ow;
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = T::fmadd(T::loadu(p + r * row_step + L * v), w[t], acc[r][v]);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      const int64_t o = ow + L * v;
      T::store_n(out + r * OW + o, acc[r][v], static_cast<int>(std::min<int64_t>(L, OW - o)));
    }
}

// Whole output plane of one channel from its phased scratch plane.
template <class T, int TAPS>
void depthwise_plane(const Conv2dShape& s, const PhasedPlane& g, const float* scratch, const float* weights,
                     const int64_t* offs, float* out, const float* res, float bias_value, const Epilogue& ep) {
  using V = typename T::V;
  constexpr int L = T::L;
  const int64_t OH = s.out_h(), OW = s.out_w();
  const int taps = static_cast<int>(s.kernel_h * s.kernel_w);
  // Broadcast weights: fixed-size locals (registers after unrolling) when TAPS is known.
  constexpr int kFixed = TAPS > 0 ? TAPS : 1;
  V w_fixed[kFixed];
  static thread_local AlignedBuffer w_buffer;
  V* w = TAPS > 0 ? w_fixed : reinterpret_cast<V*>(w_buffer.ensure(static_cast<size_t>(taps * L)));
  for (int t = 0; t < taps; ++t) w[t] = T::set1(weights[t]);
  const V bias = T::set1(bias_value);
  const int64_t row_step = s.stride_h * g.row_stride;
  int64_t oh = 0;
  if (OW <= L) {  // 4 rows x 1 vector
    for (; oh + 4 <= OH; oh += 4)
      depthwise_vectors<T, TAPS, 1, 4>(scratch + oh * row_step, row_step, offs, w, taps, out + oh * OW, 0, OW, bias);
  } else if (OW <= 2 * L) {  // 2 rows x 2 vectors
    for (; oh + 2 <= OH; oh += 2)
      depthwise_vectors<T, TAPS, 2, 2>(scratch + oh * row_step, row_step, offs, w, taps, out + oh * OW, 0, OW, bias);
  }
  for (; oh < OH; ++oh) {
    const float* row_base = scratch + oh * row_step;
    float* o = out + oh * OW;
    int64_t ow = 0;
    for (; ow + 4 * L <= OW; ow += 4 * L)
      depthwise_vectors<T, TAPS, 4, 1>(row_base, row_step, offs, w, taps, o, ow, OW, bias);
    for (; ow + 2 * L <= OW; ow += 2 * L)
      depthwise_vectors<T, TAPS, 2, 1>(row_base, row_step, offs, w, taps, o, ow, OW, bias);
    for (; ow < OW; ow += L) depthwise_vectors<T, TAPS, 1, 1>(row_base, row_step, offs, w, taps, o, ow, OW, bias);
  }
  apply_residual_activation(out, res, OH * OW, ep);  // the plane is still in L1/L2
}

// T: the vector width of the output rows (16 lanes with AVX-512 for rows wider than 8).
template <class T>
void depthwise_generic(const Conv2dShape& s, const float* in, const float* weights, float* out, const Epilogue& ep,
                       ThreadPool* pool) {
  const int64_t C = s.in_channels, OH = s.out_h(), OW = s.out_w(), taps = s.kernel_h * s.kernel_w;
  // Undilated rows at stride 1 or 2 (every network's) are filled by planes::fill_row: precomputed border
  // masks, whole vectors between (for MnasNet's 5x5 stride-2 layers the 8-column fill_phased_row chunks
  // cost twice the convolution). Its geometry is the same phase-split layout.
  const bool row_fill = s.dilation_w == 1 && (s.stride_w == 1 || s.stride_w == 2);
  const planes::RowGeometry geo(s.kernel_w, row_fill ? s.stride_w : 1, s.pad_left, s.in_w, OW, T::L);
  PhasedPlane g = phased_plane_geometry(s, T::L);
  if (row_fill) g.phase_w = geo.phase_w, g.row_stride = geo.row_stride;
  // Tap offsets into the scratch plane (the same for every channel).
  std::vector<int64_t> offs(taps);
  for (int64_t ky = 0, t = 0; ky < s.kernel_h; ++ky)
    for (int64_t kx = 0; kx < s.kernel_w; ++kx, ++t) {
      const int64_t dx = kx * s.dilation_w;
      offs[t] = ky * s.dilation_h * g.row_stride + (dx % s.stride_w) * g.phase_w + dx / s.stride_w;
    }
  parallel_for(pool, s.batch * C, [&](int64_t b, int64_t e) {
    static thread_local AlignedBuffer scratch_buffer;
    // Slack past the last row: the last vector's lanes past OW read on (never stored); kept zero.
    const int64_t used = g.rows * g.row_stride, slack = 2 * T::L;
    float* scratch = scratch_buffer.ensure(static_cast<size_t>(used + slack));
    std::fill(scratch + used, scratch + used + slack, 0.0f);
    for (int64_t nc = b; nc < e; ++nc) {
      const int64_t c = nc % C;
      const float* plane = in + nc * s.in_h * s.in_w;
      for (int64_t r = 0; r < g.rows; ++r) {
        const int64_t ih = r - s.pad_top;
        const float* src = ih >= 0 && ih < s.in_h ? plane + ih * s.in_w : nullptr;
        if (row_fill)
          planes::fill_row<T>(geo, src, scratch + r * g.row_stride, 0.0f);
        else
          fill_phased_row(s, g, src, scratch + r * g.row_stride);
      }
      float* o = out + nc * OH * OW;
      const float* res = ep.residual ? ep.residual + nc * OH * OW : nullptr;
      const float bias = ep.bias ? ep.bias[c] : 0.0f;
      const float* w = weights + c * taps;
      // 3x3 (dilated or strided unlike the fast path) and 5x5 (MnasNet, EfficientNet) keep their weights
      // in registers.
      if (taps == 9)
        depthwise_plane<T, 9>(s, g, scratch, w, offs.data(), o, res, bias, ep);
      else if (taps == 25)
        depthwise_plane<T, 25>(s, g, scratch, w, offs.data(), o, res, bias, ep);
      else
        depthwise_plane<T, 0>(s, g, scratch, w, offs.data(), o, res, bias, ep);
    }
  });
}

// ---- small maps: channels in lanes ----

//
// A plane of at most 8 output columns (MobileNet's 7x7) fills few lanes of a row vector. Here L channels
// at a time are transposed into a zero-padded [row][column][L] scratch, so every tap of every output
// pixel is one aligned vector load with no border case; the L channels' taps are vectors; and the
// [pixel][L] result is transposed back into the L output planes with the epilogue on the way out. Any
// kernel size, stride and dilation.

// NP consecutive output pixels from `x` (the scratch at the first one's window origin; pixel i's is
// i * step floats further), tap t at offs[t]; independent accumulator chains.
template <class T, int TAPS, int NP>
inline void lanes_pixels(const float* x, int64_t step, const int64_t* offs, const typename T::V* w, int taps,
                         typename T::V bias, float* y) {
  typename T::V acc[NP];
  for (int i = 0; i < NP; ++i) acc[i] = bias;
  const int n = TAPS > 0 ? TAPS : taps;
#pragma GCC unroll 25
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < NP; ++i) acc[i] = T::fmadd(T::load(x + offs[t] + i * step), w[t], acc[i]);
  for (int i = 0; i < NP; ++i) T::store(y + i * T::L, acc[i]);
}

template <class T, int TAPS>
void dw_lanes_run(const Conv2dShape& s, const float* in, const float* weights, float* out, const Epilogue& ep,
                  ThreadPool* pool) {
  using V = typename T::V;
  constexpr int L = T::L;
  const int64_t C = s.in_channels, HW = s.in_h * s.in_w, OW = s.out_w(), OHW = s.out_h() * OW;
  // Padded size: what the windows reach (more than input + pads when the last window does not fit,
  // which the output size's truncating division allows).
  const int64_t PH = std::max(s.in_h + s.pad_top + s.pad_bottom, (s.out_h() - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1);
  const int64_t PW = std::max(s.in_w + s.pad_left + s.pad_right, (OW - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1);
  const int taps = static_cast<int>(s.kernel_h * s.kernel_w);
  const int64_t blocks = (C + L - 1) / L;
  const Store<T> store = Store<T>::of(ep);
  std::vector<int64_t> offs(taps);  // tap offsets in the scratch, in floats
  for (int t = 0; t < taps; ++t)
    offs[t] = ((t / s.kernel_w) * s.dilation_h * PW + (t % s.kernel_w) * s.dilation_w) * L;
  parallel_for(pool, s.batch * blocks, [&](int64_t b0, int64_t b1) {
    static thread_local AlignedBuffer x_buf, y_buf, w_buf;
    float* X = x_buf.ensure(static_cast<size_t>(PH * PW * L));
    float* Y = y_buf.ensure(static_cast<size_t>((OHW + L) * L));
    std::fill(X, X + PH * PW * L, 0.0f);  // the border stays zero; the interior is rewritten per block
    // The taps as vectors of the block's L channels: in registers when TAPS is known.
    constexpr int kFixed = TAPS > 0 ? TAPS : 1;
    V w_fixed[kFixed];
    V* w = TAPS > 0 ? w_fixed : reinterpret_cast<V*>(w_buf.ensure(static_cast<size_t>(taps * L)));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n = b / blocks, c0 = (b % blocks) * L;
      const int nc = static_cast<int>(std::min<int64_t>(L, C - c0));
      const float* src = in + (n * C + c0) * HW;
      alignas(64) float lane[L];
      for (int t = 0; t < taps; ++t) {
        for (int c = 0; c < L; ++c) lane[c] = c < nc ? weights[(c0 + c) * taps + t] : 0.0f;
        w[t] = T::loadu(lane);
      }
      for (int c = 0; c < L; ++c) lane[c] = c < nc && ep.bias ? ep.bias[c0 + c] : 0.0f;
      const V bias = T::loadu(lane);
      // Planes -> [row][column][L], L pixels at a time.
      int64_t h = 0, x = 0;  // row and column of pixel p
      for (int64_t p0 = 0; p0 < HW; p0 += L) {
        const int np = static_cast<int>(std::min<int64_t>(L, HW - p0));
        V r[L];
        for (int c = 0; c < L; ++c) r[c] = c < nc ? T::load_n(src + c * HW + p0, np) : T::zero();
        T::transpose(r);
        for (int j = 0; j < np; ++j) {
          T::store(X + ((h + s.pad_top) * PW + x + s.pad_left) * L, r[j]);
          if (++x == s.in_w) x = 0, ++h;
        }
      }
      const int64_t step = s.stride_w * L;
      for (int64_t oh = 0; oh < s.out_h(); ++oh) {
        const float* x = X + oh * s.stride_h * PW * L;
        float* y = Y + oh * OW * L;
        int64_t ow = 0;
        for (; ow + 4 <= OW; ow += 4) lanes_pixels<T, TAPS, 4>(x + ow * step, step, offs.data(), w, taps, bias, y + ow * L);
        for (; ow < OW; ++ow) lanes_pixels<T, TAPS, 1>(x + ow * step, step, offs.data(), w, taps, bias, y + ow * L);
      }
      // [pixel][L] -> planes, L pixels at a time, with residual and Relu/Clip in the store.
      for (int64_t q0 = 0; q0 < OHW; q0 += L) {
        const int nq = static_cast<int>(std::min<int64_t>(L, OHW - q0));
        V r[L];
        for (int j = 0; j < L; ++j) r[j] = T::load(Y + (q0 + j) * L);  // rows past OHW: slack, never stored
        T::transpose(r);
        const typename T::Mask m = T::mask(nq == L ? ~0u : (1u << nq) - 1u);
        for (int c = 0; c < nc; ++c) {
          const int64_t plane = (n * C + c0 + c) * OHW;
          const float* res = ep.residual && !store.deferred ? ep.residual + plane + q0 : nullptr;
          if (nq == L)
            store.template put<false>(out + plane + q0, res, r[c], m);
          else
            store.template put<true>(out + plane + q0, res, r[c], m);
        }
      }
      if (store.deferred)
        for (int c = 0; c < nc; ++c) {
          const int64_t plane = (n * C + c0 + c) * OHW;
          apply_residual_activation(out + plane, ep.residual ? ep.residual + plane : nullptr, OHW, ep);
        }
    }
  });
}

// ---- small maps, row-streamed channels in lanes (kernel width 3 or 5, stride 1 or 2) ----
//
// The same [row][column][L] layout for maps up to 28 wide (MnasNet's and EfficientNet's 5x5 layers:
// 14 or 28 output columns fill a 16-lane row vector badly and their stride-2 rows need even/odd
// splitting). Three things make it faster than dw_lanes_run above on these larger maps:
//   - streamed: the input is transposed into the scratch only just before the first output row that
//     reads it, and each finished output row's whole L-pixel groups are transposed back at once, so
//     scratch rows are read and Y written while still in L1 (a 56x56 input's scratch is 230 KB);
//   - a run of NP output pixels of one row (up to 16 with AVX-512, 8 with AVX2; a row is cut into
//     equal runs) accumulates in NP registers: for each kernel row its KW weight vectors are loaded into
//     registers and each input column vector is loaded once and feeds every output of the run whose
//     window holds it (up to KW FMAs per load at stride 1, up to KW / 2 + 1 at stride 2);
//   - only the scratch border is zeroed per call.

// Output pixels [0, NP) of one row: `x` is the scratch at the first one's window origin (row ky = 0),
// `rs` floats between scratch rows, kh kernel rows; weights w[ky * KW + kx] (vectors in memory).
template <class T, int KW, int S, int NP>
void lanes_run(const float* x, int64_t rs, int kh, const typename T::V* w, const typename T::V* bias, float* y) {
  using V = typename T::V;
  constexpr int L = T::L, NC = (NP - 1) * S + KW;  // input columns the run reads
  V acc[NP];
#pragma GCC unroll 16
  for (int i = 0; i < NP; ++i) acc[i] = *bias;
  for (int ky = 0; ky < kh; ++ky) {
    const float* r = x + ky * rs;
    V wk[KW];
#pragma GCC unroll 5
    for (int kx = 0; kx < KW; ++kx) wk[kx] = w[ky * KW + kx];
#pragma GCC unroll 64
    for (int c = 0; c < NC; ++c) {
      const V xc = T::load(r + c * L);
#pragma GCC unroll 5
      for (int kx = 0; kx < KW; ++kx) {
        const int d = c - kx;  // output i = d / S reads column c at tap kx
        if (d >= 0 && d % S == 0 && d / S < NP) acc[d / S] = T::fmadd(xc, wk[kx], acc[d / S]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < NP; ++i) T::store(y + i * L, acc[i]);
}

template <class T>
constexpr int kStreamMaxNP = T::L == 16 ? 16 : 8;  // accumulators + KW weights + 1 input in 32 zmm / 16 ymm

template <class T>
using LanesRunFn = void (*)(const float*, int64_t, int, const typename T::V*, const typename T::V*, float*);

template <class T, int KW, int S, int... I>
constexpr std::array<LanesRunFn<T>, sizeof...(I)> lanes_run_table(std::integer_sequence<int, I...>) {
  return {&lanes_run<T, KW, S, I + 1>...};
}

// An Epilogue's activation on one vector (the functions apply_residual_activation uses).
inline __m256 activate_vec(__m256 v, const Epilogue& ep) { return activate(v, ep); }
#if defined(__AVX512F__)
inline __m512 activate_vec(__m512 v, const Epilogue& ep) { return activate512(v, ep); }
#endif

// Geometry of dw_lanes_stream, passed by value so that the block loop keeps it in registers (vector
// stores may alias anything reached through a reference).
struct StreamGeom {
  int64_t C, H, W, HW, OH, OW, OHW, KH, SH, PT, PL, PW, rs, np;
  int taps;
};

// One block of L channels (nc of them real) of image n.
template <class T, int KW, int S>
void dw_lanes_stream_block(const StreamGeom g, const float* src, const float* weights, float* out, const float* residual,
                           const float* bias_in, int nc, float* X, float* Y, typename T::V* w, const Store<T>& store,
                           const Epilogue& ep) {
  using V = typename T::V;
  constexpr int L = T::L;
  static constexpr auto kRuns = lanes_run_table<T, KW, S>(std::make_integer_sequence<int, kStreamMaxNP<T>>{});
  // Weights [channel][tap] -> [tap][L], L taps at a time through the transpose; then the bias.
  for (int t0 = 0; t0 < g.taps; t0 += L) {
    const int nt = std::min(L, g.taps - t0);
    V r[L];
    for (int c = 0; c < L; ++c) r[c] = c < nc ? T::load_n(weights + c * g.taps + t0, nt) : T::zero();
    T::transpose(r);
    for (int j = 0; j < nt; ++j) w[t0 + j] = r[j];
  }
  {
    alignas(64) float lane[L];
    for (int c = 0; c < L; ++c) lane[c] = c < nc && bias_in ? bias_in[c] : 0.0f;
    w[g.taps] = T::load(lane);
  }
  int64_t p0 = 0, xw = 0;                            // next input pixel to transpose, its column
  float* dst = X + (g.PT * g.PW + g.PL) * L;          // its place in the scratch
  const int64_t row_skip = (g.PW - g.W) * L;
  int64_t q0 = 0;  // next output pixel to transpose back
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    // Input rows this output row reads: up to (exclusive) oh * SH + KH - PT.
    const int64_t need = std::min(g.H, oh * g.SH + g.KH - g.PT) * g.W;
    for (; p0 < need; p0 += L) {
      const int np_in = static_cast<int>(std::min<int64_t>(L, g.HW - p0));
      V r[L];
      for (int c = 0; c < L; ++c) r[c] = c < nc ? T::load_n(src + c * g.HW + p0, np_in) : T::zero();
      T::transpose(r);
      for (int j = 0; j < np_in; ++j) {
        T::store(dst, r[j]);
        dst += L;
        if (++xw == g.W) xw = 0, dst += row_skip;
      }
    }
    const float* xr = X + oh * g.SH * g.rs;
    float* y = Y + oh * g.OW * L;
    for (int64_t ow = 0; ow < g.OW; ow += g.np) {
      const int64_t k = std::min(g.np, g.OW - ow);
      kRuns[k - 1](xr + ow * S * L, g.rs, static_cast<int>(g.KH), w, w + g.taps, y + ow * L);
    }
    // [pixel][L] -> planes for the finished whole groups of L pixels (all at the last row).
    const int64_t done = (oh + 1) * g.OW, q_end = oh + 1 == g.OH ? done : done / L * L;
    for (; q0 < q_end; q0 += L) {
      const int nq = static_cast<int>(std::min<int64_t>(L, q_end - q0));
      V r[L];
      for (int j = 0; j < L; ++j) r[j] = T::load(Y + (q0 + j) * L);  // rows past q_end: never stored
      T::transpose(r);
      const typename T::Mask m = T::mask(nq == L ? ~0u : (1u << nq) - 1u);
      float* o = out + q0;
      const float* res = residual ? residual + q0 : nullptr;
      if (store.deferred) {  // residual and activation (SiLU, ...) in registers, not in a pass over the planes
        for (int c = 0; c < nc; ++c, o += g.OHW, res = res ? res + g.OHW : nullptr) {
          V v = r[c];
          if (res) v = T::add(v, T::maskz_load(res, m));
          T::mask_store(o, m, activate_vec(v, ep));
        }
        continue;
      }
      if (nq == L && nc == L) {  // the common case unrolled: r stays in registers
#pragma GCC unroll 16
        for (int c = 0; c < L; ++c) store.template put<false>(o + c * g.OHW, res ? res + c * g.OHW : nullptr, r[c], m);
        continue;
      }
      for (int c = 0; c < nc; ++c, o += g.OHW, res = res ? res + g.OHW : nullptr) {
        if (nq == L)
          store.template put<false>(o, res, r[c], m);
        else
          store.template put<true>(o, res, r[c], m);
      }
    }
  }
}

template <class T, int KW, int S>
void dw_lanes_stream(const Conv2dShape& s, const float* in, const float* weights, float* out, const Epilogue& ep,
                     ThreadPool* pool) {
  using V = typename T::V;
  constexpr int L = T::L;
  StreamGeom g;
  g.C = s.in_channels, g.H = s.in_h, g.W = s.in_w, g.HW = g.H * g.W, g.OH = s.out_h(), g.OW = s.out_w();
  g.OHW = g.OH * g.OW, g.KH = s.kernel_h, g.SH = s.stride_h, g.PT = s.pad_top, g.PL = s.pad_left;
  // Padded size: what the windows reach (see dw_lanes_run).
  const int64_t PH = std::max(g.H + g.PT + s.pad_bottom, (g.OH - 1) * g.SH + g.KH);
  g.PW = std::max(g.W + g.PL + s.pad_right, (g.OW - 1) * S + KW);
  g.rs = g.PW * L;  // floats per scratch row
  g.taps = static_cast<int>(g.KH * KW);
  // A row in equal runs of at most kStreamMaxNP pixels (28 -> 14 + 14 with 16 lanes, 4 x 7 with 8).
  const int64_t nruns = (g.OW + kStreamMaxNP<T> - 1) / kStreamMaxNP<T>;
  g.np = (g.OW + nruns - 1) / nruns;
  const int64_t blocks = (g.C + L - 1) / L;
  const Store<T> store = Store<T>::of(ep);
  parallel_for(pool, s.batch * blocks, [&](int64_t b0, int64_t b1) {
    static thread_local AlignedBuffer x_buf, y_buf, w_buf;
    float* X = x_buf.ensure(static_cast<size_t>(PH * g.rs));
    float* Y = y_buf.ensure(static_cast<size_t>((g.OHW + L) * L));
    V* w = reinterpret_cast<V*>(w_buf.ensure(static_cast<size_t>((g.taps + 1) * L)));
    // Zero the border only: the interior is rewritten for every block.
    for (int64_t r = 0; r < PH; ++r) {
      float* row = X + r * g.rs;
      if (r < g.PT || r >= g.PT + g.H) {
        std::fill(row, row + g.rs, 0.0f);
      } else {
        std::fill(row, row + g.PL * L, 0.0f);
        std::fill(row + (g.PL + g.W) * L, row + g.rs, 0.0f);
      }
    }
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n = b / blocks, c0 = (b % blocks) * L;
      const int nc = static_cast<int>(std::min<int64_t>(L, g.C - c0));
      const int64_t plane0 = (n * g.C + c0) * g.OHW;
      dw_lanes_stream_block<T, KW, S>(g, in + (n * g.C + c0) * g.HW, weights + c0 * g.taps, out + plane0,
                                      ep.residual ? ep.residual + plane0 : nullptr, ep.bias ? ep.bias + c0 : nullptr,
                                      nc, X, Y, w, store, ep);
    }
  });
}

constexpr int64_t kStreamMaxOutW = 28;
// 3x3 at stride 1 or 2 (the fast path above): 7x7 maps with AVX-512 (960ch 7x7 37 -> 26 us, 576ch 14->7
// 42 -> 23; 14 and 28 wide are 1.00-1.04x, the 16-lane rows need no transposes), up to 14 wide with AVX2
// (384ch 14x14 48 -> 43 us; 144ch 56->28 would be 114 -> 136).
template <class T>
constexpr int64_t kStream3x3MaxOutW = T::L == 16 ? 8 : 14;

bool lanes_stream_applicable(const Conv2dShape& s) {
  return (s.kernel_w == 3 || s.kernel_w == 5) && (s.stride_w == 1 || s.stride_w == 2) && s.dilation_h == 1 &&
         s.dilation_w == 1;
}

template <class T>
void dw_lanes_stream_dispatch(const Conv2dShape& s, const float* in, const float* weights, float* out,
                              const Epilogue& ep, ThreadPool* pool) {
  if (s.kernel_w == 3)
    return s.stride_w == 1 ? dw_lanes_stream<T, 3, 1>(s, in, weights, out, ep, pool)
                           : dw_lanes_stream<T, 3, 2>(s, in, weights, out, ep, pool);
  return s.stride_w == 1 ? dw_lanes_stream<T, 5, 1>(s, in, weights, out, ep, pool)
                         : dw_lanes_stream<T, 5, 2>(s, in, weights, out, ep, pool);
}

// Taken for output planes at most this wide (with AVX-512; 4 with AVX2's 8 lanes).
template <class T>
constexpr int64_t kLanesMaxOutW = T::L / 2;

template <class T>
void dw_lanes(const Conv2dShape& s, const float* in, const float* weights, float* out, const Epilogue& ep,
              ThreadPool* pool) {
  if (s.kernel_h * s.kernel_w == 9)
    dw_lanes_run<T, 9>(s, in, weights, out, ep, pool);
  else if (s.kernel_h * s.kernel_w == 25)
    dw_lanes_run<T, 25>(s, in, weights, out, ep, pool);
  else
    dw_lanes_run<T, 0>(s, in, weights, out, ep, pool);
}

#if defined(__AVX512F__)
// GCC 12's own intrinsic headers (valignd's undefined source) trip -Wmaybe-uninitialized; nothing here is.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// ---- small planes at stride 1, flat (AVX-512) ----
//
// A map of at most kFlatMaxPixels outputs whose rows keep the input's width (stride 1, left + right padding =
// kernel width - 1: every 3x3 layer on a 7x7 map in MobileNetV2/V3, MnasNet and EfficientNet) is computed as one flat run
// of NV vectors per channel: with OW == W, output pixel q reads input pixel q + (ky - pad_top) W + kx - pad_left
// at tap (ky, kx), so each tap is one shifted load per vector, its lanes that fall outside the plane (rows above
// or below, columns wrapped into the neighbouring row) masked to zero. Nothing is transposed or copied, against
// dw_lanes_stream's 16x16 transposes into its [pixel][16] scratch and back, which took most of its time here.
// Kernel rows outer, CG channels inside: each row's offset and load masks serve CG channels. Kernel width 3 only: at
// width 5 the 16 masks per kernel row spill through general registers (1152ch 7x7: 50 -> 73 us, docs/cpu-target.md).
constexpr int64_t kFlatMaxPixels = 64;

bool flat_plane_applicable(const Conv2dShape& s) {
  return s.stride_h == 1 && s.stride_w == 1 && s.dilation_h == 1 && s.dilation_w == 1 && s.out_w() == s.in_w &&
         s.out_h() * s.out_w() <= kFlatMaxPixels && s.kernel_w == 3 && s.kernel_h <= 7 && s.pad_left < s.kernel_w;
}

struct FlatTaps {
  int kh = 0, nv = 0;
  int64_t row_offset[7];      // kernel row ky: input offset of output pixel 0's tap (ky, 0), ky - pad_top rows down
  __mmask16 valid[49][4];     // tap (ky, kx), output vector v: the lanes whose input pixel is in the plane
  __mmask16 inside[7][5];     // kernel row ky: the lanes of input vectors v = 0..NV that lie inside the plane
};

// Kernel width KW: per kernel row, NV + 1 loads of 16 consecutive floats, the taps of each output vector
// cut from two neighbours (valignd), then masked FMAs (lanes of another row or outside the plane keep acc).
template <int NV, int CG, int KW>
void dw_flat_channels(const FlatTaps& ft, const float* x, const float* w, int64_t taps, int64_t hw, int64_t ohw,
                      const float* bias, const float* residual, float* y, const Epilogue& ep) {
  __m512 acc[CG][NV];
#pragma GCC unroll 4
  for (int c = 0; c < CG; ++c) {
    const __m512 b = _mm512_set1_ps(bias ? bias[c] : 0.0f);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[c][v] = b;
  }
  for (int ky = 0; ky < ft.kh; ++ky) {
    const float* xr = x + ft.row_offset[ky];
#pragma GCC unroll 4
    for (int c = 0; c < CG; ++c) {
      __m512 in[NV + 1];
#pragma GCC unroll 5
      for (int v = 0; v <= NV; ++v) in[v] = _mm512_maskz_loadu_ps(ft.inside[ky][v], xr + c * hw + v * 16);
#pragma GCC unroll 5
      for (int kx = 0; kx < KW; ++kx) {
        const __m512 wv = _mm512_set1_ps(w[c * taps + ky * KW + kx]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const __m512 xs = kx == 0 ? in[v]
                                    : _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(in[v + 1]),
                                                                              _mm512_castps_si512(in[v]), kx));
          acc[c][v] = _mm512_mask3_fmadd_ps(xs, wv, acc[c][v], ft.valid[ky * KW + kx][v]);
        }
      }
    }
  }
  const __mmask16 last = vtail_mask512(ohw - (NV - 1) * 16);
#pragma GCC unroll 4
  for (int c = 0; c < CG; ++c)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 sm = v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
      __m512 r = acc[c][v];
      if (residual) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(sm, residual + c * ohw + v * 16));
      _mm512_mask_storeu_ps(y + c * ohw + v * 16, sm, activate512(r, ep));
    }
}

template <int NV, int KW>
void dw_flat_run(const Conv2dShape& s, const FlatTaps& ft, const float* in, const float* weights, float* out,
                 const Epilogue& ep, ThreadPool* pool) {
  constexpr int CG = 4;
  const int64_t C = s.in_channels, hw = s.in_h * s.in_w, ohw = s.out_h() * s.out_w(), taps = ft.kh * KW;
  const int64_t groups = (C + CG - 1) / CG;
  parallel_for(pool, s.batch * groups, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t n = g / groups, c0 = (g % groups) * CG, plane = n * C + c0;
      const float* x = in + plane * hw;
      const float* w = weights + c0 * taps;
      const float* b = ep.bias ? ep.bias + c0 : nullptr;
      const float* r = ep.residual ? ep.residual + plane * ohw : nullptr;
      float* y = out + plane * ohw;
      if (C - c0 >= CG) {
        dw_flat_channels<NV, CG, KW>(ft, x, w, taps, hw, ohw, b, r, y, ep);
      } else {
        for (int64_t c = c0; c < C; ++c, x += hw, w += taps, y += ohw, r = r ? r + ohw : nullptr, b = b ? b + 1 : nullptr)
          dw_flat_channels<NV, 1, KW>(ft, x, w, taps, hw, ohw, b, r, y, ep);
      }
    }
  });
}

void dw_flat(const Conv2dShape& s, const float* in, const float* weights, float* out, const Epilogue& ep,
             ThreadPool* pool) {
  FlatTaps ft;
  const int64_t OH = s.out_h(), OW = s.out_w(), ohw = OH * OW, W = s.in_w, H = s.in_h, hw = H * W;
  ft.kh = static_cast<int>(s.kernel_h);
  ft.nv = static_cast<int>((ohw + 15) / 16);
  for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
    const int64_t dy = ky - s.pad_top, base = dy * W - s.pad_left;
    ft.row_offset[ky] = base;
    for (int v = 0; v <= 4; ++v) {
      unsigned m = 0;
      for (int l = 0; l < 16; ++l) {
        const int64_t i = base + v * 16 + l;
        if (i >= 0 && i < hw) m |= 1u << l;
      }
      ft.inside[ky][v] = static_cast<__mmask16>(m);
    }
    for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
      const int64_t dx = kx - s.pad_left;
      for (int v = 0; v < 4; ++v) {
        unsigned m = 0;
        for (int l = 0; l < 16; ++l) {
          const int64_t q = v * 16 + l, oh = q / OW, ow = q % OW, ih = oh + dy, iw = ow + dx;
          if (q < ohw && ih >= 0 && ih < H && iw >= 0 && iw < W) m |= 1u << l;
        }
        ft.valid[ky * s.kernel_w + kx][v] = static_cast<__mmask16>(m);
      }
    }
  }
  switch (ft.nv) {
    case 1: return dw_flat_run<1, 3>(s, ft, in, weights, out, ep, pool);
    case 2: return dw_flat_run<2, 3>(s, ft, in, weights, out, ep, pool);
    case 3: return dw_flat_run<3, 3>(s, ft, in, weights, out, ep, pool);
    default: return dw_flat_run<4, 3>(s, ft, in, weights, out, ep, pool);
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void conv2d_nchw_depthwise_avx2(const Conv2dShape& s, const float* in, const float* weights, float* out,
                                const Epilogue& ep, ThreadPool* pool) {
#if defined(__AVX512F__)
  if (flat_plane_applicable(s)) return dw_flat(s, in, weights, out, ep, pool);
  // 5x5 stride 2 with at least two output vectors per row: on its rows, split into even and odd columns in
  // registers (72ch 56 -> 28 66 -> 52 us at 1 thread, 43 -> 26 at 2; 48ch 112 -> 56 279 -> 130 us).
  if (is_5x5_s2(s) && s.out_w() > planes::Vec16::L) return dw_rows_run<planes::Vec16, 5>(s, in, weights, out, ep, pool);
#endif
  // Maps at most 28 wide, kernel width 3 or 5, stride 1 or 2 (MnasNet's and EfficientNet's 5x5 layers,
  // every layer on 7x7 maps): channels in lanes, streamed. The 3x3 fast path keeps the 3x3 maps wider
  // than kStream3x3MaxOutW (it measures faster there).
  if (lanes_stream_applicable(s) && s.out_w() <= kStreamMaxOutW &&
      (!is_fast_3x3(s) || s.out_w() <= kStream3x3MaxOutW<planes::VecWide>))
    return dw_lanes_stream_dispatch<planes::VecWide>(s, in, weights, out, ep, pool);
  if (s.out_w() <= kLanesMaxOutW<planes::VecWide> || (!is_fast_3x3(s) && s.out_w() <= planes::VecWide::L)) return dw_lanes<planes::VecWide>(s, in, weights, out, ep, pool);
#if defined(__AVX512F__)
  if (!is_fast_3x3(s))
    return s.out_w() > 8 ? depthwise_generic<planes::Vec16>(s, in, weights, out, ep, pool)
                         : depthwise_generic<planes::Vec8>(s, in, weights, out, ep, pool);
  // Maps at most 8 wide (MobileNet's 7x7) waste less with 8-lane vectors.
  if (s.out_w() > 8) return dw_rows_run<planes::Vec16, 3>(s, in, weights, out, ep, pool);
#else
  if (!is_fast_3x3(s)) return depthwise_generic<planes::Vec8>(s, in, weights, out, ep, pool);
#endif
  dw_rows_run<planes::Vec8, 3>(s, in, weights, out, ep, pool);
}

}  // namespace tessel::rt
