// Winograd F(4x4, 3x3) convolution (NCHW, stride 1): 6x6 input tiles, 36 products over channels.
// Transforms are vectorised across tiles (lanes = tiles): the input transform 8 at a time with masked
// gathers for padding and edges, the output transform 8 or (AVX-512) 16 at a time; the weight
// transform U = G g G^T is done once at pack time into 36 packed GEMM A operands. A block of tiles is
// input-transformed into V (kept in L2); then for each register tile of (output channels x tiles) the
// 36 products are computed and inverse-transformed at once, so they never leave the cache.
#include <immintrin.h>

#include <algorithm>

#include "plane_rows.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/cpu.h"
#include "tessel/rt/epilogue_avx2.h"
#include "tessel/rt/gemm.h"

// GCC 12's own intrinsic headers trip -W(maybe-)uninitialized on the 512-bit shuffles where they are
// inlined (tiles_to_row into transform_output); nothing here is uninitialised.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tessel::rt {
namespace {

constexpr int kTile = 6, kOut = 4, kXi = 36;

// r = B^T d for one column of 6 values (strided).
inline void input_1d(const __m256* d, int stride, __m256* r, int rstride) {
  const __m256 d0 = d[0], d1 = d[stride], d2 = d[2 * stride], d3 = d[3 * stride], d4 = d[4 * stride],
               d5 = d[5 * stride];
  const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f);
  r[0] = _mm256_fnmadd_ps(five, d2, _mm256_fmadd_ps(four, d0, d4));
  const __m256 a = _mm256_fnmadd_ps(four, d2, _mm256_add_ps(d3, d4));  // -4d2 + d3 + d4 (+-4d1)
  const __m256 a2 = _mm256_fnmadd_ps(four, d2, _mm256_sub_ps(d4, d3));
  r[rstride] = _mm256_fnmadd_ps(four, d1, a);
  r[2 * rstride] = _mm256_fmadd_ps(four, d1, a2);
  const __m256 b = _mm256_sub_ps(d4, d2), c = _mm256_sub_ps(d3, d1);
  r[3 * rstride] = _mm256_fmadd_ps(two, c, b);
  r[4 * rstride] = _mm256_fnmadd_ps(two, c, b);
  r[5 * rstride] = _mm256_fnmadd_ps(five, d3, _mm256_fmadd_ps(four, d1, d5));
}

