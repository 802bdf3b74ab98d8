// Internal to the NCHW depthwise and pooling kernels: a fixed-width vector type per instruction set
// (16 lanes with AVX-512, 8 with AVX2) with masked loads and even/odd deinterleaving, the lane masks
// of a row's borders, and (for pooling) padded, stride-phase-split scratch rows in a ring, so that
// every tap of a window is one unit-stride vector load with no border cases.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/epilogue.h"
#include "tessel/rt/vmath.h"

namespace tessel::rt::planes {

// Prefetches (into L1) columns [c0, c1) of rows [r0, r1) of a plane `width` floats wide: for kernels that
// gather or mask-load a window's rows a few channels later, from lines another core may have written.
inline void prefetch_rows(const float* plane, int64_t width, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (c1 <= c0) return;
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = plane + r * width;
    for (int64_t c = c0; c < c1; c += 16) _mm_prefetch(reinterpret_cast<const char*>(row + c), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(row + c1 - 1), _MM_HINT_T0);
  }
}

/// 8 float lanes (AVX2 + FMA).
struct Vec8 {
  using V = __m256;
  static constexpr int L = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const float* p) { return _mm256_load_ps(p); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, V v) { _mm256_store_ps(p, v); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  /// The first n (1..L) lanes of p; the others are zero and never read.
  static V load_n(const float* p, int n) { return n == L ? loadu(p) : _mm256_maskload_ps(p, vtail_mask(n)); }
  static void store_n(float* p, V v, int n) {
    if (n == L)
      storeu(p, v);
    else
      _mm256_maskstore_ps(p, vtail_mask(n), v);
  }
  /// A lane mask (lane l selected by bit l of `bits`) and the zero-masking load through it: lanes
  /// not selected are zero and never read.
  using Mask = __m256i;
  static Mask mask(uint32_t bits) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), lane_bit), lane_bit);
  }
  static V maskz_load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void mask_store(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  /// Lanes whose bit is set in `bits` from p, the others `fill`; only those lanes are read.
  static V load_bits(const float* p, uint32_t bits, V fill) {
    const Mask m = mask(bits);
    return _mm256_blendv_ps(fill, maskz_load(p, m), _mm256_castsi256_ps(m));
  }
  /// Lanes 1..L-1 of e followed by lane 0 of a.
  static V shift_in(V e, V a) {
    const V t = _mm256_permutevar8x32_ps(e, _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0));
    return _mm256_blend_ps(t, _mm256_broadcastss_ps(_mm256_castps256_ps128(a)), 0x80);
  }
  /// (a, b) = columns [0, 2L) -> even columns, odd columns.
  static void deinterleave(V a, V b, V& even, V& odd) {
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
  }
  /// In-place L x L transpose: afterwards r[m] lane k is what r[k] lane m was.
  static void transpose(V (&r)[L]) {
    V t[8], u[8];
    for (int k = 0; k < 4; ++k) {
      t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
      t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    // u[4 k + c], 128-bit lane j: column 4 j + c of rows 4 k .. 4 k + 3.
    for (int k = 0; k < 2; ++k) {
      u[4 * k + 0] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
      u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
      u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
      u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int c = 0; c < 4; ++c) {
      r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
      r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
  }
};

#if defined(__AVX512F__)
/// 16 float lanes (AVX-512F).
struct Vec16 {
  using V = __m512;
  static constexpr int L = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const float* p) { return _mm512_load_ps(p); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, V v) { _mm512_store_ps(p, v); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  // Here and in shift_in: the zero-masking forms with a full mask compile to the plain instruction;
  // GCC 12's unmasked forms warn (-Wmaybe-uninitialized on their undefined pass-through operand).
  static V max(V a, V b) { return _mm512_maskz_max_ps(static_cast<__mmask16>(0xFFFF), a, b); }
  static V min(V a, V b) { return _mm512_maskz_min_ps(static_cast<__mmask16>(0xFFFF), a, b); }
  static __mmask16 range_mask(int lo, int hi) {
    return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
  }
  static V load_n(const float* p, int n) { return n == L ? loadu(p) : _mm512_maskz_loadu_ps(range_mask(0, n), p); }
  static void store_n(float* p, V v, int n) {
    if (n == L)
      storeu(p, v);
    else
      _mm512_mask_storeu_ps(p, range_mask(0, n), v);
  }
  using Mask = __mmask16;
  static Mask mask(uint32_t bits) { return static_cast<__mmask16>(bits); }
  static V maskz_load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void mask_store(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static V load_bits(const float* p, uint32_t bits, V fill) {
    return _mm512_mask_loadu_ps(fill, static_cast<__mmask16>(bits), p);
  }
  /// Lanes N..L-1 of lo followed by lanes 0..N-1 of hi (valignd).
  template <int N>
  static V alignr(V hi, V lo) {
    return _mm512_castsi512_ps(
        _mm512_maskz_alignr_epi32(static_cast<__mmask16>(0xFFFF), _mm512_castps_si512(hi), _mm512_castps_si512(lo), N));
  }
  static V shift_in(V e, V a) {
    return _mm512_castsi512_ps(
        _mm512_maskz_alignr_epi32(static_cast<__mmask16>(0xFFFF), _mm512_castps_si512(a), _mm512_castps_si512(e), 1));
  }
  /// Lanes 1..L-1 of o followed by lane 1 of a (the odd columns one further, a the next 2L columns' first L).
  static V shift_in_odd(V o, V a) {
    return _mm512_permutex2var_ps(o, _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17), a);
  }
  /// Lanes 2..L-1 of e followed by lanes 0 and 2 of a (the even columns two further).
  static V shift2_in(V e, V a) {
    return _mm512_permutex2var_ps(e, _mm512_setr_epi32(2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18), a);
  }
  static void deinterleave(V a, V b, V& even, V& odd) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    even = _mm512_permutex2var_ps(a, ie, b);
    odd = _mm512_permutex2var_ps(a, io, b);
  }
  /// In-place L x L transpose: afterwards r[m] lane k is what r[k] lane m was.
  static void transpose(V (&r)[L]) {
    constexpr __mmask16 kAll = 0xFFFF;  // zero-masking forms: see max() above
    V t[16], u[16];
    for (int k = 0; k < 8; ++k) {
      t[2 * k] = _mm512_maskz_unpacklo_ps(kAll, r[2 * k], r[2 * k + 1]);
      t[2 * k + 1] = _mm512_maskz_unpackhi_ps(kAll, r[2 * k], r[2 * k + 1]);
    }
    // u[4 k + c], 128-bit lane j: column 4 j + c of rows 4 k .. 4 k + 3.
    for (int k = 0; k < 4; ++k) {
      u[4 * k + 0] = _mm512_maskz_shuffle_ps(kAll, t[4 * k], t[4 * k + 2], 0x44);
      u[4 * k + 1] = _mm512_maskz_shuffle_ps(kAll, t[4 * k], t[4 * k + 2], 0xEE);
      u[4 * k + 2] = _mm512_maskz_shuffle_ps(kAll, t[4 * k + 1], t[4 * k + 3], 0x44);
      u[4 * k + 3] = _mm512_maskz_shuffle_ps(kAll, t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    // Row m = 4 j + c gathers lane j of u[c], u[4 + c], u[8 + c], u[12 + c].
    for (int c = 0; c < 4; ++c) {
      const V x01 = _mm512_maskz_shuffle_f32x4(kAll, u[c], u[4 + c], 0x44), x23 = _mm512_maskz_shuffle_f32x4(kAll, u[c], u[4 + c], 0xEE);
      const V y01 = _mm512_maskz_shuffle_f32x4(kAll, u[8 + c], u[12 + c], 0x44), y23 = _mm512_maskz_shuffle_f32x4(kAll, u[8 + c], u[12 + c], 0xEE);
      r[c] = _mm512_maskz_shuffle_f32x4(kAll, x01, y01, 0x88);
      r[4 + c] = _mm512_maskz_shuffle_f32x4(kAll, x01, y01, 0xDD);
      r[8 + c] = _mm512_maskz_shuffle_f32x4(kAll, x23, y23, 0x88);
      r[12 + c] = _mm512_maskz_shuffle_f32x4(kAll, x23, y23, 0xDD);
    }
  }
};
/// The widest vector of this build.
using VecWide = Vec16;
#else
using VecWide = Vec8;
#endif

/// Bits of the lanes l in [0, lanes) whose column first + l lies in [0, width).
inline uint32_t lanes_inside(int64_t first, int64_t width, int lanes) {
  const int64_t lo = std::clamp<int64_t>(-first, 0, lanes), hi = std::clamp<int64_t>(width - first, 0, lanes);
  return lo >= hi ? 0u : (((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/// Scratch rows of one channel plane for windows of width `kernel_w`, stride `stride` (1 or 2) along
/// the row, `pad_left` columns of padding and `out_w` outputs computed in whole vectors of `lanes`.
/// Padded column c of a row sits at phase (c % stride), index c / stride; each phase holds
/// `phase_w` floats, so the tap kx of output j is at phase (kx % stride), index j + kx / stride.
/// Rows live in a ring of kRingRows slots (padded row r at slot r % kRingRows).
struct RowGeometry {
  static constexpr int64_t kRingRows = 32;
  /// One vector load of a row fill: input columns [first, first + lanes), lanes in `bits` inside the row.
  struct Load {
    int64_t first;
    uint32_t bits;
  };
  int64_t stride = 1, pad_left = 0, in_w = 0;
  int64_t phase_w = 0, row_stride = 0;
  uint32_t all_lanes = 0;
  std::vector<Load> loads;  ///< stride 1: one per output vector; stride 2: two (even/odd source pair)
  int64_t full_begin = 0, full_end = 0;  ///< loads [full_begin, full_end) read whole vectors

  RowGeometry(int64_t kernel_w, int64_t stride_w, int64_t pad, int64_t width, int64_t out_w, int lanes)
      : stride(stride_w), pad_left(pad), in_w(width) {
    // Outputs [0, out_w) read phase indices up to out_w - 1 + (kernel_w - 1) / stride_w. Lanes past
    // out_w of the last vector read on into the next phase, row or the ring's slack (never stored).
    phase_w = (out_w + (kernel_w - 1) / stride_w + lanes - 1) / lanes * lanes;
    row_stride = phase_w * stride_w;
    all_lanes = (1u << lanes) - 1u;
    // Stride 1: vector j covers padded columns [j, j + L); stride 2: 2L padded columns per vector j.
    for (int64_t c = 0; c < row_stride; c += lanes) {
      const int64_t first = c - pad;
      const uint32_t bits = lanes_inside(first, width, lanes);
      loads.push_back({bits == 0 ? 0 : first, bits});
    }
    const int64_t n = static_cast<int64_t>(loads.size());
    full_begin = 0;
    while (full_begin < n && loads[full_begin].bits != all_lanes) ++full_begin;
    full_end = full_begin;
    while (full_end < n && loads[full_end].bits == all_lanes) ++full_end;
  }
  /// Floats of the ring (plus slack for the last row's lanes past out_w).
  int64_t ring_floats() const { return kRingRows * row_stride + 2 * 64; }
  /// Offset of tap kx (relative to output column j's position in phase 0).
  int64_t tap_offset(int64_t kx) const { return (kx % stride) * phase_w + kx / stride; }
};

/// The ring of `g` in a per-thread buffer; zeroed when (re)allocated, so that lanes read past the
/// last row's end (never stored) hold no stale NaN or denormal bit patterns.
inline float* ring_storage(AlignedBuffer& buffer, const RowGeometry& g) {
  const size_t n = static_cast<size_t>(g.ring_floats());
  if (buffer.size() < n) {
    buffer.resize(n);
    buffer.zero();
  }
  return buffer.data();
}

/// Writes one padded, phase-split row from input row `src` (null: a padding row) to `dst`; columns
/// outside the input take `pad_value`. Only the input's own columns are read.
template <class T>
void fill_row(const RowGeometry& g, const float* src, float* dst, float pad_value) {
  using V = typename T::V;
  constexpr int L = T::L;
  const V pad = T::set1(pad_value);
  if (src == nullptr) {
    for (int64_t j = 0; j < g.row_stride; j += L) T::store(dst + j, pad);
    return;
  }
  const RowGeometry::Load* ld = g.loads.data();
  auto load = [&](int64_t k) {
    if (ld[k].bits == g.all_lanes) return T::loadu(src + ld[k].first);
    if (ld[k].bits == 0) return pad;
    return T::load_bits(src + ld[k].first, ld[k].bits, pad);
  };
  // Vectors [0, full_begin) and [full_end, n) touch a border; the ones between are plain loads.
  const int64_t n = static_cast<int64_t>(g.loads.size()), k0 = g.full_begin, k1 = g.full_end;
  const float* base = src - g.pad_left;  // input column of padded column 0
  if (g.stride == 1) {
    for (int64_t k = 0; k < k0; ++k) T::store(dst + k * L, load(k));
    for (int64_t k = k0; k < k1; ++k) T::store(dst + k * L, T::loadu(base + k * L));
    for (int64_t k = k1; k < n; ++k) T::store(dst + k * L, load(k));
    return;
  }
  // Stride 2: vectors 2q and 2q + 1 (2L padded columns) give L columns of each phase; pairs
  // [q0, q1) have both vectors whole.
  const int64_t q0 = (k0 + 1) / 2, q1 = std::max(q0, k1 / 2);
  auto pair = [&](int64_t q, V a, V b) {
    V even, odd;
    T::deinterleave(a, b, even, odd);
    T::store(dst + q * L, even);
    T::store(dst + g.phase_w + q * L, odd);
  };
  for (int64_t q = 0; q < q0; ++q) pair(q, load(2 * q), load(2 * q + 1));
  for (int64_t q = q0; q < q1; ++q) pair(q, T::loadu(base + 2 * q * L), T::loadu(base + (2 * q + 1) * L));
  for (int64_t q = q1; 2 * q < n; ++q) pair(q, load(2 * q), load(2 * q + 1));
}

// The store after conv + bias (the NCHW depthwise kernels, the stems' register blocks): residual (if any) added
// in registers, then for Relu and Clip min(max(x, lo), hi) (lo = 0, hi = +inf for Relu; as activate() does, NaN
// becomes lo). Other activations: stored as conv + bias, and a pass over the stored plane or row applies residual
// and activation afterwards (`deferred`).
template <class T>
struct Store {
  typename T::V lo, hi;
  bool clamp, deferred;

  static Store of(const Epilogue& ep) {
    const float inf = std::numeric_limits<float>::infinity();
    switch (ep.act) {
      case Activation::None: return {T::set1(-inf), T::set1(inf), false, false};
      case Activation::Relu: return {T::set1(0.0f), T::set1(inf), true, false};
      case Activation::Clip: return {T::set1(ep.alpha), T::set1(ep.beta), true, false};
      default: return {T::set1(-inf), T::set1(inf), false, true};
    }
  }
  // Output vector at `o` from `acc`; `res` is the residual at the same position or null. PARTIAL:
  // only the lanes of `m` are read and written.
  template <bool PARTIAL>
  inline void put(float* o, const float* res, typename T::V acc, typename T::Mask m) const {
    if (res) acc = T::add(acc, PARTIAL ? T::maskz_load(res, m) : T::loadu(res));
    if (clamp) acc = T::min(T::max(acc, lo), hi);
    if constexpr (PARTIAL)
      T::mask_store(o, m, acc);
    else
      T::storeu(o, acc);
  }
};

/// Fills ring rows lazily: padded rows [filled, upto) of a plane whose row r is input row r - pad_top.
template <class T>
struct RowRing {
  const RowGeometry& g;
  const float* plane;
  int64_t in_h, pad_top;
  float* ring;
  float pad_value;
  int64_t filled = 0;

  void ensure(int64_t upto) {
    for (; filled < upto; ++filled) {
      const int64_t ih = filled - pad_top;
      fill_row<T>(g, ih >= 0 && ih < in_h ? plane + ih * g.in_w : nullptr, row(filled), pad_value);
    }
  }
  /// Padded row r (r >= 0) of the ring; unsigned, so that the modulo is a mask.
  float* row(int64_t r) const {
    return ring + static_cast<int64_t>(static_cast<uint64_t>(r) % RowGeometry::kRingRows) * g.row_stride;
  }
};

}  // namespace tessel::rt::planes
