// SGEMM driver: packing, MC/KC/NC blocking, thread partitioning and the 6x16 AVX2 micro-kernel.
#include "tessel/rt/gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/epilogue_avx2.h"
#include "tessel/rt/vmath512.h"

namespace tessel::rt {
namespace {

constexpr int MR = kGemmMR, NR = kGemmNR;
// B micro-panels (KC x 16 or 32 floats) and the current A panel stay in L1/L2; an MC x KC A block and the K x NC B block in L2.
// Upper bound of a K block; K is split into equal blocks (balanced_kc). With AVX-512 the 12x32 tiles' B micro-panel
// (kc x 32 floats) is read from L2 at either size, and one block up to K = 768 keeps the whole reduction in the
// registers with the epilogue inline, instead of storing the tiles and adding a second pass (Zen 5, 1 thread, minima
// of alternating runs: ViT-B/16's 197 x 2304 x 768 3.75 -> 3.40 ms, 197 x 768 x 768 1.22 -> 1.15, ResNet-style
// 2048 x 49 x 512 0.597 -> 0.579, 128 x 784 x 512 0.540 -> 0.507). With AVX2 the 6x16 tiles' micro-panel (kc x 16) fits
// a 32 KiB L1 at 384 only, and 1024 was 2-10 % slower there; 768 gained 1-5 % on Zen 5 (48 KiB L1) but is not taken.
#if defined(__AVX512F__)
constexpr int64_t KC = 768;
#else
constexpr int64_t KC = 384;
#endif
constexpr int64_t MC = 120;
// Rows of the register tiles of gemm_task (12 x 32 with AVX-512, 6 x 16 with AVX2).
#if defined(__AVX512F__)
constexpr int64_t kRowTile = 2 * MR;
#else
constexpr int64_t kRowTile = MR;
#endif
// AVX-512: the height of the register tile gemm_task runs for the last mr (1-12) rows of a block: 12, 8, 6 or 4,
// the fewest that cover them.
constexpr int edge_tile_rows(int64_t mr) { return mr > 8 ? 12 : mr > MR ? 8 : mr > 4 ? 6 : 4; }
// Rows gemm_task's register tiles compute for `rows` rows of C: whole tiles of kRowTile, and at the bottom edge
// (AVX-512) edge_tile_rows; AVX2's edge tiles have every height.
// M = 40 computes 40 rows; split 24 + 16 over two threads, the busier one computes 24.
constexpr int64_t tile_rows(int64_t rows) {
#if defined(__AVX512F__)
  const int64_t rest = rows % kRowTile;
  return rows - rest + (rest == 0 ? 0 : edge_tile_rows(rest));
#else
  return rows;
#endif
}
static_assert(tile_rows(40) == 40 && tile_rows(24) == 24);
constexpr int64_t kBBlockBytes = 1 << 20;
// Up to this K, tiles are visited row block by row block (gemm_task). In ResNet-50 (1 thread, AVX-512)
// this took layer1's K=64 1x1 convs from 12.9 to 4.9 ms and the whole model from 92 to 81 ms; visiting
// row-block-first for every K measured no better than up to 160.
constexpr int64_t kRowsOuterMaxK = 160;
// B read in place (few rows of C) is visited row block by row block too up to this K, in chunks of this many
// columns (a multiple of the 32-column tiles; their K rows stay in L1/L2 while every row block passes). Column-tile
// first, a tile's 12 rows of C were 24 scattered lines per 16 x 24 FMAs: MobileNetV3-large's 16->64 1x1 on 112x112
// took 0.58-0.74 ms in the model against ONNX Runtime's 0.26, and 0.35-0.37 ms this way. Zen 4 (AMD EPYC family 25
// model 17), bench/ab.py against column-tile first, 1 / 2 threads: MobileNetV3-large 0.934 / 0.909, MobileNetV2
// 0.957 / 1.001, MnasNet 0.984 / 0.985; up to K = 160 or in chunks of 2048 measured no better (0.94-1.03), chunks
// of 512 about the same.
constexpr int64_t kRawRowsOuterMaxK = 32, kRawRowsOuterCols = 1024;
// Up to this many rows of C (per task), B is read unpacked (AVX-512 path of gemm_task). On Sapphire
// Rapids 32 rather than 24: M = 32 products took 7-13% less time unpacked (K = 96-256, N = 729-3136;
// same-process alternating minima), while M = 64 with K = 256 on 56x56 took 20-30% more. On Zen 4 (AMD)
// M = 64 gains too: 256->64 on 56x56 1070 -> 980 us, 64->64 265 -> 246 (minima of 3, 1 thread).
// On Zen 4 (AMD EPYC family 25 model 17, 1 thread) also up to M = 256 once K >= 256: ResNeXt-50's 256->128 1x1
// on 56x56 in the model 2.06 -> 1.92 ms; with K = 64-128 reading B in place was slower (128->256: 2.07 -> 2.17).
[[maybe_unused]] bool amd_cpu() {
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
}
[[maybe_unused]] int64_t raw_b_max_m(int64_t K) {
  if (!amd_cpu()) return 32;
  return K >= 256 ? 256 : 64;
}
// The AVX2 path's raw_b_max_m. Zen 5, AVX2 runtime, 1 thread, alternating runs: ResNet-50's 256->64 1x1 on
// 56x56 88 -> 99 GFLOP/s read in place, 512->64 on 28x28 87 -> 98; for M = 128-256 the two ways were within
// the noise (82-102 GFLOP/s either way).
[[maybe_unused]] constexpr int64_t kRawBMaxMAvx2 = 64;
// The AVX-512 single-pass tiles prefetch their C lines (for writing) and residual lines before their K loop when
// C is larger than L2 and each tile's reduction long enough to hide the misses: in a model C is a recycled arena
// buffer and the residual was written layers ago, both in L3 or beyond, and a tile's 12 rows are 24 lines the
// hardware prefetchers do not follow. ResNeXt-50 (Zen 4, AMD EPYC family 25 model 17, bench/ab.py, 1 thread, 8
// rounds): 0.989x the time; its 56x56 1x1 convs with a residual 2.36 -> 2.05 ms in one profile. For all C and
// K >= 64 MnasNet took 1.008x (its C is mostly in L2 already), hence the size bound.
constexpr int64_t kPrefetchCMinK = 64, kPrefetchCMinFloats = int64_t{1} << 18;
// Up to this many floats (16 MiB), a raw A that several column blocks would each pack is packed once.
constexpr int64_t kPrepackAMaxFloats = int64_t{4} << 20;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// K block size: K split into the fewest blocks of at most KC, all about equal (K = 576 gives 2 x 288
// rather than 384 + 192): fewer passes over C, and no short last block.
inline int64_t balanced_kc(int64_t K) { return round_up(ceil_div(K, ceil_div(std::max<int64_t>(K, 1), KC)), 8); }

// Where op(A) comes from: a full pre-packed copy (panel stride K*6) or a raw matrix.
struct ASource {
  const float* packed = nullptr;
  const float* raw = nullptr;
  int64_t lda = 0;
  bool trans = false;
};

// Where op(B) comes from: pre-packed panels, a raw matrix, or a custom panel packer.
struct BSource {
  const float* packed = nullptr;
  const float* raw = nullptr;
  int64_t ldb = 0;
  bool trans = false;
  const BPanelPacker* packer = nullptr;
};

// Everything the store of one tile needs besides the accumulators.
struct TileStore {
  float alpha, beta;
  bool first, last;  // first K block applies beta; last K block applies the epilogue
  const Epilogue* ep;
  int64_t ldc, res_ld;
  bool prefetch_c = false;  // see kPrefetchCMinFloats
};

// Packs rows [i0, i0+mr) x k in [k0, k0+kc) of op(A) into dst[k * 6 + r], zero padding rows >= mr.
void pack_a_panel(const ASource& a, int64_t i0, int mr, int64_t k0, int64_t kc, float* dst) {
  if (!a.trans) {
    const float* rows[MR];
    for (int r = 0; r < MR; ++r) rows[r] = a.raw + (i0 + std::min(r, mr - 1)) * a.lda + k0;
    for (int64_t k = 0; k < kc; ++k)
      for (int r = 0; r < MR; ++r) dst[k * MR + r] = r < mr ? rows[r][k] : 0.0f;
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = a.raw + (k0 + k) * a.lda + i0;
      for (int r = 0; r < MR; ++r) dst[k * MR + r] = r < mr ? src[r] : 0.0f;
    }
  }
}

// Packs columns [j0, j0+nr) x all K rows of a raw op(B) into dst[k * 16 + j].
void pack_b_panel_raw(const float* B, int64_t ldb, bool trans, int64_t K, int64_t j0, int nr, float* dst) {
  if (!trans) {
    if (nr == NR) {
      for (int64_t k = 0; k < K; ++k) {
        const float* src = B + k * ldb + j0;
        _mm256_store_ps(dst + k * NR, _mm256_loadu_ps(src));
        _mm256_store_ps(dst + k * NR + 8, _mm256_loadu_ps(src + 8));
      }
      return;
    }
    for (int64_t k = 0; k < K; ++k)
      for (int j = 0; j < NR; ++j) dst[k * NR + j] = j < nr ? B[k * ldb + j0 + j] : 0.0f;
  } else {
    for (int j = 0; j < NR; ++j) {
      const float* src = B + (j0 + std::min(j, nr - 1)) * ldb;
      for (int64_t k = 0; k < K; ++k) dst[k * NR + j] = j < nr ? src[k] : 0.0f;
    }
  }
}

// Packs columns [j0, j1) of a raw, not transposed B into consecutive panels (panel p at dst + p * K * 16),
// 16 panels at a time row by row: each row's 256 columns are one sequential read (1 KiB) and the
// panels 16 write streams, rather than one panel at a time down K rows that lie ldb apart (K = 256 1x1
// convs on 56x56, B 3.2 MB: 5-7% less time for the whole GEMM).
void pack_b_block_rows(const float* B, int64_t ldb, int64_t K, int64_t j0, int64_t j1, float* dst) {
  constexpr int64_t kGroup = 16;
  const int64_t panels = (j1 - j0 + NR - 1) / NR;
  for (int64_t g0 = 0; g0 < panels; g0 += kGroup) {
    const int64_t g1 = std::min(panels, g0 + kGroup);
    for (int64_t k = 0; k < K; ++k) {
      const float* src = B + k * ldb + j0;
      for (int64_t p = g0; p < g1; ++p) {
        float* d = dst + p * K * NR + k * NR;
        const int64_t n = std::min<int64_t>(NR, j1 - j0 - p * NR);
        if (n == NR) {
          _mm256_store_ps(d, _mm256_loadu_ps(src + p * NR));
          _mm256_store_ps(d + 8, _mm256_loadu_ps(src + p * NR + 8));
        } else {
          const int m = static_cast<int>(n);
          _mm256_store_ps(d, _mm256_maskload_ps(src + p * NR, vtail_mask(std::min(m, 8))));
          _mm256_store_ps(d + 8, _mm256_maskload_ps(src + p * NR + 8, vtail_mask(std::max(m - 8, 0))));
        }
      }
    }
  }
}

void pack_b_panel(const BSource& b, int64_t K, int64_t j0, int nr, float* dst) {
  if (b.packer)
    b.packer->pack_panel(j0, nr, dst);
  else
    pack_b_panel_raw(b.raw, b.ldb, b.trans, K, j0, nr, dst);
}

// Finishes one row of a tile: alpha, beta/accumulate, then on the last K block bias+residual+act.
inline void finish_row(float* c, __m256 v0, __m256 v1, int nr, const TileStore& t, int64_t row,
                       int64_t col) {
  const bool full = nr == NR;
  const __m256i m0 = vtail_mask(std::min(nr, 8)), m1 = vtail_mask(std::max(nr - 8, 0));
  auto load = [&](const float* p, int half) {
    if (full) return _mm256_loadu_ps(p + half * 8);
    return _mm256_maskload_ps(p + half * 8, half == 0 ? m0 : m1);
  };
  const __m256 alpha = _mm256_set1_ps(t.alpha);
  v0 = _mm256_mul_ps(v0, alpha);
  v1 = _mm256_mul_ps(v1, alpha);
  if (!t.first) {
    v0 = _mm256_add_ps(v0, load(c, 0));
    v1 = _mm256_add_ps(v1, load(c, 1));
  } else if (t.beta != 0.0f) {
    const __m256 beta = _mm256_set1_ps(t.beta);
    v0 = _mm256_fmadd_ps(load(c, 0), beta, v0);
    v1 = _mm256_fmadd_ps(load(c, 1), beta, v1);
  }
  if (t.last) {
    const Epilogue& ep = *t.ep;
    if (ep.bias) {
      if (ep.bias_per_column) {
        v0 = _mm256_add_ps(v0, load(ep.bias + col, 0));
        v1 = _mm256_add_ps(v1, load(ep.bias + col, 1));
      } else {
        const __m256 b = _mm256_set1_ps(ep.bias[row]);
        v0 = _mm256_add_ps(v0, b);
        v1 = _mm256_add_ps(v1, b);
      }
    }
    if (ep.residual) {
      const float* r = ep.residual + row * t.res_ld + col;
      v0 = _mm256_add_ps(v0, load(r, 0));
      v1 = _mm256_add_ps(v1, load(r, 1));
    }
    v0 = activate(v0, ep);
    v1 = activate(v1, ep);
  }
  if (full) {
    _mm256_storeu_ps(c, v0);
    _mm256_storeu_ps(c + 8, v1);
  } else {
    _mm256_maskstore_ps(c, m0, v0);
    _mm256_maskstore_ps(c + 8, m1, v1);
  }
}

// The common single-pass epilogue of the 8-lane path (alpha 1, one K block, no C to add, bias per row or none,
// a residual or none, ReLU / Clip / none) in registers: finish_row's general case, called out of line for each
// row, took 12 % of a K = 64 1x1 convolution with its residual (ResNet-50's layer1, Zen 5 AVX2 build).
struct FastStore {
  bool on = false;
  __m256 lo, hi;
};
inline FastStore fast_store(const TileStore& t) {
  const Epilogue& ep = *t.ep;
  FastStore f;
  f.on = t.first && t.last && t.alpha == 1.0f && t.beta == 0.0f && !(ep.bias && ep.bias_per_column) &&
         (ep.act == Activation::None || ep.act == Activation::Relu || ep.act == Activation::Clip);
  const float inf = std::numeric_limits<float>::infinity();
  f.lo = _mm256_set1_ps(ep.act == Activation::Clip ? ep.alpha : ep.act == Activation::Relu ? 0.0f : -inf);
  f.hi = _mm256_set1_ps(ep.act == Activation::Clip ? ep.beta : inf);
  return f;
}
__attribute__((always_inline)) inline void fast_row(float* c, __m256 v0, __m256 v1, int nr, const TileStore& t,
                                                    const FastStore& f, int64_t row, int64_t col) {
  const Epilogue& ep = *t.ep;
  if (ep.bias) {
    const __m256 b = _mm256_set1_ps(ep.bias[row]);
    v0 = _mm256_add_ps(v0, b);
    v1 = _mm256_add_ps(v1, b);
  }
  const float* r = ep.residual ? ep.residual + row * t.res_ld + col : nullptr;
  if (nr == NR) {
    if (r) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(r));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(r + 8));
    }
    _mm256_storeu_ps(c, _mm256_min_ps(_mm256_max_ps(v0, f.lo), f.hi));
    _mm256_storeu_ps(c + 8, _mm256_min_ps(_mm256_max_ps(v1, f.lo), f.hi));
    return;
  }
  const __m256i m0 = vtail_mask(std::min(nr, 8)), m1 = vtail_mask(std::max(nr - 8, 0));
  if (r) {
    v0 = _mm256_add_ps(v0, _mm256_maskload_ps(r, m0));
    v1 = _mm256_add_ps(v1, _mm256_maskload_ps(r + 8, m1));
  }
  _mm256_maskstore_ps(c, m0, _mm256_min_ps(_mm256_max_ps(v0, f.lo), f.hi));
  _mm256_maskstore_ps(c + 8, m1, _mm256_min_ps(_mm256_max_ps(v1, f.lo), f.hi));
}

