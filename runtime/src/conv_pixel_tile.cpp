// Pixel-tile convolution, NCHW in and out (any groups). The register tile is 7 output pixels by up to 64
// output channels: for each step k of the reduction (input channel x kernel tap) the 7 input values are
// broadcast and 64 weights loaded as 4 zmm vectors, 28 FMAs into 28 accumulators. The weights are packed
// as [Cout/64][K][64], so a tile streams one contiguous panel; the input is read in place for 1x1
// stride-1 convs (7 consecutive pixels of one channel plane per k), through phase planes for strides 1-2
// without dilation (the padded input split by stride phase, where every tap reads a tile's pixels as 7
// consecutive floats: no im2col, ResNet-50's 3x3/2 128->128 on 56x56 1.72 -> 1.38 ms and 1x1/2 256->512
// 1.59 -> 1.23 ms on Zen 5 at 1 thread, and grouped convolutions, one group per task) and through im2col
// panels [K][8] otherwise (dilation). On the way out each 7 x 16 block is transposed in registers so that
// every output channel gets its 7 pixels as one masked store, with bias, residual and activation applied.
//
// Against im2col + GEMM (C[Cout x pixels]) this wins where the pixel count is small or K is large: the
// GEMM's 32-column tiles waste 15 of 64 columns on a 7x7 map, and its B packing is a full pass over the
// input; here 7 | 49, 196, 784, 3136 and 12544, and a 1x1 conv packs nothing. For K < 256 the transpose
// on the way out costs more than the GEMM loses (selection in conv_registry.cpp).
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "plane_rows.h"
#include "weight_blocks.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "tessel/rt/epilogue_avx2.h"
#include "tessel/rt/vmath512.h"
#endif

