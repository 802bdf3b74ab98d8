// Pixel-tile convolution, NCHW in and out (groups == 1). The register tile is 7 output pixels by up to 64
// output channels: for each step k of the reduction (input channel x kernel tap) the 7 input values are
// broadcast and 64 weights loaded as 4 zmm vectors, 28 FMAs into 28 accumulators. The weights are packed
// as [Cout/64][K][64], so a tile streams one contiguous panel; the input is read in place for 1x1
// stride-1 convs (7 consecutive pixels of one channel plane per k) and through im2col panels [K][8]
// otherwise. On the way out each 7 x 16 block is transposed in registers so that every output channel
// gets its 7 pixels as one masked store, with bias, residual and activation applied there.
//
// Against im2col + GEMM (C[Cout x pixels]) this wins where the pixel count is small or K is large: the
// GEMM's 32-column tiles waste 15 of 64 columns on a 7x7 map, and its B packing is a full pass over the
// input; here 7 | 49, 196, 784, 3136 and 12544, and a 1x1 conv packs nothing. For K < 256 the transpose
// on the way out costs more than the GEMM loses (selection in conv_registry.cpp).
#include <algorithm>
#include <array>
#include <vector>

#include "im2col.h"
#include "plane_rows.h"
#include "weight_blocks.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "tessel/rt/epilogue_avx2.h"
#endif