// The micro-kernel: a 6x16 tile of C from a kc x 6 A panel and a kc x 16 B panel (b_ks = 16), or 16
// columns of an unpacked row-major B (b_ks = its row stride); 12 accumulators.
[[maybe_unused]] void sgemm_6x16_avx2(int64_t kc, const float* a, const float* b, int64_t b_ks, float* c, int mr,
                                      int nr, const TileStore& t, int64_t row, int64_t col) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 av = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
    a += MR;
    b += b_ks;
  }
  const int64_t ldc = t.ldc;
  if (const FastStore f = fast_store(t); f.on) {
    fast_row(c, c00, c01, nr, t, f, row, col);
    if (mr > 1) fast_row(c + ldc, c10, c11, nr, t, f, row + 1, col);
    if (mr > 2) fast_row(c + 2 * ldc, c20, c21, nr, t, f, row + 2, col);
    if (mr > 3) fast_row(c + 3 * ldc, c30, c31, nr, t, f, row + 3, col);
    if (mr > 4) fast_row(c + 4 * ldc, c40, c41, nr, t, f, row + 4, col);
    if (mr > 5) fast_row(c + 5 * ldc, c50, c51, nr, t, f, row + 5, col);
    return;
  }
  finish_row(c, c00, c01, nr, t, row, col);
  if (mr > 1) finish_row(c + ldc, c10, c11, nr, t, row + 1, col);
  if (mr > 2) finish_row(c + 2 * ldc, c20, c21, nr, t, row + 2, col);
  if (mr > 3) finish_row(c + 3 * ldc, c30, c31, nr, t, row + 3, col);
  if (mr > 4) finish_row(c + 4 * ldc, c40, c41, nr, t, row + 4, col);
  if (mr > 5) finish_row(c + 5 * ldc, c50, c51, nr, t, row + 5, col);
}

