// Grouped convolution in NCHW with few channels per group (1 < groups, not depthwise; RegNet's and ResNeXt's
// 3x3 convs with 4-16 channels per group), the epilogue fused.
//
// im2col + GEMM runs one small GEMM per group (M = channels per group, K = 72 for 8 x 3x3): its 6- or
// 12-row tiles are mostly padding, it packs a B panel per group and per call, and it ran RegNetY-400MF's
// grouped layers at 10-15 GFLOP/s against 110-150 for the model's 1x1 convs (AVX-512, 1 thread). Here
// each (image, group) is one task: the group's input planes are read through padded, stride-phase-split
// scratch rows (plane_rows.h; every tap of a row is one unit-stride vector load, no border cases), and
// the output is computed in register tiles of kBlockM output channels x NV vectors of pixels (consecutive
// in raster order, so they may span rows): per tap, NV input vectors are loaded once and each of the
// kBlockM weights is broadcast into NV FMAs. Bias is added in the store; residual and activation in one
// pass over the group's finished planes (still in cache).
#include <algorithm>
#include <vector>

#include "plane_rows.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"

namespace tessel::rt {
namespace {

using planes::RowGeometry;
using planes::RowRing;

// Output channels of a register tile and of a packed weight block: weights are packed as
// [group][Cout_g / kBlockM][Cin_g][KH][KW][kBlockM] (channels past Cout_g zero), the same in every build.
constexpr int kBlockM = 8;
constexpr int64_t kMaxInPerGroup = 32;  // one scratch ring per input channel of the group

int64_t taps(const Conv2dShape& s) { return s.in_per_group() * s.kernel_h * s.kernel_w; }
int64_t blocks_m(const Conv2dShape& s) { return (s.out_per_group() + kBlockM - 1) / kBlockM; }

// Register tile: kTileM<T> output channels (a whole weight block of 8, or half of one) x kTileNV<T> vectors of
// pixels; the accumulators + NV inputs + 1 broadcast weight must fit the register file (32 zmm, 16 ymm). With
// AVX2, 4 x 3 (12 accumulators, 7 loads per 12 FMAs) rather than 8 x 1 (8 accumulators, too few to cover the
// FMA latency, and 9 loads per 8 FMAs): ResNeXt-50's and RegNetY's grouped layers ran at 25-35 GFLOP/s on
// Zen 2 with 8 x 1.
template <class T>
constexpr int kTileNV = 3;
template <class T>
constexpr int kTileM = T::L == 16 ? 8 : 4;

// The output vectors of a group in raster order (row, vector within the row): a register tile takes NV
// consecutive ones, so rows narrower than NV vectors (14x14 and 7x7 maps with 16 lanes) still fill it.
struct Slot {
  int64_t oh, v;
};

// Scratch rows of the group's input channels (one ring each).
template <class T>
struct GroupRows {
  const Conv2dShape& s;
  std::vector<RowRing<T>> rings;
  void ensure(int64_t oh) {
    for (RowRing<T>& r : rings) r.ensure(oh * s.stride_h + s.kernel_h);
  }
};

// What every tile of a call shares: tap_off[kw] is the scratch offset of tap column kw
// (RowGeometry::tap_offset, computed once per call: a division by the stride per tap cost a quarter of the
// time on 14x14 maps), and the shape's divisions (in_per_group, out_w) are done once per call, not per tile.
struct TileGeometry {
  const int64_t* tap_off;
  int64_t cin, kh, kw, stride_h, out_w, plane;
};

// One register tile: output channels [0, kBlockM) of a weight block at the NV output vectors `slot`.
// Stores the `mvalid` real channels (lanes past OW masked) with bias added. Out of line, so that every NV
// keeps its accumulators in registers. MB (8, or 4 for half a block: w then points at the half's first
// channel) channels of the block.
// CIN > 0: the group's input channels as a constant (4, 8 or 16 with 3 kernel rows), so that the reduction loop
// has a constant trip count and the accumulators stay in registers instead of passing through the stack.
template <class T, int NV, int MB, int CIN = 0>
__attribute__((noinline)) void slot_tile(const TileGeometry& tg, GroupRows<T>& rows, const float* w,
                                         const Slot* slot, int mvalid, const float* bias, float* out) {
  using V = typename T::V;
  constexpr int L = T::L;
  V acc[MB][NV];
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < NV; ++v) acc[m][v] = T::zero();
  const int64_t KW = tg.kw;
  int64_t row0[NV];  // padded input row of tap row 0 of each vector
  for (int v = 0; v < NV; ++v) row0[v] = slot[v].oh * tg.stride_h;
  const int64_t cin = CIN > 0 ? CIN : tg.cin, khs = CIN > 0 ? 3 : tg.kh;
  for (int64_t ci = 0; ci < cin; ++ci) {
    const RowRing<T>& ring = rows.rings[static_cast<size_t>(ci)];
#pragma GCC unroll 3
    for (int64_t kh = 0; kh < khs; ++kh) {
      const float* x[NV];
      for (int v = 0; v < NV; ++v) x[v] = ring.row(row0[v] + kh) + slot[v].v * L;
      for (int64_t kw = 0; kw < KW; ++kw, w += kBlockM) {
        const int64_t off = tg.tap_off[kw];
        V in[NV];
        for (int v = 0; v < NV; ++v) in[v] = T::loadu(x[v] + off);
        for (int m = 0; m < MB; ++m) {
          const V wm = T::set1(w[m]);
          for (int v = 0; v < NV; ++v) acc[m][v] = T::fmadd(wm, in[v], acc[m][v]);
        }
      }
    }
  }
  // Unrolled with compile-time indices (a loop to the run-time mvalid kept the accumulators on the stack).
  int lanes[NV];
  for (int v = 0; v < NV; ++v) lanes[v] = static_cast<int>(std::min<int64_t>(L, tg.out_w - slot[v].v * L));
#pragma GCC unroll 8
  for (int m = 0; m < MB; ++m) {
    if (m >= mvalid) break;
    const V b = T::set1(bias ? bias[m] : 0.0f);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      T::store_n(out + m * tg.plane + slot[v].oh * tg.out_w + slot[v].v * L, T::add(acc[m][v], b), lanes[v]);
  }
}

// A tile of NV vectors (NV at most 6), `nv` of them used (the last tile of a group may hold fewer).
template <class T, int NV, int MB, int CIN>
void slot_tile_n(int nv, const TileGeometry& tg, GroupRows<T>& rows, const float* w, const Slot* slot, int mvalid,
                 const float* bias, float* out) {
  switch (std::min(nv, NV)) {
    case 6: if constexpr (NV >= 6) return slot_tile<T, 6, MB, CIN>(tg, rows, w, slot, mvalid, bias, out); [[fallthrough]];
    case 5: if constexpr (NV >= 5) return slot_tile<T, 5, MB, CIN>(tg, rows, w, slot, mvalid, bias, out); [[fallthrough]];
    case 4: if constexpr (NV >= 4) return slot_tile<T, 4, MB, CIN>(tg, rows, w, slot, mvalid, bias, out); [[fallthrough]];
    case 3: if constexpr (NV >= 3) return slot_tile<T, 3, MB, CIN>(tg, rows, w, slot, mvalid, bias, out); [[fallthrough]];
    case 2: if constexpr (NV >= 2) return slot_tile<T, 2, MB, CIN>(tg, rows, w, slot, mvalid, bias, out); [[fallthrough]];
    default: return slot_tile<T, 1, MB, CIN>(tg, rows, w, slot, mvalid, bias, out);
  }
}

template <class T, int NV, int MB, int CIN = 0>
void grouped_run(const Conv2dShape& s, const float* in, const float* packed, float* out, const Epilogue& ep,
                 ThreadPool* pool) {
  constexpr int L = T::L;
  const int64_t OH = s.out_h(), OW = s.out_w(), plane = OH * OW, in_plane = s.in_h * s.in_w;
  const int64_t Cin = s.in_per_group(), Cout = s.out_per_group();
  const int64_t block_floats = taps(s) * kBlockM, vectors = (OW + L - 1) / L;
  const RowGeometry geo(s.kernel_w, s.stride_w, s.pad_left, s.in_w, OW, L);
  std::vector<Slot> slots;
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t v = 0; v < vectors; ++v) slots.push_back({oh, v});
  const int64_t nslots = static_cast<int64_t>(slots.size());
  std::vector<int64_t> tap_off(static_cast<size_t>(s.kernel_w));
  for (int64_t kw = 0; kw < s.kernel_w; ++kw) tap_off[static_cast<size_t>(kw)] = geo.tap_offset(kw);
  const TileGeometry tg{tap_off.data(), Cin, s.kernel_h, s.kernel_w, s.stride_h, OW, plane};
  const bool deferred = ep.residual != nullptr || ep.act != Activation::None;
  parallel_for(pool, s.batch * s.groups, [&](int64_t b, int64_t e) {
    static thread_local AlignedBuffer scratch;
    const size_t ring = static_cast<size_t>(geo.ring_floats());
    if (scratch.size() < ring * Cin) {
      scratch.resize(ring * Cin);
      scratch.zero();  // lanes read past a row's end (never stored) hold no stale NaN or denormal
    }
    for (int64_t ng = b; ng < e; ++ng) {
      const int64_t n = ng / s.groups, grp = ng % s.groups;
      GroupRows<T> rows{s, {}};
      for (int64_t ci = 0; ci < Cin; ++ci)
        rows.rings.push_back({geo, in + (n * s.in_channels + grp * Cin + ci) * in_plane, s.in_h, s.pad_top,
                              scratch.data() + ci * ring, 0.0f});
      const int64_t c0 = grp * Cout;
      float* out_g = out + (n * s.out_channels + c0) * plane;
      for (int64_t q = 0; q < nslots;) {
        const int nv = static_cast<int>(std::min<int64_t>(NV, nslots - q));
        rows.ensure(slots[q + nv - 1].oh);
        for (int64_t mb = 0; mb < blocks_m(s); ++mb) {
          for (int64_t m0 = mb * kBlockM; m0 < std::min<int64_t>(Cout, (mb + 1) * kBlockM); m0 += MB) {
            const float* w = packed + (grp * blocks_m(s) + mb) * block_floats + (m0 - mb * kBlockM);
            const int mvalid = static_cast<int>(std::min<int64_t>(MB, Cout - m0));
            const float* bias = ep.bias ? ep.bias + c0 + m0 : nullptr;
            float* o = out_g + m0 * plane;
            // The last tile of a group may hold fewer vectors (14 rows of one vector each: 3+3+3+3+2).
            slot_tile_n<T, NV, MB, CIN>(nv, tg, rows, w, &slots[q], mvalid, bias, o);
          }
        }
        q += nv;
      }
      // The group's planes are still in cache.
      if (deferred)
        for (int64_t m = 0; m < Cout; ++m)
          apply_residual_activation(out_g + m * plane, ep.residual ? ep.residual + (out_g - out) + m * plane : nullptr,
                                    plane, ep);
    }
  });
}

}  // namespace