// y = A^T m for one column of 6 values (strided) -> 4 values, lanes = tiles.
template <class T>
inline void output_1d(const typename T::V* m, int stride, typename T::V* y, int ystride) {
  using V = typename T::V;
  const V m0 = m[0], m1 = m[stride], m2 = m[2 * stride], m3 = m[3 * stride], m4 = m[4 * stride], m5 = m[5 * stride];
  const V s12 = T::add(m1, m2), d12 = T::sub(m1, m2);
  const V s34 = T::add(m3, m4), d34 = T::sub(m3, m4);
  y[0] = T::add(T::add(m0, s12), s34);
  y[ystride] = T::fmadd(T::set1(2.0f), d34, d12);
  y[2 * ystride] = T::fmadd(T::set1(4.0f), s34, s12);
  y[3 * ystride] = T::add(T::fmadd(T::set1(8.0f), d34, d12), m5);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// The transformed-domain products are computed one register tile at a time (sgemm_tile: kRows output
// channels x kCols tiles, over all 36 xi), and each tile's 36 products are inverse-transformed while
// they are in cache: the 36 x Cout x tiles product matrix is never materialised.
constexpr int kRows = kGemmTileRows, kCols = kGemmTileCols;
// Output channels padded in the packed weights: the same on every ISA (see kGemmTileRowsMax).
inline int64_t padded_out(const Conv2dShape& s) { return round_up(s.out_channels, kGemmTileRowsMax); }

struct WinoPlan {
  int64_t oh, ow, tiles_w, tiles;
  int64_t groups;        // tile groups of kCols tiles (one register tile's columns)
  int64_t block_groups;  // groups whose transformed input (V) is built and consumed together
  int64_t n_blocks;
  int64_t v_cols;        // columns of V: block_groups * kCols
  int64_t co_blocks;     // groups of kRows output channels
  bool c8 = false;       // input and output in NCHWc8 (conv2d_winograd_f43_nchwc8_avx2)
};

// V of one block (36 x Cin x block columns) stays in about half of L2 while every channel block reads it.
WinoPlan make_plan(const Conv2dShape& s, int64_t max_block_groups) {
  WinoPlan p;
  p.oh = s.out_h();
  p.ow = s.out_w();
  p.tiles_w = ceil_div(p.ow, kOut);
  p.tiles = ceil_div(p.oh, kOut) * p.tiles_w;
  p.groups = ceil_div(p.tiles, kCols);
  const int64_t v_group_bytes = int64_t{kXi} * s.in_channels * kCols * 4;
  p.block_groups = std::clamp<int64_t>(cpu_l2_bytes() / 2 / v_group_bytes, 1, std::min(p.groups, max_block_groups));
  p.n_blocks = ceil_div(p.groups, p.block_groups);
  p.block_groups = ceil_div(p.groups, p.n_blocks);  // equal blocks
  p.v_cols = p.block_groups * kCols;
  p.co_blocks = ceil_div(s.out_channels, kRows);
  return p;
}

// How the few-tile case splits over the threads: by tiles (each thread all channel blocks of its tiles) or by
// output-channel blocks (each thread every tile, transformed again per thread).
struct FewTileSplit {
  bool by_tiles;
  int threads;
  std::pair<int64_t, int64_t> tile_range(const WinoPlan& p, int64_t r) const {
    if (!by_tiles) return {0, p.tiles};
    // Boundaries on the input transform's 8-tile steps (each thread's V starts at its first tile).
    const int64_t steps = ceil_div(p.tiles, 8);
    return {std::min(p.tiles, r * steps / threads * 8), std::min(p.tiles, (r + 1) * steps / threads * 8)};
  }
  std::pair<int64_t, int64_t> block_range(const WinoPlan& p, int64_t r) const {
    if (by_tiles) return {0, p.co_blocks};
    return {r * p.co_blocks / threads, (r + 1) * p.co_blocks / threads};
  }
};

// Register-tile columns the products of n tiles take (whole 16-column panels, kCols at a time).
int64_t product_columns(int64_t n) {
  const int64_t rest = n % kCols;
  return n / kCols * kCols + (rest == 0 ? 0 : rest <= kGemmNR ? kGemmNR : kCols);
}

// Prices both splits by the busiest thread: per tile and input channel the products cost about 13.5 cycles
// per channel block and column (36 x kRows FMAs over 16 lanes, two FMA pipes), the input transform about 48
// (36 gathers and the transform over 8 tiles; measured before TileRows replaced the gathers with AVX-512).
FewTileSplit few_tile_split(const WinoPlan& p, int threads) {
  constexpr double kProduct = 13.5, kTransform = 48.0;
  FewTileSplit tiles{true, threads}, blocks{false, threads};
  double by_tiles = 0.0;
  for (int r = 0; r < threads; ++r) {
    const auto [t0, t1] = tiles.tile_range(p, r);
    by_tiles = std::max(by_tiles, static_cast<double>(product_columns(t1 - t0)) * static_cast<double>(p.co_blocks) *
                                          kProduct + static_cast<double>(t1 - t0) * kTransform);
  }
  const double by_blocks = static_cast<double>(ceil_div(p.co_blocks, threads) * product_columns(p.tiles)) * kProduct +
                           static_cast<double>(p.tiles) * kTransform;
  return by_tiles <= by_blocks ? tiles : blocks;
}

// Distance between V's 36 operands: Cin x columns plus one cache line, so that the 36 stores of one
// channel's transform do not all fall into one L1 set when Cin x columns x 4 bytes is a multiple of 4 KiB
// (16 channels x 128 columns: the transform took twice as long as with 96 columns).
int64_t v_xi_stride(const Conv2dShape& s, const WinoPlan& p) { return s.in_channels * p.v_cols + 16; }

#if defined(__AVX512F__)
// The 6x6 input windows of 8 consecutive tiles (lanes), read as rows rather than gathered: the tiles form
// runs ("segments") along tile rows; per segment and window row, four masked loads cover the 34 input
// columns the run's windows span (columns outside the plane read as zero), and one two-source permute
// per window column picks lane l's value (column 4 l + c of the run). Zen 5 gathers cost about a cycle
// per element; this is 4 loads and 6 permutes (and blends) per row and segment instead of 36 gathers.
class TileRows {
 public:
  TileRows(const Conv2dShape& s, const WinoPlan& p, int64_t t, int64_t t_end) : H_(s.in_h), W_(s.in_w) {
    for (int l = 0; l < 8 && t + l < t_end;) {
      const int64_t tt = t + l, tc0 = tt % p.tiles_w;
      const int len = static_cast<int>(std::min<int64_t>({8 - l, p.tiles_w - tc0, t_end - tt}));
      Segment& g = seg_[n_++];
      g.ih0 = (tt / p.tiles_w) * kOut - s.pad_top;
      g.base = tc0 * kOut - s.pad_left;
      g.lanes = static_cast<__mmask8>(((1u << len) - 1) << l);
      alignas(64) int index[kTile][16] = {};
      for (int c = 0; c < kTile; ++c)
        for (int i = l; i < l + len; ++i) index[c][i] = 4 * (i - l) + c - (c >= 4 ? 2 : 0);
      for (int c = 0; c < kTile; ++c) g.idx[c] = _mm512_load_si512(index[c]);
      // Loads 0/1: columns base + [0, 32); loads 2/3: base + 2 + [0, 32) (for window columns 4 and 5).
      for (int j = 0; j < 4; ++j) {
        const int64_t first = g.base + (j >= 2 ? 2 : 0) + (j % 2) * 16;
        uint32_t m = 0;
        for (int i = 0; i < 16; ++i)
          if (first + i >= 0 && first + i < W_) m |= 1u << i;
        g.mask[j] = static_cast<__mmask16>(m);
      }
      l += len;
    }
  }
  void load(const float* plane, __m256 (&d)[kTile][kTile]) const {
    for (int r = 0; r < kTile; ++r)
      for (int c = 0; c < kTile; ++c) d[r][c] = _mm256_setzero_ps();
    for (int k = 0; k < n_; ++k) {
      const Segment& g = seg_[k];
      for (int r = 0; r < kTile; ++r) {
        const int64_t ih = g.ih0 + r;
        if (ih < 0 || ih >= H_) continue;
        // Masked-off lanes are not read, so the addresses left of the row or past it are never touched.
        const float* row = plane + ih * W_ + g.base;
        const __m512 z0 = _mm512_maskz_loadu_ps(g.mask[0], row), z1 = _mm512_maskz_loadu_ps(g.mask[1], row + 16);
        const __m512 z2 = _mm512_maskz_loadu_ps(g.mask[2], row + 2), z3 = _mm512_maskz_loadu_ps(g.mask[3], row + 18);
        for (int c = 0; c < kTile; ++c) {
          const __m512 v = c < 4 ? _mm512_permutex2var_ps(z0, g.idx[c], z1) : _mm512_permutex2var_ps(z2, g.idx[c], z3);
          d[r][c] = _mm256_mask_blend_ps(g.lanes, d[r][c], _mm512_castps512_ps256(v));
        }
      }
    }
  }

 private:
  struct Segment {
    int64_t ih0, base;
    __mmask8 lanes;
    __mmask16 mask[4];
    __m512i idx[kTile];
  };
  int64_t H_, W_;
  Segment seg_[8];
  int n_ = 0;
};
#else
// The 6x6 input windows of 8 consecutive tiles (lanes) by masked gathers (AVX2): one gather per window
// element, lanes outside the plane or past t_end read as zero.
class TileGathers {
 public:
  TileGathers(const Conv2dShape& s, const WinoPlan& p, int64_t t, int64_t t_end) {
    alignas(32) int ih0[8], iw0[8];
    for (int l = 0; l < 8; ++l) {
      const int64_t tt = std::min(t + l, t_end - 1);
      ih0[l] = static_cast<int>((tt / p.tiles_w) * kOut - s.pad_top);
      iw0[l] = static_cast<int>((tt % p.tiles_w) * kOut - s.pad_left);
    }
    const __m256i lane_ok = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(t_end - t)),
                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i vih0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(ih0));
    const __m256i viw0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(iw0));
    const __m256i H = _mm256_set1_epi32(static_cast<int>(s.in_h)), W = _mm256_set1_epi32(static_cast<int>(s.in_w));
    const __m256i minus1 = _mm256_set1_epi32(-1);
    for (int r = 0; r < kTile; ++r) {
      const __m256i ih = _mm256_add_epi32(vih0, _mm256_set1_epi32(r));
      const __m256i row_ok = _mm256_and_si256(
          lane_ok, _mm256_and_si256(_mm256_cmpgt_epi32(ih, minus1), _mm256_cmpgt_epi32(H, ih)));
      for (int c = 0; c < kTile; ++c) {
        const __m256i iw = _mm256_add_epi32(viw0, _mm256_set1_epi32(c));
        const __m256i ok = _mm256_and_si256(row_ok, _mm256_and_si256(_mm256_cmpgt_epi32(iw, minus1), _mm256_cmpgt_epi32(W, iw)));
        mask[r][c] = _mm256_castsi256_ps(ok);
        idx[r][c] = _mm256_and_si256(ok, _mm256_add_epi32(_mm256_mullo_epi32(ih, W), iw));
      }
    }
  }
  void load(const float* plane, __m256 (&d)[kTile][kTile]) const {
    for (int r = 0; r < kTile; ++r)
      for (int c = 0; c < kTile; ++c)
        d[r][c] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), plane, idx[r][c], mask[r][c], 4);
  }

 private:
  __m256i idx[kTile][kTile];
  __m256 mask[kTile][kTile];
};
#endif