// Edge tiles of the 8-lane path: only the R (<= 6) rows and V (1 or 2) 8-column vectors that hold results, so
// the last panel of a 7x7 map's 49 pixels (1 column of 16) or of 64 channels (4 rows of 6) costs a fraction of a
// full 6x16 tile. R = 1 takes 3 loads per 2 FMAs (load-bound), ideally a quarter of the full tile's time.
template <int R, int V>
[[maybe_unused]] void sgemm_edge_avx2(int64_t kc, const float* a, const float* b, int64_t b_ks, float* c, int nr,
                                      const TileStore& t, int64_t row, int64_t col) {
  // S chains of accumulators over interleaved steps, so that at least 8 FMAs are independent (4 cycles of
  // latency on 2 pipes): with R x V < 8 one chain waited on its own FMAs. The 1-row tile of a 7x7 map's 49th
  // pixel took 7 % of ResNet-50's layer4 3x3 (pixel rows) with one chain.
  constexpr int S = std::min((8 + R * V - 1) / (R * V), (16 - V - 1) / (R * V));
  __m256 acc[S][R][V];
  for (int q = 0; q < S; ++q)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[q][r][v] = _mm256_setzero_ps();
  auto step = [&](__m256(&sum)[R][V], const float* ak, const float* bk) {
    __m256 bv[V];
    for (int v = 0; v < V; ++v) bv[v] = _mm256_loadu_ps(bk + 8 * v);
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ak + r);
      for (int v = 0; v < V; ++v) sum[r][v] = _mm256_fmadd_ps(av, bv[v], sum[r][v]);
    }
  };
  int64_t k = 0;
  for (; k + S <= kc; k += S) {
#pragma GCC unroll 8
    for (int q = 0; q < S; ++q) step(acc[q], a + q * MR, b + q * b_ks);
    a += S * MR;
    b += S * b_ks;
  }
  for (; k < kc; ++k, a += MR, b += b_ks) step(acc[0], a, b);
  for (int q = 1; q < S; ++q)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[0][r][v] = _mm256_add_ps(acc[0][r][v], acc[q][r][v]);
  if (const FastStore f = fast_store(t); f.on) {
    for (int r = 0; r < R; ++r)
      fast_row(c + r * t.ldc, acc[0][r][0], V > 1 ? acc[0][r][V - 1] : _mm256_setzero_ps(), nr, t, f, row + r, col);
    return;
  }
  for (int r = 0; r < R; ++r)
    finish_row(c + r * t.ldc, acc[0][r][0], V > 1 ? acc[0][r][V - 1] : _mm256_setzero_ps(), nr, t, row + r, col);
}