namespace tessel::rt {
namespace {

constexpr int kTileP = 7;         // output pixels per register tile
constexpr int kBlockC = 64;       // output channels per weight panel (4 zmm)
constexpr int kPanelW = 8;        // floats per k in an im2col panel (7 pixels + 1 pad)
constexpr int64_t kKC = 512;      // reduction block: a 512 x 64 weight panel is 128 KiB (L2)
constexpr int kTilesPerPack = 8;  // im2col panels packed together (56 pixels, [K][8] each)

int64_t reduction(const Conv2dShape& s) { return s.in_per_group() * s.kernel_h * s.kernel_w; }
[[maybe_unused]] int64_t channel_blocks(const Conv2dShape& s) { return (s.out_channels + kBlockC - 1) / kBlockC; }

// Where one tile's output goes and what to do on the way: first/last reduction block, the epilogue at
// the tile's first channel and pixel.
struct TileOut {
  float* out;             // out + c0 * plane + p0
  int64_t plane;          // output plane size (channel stride)
  const float* bias;      // bias + c0 (null: none)
  const float* residual;  // residual + c0 * plane + p0 (null: none)
  const Epilogue* ep;
  int pixels;             // valid pixels of the tile (<= kTileP)
  int channels;           // valid channels of the block (<= kBlockC)
  bool first, last;
};

#if defined(__AVX512F__)
// GCC 12's own intrinsic headers (the 512->256 extracts) trip -W(maybe-)uninitialized; nothing here is.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Accumulates a tile of RP pixels x NP*16 channels over kc reduction steps and stores it. a[k * a_ks + r]
// is pixel r's input at step k; w[k * kBlockC + 16 p + l] the weight of channel 16 p + l; pf > 0
// prefetches pf floats ahead on each row of a (the in-place input, whose rows are a plane apart).
// Meanwhile it prefetches (to L2) `lines` cache lines from `next` (the next weight panel's share of
// this tile), spread over the k steps.
template <int RP, int NP>
void pixel_tile(int64_t kc, const float* a, int64_t a_ks, int pf, const float* w, const char* next, int64_t lines,
                const TileOut& t) {
  const int64_t per_step = (lines + kc - 1) / std::max<int64_t>(kc, 1);
  __m512 acc[RP][NP];
#pragma GCC unroll 8
  for (int r = 0; r < RP; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    if (pf) _mm_prefetch(reinterpret_cast<const char*>(a + k * a_ks + pf), _MM_HINT_T0);
    for (int64_t q = k * per_step; q < std::min(lines, (k + 1) * per_step); ++q) _mm_prefetch(next + q * 64, _MM_HINT_T1);
    // Two weight vectors at a time, the pixels broadcast once per pair: 28 accumulators + 2 weights + 1
    // broadcast fit the 32 registers. With all four weight vectors loaded at once (33 registers) GCC kept one
    // accumulator on the stack, and its store-and-reload took half the samples (256->256 3x3 on 14x14:
    // 172 GFLOP/s on Zen 5).
#pragma GCC unroll 2
    for (int h = 0; h < NP; h += 2) {
      __m512 wv[2];
#pragma GCC unroll 2
      for (int p = 0; p < 2; ++p)
        if (h + p < NP) wv[p] = _mm512_load_ps(w + k * kBlockC + (h + p) * 16);
#pragma GCC unroll 8
      for (int r = 0; r < RP; ++r) {
        // A volatile asm, so that GCC broadcasts again in the second half instead of keeping all seven
        // broadcasts live (which spills accumulators just the same).
        __m512 av;
        asm volatile("vbroadcastss %1, %0" : "=v"(av) : "m"(a[k * a_ks + r]));
#pragma GCC unroll 2
        for (int p = 0; p < 2; ++p)
          if (h + p < NP) acc[r][h + p] = _mm512_fmadd_ps(av, wv[p], acc[r][h + p]);
      }
    }
  }
  const Epilogue& ep = *t.ep;
  const __mmask8 pixels = static_cast<__mmask8>((1u << t.pixels) - 1);
#pragma GCC unroll 4
  for (int p = 0; p < NP; ++p) {
    // Rows 0..7 (pixels; rows >= RP are zero) of 16 channels each.
    __m512 r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) r[i] = i < RP ? acc[i][p] : _mm512_setzero_ps();
    if (t.last && t.bias) {
      const int n = std::clamp(t.channels - p * 16, 0, 16);
      const __m512 b = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), t.bias + p * 16);
#pragma GCC unroll 8
      for (int i = 0; i < RP; ++i) r[i] = _mm512_add_ps(r[i], b);
    }
    // 8 x 16 -> 16 x 8 transpose: after the unpacks and shuffles, u[j] holds in 128-bit lane L channel
    // 4 L + j of rows 0-3 and v[j] the same of rows 4-7.
    const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
    const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
    const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
    const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
    const __m512 u[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE),
                         _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xEE)};
    const __m512 v[4] = {_mm512_shuffle_ps(t4, t6, 0x44), _mm512_shuffle_ps(t4, t6, 0xEE),
                         _mm512_shuffle_ps(t5, t7, 0x44), _mm512_shuffle_ps(t5, t7, 0xEE)};
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      // x = [u lane 0, v lane 0, u lane 1, v lane 1], y the same of lanes 2 and 3: each 256-bit half is
      // one channel's 8 pixels.
      __m512 x = _mm512_shuffle_f32x4(u[j], v[j], _MM_SHUFFLE(1, 0, 1, 0));
      __m512 y = _mm512_shuffle_f32x4(u[j], v[j], _MM_SHUFFLE(3, 2, 3, 2));
      x = _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(3, 1, 2, 0));
      y = _mm512_shuffle_f32x4(y, y, _MM_SHUFFLE(3, 1, 2, 0));
      const __m256 col[4] = {_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1), _mm512_castps512_ps256(y),
                             _mm512_extractf32x8_ps(y, 1)};
#pragma GCC unroll 4
      for (int lane = 0; lane < 4; ++lane) {
        const int c = p * 16 + 4 * lane + j;
        if (c >= t.channels) continue;
        float* dst = t.out + c * t.plane;
        __m256 val = col[lane];
        if (!t.first) val = _mm256_add_ps(val, _mm256_maskz_loadu_ps(pixels, dst));
        if (t.last) {
          if (t.residual) val = _mm256_add_ps(val, _mm256_maskz_loadu_ps(pixels, t.residual + c * t.plane));
          val = activate(val, ep);
        }
        _mm256_mask_storeu_ps(dst, pixels, val);
      }
    }
  }
}