// The 8 padding columns from `local` of V (up to the register tile's width) as zeros. Not through the
// transforms' gathers: with every lane masked off they cost Zen 5 twice a real step (ResNet's 196 tiles padded
// to 224: 15 % of a 16->64 conv's time).
void zero_columns(const Conv2dShape& s, const WinoPlan& p, int64_t local, float* V) {
  const int64_t xi_stride = v_xi_stride(s, p);
  const int64_t panel_off = (local / 16) * s.in_channels * 16 + local % 16;
  for (int64_t ci = 0; ci < s.in_channels; ++ci)
    for (int x = 0; x < kXi; ++x) _mm256_storeu_ps(V + ci * 16 + panel_off + x * xi_stride, _mm256_setzero_ps());
}

// Transforms 8 tiles [t, t+8) (t < t_end) of every input channel into V (36 packed-B operands, Cin x block).
void transform_input(const Conv2dShape& s, const WinoPlan& p, const float* in, int64_t t, int64_t t_end,
                     int64_t local, float* V, bool prefetch) {
  const int64_t xi_stride = v_xi_stride(s, p);
  const int64_t panel_off = (local / 16) * s.in_channels * 16 + local % 16;
  // With several threads, the rows and columns these tiles read are prefetched kAhead channels ahead:
  // part of the input was written by another core, and the gathers alone wait on each missing line in
  // turn (ResNet-50's 28x28 3x3 convs at 2 threads: 0.55 -> 0.43 ms). One thread finds its input in its
  // own cache, and the prefetches only cost (3-4 %).
  constexpr int64_t kAhead = 4;
  const int64_t last = std::min(t + 7, t_end - 1);
  const int64_t r0 = std::max<int64_t>(0, (t / p.tiles_w) * kOut - s.pad_top);
  const int64_t r1 = std::min<int64_t>(s.in_h, (last / p.tiles_w) * kOut - s.pad_top + kTile);
  const bool wraps = last / p.tiles_w != t / p.tiles_w;
  const int64_t c0 = wraps ? 0 : std::max<int64_t>(0, (t % p.tiles_w) * kOut - s.pad_left);
  const int64_t c1 = wraps ? s.in_w : std::min<int64_t>(s.in_w, (last % p.tiles_w) * kOut - s.pad_left + kTile);
  auto prefetch_channel = [&](int64_t ci) {
    planes::prefetch_rows(in + ci * s.in_h * s.in_w, s.in_w, r0, r1, c0, c1);
  };
  for (int64_t ci = 0; prefetch && ci < std::min(kAhead, s.in_channels); ++ci) prefetch_channel(ci);
#if defined(__AVX512F__)
  const TileRows windows(s, p, t, t_end);
#else
  const TileGathers windows(s, p, t, t_end);
#endif
  for (int64_t ci = 0; ci < s.in_channels; ++ci) {
    if (prefetch && ci + kAhead < s.in_channels) prefetch_channel(ci + kAhead);
    const float* plane = in + ci * s.in_h * s.in_w;
    __m256 d[kTile][kTile], tmp[kTile][kTile], v[kTile][kTile];
    windows.load(plane, d);
    for (int c = 0; c < kTile; ++c) input_1d(&d[0][c], kTile, &tmp[0][c], kTile);  // B^T d
    for (int i = 0; i < kTile; ++i) input_1d(&tmp[i][0], 1, &v[i][0], 1);           // (B^T d) B
    float* dst = V + ci * 16 + panel_off;
    for (int i = 0; i < kTile; ++i)
      for (int j = 0; j < kTile; ++j) _mm256_storeu_ps(dst + (i * kTile + j) * xi_stride, v[i][j]);
  }
}