// One tile of the 8-lane path: the 6x16 kernel, or the edge kernel of the rows and vectors that exist.
[[maybe_unused]] void sgemm_tile_avx2(int64_t kc, const float* a, const float* b, int64_t b_ks, float* c, int mr,
                                      int nr, const TileStore& t, int64_t row, int64_t col) {
  using Edge = void (*)(int64_t, const float*, const float*, int64_t, float*, int, const TileStore&, int64_t, int64_t);
  static constexpr Edge kEdge[MR][2] = {{sgemm_edge_avx2<1, 1>, sgemm_edge_avx2<1, 2>}, {sgemm_edge_avx2<2, 1>, sgemm_edge_avx2<2, 2>},
                                        {sgemm_edge_avx2<3, 1>, sgemm_edge_avx2<3, 2>}, {sgemm_edge_avx2<4, 1>, sgemm_edge_avx2<4, 2>},
                                        {sgemm_edge_avx2<5, 1>, sgemm_edge_avx2<5, 2>}, {sgemm_edge_avx2<6, 1>, nullptr}};
  if (mr >= MR && nr > 8) {
    sgemm_6x16_avx2(kc, a, b, b_ks, c, mr, nr, t, row, col);
    return;
  }
  kEdge[std::min(mr, MR) - 1][nr > 8 ? 1 : 0](kc, a, b, b_ks, c, nr, t, row, col);
}

#if defined(__AVX512F__)
// GCC 12's own intrinsic headers (the 512->256 casts) trip -Wmaybe-uninitialized; nothing here is.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// AVX-512 micro-kernel over the same packed layouts: MP 6-row A panels (stride a_ps) by NP 16-column
// B panels (stride b_ps), one zmm per row and B panel. MP = NP = 2 is a 12x32 tile with 24
// accumulators (of 32 registers), 2 loads and 12 broadcasts per 24 FMAs.

// finish_row for one zmm of 16 columns (nr <= 16 real ones): masked loads and stores, every activation on
// the 16 lanes (vmath512.h).
// Mask of the first n (0..16) lanes.
inline __mmask16 first_lanes(int n) {
  return n >= NR ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

inline void finish_row512(float* c, __m512 v, int nr, const TileStore& t, int64_t row, int64_t col) {
  const __mmask16 m = first_lanes(nr);
  if (t.alpha != 1.0f) v = _mm512_mul_ps(v, _mm512_set1_ps(t.alpha));
  if (!t.first)
    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c));
  else if (t.beta != 0.0f)
    v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, c), _mm512_set1_ps(t.beta), v);
  if (t.last) {
    const Epilogue& ep = *t.ep;
    if (ep.bias)
      v = _mm512_add_ps(v, ep.bias_per_column ? _mm512_maskz_loadu_ps(m, ep.bias + col) : _mm512_set1_ps(ep.bias[row]));
    if (ep.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, ep.residual + row * t.res_ld + col));
    switch (ep.act) {
      case Activation::None: break;
      case Activation::Relu: v = _mm512_max_ps(v, _mm512_setzero_ps()); break;
      case Activation::Clip:
        v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ep.alpha)), _mm512_set1_ps(ep.beta));
        break;
      default: v = activate512(v, ep);
    }
  }
  _mm512_mask_storeu_ps(c, m, v);
}

// Stores an R x NP-vector tile of accumulators (row-major in acc) into C: out of line, so the
// micro-kernel's loop keeps its registers, and with the common epilogues (alpha 1, bias per row,
// residual, ReLU / Clip / none) as one tight loop whose choices are made once per tile. For K = 16
// (SqueezeNet's expand 1x1) the per-row finish_row512 path spent 60% of the GEMM's time storing.
__attribute__((noinline)) void store_tile512(const __m512* acc, int R, int NP, float* c, int mr, int nr,
                                             const TileStore& t, int64_t row, int64_t col) {
  const Epilogue& ep = *t.ep;
  const bool simple = t.alpha == 1.0f && (!t.first || t.beta == 0.0f) && (!t.last || !(ep.bias && ep.bias_per_column));
  const int rows = std::min(R, mr);
  if (!simple) {
    for (int r = 0; r < rows; ++r)
      for (int p = 0; p < NP; ++p) {
        const int n = std::min(nr - p * NR, NR);
        if (n > 0) finish_row512(c + r * t.ldc + p * NR, acc[r * NP + p], n, t, row + r, col + p * NR);
      }
    return;
  }
  const bool add_c = !t.first, epi = t.last;
  const float* bias = epi ? ep.bias : nullptr;
  const float* res = epi ? ep.residual : nullptr;
  const Activation act = epi ? ep.act : Activation::None;
  const __m512 lo = _mm512_set1_ps(act == Activation::Clip ? ep.alpha : 0.0f);
  const __m512 hi = _mm512_set1_ps(act == Activation::Clip ? ep.beta : 0.0f);
  __mmask16 mask[2];
  for (int p = 0; p < NP; ++p) mask[p] = first_lanes(std::max(std::min(nr - p * NR, NR), 0));
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * t.ldc;
    const float* rr = res ? res + (row + r) * t.res_ld + col : nullptr;
    const __m512 b = _mm512_set1_ps(bias ? bias[row + r] : 0.0f);
    for (int p = 0; p < NP; ++p) {
      if (!mask[p]) continue;
      __m512 v = acc[r * NP + p];
      if (add_c) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[p], cr + p * NR));
      if (epi) {
        v = _mm512_add_ps(v, b);
        if (rr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask[p], rr + p * NR));
        if (act == Activation::Relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
        else if (act == Activation::Clip) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        else if (act != Activation::None) v = activate512(v, ep);  // SiLU, HardSwish, ...: 16 lanes inline
      }
      _mm512_mask_storeu_ps(cr + p * NR, mask[p], v);
    }
  }
}