namespace tessel::rt {
namespace {

constexpr int kTileP = 7;         // output pixels per register tile
constexpr int kBlockC = 64;       // output channels per weight panel (4 zmm)
constexpr int kPanelW = 8;        // floats per k in an im2col panel (7 pixels + 1 pad)
constexpr int64_t kKC = 512;      // reduction block: a 512 x 64 weight panel is 128 KiB (L2)
constexpr int kTilesPerPack = 8;  // im2col panels packed together (56 pixels, [K][8] each)

int64_t reduction(const Conv2dShape& s) { return s.in_per_group() * s.kernel_h * s.kernel_w; }

// Phase planes instead of im2col panels (PhasePlanes below): every convolution with a kernel larger than
// 1x1 or a stride, strides 1-2, no dilation; the only way for grouped convolutions.
bool phase_mode(const Conv2dShape& s) {
  return !s.is_pointwise() && s.dilation_h == 1 && s.dilation_w == 1 && s.stride_h >= 1 && s.stride_h <= 2 &&
         s.stride_w >= 1 && s.stride_w <= 2 && s.kernel_h <= 7 && s.kernel_w <= 7;
}

// One group's convolution (groups == 1: the whole one).
[[maybe_unused]] Conv2dShape group_shape(const Conv2dShape& s) {
  Conv2dShape g = s;
  g.in_channels = s.in_per_group(), g.out_channels = s.out_per_group(), g.groups = 1;
  return g;
}
int64_t group_packed_floats(const Conv2dShape& s) {
  return detail::channel_blocked_size(s.out_per_group(), reduction(s), kBlockC);
}
// Where weight (group g, output channel m of the group, input channel c, tap) is packed.
int64_t packed_index(const Conv2dShape& s, int64_t g, int64_t m, int64_t c, int64_t tap) {
  const int64_t K = reduction(s), taps = s.kernel_h * s.kernel_w;
  const int64_t k = phase_mode(s) ? tap * s.in_per_group() + c : c * taps + tap;
  return g * group_packed_floats(s) + ((m / kBlockC) * K + k) * kBlockC + m % kBlockC;
}
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
// Accumulates a tile of RP pixels x NP*16 channels over the reduction steps of its input segments and
// stores it. Segment s covers seg[s].n consecutive steps: seg[s].a[k * a_ks + r] is pixel r's input at
// its step k (one segment for im2col panels and 1x1 convs read in place; one per kernel tap for phase
// planes, below); w[k * kBlockC + 16 p + l] the weight of channel 16 p + l at the k-th step over all
// segments; pf > 0 prefetches pf floats ahead on each row of a (input read in place, rows a plane apart).
// Meanwhile it prefetches (to L2) `lines` cache lines from `next` (the next weight panel's share of
// this tile), spread over the k steps.
struct Segment {
  const float* a;
  int64_t n;
};

template <int RP, int NP>
void pixel_tile(const Segment* seg, int nseg, int64_t a_ks, int pf, const float* w, const char* next, int64_t lines,
                const TileOut& t) {
  int64_t kc = 0;
  for (int s = 0; s < nseg; ++s) kc += seg[s].n;
  const int64_t per_step = (lines + kc - 1) / std::max<int64_t>(kc, 1);
  __m512 acc[RP][NP];
#pragma GCC unroll 8
  for (int r = 0; r < RP; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  int64_t k_done = 0;  // steps of the earlier segments
  for (int s = 0; s < nseg; ++s) {
    const float* a = seg[s].a;
    const int64_t n = seg[s].n;
#pragma GCC unroll 2
    for (int64_t k = 0; k < n; ++k) {
      if (pf) _mm_prefetch(reinterpret_cast<const char*>(a + k * a_ks + pf), _MM_HINT_T0);
      for (int64_t q = (k_done + k) * per_step; q < std::min(lines, (k_done + k + 1) * per_step); ++q)
        _mm_prefetch(next + q * 64, _MM_HINT_T1);
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
    w += n * kBlockC;
    k_done += n;
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

using TileFn = void (*)(const Segment*, int, int64_t, int, const float*, const char*, int64_t, const TileOut&);

// kTiles[rp - 1][np - 1]: the tile for rp pixels (in-place input needs the exact count) and np vectors.
template <int RP>
constexpr std::array<TileFn, 4> tiles_for() {
  return {pixel_tile<RP, 1>, pixel_tile<RP, 2>, pixel_tile<RP, 3>, pixel_tile<RP, 4>};
}
constexpr std::array<std::array<TileFn, 4>, kTileP> kTiles = {tiles_for<1>(), tiles_for<2>(), tiles_for<3>(),
                                                             tiles_for<4>(), tiles_for<5>(), tiles_for<6>(),
                                                             tiles_for<7>()};

// Phase planes: the zero-padded input split by stride phase, so that every kernel tap reads a tile's
// pixels (consecutive outputs of one row) as consecutive floats, with no im2col panel to pack. For
// stride s, padded row y = s i + a and column x = s j + b is phase (a, b)'s element (i, j); tap (ky, kx)
// of output (oh, ow) is phase (ky % s, kx % s) at (oh + ky / s, ow + kx / s). Only the phases some tap
// reads are built; planes [channel][phase][rows][cols], the rows those of output rows [oh0, oh1).
struct PhasePlanes {
  const float* buf = nullptr;
  int64_t rows = 0, cols = 0, oh0 = 0;
  int64_t chan_stride = 0;            // floats per channel (all its phases)
  std::vector<int64_t> tap_offset;    // per tap ky * KW + kx: its phase plane and (ky / s, kx / s)
};

struct Job {
  const Conv2dShape& s;
  const float* in;      // this image's input (this group's first channel)
  const float* packed;  // [cb][K][64] (phase planes: K tap-major, k = tap * Cin + c)
  float* out;           // this image's output (this group's first channel)
  const float* residual;
  const Epilogue& ep;
  int64_t K, plane, n_tiles;
  bool prefetch;  // several threads: pack_tiles prefetches its input rows (another core may have written them)
  int64_t row_tiles = 0;  // > 0: tiles are ceil(OW / 7) per output row (phase planes), else 7 flat pixels
};

// Output pixel of a tile's first pixel, and its pixel count.
int64_t tile_first_pixel(const Job& j, int64_t tile) {
  if (j.row_tiles == 0) return tile * kTileP;
  return tile / j.row_tiles * j.s.out_w() + tile % j.row_tiles * kTileP;
}
int tile_pixels(const Job& j, int64_t tile) {
  if (j.row_tiles == 0) return static_cast<int>(std::min<int64_t>(kTileP, j.plane - tile * kTileP));
  return static_cast<int>(std::min<int64_t>(kTileP, j.s.out_w() - tile % j.row_tiles * kTileP));
}

TileOut tile_out(const Job& j, int64_t cb, int64_t tile, int64_t k0, int64_t kc) {
  const int64_t c0 = cb * kBlockC, p0 = tile_first_pixel(j, tile);
  TileOut t;
  t.out = j.out + c0 * j.plane + p0;
  t.plane = j.plane;
  t.bias = j.ep.bias ? j.ep.bias + c0 : nullptr;
  t.residual = j.residual ? j.residual + c0 * j.plane + p0 : nullptr;
  t.ep = &j.ep;
  t.pixels = tile_pixels(j, tile);
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

// At most one segment per tap plus one (a reduction block may start and end inside a tap).
constexpr int kMaxSegments = 7 * 7 + 1;

// Channel blocks [cb0, cb1) x tiles [t0, t1); segments(tile, k0, kc, seg) writes the input segments of
// steps [k0, k0 + kc) of a tile and returns their count, a_ks the distance between steps within a
// segment (in place or phase planes: a plane; packed: a panel row). While a panel's tiles run, they
// prefetch the next panel to L2 between them: weights come from memory once per inference.
template <class Segments>
void run_tiles(const Job& j, int64_t cb0, int64_t cb1, int64_t t0, int64_t t1, const Segments& segments,
               int64_t a_ks, bool in_place) {
  const int64_t n = t1 - t0;
  Segment seg[kMaxSegments];
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
        const int nseg = segments(tile, k0, kc, seg);
        kTiles[in_place ? t.pixels - 1 : kTileP - 1][(t.channels + 15) / 16 - 1](
            seg, nseg, a_ks, in_place ? 16 : 0, w, next ? next + first * 64 : nullptr, count, t);
      }
    }
  }
}

// One segment per reduction block: a(tile) is the tile's input at step 0, steps a_ks apart.
template <class Input>
auto single_segment(const Input& a, int64_t a_ks) {
  return [&a, a_ks](int64_t tile, int64_t k0, int64_t kc, Segment* seg) {
    seg[0] = {a(tile) + k0 * a_ks, kc};
    return 1;
  };
}

void run_in_place(const Job& j, int64_t cb0, int64_t cb1, int64_t t0, int64_t t1) {
  const auto a = [&](int64_t tile) { return j.in + tile * kTileP; };
  run_tiles(j, cb0, cb1, t0, t1, single_segment(a, j.plane), j.plane, true);
}

template <class Panels>
void run_panels(const Job& j, int64_t cb0, int64_t cb1, int64_t t0, int64_t t1, const Panels& panels) {
  run_tiles(j, cb0, cb1, t0, t1, single_segment(panels, kPanelW), kPanelW, false);
}

// The phases some tap reads: their count, and index[a * sw + b] = phase (a, b)'s plane (-1: none reads it).
int64_t phase_count(const Conv2dShape& s, std::vector<int>* index) {
  const int64_t sh = s.stride_h, sw = s.stride_w;
  index->assign(static_cast<size_t>(sh * sw), -1);
  int count = 0;
  for (int64_t ky = 0; ky < s.kernel_h; ++ky)
    for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
      int& i = (*index)[static_cast<size_t>(ky % sh * sw + kx % sw)];
      if (i < 0) i = count++;
    }
  return count;
}
// Rows and columns of a phase plane for output rows [oh0, oh1) (the taps below the last row and right of the
// last column add (K - 1) / s), and the floats of all channels' planes.
int64_t phase_rows(const Conv2dShape& s, int64_t oh0, int64_t oh1) { return oh1 - oh0 + (s.kernel_h - 1) / s.stride_h; }
int64_t phase_cols(const Conv2dShape& s) { return s.out_w() + (s.kernel_w - 1) / s.stride_w; }
size_t phase_floats(const Conv2dShape& s, int64_t cin, int64_t oh0, int64_t oh1) {
  std::vector<int> index;
  return static_cast<size_t>(cin * phase_count(s, &index) * phase_rows(s, oh0, oh1) * phase_cols(s));
}

// Builds the phase planes of output rows [oh0, oh1) of input channels [0, cin) into dst (phase_floats of
// them): 16 columns per masked load (stride 2: two loads' even lanes), padding written as zeros.
// planes::fill_row (plane_rows.h) splits a row the same way but writes every column phase in vector-wide
// rows; here only the phases some tap reads are built, compact (a 1x1/2 builds one): through fill_row
// ResNet-50's 1x1/2 256->512 on 56x56 took 1.35 instead of 1.22 ms (Zen 5, 1 thread).
void build_phases(const Conv2dShape& s, const float* in, int64_t cin, int64_t oh0, int64_t oh1, float* dst,
                  PhasePlanes* out) {
  std::vector<int> index;
  const int64_t nph = phase_count(s, &index), sh = s.stride_h, sw = s.stride_w, H = s.in_h, W = s.in_w;
  const int64_t rows = phase_rows(s, oh0, oh1), cols = phase_cols(s), plane = rows * cols;
  out->buf = dst, out->rows = rows, out->cols = cols, out->oh0 = oh0, out->chan_stride = nph * plane;
  out->tap_offset.clear();
  for (int64_t ky = 0; ky < s.kernel_h; ++ky)
    for (int64_t kx = 0; kx < s.kernel_w; ++kx)
      out->tap_offset.push_back(index[static_cast<size_t>(ky % sh * sw + kx % sw)] * plane + ky / sh * cols + kx / sw);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t c = 0; c < cin; ++c) {
    const float* src_plane = in + c * H * W;
    for (int64_t a = 0; a < sh; ++a)
      for (int64_t b = 0; b < sw; ++b) {
        const int ph = index[static_cast<size_t>(a * sw + b)];
        if (ph < 0) continue;
        for (int64_t i = 0; i < rows; ++i) {
          float* d = dst + c * out->chan_stride + ph * plane + i * cols;
          const int64_t y = (oh0 + i) * sh + a - s.pad_top;  // input row
          if (y < 0 || y >= H) {
            std::fill(d, d + cols, 0.0f);
            continue;
          }
          const float* src = src_plane + y * W;
          // Column j reads input column x = j * sw + b - pad_left: 16 columns at a time from one (stride 1) or
          // two (stride 2: the even lanes) masked loads, input columns outside the row read as zero. Narrow
          // planes (a 14x14 map at stride 2: 8 columns) took a scalar loop per column before, which cost
          // ResNeXt-50's grouped 3x3/2 more than its products.
          if (sw <= 2) {
            for (int64_t j = 0; j < cols; j += 16) {
              const int64_t x0 = j * sw + b - s.pad_left;
              __m512 v = _mm512_maskz_loadu_ps(vrange_mask512(x0, W), src + x0);
              if (sw == 2)
                v = _mm512_permutex2var_ps(v, evens, _mm512_maskz_loadu_ps(vrange_mask512(x0 + 16, W), src + x0 + 16));
              _mm512_mask_storeu_ps(d + j, vtail_mask512(cols - j), v);
            }
            continue;
          }
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t x = j * sw + b - s.pad_left;
            d[j] = x >= 0 && x < W ? src[x] : 0.0f;
          }
        }
      }
  }
}

// The input segments of a tile's steps [k0, k0 + kc) in phase planes (K tap-major: k = tap * Cin + c).
struct PhaseSegments {
  const Job& j;
  const PhasePlanes& p;
  int operator()(int64_t tile, int64_t k0, int64_t kc, Segment* seg) const {
    const int64_t cin = j.s.in_channels;
    const int64_t base = (tile / j.row_tiles - p.oh0) * p.cols + tile % j.row_tiles * kTileP;
    int n = 0;
    for (int64_t k = k0; k < k0 + kc;) {
      const int64_t tap = k / cin, c = k % cin, len = std::min(cin - c, k0 + kc - k);
      seg[n++] = {p.buf + p.tap_offset[static_cast<size_t>(tap)] + c * p.chan_stride + base, len};
      k += len;
    }
    return n;
  }
};

// Output rows [oh0, oh1), channel blocks [cb0, cb1): builds the phase planes of those rows into this
// thread's scratch, then runs the tiles a few at a time (their inputs stay in L2) over every block.
// The rows go in bands whose planes fit half of L2 (kPhaseBandBytes).
constexpr int64_t kPhaseBandBytes = 512 << 10;

void run_phase_rows(const Job& j, int64_t oh0, int64_t oh1, int64_t cb0, int64_t cb1) {
  if (oh0 >= oh1 || cb0 >= cb1) return;
  static thread_local AlignedBuffer scratch;
  // phase_floats is linear in the rows: one output row's share of them, and the taps' rows below a band.
  const int64_t halo = (j.s.kernel_h - 1) / j.s.stride_h;
  const int64_t row_bytes =
      static_cast<int64_t>(phase_floats(j.s, j.s.in_channels, 0, 1) * sizeof(float)) / (1 + halo);
  const int64_t band = std::max<int64_t>(1, kPhaseBandBytes / row_bytes - halo);
  for (int64_t r0 = oh0; r0 < oh1; r0 += band) {
    const int64_t r1 = std::min(oh1, r0 + band);
    PhasePlanes phases;
    build_phases(j.s, j.in, j.s.in_channels, r0, r1, scratch.ensure(phase_floats(j.s, j.s.in_channels, r0, r1)),
                 &phases);
    const PhaseSegments segments{j, phases};
    const int64_t t0 = r0 * j.row_tiles, t1 = r1 * j.row_tiles;
    for (int64_t b0 = t0; b0 < t1; b0 += kTilesPerPack)
      run_tiles(j, cb0, cb1, b0, std::min(t1, b0 + kTilesPerPack), segments, phases.chan_stride, true);
  }
}

// Packs the im2col panels of tiles [t0, t1) into dst (tile t's [K][8] panel at (t - t0) * K * 8). A tile
// inside one output row is one masked load per reduction step (stride 1: 7 consecutive input values;
// stride 2: 14, of which the even lanes are kept); a tile across rows, or another stride, goes value
// by value.
void pack_tiles(const Job& j, int64_t t0, int64_t t1, float* dst) {
  const Conv2dShape& s = j.s;
  const int64_t H = s.in_h, W = s.in_w, OW = s.out_w(), sw = s.stride_w;
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
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
            const __mmask16 valid = g.lanes & vrange_mask512(base, W);
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
    if (threads > 1 && ncb < int64_t{ThreadPool::kChunksPerThread} * threads && j.s.out_channels % kBlockC == 0) {
      // Few whole channel blocks: one task per (block, tile), blocks outermost, so each thread writes whole
      // output planes but those of one shared block (the tile chunks below split every plane between the
      // threads on a 7x7 map, a cache line each written by both) and the shares are equal to a tile (1152 -> 320
      // on 7x7, 5 blocks: tile chunks of 3 and 4 gave one thread 20 of 35 block-tiles). Zen 4, 2 threads: that
      // layer 205-211 -> 169-178 us (kernel benchmark), MnasNet and EfficientNet-B0 0.99x. Partial blocks keep
      // the chunks: with 80 or 96 channels one thread would get the narrow block alone.
      const int64_t units = ncb * j.n_tiles;
      parallel_for(pool, units, [&](int64_t a, int64_t b) {
        while (a < b) {
          const int64_t cb = a / j.n_tiles, t0 = a % j.n_tiles, t1 = std::min(j.n_tiles, t0 + (b - a));
          run_in_place(j, cb, cb + 1, t0, t1);
          a += t1 - t0;
        }
      });
      return;
    }
    for_blocks(j, pool, [&](int64_t c0, int64_t c1, int64_t t0, int64_t t1) { run_in_place(j, c0, c1, t0, t1); });
    return;
  }
  if (j.row_tiles > 0) {
    // Phase planes: each thread builds those of its own output rows (or, on a small map, of all rows for
    // its own channel blocks), so no thread reads planes another core wrote.
    const int64_t OH = j.s.out_h();
    if (threads == 1) {
      run_phase_rows(j, 0, OH, 0, ncb);
      return;
    }
    const bool by_rows = OH >= 8 * threads || ncb < threads;
    parallel_per_thread(pool, threads, [&](int r) {
      if (by_rows)
        run_phase_rows(j, r * OH / threads, (r + 1) * OH / threads, 0, ncb);
      else
        run_phase_rows(j, 0, OH, r * ncb / threads, (r + 1) * ncb / threads);
    });
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

bool conv2d_nchw_pixel_tile_applicable(const Conv2dShape& s) {
  return s.groups == 1 || (!s.is_depthwise() && phase_mode(s));
}

size_t conv2d_nchw_pixel_tile_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>(s.groups * group_packed_floats(s));
}

void conv2d_nchw_pixel_tile_pack(const Conv2dShape& s, const float* weights, float* packed) {
  if (!phase_mode(s)) {
    detail::pack_channel_blocked(weights, s.out_channels, reduction(s), kBlockC, packed);
    return;
  }
  std::fill(packed, packed + conv2d_nchw_pixel_tile_packed_size(s), 0.0f);
  const int64_t taps = s.kernel_h * s.kernel_w, cin = s.in_per_group(), cout = s.out_per_group();
  for (int64_t g = 0; g < s.groups; ++g)
    for (int64_t m = 0; m < cout; ++m)
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t tap = 0; tap < taps; ++tap)
          packed[packed_index(s, g, m, c, tap)] = weights[((g * cout + m) * cin + c) * taps + tap];
}