// The NCHWc8 input transform of 8 tiles [t, t+8) of every input channel into V, the same V as
// transform_input: here the 6x6 windows are plain 8-channel vector loads (no gathers), transformed with the
// channels in the lanes, one tile at a time; an 8x8 transpose per xi then turns 8 tiles x 8 channels into the
// tiles-in-lanes rows of V.
void transform_input_c8(const Conv2dShape& s, const WinoPlan& p, const float* in, int64_t t, int64_t t_end,
                        int64_t local, float* V, bool prefetch) {
  const int64_t xi_stride = v_xi_stride(s, p);
  const int64_t panel_off = (local / 16) * s.in_channels * 16 + local % 16;
  const int64_t H = s.in_h, W = s.in_w, block = H * W * 8;
  const int n = static_cast<int>(std::min<int64_t>(8, t_end - t));
  // Per tile: its window's top-left input pixel and which of its rows / columns lie inside the plane.
  int64_t ih0[8], iw0[8];
  unsigned rows_in[8], cols_in[8];
  for (int l = 0; l < n; ++l) {
    ih0[l] = ((t + l) / p.tiles_w) * kOut - s.pad_top;
    iw0[l] = ((t + l) % p.tiles_w) * kOut - s.pad_left;
    rows_in[l] = cols_in[l] = 0;
    for (int r = 0; r < kTile; ++r) {
      if (ih0[l] + r >= 0 && ih0[l] + r < H) rows_in[l] |= 1u << r;
      if (iw0[l] + r >= 0 && iw0[l] + r < W) cols_in[l] |= 1u << r;
    }
  }
  const int64_t last = t + n - 1;
  const int64_t r0 = std::max<int64_t>(0, (t / p.tiles_w) * kOut - s.pad_top);
  const int64_t r1 = std::min<int64_t>(H, (last / p.tiles_w) * kOut - s.pad_top + kTile);
  alignas(32) float buf[kXi][8][8];  // [xi][tile][channel]
  if (n < 8) std::fill(&buf[0][0][0], &buf[0][0][0] + kXi * 64, 0.0f);
  for (int64_t cb = 0; cb < s.in_channels / 8; ++cb) {
    const float* blk = in + cb * block;
    if (prefetch && cb + 1 < s.in_channels / 8) planes::prefetch_rows(blk + block, W * 8, r0, r1, 0, W * 8);
    for (int l = 0; l < n; ++l) {
      __m256 d[kTile][kTile], tmp[kTile][kTile], v[kTile][kTile];
      const float* win = blk + (ih0[l] * W + iw0[l]) * 8;
      if (rows_in[l] == 0x3F && cols_in[l] == 0x3F) {
        for (int r = 0; r < kTile; ++r)
          for (int c = 0; c < kTile; ++c) d[r][c] = _mm256_loadu_ps(win + (r * W + c) * 8);
      } else {
        for (int r = 0; r < kTile; ++r)
          for (int c = 0; c < kTile; ++c)
            d[r][c] = (rows_in[l] >> r & cols_in[l] >> c & 1u) ? _mm256_loadu_ps(win + (r * W + c) * 8)
                                                               : _mm256_setzero_ps();
      }
      for (int c = 0; c < kTile; ++c) input_1d(&d[0][c], kTile, &tmp[0][c], kTile);  // B^T d
      for (int i = 0; i < kTile; ++i) input_1d(&tmp[i][0], 1, &v[i][0], 1);           // (B^T d) B
      for (int i = 0; i < kTile; ++i)
        for (int j = 0; j < kTile; ++j) _mm256_store_ps(buf[i * kTile + j][l], v[i][j]);
    }
    float* dst = V + cb * 8 * 16 + panel_off;
    for (int x = 0; x < kXi; ++x) {
      __m256 r[8];
      for (int l = 0; l < 8; ++l) r[l] = _mm256_load_ps(buf[x][l]);
      planes::Vec8::transpose(r);  // r[c]: channel c of the 8 tiles
      for (int c = 0; c < 8; ++c) _mm256_storeu_ps(dst + c * 16 + x * xi_stride, r[c]);
    }
  }
}