// The register tile's K loop, shared by the micro-kernels: acc[r][p] = sum_k A[r][k] B[k][16 p ...], from
// MP 6-row A panels (a_ps apart) and NP 16-column B panels (packed, b_ps apart; RAW: row-major B, row
// stride b_ps, masked by bmask at the right edge). b_next (RAW): the next column tile's B rows, prefetched;
// a_next: the next call's A panels, prefetched into L1. Always inlined, so acc stays in registers.
// R (at most MP * MR) rows are computed: an edge tile of 8 or 4 rows does no FMAs on its panels' padding.
template <int MP, int NP, bool RAW, int R = MP * MR>
__attribute__((always_inline)) inline void accumulate(int64_t kc, const float* a, int64_t a_ps, const float* b,
                                                      int64_t b_ps, const __mmask16* bmask, const float* b_next,
                                                      const float* a_next, __m512 (&acc)[R][NP]) {
  static_assert(R <= MP * MR && R > (MP - 1) * MR);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NP];
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p)
      bv[p] = RAW ? _mm512_maskz_loadu_ps(bmask[p], b + k * b_ps + p * NR) : _mm512_load_ps(b + p * b_ps + k * NR);
    if (b_next) {
      _mm_prefetch(reinterpret_cast<const char*>(b_next + k * b_ps), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b_next + k * b_ps + NR), _MM_HINT_T0);
    }
    if (a_next) {
#pragma GCC unroll 2
      for (int p = 0; p < MP; ++p) _mm_prefetch(reinterpret_cast<const char*>(a_next + p * a_ps + k * MR), _MM_HINT_T0);
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[(r / MR) * a_ps + k * MR + r % MR]);
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_fmadd_ps(av, bv[p], acc[r][p]);
    }
  }
}

// RAW: b is the unpacked row-major B (row stride b_ps) at the tile's first column, read with masked
// loads at the right edge; otherwise b is the first of NP packed panels b_ps floats apart.
template <int MP, int NP, bool RAW = false, int R = MP * MR>
void sgemm_avx512(int64_t kc, const float* a, int64_t a_ps, const float* b, int64_t b_ps, float* c, int mr,
                  int nr, const TileStore& t, int64_t row, int64_t col, const float* b_next = nullptr) {
  __m512 acc[R][NP];
  __mmask16 bmask[NP];
  for (int p = 0; p < NP; ++p) bmask[p] = first_lanes(std::max(nr - p * NR, 0));
  accumulate<MP, NP, RAW, R>(kc, a, a_ps, b, b_ps, bmask, RAW ? b_next : nullptr, nullptr, acc);
  // A copy goes out of line: taking acc's own address would make the compiler keep it in memory
  // throughout the loop.
  alignas(64) __m512 tile[R * NP];
#pragma GCC unroll 24
  for (int i = 0; i < R * NP; ++i) tile[i] = acc[i / NP][i % NP];
  store_tile512(tile, R, NP, c, mr, nr, t, row, col);
}
// The common single-pass epilogue (one K block, alpha 1, no C to add, bias per row or none, a residual
// or none, ReLU / Clip / none) written inline after the K loop, for every tile shape: without the
// out-of-line store's copy of the accumulators. For short reductions (MobileNet's K = 16-32 expands)
// that copy is a large share.
struct InlineEpilogue {
  const float* bias;      // per row, or null
  const float* residual;  // the output's shape (row stride res_ld), or null
  int64_t res_ld;
  __m512 lo, hi;          // clamp bounds (-inf/+inf for none, 0/+inf for ReLU)
  bool prefetch;          // prefetch the tile's C and residual lines before its K loop (TileStore::prefetch_c)
};

template <int MP, int NP, bool RAW, int R = MP * MR>
void sgemm_avx512_inline(int64_t kc, const float* a, int64_t a_ps, const float* b, int64_t b_ps, float* c, int mr,
                         int nr, int64_t ldc, const InlineEpilogue& e, int64_t row, int64_t col, const float* b_next) {
  __m512 acc[R][NP];
  __mmask16 bmask[NP];
  for (int p = 0; p < NP; ++p) bmask[p] = first_lanes(std::max(nr - p * NR, 0));
  if (e.prefetch) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      if (r >= mr) break;
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) {
        if (e.residual) __builtin_prefetch(e.residual + (row + r) * e.res_ld + col + p * NR, 0, 3);
        __builtin_prefetch(c + r * ldc + p * NR, 1, 3);
      }
    }
  }
  accumulate<MP, NP, RAW, R>(kc, a, a_ps, b, b_ps, bmask, RAW ? b_next : nullptr, nullptr, acc);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    if (r >= mr) break;
    const __m512 bias = _mm512_set1_ps(e.bias ? e.bias[row + r] : 0.0f);
    const float* res = e.residual ? e.residual + (row + r) * e.res_ld + col : nullptr;
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) {
      __m512 v = _mm512_add_ps(acc[r][p], bias);
      if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(bmask[p], res + p * NR));
      _mm512_mask_storeu_ps(c + r * ldc + p * NR, bmask[p], _mm512_min_ps(_mm512_max_ps(v, e.lo), e.hi));
    }
  }
}

// A 12 x (16 NP) tile with plain stores (sgemm_tile): the accumulators go straight to C, with no
// epilogue to make them spill.
template <int NP>
inline void tile_avx512(int64_t K, const float* a, int64_t a_ps, const float* b, int64_t b_ps, float* c,
                        int64_t ldc, const float* a_next) {
  __m512 acc[2 * MR][NP];
  accumulate<2, NP, false>(K, a, a_ps, b, b_ps, nullptr, nullptr, a_next, acc);
#pragma GCC unroll 12
  for (int r = 0; r < 2 * MR; ++r)
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) _mm512_storeu_ps(c + r * ldc + p * NR, acc[r][p]);
}
#pragma GCC diagnostic pop
#endif

// Per-thread packing scratch, reused across calls.
struct Scratch {
  AlignedBuffer a_block, b_block;
};
Scratch& thread_scratch() {
  static thread_local Scratch s;
  return s;
}