using TileFn = void (*)(int64_t, const float*, int64_t, int, const float*, const char*, int64_t, const TileOut&);

// kTiles[rp - 1][np - 1]: the tile for rp pixels (in-place input needs the exact count) and np vectors.
template <int RP>
constexpr std::array<TileFn, 4> tiles_for() {
  return {pixel_tile<RP, 1>, pixel_tile<RP, 2>, pixel_tile<RP, 3>, pixel_tile<RP, 4>};
}
constexpr std::array<std::array<TileFn, 4>, kTileP> kTiles = {tiles_for<1>(), tiles_for<2>(), tiles_for<3>(),
                                                             tiles_for<4>(), tiles_for<5>(), tiles_for<6>(),
                                                             tiles_for<7>()};

struct Job {
  const Conv2dShape& s;
  const float* in;      // this image's input
  const float* packed;  // [cb][K][64]
  float* out;           // this image's output
  const float* residual;
  const Epilogue& ep;
  int64_t K, plane, n_tiles;
  bool prefetch;  // several threads: pack_tiles prefetches its input rows (another core may have written them)
};

TileOut tile_out(const Job& j, int64_t cb, int64_t tile, int64_t k0, int64_t kc) {
  const int64_t c0 = cb * kBlockC, p0 = tile * kTileP;
  TileOut t;
  t.out = j.out + c0 * j.plane + p0;
  t.plane = j.plane;
  t.bias = j.ep.bias ? j.ep.bias + c0 : nullptr;
  t.residual = j.residual ? j.residual + c0 * j.plane + p0 : nullptr;
  t.ep = &j.ep;
  t.pixels = static_cast<int>(std::min<int64_t>(kTileP, j.plane - p0));
  t.channels = static_cast<int>(std::min<int64_t>(kBlockC, j.s.out_channels - c0));
  t.first = k0 == 0;
  t.last = k0 + kc >= j.K;
  return t;
}

// The weight panel after (cb, k0) in the order run_tiles visits them (null after the last), and its
// size in cache lines.
const char* next_panel(const Job& j, int64_t cb, int64_t cb0, int64_t cb1, int64_t k0, int64_t* lines) {
  int64_t ncb = cb + 1, nk0 = k0;
  if (ncb == cb1) ncb = cb0, nk0 = k0 + kKC;
  if (nk0 >= j.K) {
    *lines = 0;
    return nullptr;
  }
  *lines = std::min(kKC, j.K - nk0) * kBlockC * sizeof(float) / 64;
  return reinterpret_cast<const char*>(j.packed + (ncb * j.K + nk0) * kBlockC);
}

// Channel blocks [cb0, cb1) x tiles [t0, t1); a(tile) is the tile's first input value at k = 0 and a_ks
// the distance between k steps (in place: a plane; packed: a panel row). While a panel's tiles run,
// they prefetch the next panel to L2 between them: weights come from memory once per inference.
template <class Input>
void run_tiles(const Job& j, int64_t cb0, int64_t cb1, int64_t t0, int64_t t1, const Input& a, int64_t a_ks,
               bool in_place) {
  const int64_t n = t1 - t0;
  for (int64_t k0 = 0; k0 < j.K; k0 += kKC) {
    const int64_t kc = std::min(kKC, j.K - k0);
    for (int64_t cb = cb0; cb < cb1; ++cb) {
      const float* w = j.packed + (cb * j.K + k0) * kBlockC;
      int64_t lines = 0;
      const char* next = next_panel(j, cb, cb0, cb1, k0, &lines);
      const int64_t share = (lines + n - 1) / std::max<int64_t>(n, 1);
      for (int64_t tile = t0; tile < t1; ++tile) {
        const TileOut t = tile_out(j, cb, tile, k0, kc);
        const int64_t first = std::min(lines, (tile - t0) * share), count = std::min(lines, first + share) - first;
        kTiles[in_place ? t.pixels - 1 : kTileP - 1][(t.channels + 15) / 16 - 1](
            kc, a(tile) + k0 * a_ks, a_ks, in_place ? 16 : 0, w, next ? next + first * 64 : nullptr, count, t);
      }
    }
  }
}