// Stores the output rows of `lanes` consecutive tiles from t (buf row i: output row i of the tiles as
// consecutive pixels, row stride ld) into channel co, with residual and activation: the lanes of one
// tile row are consecutive pixels, stored as runs of 8-wide vectors.
void store_tile_rows(const WinoPlan& p, int64_t t, int lanes, const float* buf, int ld, int64_t co, float* out,
                     const float* res, const Epilogue& ep) {
  float* plane = out + co * p.oh * p.ow;
  const float* rplane = res ? res + co * p.oh * p.ow : nullptr;
  // Lanes of one tile row are consecutive pixels: store each run of them with 8-wide vectors.
  for (int la = 0; la < lanes;) {
    const int64_t ty = (t + la) / p.tiles_w, tx = (t + la) % p.tiles_w;
    const int lb = static_cast<int>(std::min<int64_t>(lanes, la + (p.tiles_w - tx)));
    const int64_t oy = ty * kOut, ox = tx * kOut;
    const int ny = static_cast<int>(std::min<int64_t>(kOut, p.oh - oy));
    const int width = static_cast<int>(std::min<int64_t>(kOut * (lb - la), p.ow - ox));
    for (int i = 0; i < ny; ++i) {
      const float* src = buf + i * ld + kOut * la;
      float* o = plane + (oy + i) * p.ow + ox;
      const float* r = rplane ? rplane + (oy + i) * p.ow + ox : nullptr;
      for (int x = 0; x < width; x += 8) {
        const int n = std::min(8, width - x);
        __m256 v = _mm256_loadu_ps(src + x);
        if (n == 8) {
          if (r) v = _mm256_add_ps(v, _mm256_loadu_ps(r + x));
          _mm256_storeu_ps(o + x, activate(v, ep));
        } else {
          const __m256i mk = vtail_mask(n);
          if (r) v = _mm256_add_ps(v, _mm256_maskload_ps(r + x, mk));
          _mm256_maskstore_ps(o + x, mk, activate(v, ep));
        }
      }
    }
    la = lb;
  }
}

// Output row i of 4 consecutive-tile vectors y0..y3 (lane l = tile l; y_j holds column j) as 4 L
// consecutive pixels: row[4 l + j] = y_j[l].
inline void tiles_to_row(__m256 y0, __m256 y1, __m256 y2, __m256 y3, float* row) {
  const __m256 a = _mm256_unpacklo_ps(y0, y1), b = _mm256_unpacklo_ps(y2, y3);
  const __m256 c = _mm256_unpackhi_ps(y0, y1), d = _mm256_unpackhi_ps(y2, y3);
  const __m256 e = _mm256_shuffle_ps(a, b, 0x44), f = _mm256_shuffle_ps(a, b, 0xEE);  // lanes 0,4 / 1,5
  const __m256 g = _mm256_shuffle_ps(c, d, 0x44), h = _mm256_shuffle_ps(c, d, 0xEE);  // lanes 2,6 / 3,7
  _mm256_store_ps(row + 0, _mm256_permute2f128_ps(e, f, 0x20));
  _mm256_store_ps(row + 8, _mm256_permute2f128_ps(g, h, 0x20));
  _mm256_store_ps(row + 16, _mm256_permute2f128_ps(e, f, 0x31));
  _mm256_store_ps(row + 24, _mm256_permute2f128_ps(g, h, 0x31));
}
#if defined(__AVX512F__)
inline void tiles_to_row(__m512 y0, __m512 y1, __m512 y2, __m512 y3, float* row) {
  const __m512 a = _mm512_unpacklo_ps(y0, y1), b = _mm512_unpacklo_ps(y2, y3);
  const __m512 c = _mm512_unpackhi_ps(y0, y1), d = _mm512_unpackhi_ps(y2, y3);
  // One tile per 128-bit lane: e tiles 0,4,8,12; f 1,5,9,13; g 2,6,10,14; h 3,7,11,15.
  const __m512 e = _mm512_shuffle_ps(a, b, 0x44), f = _mm512_shuffle_ps(a, b, 0xEE);
  const __m512 g = _mm512_shuffle_ps(c, d, 0x44), h = _mm512_shuffle_ps(c, d, 0xEE);
  const __m512 t0 = _mm512_shuffle_f32x4(e, f, 0x44), t1 = _mm512_shuffle_f32x4(g, h, 0x44);
  const __m512 t2 = _mm512_shuffle_f32x4(e, f, 0xEE), t3 = _mm512_shuffle_f32x4(g, h, 0xEE);
  _mm512_store_ps(row + 0, _mm512_shuffle_f32x4(t0, t1, 0x88));   // tiles 0-3
  _mm512_store_ps(row + 16, _mm512_shuffle_f32x4(t0, t1, 0xDD));  // tiles 4-7
  _mm512_store_ps(row + 32, _mm512_shuffle_f32x4(t2, t3, 0x88));  // tiles 8-11
  _mm512_store_ps(row + 48, _mm512_shuffle_f32x4(t2, t3, 0xDD));  // tiles 12-15
}
#endif