// Computes rows [m0, m1) x columns [n0, n1) of C over all of K.
void gemm_task(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const ASource& a,
               const BSource& b, float* C, const TileStore& base) {
  Scratch& s = thread_scratch();
  const int64_t n_panels = ceil_div(n1 - n0, NR);
  const float* b_block = nullptr;
#if defined(__AVX512F__)
  // Few rows of C: each B element feeds at most raw_b_max_m(K) FMAs, so packing B would cost about as much as
  // the product; read B where it is instead (row-major, not transposed, no custom packer).
  const bool raw_b = b.raw && !b.trans && !b.packer && m1 - m0 <= raw_b_max_m(K);
#else
  // The same with AVX2 (6x16 tiles), when every tile is 16 columns wide (an edge tile would pack its panel
  // again for every row tile: 7x7 maps with K = 2048 took 62 instead of 75 GFLOP/s).
  const bool raw_b = b.raw && !b.trans && !b.packer && m1 - m0 <= kRawBMaxMAvx2 && (n1 - n0) % NR == 0;
#endif
  if (b.packed) {
    b_block = b.packed + (n0 / NR) * K * NR;
  } else if (!raw_b) {
    float* dst = s.b_block.ensure(static_cast<size_t>(n_panels * K * NR));
    // Row by row when B is larger than the block budget (it comes from beyond L2, where the K strided
    // reads of panel-by-panel packing each wait on memory); panel by panel otherwise (K = 256 on 27x27:
    // 11% faster than row by row).
    if (b.raw && !b.trans && !b.packer && K * b.ldb * int64_t{sizeof(float)} > kBBlockBytes) {
      pack_b_block_rows(b.raw, b.ldb, K, n0, n1, dst);
    } else {
      for (int64_t p = 0; p < n_panels; ++p) {
        int64_t j0 = n0 + p * NR;
        pack_b_panel(b, K, j0, static_cast<int>(std::min<int64_t>(NR, n1 - j0)), dst + p * K * NR);
      }
    }
    b_block = dst;
  }
  int64_t pc = 0;
  const int64_t kc_step = balanced_kc(K);
  do {
    const int64_t kc = std::min(kc_step, K - pc);
    TileStore t = base;
    t.first = pc == 0;
    t.last = pc + kc >= K;
    if (!t.first) t.beta = 1.0f;
    for (int64_t ic = m0; ic < m1; ic += MC) {
      const int64_t mc = std::min(MC, m1 - ic);
      const float* a_block;
      int64_t a_panel_stride;
      if (a.packed) {
        a_block = a.packed + (ic / MR) * K * MR + pc * MR;
        a_panel_stride = K * MR;
      } else {
        float* dst = s.a_block.ensure(static_cast<size_t>(round_up(mc, MR) * std::max<int64_t>(kc, 1)));
        for (int64_t i = 0; i < mc; i += MR)
          pack_a_panel(a, ic + i, static_cast<int>(std::min<int64_t>(MR, mc - i)), pc, kc, dst + i * kc);
        a_block = dst;
        a_panel_stride = kc * MR;
      }
#if defined(__AVX512F__)
      // 12x32 tiles (two A panels by two B panels), narrower ones at the right and bottom edges.
      constexpr int64_t TM = 2 * MR, TN = 2 * NR;
      const Epilogue& ep = *t.ep;
      const bool inline_store = t.first && t.last && t.alpha == 1.0f && t.beta == 0.0f &&
                                !(ep.bias && ep.bias_per_column) &&
                                (ep.act == Activation::None || ep.act == Activation::Relu || ep.act == Activation::Clip);
      const float inf = std::numeric_limits<float>::infinity();
      const InlineEpilogue ie{ep.bias, ep.residual, t.res_ld,
                              _mm512_set1_ps(ep.act == Activation::Clip ? ep.alpha : ep.act == Activation::Relu ? 0.0f : -inf),
                              _mm512_set1_ps(ep.act == Activation::Clip ? ep.beta : inf), t.prefetch_c};
      auto tile = [&](int64_t ir, int64_t jr) {
        const int nr = static_cast<int>(std::min<int64_t>(TN, n1 - jr));
        const int mr = static_cast<int>(std::min<int64_t>(TM, mc - ir));
        const float* ap = a_block + (ir / MR) * a_panel_stride;
        float* cp = C + (ic + ir) * t.ldc + jr;
        // One tile of R rows (MP A panels) by NP B vectors, B packed or read in place (RAW).
        auto run = [&]<int MP, int NP, bool RAW, int R>(const float* bp, int64_t b_ps, const float* next) {
          if (inline_store)
            sgemm_avx512_inline<MP, NP, RAW, R>(kc, ap, a_panel_stride, bp, b_ps, cp, mr, nr, t.ldc, ie, ic + ir, jr,
                                                next);
          else
            sgemm_avx512<MP, NP, RAW, R>(kc, ap, a_panel_stride, bp, b_ps, cp, mr, nr, t, ic + ir, jr, next);
        };
        // The rows that exist: 12 or 6 (whole panels), or 8 (6 + 2) or 4 at the bottom edge, so that M = 12 q + 8
        // (32, 80, 128, 320, 512 and 2048 output channels) or 12 q + 4 (16, 40, 64, 256, 1024) does no FMAs on the
        // last panel's zero padding (128 rows computed 132, 32 computed 36).
        auto rows = [&]<int NP, bool RAW>(const float* bp, int64_t b_ps, const float* next) {
          switch (edge_tile_rows(mr)) {
            case 12: run.template operator()<2, NP, RAW, 12>(bp, b_ps, next); break;
            case 8: run.template operator()<2, NP, RAW, 8>(bp, b_ps, next); break;
            case 6: run.template operator()<1, NP, RAW, 6>(bp, b_ps, next); break;
            default: run.template operator()<1, NP, RAW, 4>(bp, b_ps, next); break;
          }
        };
        if (raw_b) {
          const float* bp = b.raw + pc * b.ldb + jr;
          // The first row block of a column tile prefetches the next column tile's B rows (K rows a
          // plane apart, which the hardware prefetchers do not follow).
          const float* next = ir == 0 && jr + TN < n1 ? bp + TN : nullptr;
          rows.template operator()<2, true>(bp, b.ldb, next);
          return;
        }
        const float* bp = b_block + ((jr - n0) / NR) * K * NR + pc * NR;
        if (nr > NR)
          rows.template operator()<2, false>(bp, K * NR, nullptr);
        else
          rows.template operator()<1, false>(bp, K * NR, nullptr);
      };
#else
      constexpr int64_t TM = MR, TN = NR;
      auto tile = [&](int64_t ir, int64_t jr) {
        const int nr = static_cast<int>(std::min<int64_t>(NR, n1 - jr));
        const int mr = static_cast<int>(std::min<int64_t>(MR, mc - ir));
        const float* ap = a_block + (ir / MR) * a_panel_stride;
        float* cp = C + (ic + ir) * t.ldc + jr;
        if (raw_b) {  // nr == NR
          sgemm_tile_avx2(kc, ap, b.raw + pc * b.ldb + jr, b.ldb, cp, mr, nr, t, ic + ir, jr);
          return;
        }
        sgemm_tile_avx2(kc, ap, b_block + ((jr - n0) / NR) * K * NR + pc * NR, NR, cp, mr, nr, t, ic + ir, jr);
      };
#endif
      if (K <= kRowsOuterMaxK && (!raw_b || K <= kRawRowsOuterMaxK)) {
        // Short K: each 12-row block sweeps all columns, so its C (and residual) rows are written as
        // 12 sequential streams the prefetchers follow, instead of 12 scattered lines per tile. B read in
        // place is swept in chunks of columns whose K rows stay in L2 while every row block passes.
        const int64_t chunk = raw_b ? kRawRowsOuterCols : n1 - n0;
        for (int64_t c0 = n0; c0 < n1; c0 += chunk)
          for (int64_t ir = 0; ir < mc; ir += TM)
            for (int64_t jr = c0; jr < std::min(n1, c0 + chunk); jr += TN) tile(ir, jr);
      } else {
#if defined(__AVX512F__)
        for (int64_t jr = n0; jr < n1; jr += TN)
          for (int64_t ir = 0; ir < mc; ir += TM) tile(ir, jr);
#else
        // Packed B: the tiles of one column panel each prefetch (into L2) a slice of the next panel's kc rows,
        // which in a model come from DRAM (a transformer's weights, read once per inference); the hardware
        // prefetchers start late on panels K * 16 floats apart. ViT-B/16's MLP GEMMs (Zen 2, 1 thread) ran at
        // 75-78 GFLOP/s in the model against 85 with their weights in L3.
        const int64_t tiles = ceil_div(mc, TM), lines = ceil_div(kc * NR, 16), per_tile = ceil_div(lines, tiles);
        for (int64_t jr = n0; jr < n1; jr += TN) {
          const char* next = !raw_b && jr + TN < n1
                                 ? reinterpret_cast<const char*>(b_block + ((jr + TN - n0) / NR) * K * NR + pc * NR)
                                 : nullptr;
          for (int64_t ir = 0, i = 0; ir < mc; ir += TM, ++i) {
            if (next)
              for (int64_t l = i * per_tile; l < std::min(lines, (i + 1) * per_tile); ++l)
                _mm_prefetch(next + l * 64, _MM_HINT_T1);
            tile(ir, jr);
          }
        }
#endif
      }
    }
    pc += kc;
  } while (pc < K);
}