void run_in_place(const Job& j, int64_t cb0, int64_t cb1, int64_t t0, int64_t t1) {
  run_tiles(j, cb0, cb1, t0, t1, [&](int64_t tile) { return j.in + tile * kTileP; }, j.plane, true);
}

template <class Panels>
void run_panels(const Job& j, int64_t cb0, int64_t cb1, int64_t t0, int64_t t1, const Panels& panels) {
  run_tiles(j, cb0, cb1, t0, t1, panels, kPanelW, false);
}

// Packs the im2col panels of tiles [t0, t1) into dst (tile t's [K][8] panel at (t - t0) * K * 8). A tile
// inside one output row is one masked load per reduction step (stride 1: 7 consecutive input values;
// stride 2: 14, of which the even lanes are kept); a tile across rows, or another stride, goes value
// by value.
void pack_tiles(const Job& j, int64_t t0, int64_t t1, float* dst) {
  const Conv2dShape& s = j.s;
  const int64_t H = s.in_h, W = s.in_w, OW = s.out_w(), sw = s.stride_w;
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i width = _mm512_set1_epi32(static_cast<int>(W));
  // Per tile: first input row and column of pixel 0 at tap (0, 0), and the lanes its pixels load.
  struct Geometry {
    int64_t ih0, iw0, p0, pixels;
    __mmask16 lanes;  // 0: the tile crosses an output row (or the stride is not 1 or 2): value by value
  };
  std::vector<Geometry> geo(static_cast<size_t>(t1 - t0));
  for (int64_t tile = t0; tile < t1; ++tile) {
    Geometry& g = geo[tile - t0];
    g.p0 = tile * kTileP;
    g.pixels = std::min<int64_t>(kTileP, j.plane - g.p0);
    g.ih0 = g.p0 / OW * s.stride_h - s.pad_top;
    g.iw0 = g.p0 % OW * sw - s.pad_left;
    const bool one_row = g.p0 % OW + g.pixels <= OW && (sw == 1 || sw == 2);
    g.lanes = one_row ? static_cast<__mmask16>(((1u << (g.pixels * sw)) - 1) & (sw == 1 ? 0xFFFFu : 0x5555u)) : 0;
  }
  // The input rows (and columns, within one output row) the tiles read, prefetched kAhead channels ahead:
  // with several threads part of the input was written by another core, and the masked loads below wait
  // on each missing line in turn.
  constexpr int64_t kAhead = 4;
  const Geometry &first = geo.front(), &last = geo.back();
  const int64_t r0 = std::max<int64_t>(0, first.ih0);
  const int64_t r1 = std::min<int64_t>(H, last.ih0 + (s.kernel_h - 1) * s.dilation_h + 1);
  const bool one_row = first.ih0 == last.ih0;
  const int64_t c0 = one_row ? std::max<int64_t>(0, first.iw0) : 0;
  const int64_t c1 = one_row ? std::min<int64_t>(W, last.iw0 + (last.pixels - 1) * sw + (s.kernel_w - 1) * s.dilation_w + 1) : W;
  auto prefetch_channel = [&](int64_t c) { planes::prefetch_rows(j.in + c * H * W, W, r0, r1, c0, c1); };
  for (int64_t c = 0; j.prefetch && c < std::min(kAhead, s.in_channels); ++c) prefetch_channel(c);
  int64_t k = 0;
  for (int64_t c = 0; c < s.in_channels; ++c) {
    if (j.prefetch && c + kAhead < s.in_channels) prefetch_channel(c + kAhead);
    const float* plane = j.in + c * H * W;
    for (int64_t ky = 0; ky < s.kernel_h; ++ky)
      for (int64_t kx = 0; kx < s.kernel_w; ++kx, ++k)
        for (int64_t tile = t0; tile < t1; ++tile) {
          const Geometry& g = geo[tile - t0];
          float* d = dst + ((tile - t0) * j.K + k) * kPanelW;
          if (g.lanes) {
            const int64_t ih = g.ih0 + ky * s.dilation_h, base = g.iw0 + kx * s.dilation_w;
            if (ih < 0 || ih >= H) {
              _mm256_storeu_ps(d, _mm256_setzero_ps());
              continue;
            }
            // Lanes whose column is inside the row are loaded; the others are not read.
            const __m512i cols = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)), lanes);
            const __mmask16 valid = _mm512_mask_cmplt_epi32_mask(
                _mm512_mask_cmpge_epi32_mask(g.lanes, cols, _mm512_setzero_si512()), cols, width);
            const __m512 v = _mm512_maskz_loadu_ps(valid, plane + ih * W + base);
            _mm256_storeu_ps(d, _mm512_castps512_ps256(sw == 1 ? v : _mm512_permutexvar_ps(evens, v)));
            continue;
          }
          for (int64_t t = 0; t < kPanelW; ++t) {
            float x = 0.0f;
            if (t < g.pixels) {
              const int64_t p = g.p0 + t, ih = p / OW * s.stride_h - s.pad_top + ky * s.dilation_h,
                            iw = p % OW * sw - s.pad_left + kx * s.dilation_w;
              if (ih >= 0 && ih < H && iw >= 0 && iw < W) x = plane[ih * W + iw];
            }
            d[t] = x;
          }
        }
  }
}