// Inverse-transforms tiles [t, t_end) (at most T::L) of output channel co from m (the 36 products of
// that channel's row: product xi at m + xi * xi_stride, tile t at lane 0) into the output. Reads T::L
// floats from each product row whatever t_end - t is (the buffer has the slack).
template <class T>
void transform_output(const WinoPlan& p, const float* m_row, int64_t xi_stride, int64_t t,
                      int64_t t_end, int64_t co, float* out, const float* res, const Epilogue& ep) {
  using V = typename T::V;
  constexpr int ld = 4 * T::L + 8;  // a row of 4 L pixels + slack for store_tile_rows' last 8-wide load
  V m[kTile][kTile], tmp[kOut][kTile], y[kOut][kOut];
  for (int i = 0; i < kTile; ++i)
    for (int j = 0; j < kTile; ++j) m[i][j] = T::loadu(m_row + (i * kTile + j) * xi_stride);
  for (int j = 0; j < kTile; ++j) output_1d<T>(&m[0][j], kTile, &tmp[0][j], kTile);
  for (int i = 0; i < kOut; ++i) output_1d<T>(&tmp[i][0], 1, &y[i][0], 1);
  const V bias = T::set1(ep.bias ? ep.bias[co] : 0.0f);
  // Lanes past t_end and the slack are never stored (store_tile_rows masks them).
  alignas(64) float buf[kOut][ld];
  for (int i = 0; i < kOut; ++i)
    tiles_to_row(T::add(y[i][0], bias), T::add(y[i][1], bias), T::add(y[i][2], bias), T::add(y[i][3], bias),
                 buf[i]);
  store_tile_rows(p, t, static_cast<int>(t_end - t), &buf[0][0], ld, co, out, res, ep);
}

// The NCHWc8 output of channel block cb x tiles [t, t_end) from its products m (as transform_output reads
// them): per 8 tiles, each channel's inverse transform (tiles in lanes) into y, then per 8-channel block (or
// the 4-channel half of one that this 12-channel block shares with its neighbour) and output position an 8x8
// transpose gives each tile's pixel as one vector of channels, stored with bias, residual and activation.
void transform_output_c8(const Conv2dShape& s, const WinoPlan& p, const float* m, int64_t cb, int64_t t,
                         int64_t t_end, float* out, const float* res, const Epilogue& ep) {
  using T = planes::Vec8;
  const int64_t co0 = cb * kRows, co1 = std::min(s.out_channels, co0 + kRows);
  alignas(32) float y[kRows][kOut * kOut][8];  // [channel][output position][tile]
  for (int64_t u = t; u < t_end; u += 8) {
    const int lanes = static_cast<int>(std::min<int64_t>(8, t_end - u));
    for (int64_t co = co0; co < co1; ++co) {
      const float* m_row = m + (co - co0) * kCols + (u - t);
      __m256 mv[kTile][kTile], tmp[kOut][kTile], yy[kOut][kOut];
      for (int i = 0; i < kTile; ++i)
        for (int j = 0; j < kTile; ++j) mv[i][j] = _mm256_loadu_ps(m_row + (i * kTile + j) * kRows * kCols);
      for (int j = 0; j < kTile; ++j) output_1d<T>(&mv[0][j], kTile, &tmp[0][j], kTile);
      for (int i = 0; i < kOut; ++i) output_1d<T>(&tmp[i][0], 1, &yy[i][0], 1);
      for (int i = 0; i < kOut; ++i)
        for (int j = 0; j < kOut; ++j) _mm256_store_ps(y[co - co0][i * kOut + j], yy[i][j]);
    }
    int64_t oy[8], ox[8];
    for (int l = 0; l < lanes; ++l) {
      oy[l] = ((u + l) / p.tiles_w) * kOut;
      ox[l] = ((u + l) % p.tiles_w) * kOut;
    }
    for (int64_t c = co0; c < co1;) {
      const int64_t blk = c / 8, lo = c % 8, width = std::min<int64_t>(8 - lo, co1 - c);  // 8, or 4 (half)
      const __m256 bias = !ep.bias ? _mm256_setzero_ps()
                          : width == 8 ? _mm256_loadu_ps(ep.bias + c)
                                       : _mm256_castps128_ps256(_mm_loadu_ps(ep.bias + c));
      float* out_blk = out + blk * p.oh * p.ow * 8 + lo;
      const float* res_blk = res ? res + blk * p.oh * p.ow * 8 + lo : nullptr;
      for (int q = 0; q < kOut * kOut; ++q) {
        __m256 r[8];
        for (int k = 0; k < 8; ++k) r[k] = k < width ? _mm256_load_ps(y[c - co0 + k][q]) : _mm256_setzero_ps();
        T::transpose(r);  // r[l]: the channels of tile l at output position q
        const int64_t dy = q / kOut, dx = q % kOut;
        for (int l = 0; l < lanes; ++l) {
          if (oy[l] + dy >= p.oh || ox[l] + dx >= p.ow) continue;
          const int64_t at = ((oy[l] + dy) * p.ow + ox[l] + dx) * 8;
          __m256 v = _mm256_add_ps(r[l], bias);
          if (width == 8) {
            if (res_blk) v = _mm256_add_ps(v, _mm256_loadu_ps(res_blk + at));
            _mm256_storeu_ps(out_blk + at, activate(v, ep));
          } else {
            if (res_blk) v = _mm256_add_ps(v, _mm256_castps128_ps256(_mm_loadu_ps(res_blk + at)));
            _mm_storeu_ps(out_blk + at, _mm256_castps256_ps128(activate(v, ep)));
          }
        }
      }
      c += width;
    }
  }
}