bool conv2d_nchw_grouped_applicable(const Conv2dShape& s) {
  return s.groups > 1 && !s.is_depthwise() && s.in_per_group() <= kMaxInPerGroup && s.dilation_h == 1 &&
         s.dilation_w == 1 && (s.stride_w == 1 || s.stride_w == 2) && s.kernel_h <= 7 && s.kernel_w <= 7;
}

size_t conv2d_nchw_grouped_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>(s.groups * blocks_m(s) * taps(s) * kBlockM);
}

void conv2d_nchw_grouped_pack(const Conv2dShape& s, const float* weights, float* packed) {
  const int64_t Cout = s.out_per_group(), K = taps(s);
  std::fill(packed, packed + conv2d_nchw_grouped_packed_size(s), 0.0f);
  for (int64_t grp = 0; grp < s.groups; ++grp)
    for (int64_t m = 0; m < Cout; ++m)
      for (int64_t k = 0; k < K; ++k)
        packed[((grp * blocks_m(s) + m / kBlockM) * K + k) * kBlockM + m % kBlockM] =
            weights[(grp * Cout + m) * K + k];
}

void conv2d_nchw_grouped(const Conv2dShape& s, const float* in, const float* packed, float* out, const Epilogue& ep,
                         ThreadPool* pool) {
  using T = planes::VecWide;
  // Four channels per group (ResNeXt-50's layer1) fill only half of an 8-channel tile: 4 x 6 vectors instead
  // (the same 24 accumulators, 6 loads and 4 broadcasts per 24 FMAs, none of them on padding channels).
  const bool k3 = s.kernel_h == 3;
  if constexpr (T::L == 16)
    if (s.out_per_group() <= 4)
      return k3 && s.in_per_group() == 4 ? grouped_run<T, 6, 4, 4>(s, in, packed, out, ep, pool)
                                         : grouped_run<T, 6, 4>(s, in, packed, out, ep, pool);
  if (k3 && s.in_per_group() == 4) return grouped_run<T, kTileNV<T>, kTileM<T>, 4>(s, in, packed, out, ep, pool);
  if (k3 && s.in_per_group() == 8) return grouped_run<T, kTileNV<T>, kTileM<T>, 8>(s, in, packed, out, ep, pool);
  if (k3 && s.in_per_group() == 16) return grouped_run<T, kTileNV<T>, kTileM<T>, 16>(s, in, packed, out, ep, pool);
  grouped_run<T, kTileNV<T>, kTileM<T>>(s, in, packed, out, ep, pool);
}

}  // namespace tessel::rt