// Channel blocks x tiles cut into tasks for the pool: tile-chunk-major, so a run of tasks is one call over
// consecutive channel blocks of one tile chunk. Enough tasks for the pool to even out the threads
// (kChunksPerThread each), and never a split of the channels alone: with 96 channels, blocks of 64 and 32 on
// two threads left one idle half the time.
struct BlockTasks {
  int64_t ncb, chunks, n_tiles;
  BlockTasks(const Job& j, int threads)
      : ncb(channel_blocks(j.s)),
        chunks(threads == 1 ? 1
                            : std::clamp<int64_t>((int64_t{ThreadPool::kChunksPerThread} * threads + ncb - 1) / ncb,
                                                  1, j.n_tiles)),
        n_tiles(j.n_tiles) {}
  int64_t count() const { return ncb * chunks; }
  int64_t chunk_tile(int64_t chunk) const { return chunk * n_tiles / chunks; }  // first tile of a chunk
  // Runs fn(cb0, cb1, t0, t1) over tasks [a, b).
  template <class Fn>
  void run(int64_t a, int64_t b, const Fn& fn) const {
    while (a < b) {
      const int64_t chunk = a / ncb, cb0 = a % ncb, cb1 = std::min(ncb, cb0 + (b - a));
      fn(cb0, cb1, chunk_tile(chunk), chunk_tile(chunk + 1));
      a += cb1 - cb0;
    }
  }
};

// Runs fn(cb0, cb1, t0, t1) over every task of BlockTasks on the pool.
template <class Fn>
void for_blocks(const Job& j, ThreadPool* pool, const Fn& fn) {
  const BlockTasks tasks(j, thread_count(pool));
  parallel_for(pool, tasks.count(), [&](int64_t a, int64_t b) { tasks.run(a, b, fn); });
}