// GEMV for M == 1 with pre-packed B: each 16-column panel is a dot of a[K] with a K x 16 panel.
void gemv_packed_b(int64_t N, int64_t K, const float* a, int64_t a_stride, const float* packed_b,
                   float* c, const TileStore& t, ThreadPool* pool) {
  const int64_t panels = ceil_div(N, NR);
  parallel_for(pool, panels, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* bp = packed_b + p * K * NR;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      int64_t k = 0;
      for (; k + 2 <= K; k += 2) {
        const __m256 a0 = _mm256_set1_ps(a[k * a_stride]), a1 = _mm256_set1_ps(a[(k + 1) * a_stride]);
        s0 = _mm256_fmadd_ps(a0, _mm256_load_ps(bp + k * NR), s0);
        s1 = _mm256_fmadd_ps(a0, _mm256_load_ps(bp + k * NR + 8), s1);
        s2 = _mm256_fmadd_ps(a1, _mm256_load_ps(bp + k * NR + 16), s2);
        s3 = _mm256_fmadd_ps(a1, _mm256_load_ps(bp + k * NR + 24), s3);
      }
      for (; k < K; ++k) {
        const __m256 a0 = _mm256_set1_ps(a[k * a_stride]);
        s0 = _mm256_fmadd_ps(a0, _mm256_load_ps(bp + k * NR), s0);
        s1 = _mm256_fmadd_ps(a0, _mm256_load_ps(bp + k * NR + 8), s1);
      }
      const int64_t j0 = p * NR;
      finish_row(c + j0, _mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3),
                 static_cast<int>(std::min<int64_t>(NR, N - j0)), t, 0, j0);
    }
  });
}

// Splits the M x N output into tasks for the pool and runs them.
void gemm_driver(int64_t M, int64_t N, int64_t K, float alpha, const ASource& a, const BSource& b,
                 float beta, float* C, int64_t ldc, const Epilogue& ep, ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  TileStore t{alpha, beta, true, true, &ep, ldc, ep.residual_ld ? ep.residual_ld : ldc};
  t.prefetch_c = K >= kPrefetchCMinK && M * N >= kPrefetchCMinFloats;
  if (M == 1 && b.packed && a.raw) {
    gemv_packed_b(N, K, a.raw, a.trans ? a.lda : 1, b.packed, C, t, pool);
    return;
  }
  const int threads = thread_count(pool);
  const int64_t n_panels = ceil_div(N, NR);
  // B block (K x NC) sized to stay in L2; the block count is a multiple of the thread count.
  int64_t nc_max = std::max<int64_t>(NR, kBBlockBytes / (4 * std::max<int64_t>(K, 1)) / NR * NR);
  int64_t n_blocks = ceil_div(N, nc_max);
  // Several blocks per thread (each of at least two panels), so the pool can even out a slowed thread.
  if (threads > 1)
    n_blocks = std::max(round_up(n_blocks, threads),
                        std::min<int64_t>(n_panels / 2, int64_t{ThreadPool::kChunksPerThread} * threads));
  n_blocks = std::min(n_blocks, n_panels);
  // Block nb covers panels [nb * n_panels / n_blocks, (nb + 1) * n_panels / n_blocks): sizes differ by at
  // most one panel, so the blocks split evenly over the threads (49 panels in 8 blocks of 6 or 7, where
  // rounding every block up to 7 panels left 7 blocks: 4 for one thread, 3 for the other).
  auto block_start = [&](int64_t nb) { return std::min(N, nb * n_panels / n_blocks * NR); };
  // Too few column blocks for the threads: also split M (in multiples of MR).
  int64_t m_chunks = 1;
  if (n_blocks < threads) m_chunks = std::min(ceil_div(threads, n_blocks), ceil_div(M, 2 * MR));
  // Few column panels that do not divide over the threads (a 14x14 map: 196 pixels, 13 panels, 6 + 7 per thread
  // on 2 threads) where the rows divide better: split M instead, every thread over all columns. Counted in rows
  // computed x panels, the ragged last panel a whole one (tile_rows).
  int64_t row_unit = MR;  // rows of a chunk: a multiple of this
  if (threads > 1 && n_blocks > 1 && ceil_div(N, nc_max) == 1) {
    int64_t n_max = 0;  // panels of the busiest thread under the column split (owner-first: contiguous blocks)
    for (int t = 0; t < threads; ++t) {
      const int64_t b0 = t * n_blocks / threads, b1 = (t + 1) * n_blocks / threads;
      n_max = std::max(n_max, ceil_div(block_start(b1), NR) - block_start(b0) / NR);
    }
    const int64_t mchunk = round_up(ceil_div(M, threads), kRowTile);
    int64_t m_max = 0;  // rows computed by the busiest thread under the row split
    for (int64_t m0 = 0; m0 < M; m0 += mchunk) m_max = std::max(m_max, tile_rows(std::min(mchunk, M - m0)));
    if (m_max * n_panels < n_max * tile_rows(M)) {
      n_blocks = 1;
      m_chunks = threads;
      row_unit = kRowTile;
    }
  }
  const int64_t mchunk = round_up(ceil_div(M, m_chunks), row_unit);
  m_chunks = ceil_div(M, mchunk);
  // A raw A (activations times pre-packed weights: FC and transformer layers) would be packed again by
  // every column block's task: pack it once, in parallel, when that happens more than once and it is
  // not huge. (BERT-base's 128 x 3072 A was packed 10 times per call: 15 MB of copies.)
  ASource packedA = a;
  if (!a.packed && n_blocks > 1 && M * K <= kPrepackAMaxFloats) {
    static thread_local AlignedBuffer a_buf;
    float* dst = a_buf.ensure(packed_a_size(M, K));
    parallel_for(pool, ceil_div(M, MR), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        pack_a_panel(a, p * MR, static_cast<int>(std::min<int64_t>(MR, M - p * MR)), 0, K, dst + p * MR * K);
    });
    packedA = ASource{dst, nullptr, 0, false};
  }
  parallel_for(pool, n_blocks * m_chunks, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t nb = task / m_chunks, mb = task % m_chunks;
      gemm_task(mb * mchunk, std::min(M, (mb + 1) * mchunk), block_start(nb), block_start(nb + 1), K, packedA, b, C,
                t);
    }
  });
}

}  // namespace