// The output transform's tiles per call: 16 per zmm with AVX-512, else 8 per ymm.
using OutVec = planes::VecWide;

// Products of one register tile: kXi x kRows x kCols floats (+ slack for the output transform's reads).
float* product_tile_buffer() {
  static thread_local AlignedBuffer buf;
  return buf.ensure(static_cast<size_t>(kXi * kRows * kCols + OutVec::L));
}

// Channel block cb x tiles [t, t_end) (at most kCols, starting at column `col` of V): the 36 products
// as one register tile each, then their inverse transform into the output.
void tile_products_and_output(const Conv2dShape& s, const WinoPlan& p, const float* packed, const float* V,
                              int64_t cb, int64_t t, int64_t t_end, int64_t col, float* out, const float* res,
                              const Epilogue& ep) {
  const int64_t K = s.in_channels;
  const int64_t panel = K * kGemmMR, panel_stride = kXi * panel;  // packed weights: [6-row panel][xi][K][6]
  const float* a = packed + cb * (kRows / kGemmMR) * panel_stride;  // the block's first panel at xi = 0
  const float* b = V + (col / kGemmNR) * K * kGemmNR;     // first 16-column panel (panels K*16 apart)
  const int ncols = t_end - t > kGemmNR ? 2 * kGemmNR : kGemmNR;
  float* m = product_tile_buffer();
  for (int xi = 0; xi < kXi; ++xi)
    sgemm_tile(K, a + xi * panel, panel_stride, b + xi * v_xi_stride(s, p), K * kGemmNR, m + xi * kRows * kCols, kCols,
               ncols, xi + 1 < kXi ? a + (xi + 1) * panel : nullptr);
  if (p.c8) {
    transform_output_c8(s, p, m, cb, t, t_end, out, res, ep);
    return;
  }
  const int64_t co1 = std::min(s.out_channels, (cb + 1) * kRows);
  for (int64_t co = cb * kRows; co < co1; ++co)
    for (int64_t u = t; u < t_end; u += OutVec::L)
      transform_output<OutVec>(p, m + (co - cb * kRows) * kCols + (u - t), kRows * kCols, u,
                               std::min(u + OutVec::L, t_end), co, out, res, ep);
}

// Input transform of the tiles [t0, t1) into V (zeros up to the next multiple of kCols).
void transform_block(const Conv2dShape& s, const WinoPlan& p, const float* in, int64_t t0, int64_t t1, float* V,
                     bool prefetch) {
  const int64_t end = t0 + round_up(t1 - t0, kCols);
  for (int64_t t = t0; t < end; t += 8) {
    if (t >= t1)
      zero_columns(s, p, t - t0, V);
    else if (p.c8)
      transform_input_c8(s, p, in, t, std::min(t + 8, t1), t - t0, V, prefetch);
    else
      transform_input(s, p, in, t, std::min(t + 8, t1), t - t0, V, prefetch);
  }
}

// Tiles [t0, t1) (one block: V holds them from column 0) for output-channel blocks [cb0, cb1): the input
// transform, then per channel block and register tile the products and the output transform.
void transform_and_multiply(const Conv2dShape& s, const WinoPlan& p, const float* packed, const float* in, int64_t t0,
                            int64_t t1, int64_t cb0, int64_t cb1, float* V, bool prefetch, float* out, const float* res,
                            const Epilogue& ep) {
  transform_block(s, p, in, t0, t1, V, prefetch);
  for (int64_t cb = cb0; cb < cb1; ++cb)
    for (int64_t t = t0; t < t1; t += kCols)
      tile_products_and_output(s, p, packed, V, cb, t, std::min(t + kCols, t1), t - t0, out, res, ep);
}

float* v_buffer(const Conv2dShape& s, const WinoPlan& p) {
  static thread_local AlignedBuffer buf;
  return buf.ensure(static_cast<size_t>(kXi * v_xi_stride(s, p)));
}

}  // namespace

size_t conv2d_winograd_f43_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>(kXi * padded_out(s) * s.in_channels);
}