void run_image(const Job& j, ThreadPool* pool) {
  const int threads = thread_count(pool);
  const int64_t ncb = channel_blocks(j.s);
  const size_t panel_floats = static_cast<size_t>(j.K * kPanelW);
  if (j.s.is_pointwise()) {  // the input is read in place
    for_blocks(j, pool, [&](int64_t c0, int64_t c1, int64_t t0, int64_t t1) { run_in_place(j, c0, c1, t0, t1); });
    return;
  }
  if (threads > 1 && j.n_tiles < 16 * threads) {
    // Few pixels: the (tile chunk, channel block) tasks of for_blocks, an equal run of them per thread;
    // each thread packs the panels of its own tiles (again where two threads share a tile chunk) and
    // never reads panels another core wrote.
    const BlockTasks tasks(j, threads);
    parallel_per_thread(pool, threads, [&](int r) {
      const int64_t a = r * tasks.count() / threads, b = (r + 1) * tasks.count() / threads;
      if (a >= b) return;
      const int64_t first = tasks.chunk_tile(a / tasks.ncb), last = tasks.chunk_tile((b - 1) / tasks.ncb + 1);
      static thread_local AlignedBuffer own;
      float* panels = own.ensure(panel_floats * (last - first));
      pack_tiles(j, first, last, panels);
      tasks.run(a, b, [&](int64_t cb0, int64_t cb1, int64_t t0, int64_t t1) {
        run_panels(j, cb0, cb1, t0, t1, [&](int64_t tile) { return panels + (tile - first) * panel_floats; });
      });
    });
    return;
  }
  parallel_for(pool, j.n_tiles, [&](int64_t t0, int64_t t1) {
    // Pack a few tiles' panels (kept in L2), then run every channel block over them.
    static thread_local AlignedBuffer scratch;
    float* buf = scratch.ensure(panel_floats * kTilesPerPack);
    for (int64_t b0 = t0; b0 < t1; b0 += kTilesPerPack) {
      const int64_t b1 = std::min(t1, b0 + kTilesPerPack);
      pack_tiles(j, b0, b1, buf);
      run_panels(j, 0, ncb, b0, b1, [&](int64_t tile) { return buf + (tile - b0) * panel_floats; });
    }
  });
}
#pragma GCC diagnostic pop
#endif

}  // namespace

bool conv2d_nchw_pixel_tile_applicable(const Conv2dShape& s) { return s.groups == 1; }

size_t conv2d_nchw_pixel_tile_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>(detail::channel_blocked_size(s.out_channels, reduction(s), kBlockC));
}

void conv2d_nchw_pixel_tile_pack(const Conv2dShape& s, const float* weights, float* packed) {
  detail::pack_channel_blocked(weights, s.out_channels, reduction(s), kBlockC, packed);
}

void conv2d_nchw_pixel_tile(const Conv2dShape& s, const float* in, const float* packed, float* out,
                            const Epilogue& ep, ThreadPool* pool) {
  const int64_t K = reduction(s), plane = s.out_h() * s.out_w();
  const int64_t in_image = s.in_channels * s.in_h * s.in_w, out_image = s.out_channels * plane;
#if defined(__AVX512F__)
  for (int64_t n = 0; n < s.batch; ++n) {
    Job j{s, in + n * in_image, packed, out + n * out_image, ep.residual ? ep.residual + n * out_image : nullptr,
          ep, K, plane, (plane + kTileP - 1) / kTileP, thread_count(pool) > 1};
    run_image(j, pool);
  }
#else
  // Without AVX-512 (a build for an older --march that was handed this kernel by a tuning file): the
  // same packed weights through plain loops, then the epilogue.
  (void)pool;
  std::vector<float> col(static_cast<size_t>(K * kPanelW));
  for (int64_t n = 0; n < s.batch; ++n) {
    float* o = out + n * out_image;
    for (int64_t p0 = 0; p0 < plane; p0 += kTileP) {
      const int pixels = static_cast<int>(std::min<int64_t>(kTileP, plane - p0));
      detail::pack_im2col_panel(s, in + n * in_image, p0, pixels, kPanelW, col.data());
      for (int64_t m = 0; m < s.out_channels; ++m) {
        const float* w = packed + (m / kBlockC) * K * kBlockC + m % kBlockC;
        for (int r = 0; r < pixels; ++r) {
          float acc = 0.0f;
          for (int64_t k = 0; k < K; ++k) acc += col[k * kPanelW + r] * w[k * kBlockC];
          o[m * plane + p0 + r] = acc;
        }
      }
    }
    Epilogue e = ep;
    if (e.residual) e.residual += n * out_image;
    apply_epilogue_planar(o, s.out_channels, plane, e);
  }
#endif
}

}  // namespace tessel::rt