void conv2d_nchw_pixel_tile(const Conv2dShape& s, const float* in, const float* packed, float* out,
                            const Epilogue& ep, ThreadPool* pool) {
  const int64_t K = reduction(s), plane = s.out_h() * s.out_w();
  const int64_t in_image = s.in_channels * s.in_h * s.in_w, out_image = s.out_channels * plane;
#if defined(__AVX512F__)
  const int64_t row_tiles = phase_mode(s) ? (s.out_w() + kTileP - 1) / kTileP : 0;
  const int64_t n_tiles = row_tiles ? s.out_h() * row_tiles : (plane + kTileP - 1) / kTileP;
  if (s.groups == 1) {
    for (int64_t n = 0; n < s.batch; ++n) {
      Job j{s, in + n * in_image, packed, out + n * out_image, ep.residual ? ep.residual + n * out_image : nullptr,
            ep, K, plane, n_tiles, thread_count(pool) > 1, row_tiles};
      run_image(j, pool);
    }
    return;
  }
  // Grouped: one (image, group) per task, each a convolution of its own on one thread.
  const Conv2dShape gs = group_shape(s);
  const int64_t cin = gs.in_channels, cout = gs.out_channels, in_plane = s.in_h * s.in_w;
  parallel_for(pool, s.batch * s.groups, [&](int64_t b, int64_t e) {
    for (int64_t ng = b; ng < e; ++ng) {
      const int64_t n = ng / s.groups, g = ng % s.groups, out_off = n * out_image + g * cout * plane;
      Epilogue eg = ep;
      eg.bias = ep.bias ? ep.bias + g * cout : nullptr;
      Job j{gs, in + n * in_image + g * cin * in_plane, packed + g * group_packed_floats(s), out + out_off,
            ep.residual ? ep.residual + out_off : nullptr, eg, K, plane, n_tiles, false, row_tiles};
      run_phase_rows(j, 0, s.out_h(), 0, channel_blocks(gs));
    }
  });
#else
  // Without AVX-512 (a build for an older --march that was handed this kernel by a tuning file): the
  // same packed weights through plain loops, then the epilogue.
  (void)pool;
  (void)K;
  const int64_t taps = s.kernel_h * s.kernel_w, cin = s.in_per_group(), cout = s.out_per_group();
  for (int64_t n = 0; n < s.batch; ++n) {
    float* o = out + n * out_image;
    for (int64_t g = 0; g < s.groups; ++g)
      for (int64_t m = 0; m < cout; ++m)
        for (int64_t oh = 0; oh < s.out_h(); ++oh)
          for (int64_t ow = 0; ow < s.out_w(); ++ow) {
            float acc = 0.0f;
            for (int64_t c = 0; c < cin; ++c)
              for (int64_t tap = 0; tap < taps; ++tap) {
                const int64_t ih = oh * s.stride_h - s.pad_top + tap / s.kernel_w * s.dilation_h;
                const int64_t iw = ow * s.stride_w - s.pad_left + tap % s.kernel_w * s.dilation_w;
                if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
                const float x = in[n * in_image + ((g * cin + c) * s.in_h + ih) * s.in_w + iw];
                acc += x * packed[packed_index(s, g, m, c, tap)];
              }
            o[(g * cout + m) * plane + oh * s.out_w() + ow] = acc;
          }
    Epilogue e = ep;
    if (e.residual) e.residual += n * out_image;
    apply_epilogue_planar(o, s.out_channels, plane, e);
  }
#endif
}

}  // namespace tessel::rt