void conv2d_winograd_f43_pack(const Conv2dShape& s, const float* weights, float* packed) {
  static const double G[kTile][3] = {{1.0 / 4, 0, 0},          {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                     {-1.0 / 6, 1.0 / 6, -1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                     {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  const int64_t Co = s.out_channels, Ci = s.in_channels;
  AlignedBuffer u(static_cast<size_t>(kXi * Co * Ci));
  for (int64_t o = 0; o < Co; ++o)
    for (int64_t i = 0; i < Ci; ++i) {
      const float* g = weights + (o * Ci + i) * 9;
      double gg[kTile][3];  // G g
      for (int r = 0; r < kTile; ++r)
        for (int c = 0; c < 3; ++c) gg[r][c] = G[r][0] * g[c] + G[r][1] * g[3 + c] + G[r][2] * g[6 + c];
      for (int r = 0; r < kTile; ++r)
        for (int c = 0; c < kTile; ++c)
          u.data()[((r * kTile + c) * Co + o) * Ci + i] =
              static_cast<float>(gg[r][0] * G[c][0] + gg[r][1] * G[c][1] + gg[r][2] * G[c][2]);
    }
  // Packed A panels of 6 output channels, the 36 xi of a panel one after the other ([panel][xi][Ci][6]): the
  // products of a channel block read its weights as one sequential stream (one per 6-row panel). With the
  // xi as the outer dimension (a panel every Co x Ci floats) the AVX2 products of ResNet-50's layer3
  // (256 -> 256 on 14x14, 9.4 MB of weights from memory per call) waited on every line: 1.45 ms in the model
  // against 0.85 in the kernel benchmark, whose weights stay in L3. The padding rows are zero.
  std::fill(packed, packed + conv2d_winograd_f43_packed_size(s), 0.0f);
  const int64_t panel = Ci * kGemmMR;
  for (int64_t q = 0; q * kGemmMR < Co; ++q)
    for (int xi = 0; xi < kXi; ++xi)
      pack_a(false, std::min<int64_t>(kGemmMR, Co - q * kGemmMR), Ci, u.data() + (xi * Co + q * kGemmMR) * Ci, Ci,
             packed + (q * kXi + xi) * panel);
}

namespace {

void winograd_f43(const Conv2dShape& s, const float* in, const float* packed, float* out, const Epilogue& ep,
                  ThreadPool* pool, bool c8) {
  const int threads = thread_count(pool);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* in_n = in + n * s.in_channels * s.in_h * s.in_w;
    float* out_n = out + n * s.out_channels * s.out_h() * s.out_w();
    const float* res_n = ep.residual ? ep.residual + n * s.out_channels * s.out_h() * s.out_w() : nullptr;
    WinoPlan whole = make_plan(s, INT64_MAX);
    whole.c8 = c8;
    if (threads > 1 && whole.groups < 4 * threads) {
      // Few tiles: no thread reads what another wrote (a line another core just wrote costs 50-900 ns on
      // a VM whose vCPUs do not share a cache). Either each thread takes a range of tiles (on 8-tile
      // boundaries) and all output channels, or each thread transforms every tile into its own V
      // and takes a range of output-channel blocks; whichever FewTileSplit prices lower.
      const FewTileSplit split = few_tile_split(whole, threads);
      parallel_per_thread(pool, threads, [&](int r) {
        const auto [t0, t1] = split.tile_range(whole, r);
        const auto [cb0, cb1] = split.block_range(whole, r);
        if (t0 >= t1 || cb0 >= cb1) return;
        WinoPlan p = whole;
        p.groups = ceil_div(t1 - t0, kCols);
        p.n_blocks = 1;
        p.block_groups = p.groups;
        p.v_cols = p.groups * kCols;
        transform_and_multiply(s, p, packed, in_n, t0, t1, cb0, cb1, v_buffer(s, p), true, out_n, res_n, ep);
      });
      continue;
    }
    // Enough tiles: each thread takes whole blocks (input transform, products, output) on its own.
    WinoPlan p = make_plan(s, threads > 1 ? ceil_div(whole.groups, 2 * threads) : INT64_MAX);
    p.c8 = c8;
    parallel_for(pool, p.n_blocks, [&](int64_t b0, int64_t b1) {
      float* V = v_buffer(s, p);
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t t0 = blk * p.v_cols, t1 = std::min(p.tiles, t0 + p.v_cols);
        transform_and_multiply(s, p, packed, in_n, t0, t1, 0, p.co_blocks, V, threads > 1, out_n, res_n, ep);
      }
    });
  }
}

}  // namespace

void conv2d_winograd_f43_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                              const Epilogue& ep, ThreadPool* pool) {
  winograd_f43(s, in, packed, out, ep, pool, false);
}

bool conv2d_winograd_f43_nchwc8_applicable(const Conv2dShape& s) {
  return s.kernel_h == 3 && s.kernel_w == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dilation_h == 1 &&
         s.dilation_w == 1 && s.groups == 1 && s.in_channels % 8 == 0 && s.out_channels % 8 == 0;
}

void conv2d_winograd_f43_nchwc8_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                                     const Epilogue& ep, ThreadPool* pool) {
  winograd_f43(s, in, packed, out, ep, pool, true);
}

}  // namespace tessel::rt