void matmul_batched(const float* A, const int64_t* a_offsets, const float* B, const int64_t* b_offsets, float* C,
                    int64_t batch, int64_t M, int64_t N, int64_t K, ThreadPool* pool) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  const Epilogue none{};
  if (batch >= thread_count(pool)) {
    parallel_for(pool, batch, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        sgemm(false, false, M, N, K, 1.0f, A + a_offsets[b], K, B + b_offsets[b], N, 0.0f, C + b * M * N, N, none,
              nullptr);
    });
    return;
  }
  for (int64_t b = 0; b < batch; ++b)
    sgemm(false, false, M, N, K, 1.0f, A + a_offsets[b], K, B + b_offsets[b], N, 0.0f, C + b * M * N, N, none, pool);
}

void sgemm_tile(int64_t K, const float* a, int64_t a_panel_stride, const float* b, int64_t b_panel_stride,
                float* c, int64_t ldc, int ncols, const float* a_next) {
#if defined(__AVX512F__)
  if (ncols > NR)
    tile_avx512<2>(K, a, a_panel_stride, b, b_panel_stride, c, ldc, a_next);
  else
    tile_avx512<1>(K, a, a_panel_stride, b, b_panel_stride, c, ldc, a_next);
#else
  (void)a_next;
  (void)b_panel_stride;
  (void)ncols;
  // Two 6x16 passes (the two 6-row A panels) over the same B panel, which stays in L1 for the second.
  for (int p = 0; p < kGemmTileRows / MR; ++p, a += a_panel_stride, c += MR * ldc) {
    __m256 acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = 0; k < K; ++k) {
      const __m256 b0 = _mm256_load_ps(b + k * NR), b1 = _mm256_load_ps(b + k * NR + 8);
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + k * MR + r);
        acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
      }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      _mm256_storeu_ps(c + r * ldc, acc[r][0]);
      _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
  }
#endif
}

size_t packed_a_size(int64_t M, int64_t K) { return static_cast<size_t>(round_up(M, MR) * K); }

void pack_a(bool trans_a, int64_t M, int64_t K, const float* A, int64_t lda, float* packed) {
  ASource a{nullptr, A, lda, trans_a};
  for (int64_t i = 0; i < M; i += MR)
    pack_a_panel(a, i, static_cast<int>(std::min<int64_t>(MR, M - i)), 0, K, packed + i * K);
}

size_t packed_b_size(int64_t N, int64_t K) { return static_cast<size_t>(round_up(N, NR) * K); }

void pack_b(bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb, float* packed) {
  for (int64_t j = 0; j < N; j += NR)
    pack_b_panel_raw(B, ldb, trans_b, K, j, static_cast<int>(std::min<int64_t>(NR, N - j)), packed + j * K);
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           const Epilogue& ep, ThreadPool* pool) {
  ASource a{nullptr, A, lda, trans_a};
  BSource b{nullptr, B, ldb, trans_b, nullptr};
  gemm_driver(M, N, K, alpha, a, b, beta, C, ldc, ep, pool);
}

void sgemm_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* packed_b, float beta, float* C, int64_t ldc,
                    const Epilogue& ep, ThreadPool* pool) {
  ASource a{nullptr, A, lda, trans_a};
  BSource b{packed_b, nullptr, 0, false, nullptr};
  gemm_driver(M, N, K, alpha, a, b, beta, C, ldc, ep, pool);
}

void sgemm_packed_a(int64_t M, int64_t N, int64_t K, float alpha, const float* packed_a, bool trans_b,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const Epilogue& ep,
                    ThreadPool* pool) {
  ASource a{packed_a, nullptr, 0, false};
  BSource b{nullptr, B, ldb, trans_b, nullptr};
  gemm_driver(M, N, K, alpha, a, b, beta, C, ldc, ep, pool);
}

void sgemm_packed_a_custom_b(int64_t M, int64_t N, int64_t K, float alpha, const float* packed_a,
                             const BPanelPacker& bp, float beta, float* C, int64_t ldc,
                             const Epilogue& ep, ThreadPool* pool) {
  ASource a{packed_a, nullptr, 0, false};
  BSource b{nullptr, nullptr, 0, false, &bp};
  gemm_driver(M, N, K, alpha, a, b, beta, C, ldc, ep, pool);
}

void sgemm_packed_ab(int64_t M, int64_t N, int64_t K, float alpha, const float* packed_a,
                     const float* packed_b, float beta, float* C, int64_t ldc, const Epilogue& ep, ThreadPool* pool) {
  ASource a{packed_a, nullptr, 0, false};
  BSource b{packed_b, nullptr, 0, false, nullptr};
  if (M <= 0 || N <= 0) return;
  if (pool != nullptr) {
    gemm_driver(M, N, K, alpha, a, b, beta, C, ldc, ep, pool);
    return;
  }
  TileStore t{alpha, beta, true, true, &ep, ldc, ep.residual_ld ? ep.residual_ld : ldc};
  gemm_task(0, M, 0, N, K, a, b, C, t);
}

}  // namespace tessel::rt
