// Winograd F(4x4, 3x3) convolution (NCHW, stride 1): 6x6 input tiles, 36 GEMMs over channels.
// Transforms are vectorised across tiles (lanes = tiles): the input transform 8 at a time with masked
// gathers for padding and edges, the output transform 8 or (AVX-512) 16 at a time;
// the weight transform U = G g G^T is done once at pack time into 36 packed GEMM A operands.
#include <immintrin.h>

#include <algorithm>

#include "plane_rows.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"
#include "tessel/rt/gemm.h"

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

struct WinoPlan {
  int64_t oh, ow, tiles_w, tiles, block, n_blocks, b_cols;  // b_cols: block rounded up to 16
};

WinoPlan make_plan(const Conv2dShape& s, int threads) {
  WinoPlan p;
  p.oh = s.out_h();
  p.ow = s.out_w();
  p.tiles_w = ceil_div(p.ow, kOut);
  p.tiles = ceil_div(p.oh, kOut) * p.tiles_w;
  // Transformed input and GEMM output of one block stay in L2 (~1 MB together).
  const int64_t per_tile = kXi * std::max(s.in_channels, s.out_channels) * 4 * 2;
  const int64_t block_max = std::max<int64_t>(16, (1 << 20) / per_tile / 8 * 8);
  p.n_blocks = ceil_div(p.tiles, block_max);
  if (threads > 1) p.n_blocks = std::min(ceil_div(p.tiles, 8), ceil_div(p.n_blocks, threads) * threads);
  p.block = ceil_div(ceil_div(p.tiles, p.n_blocks), 8) * 8;
  p.n_blocks = ceil_div(p.tiles, p.block);
  p.b_cols = ceil_div(p.block, 16) * 16;
  return p;
}

// Transforms 8 tiles [t, t+8) of every input channel into V (36 packed-B operands, Cin x block).
void transform_input(const Conv2dShape& s, const WinoPlan& p, const float* in, int64_t t, int64_t t_end,
                     int64_t local, float* V) {
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
  const int64_t xi_stride = s.in_channels * p.b_cols;
  const int64_t panel_off = (local / 16) * s.in_channels * 16 + local % 16;
  __m256i idx[kTile][kTile];
  __m256 mask[kTile][kTile];
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
  for (int64_t ci = 0; ci < s.in_channels; ++ci) {
    const float* plane = in + ci * s.in_h * s.in_w;
    __m256 d[kTile][kTile], tmp[kTile][kTile], v[kTile][kTile];
    for (int r = 0; r < kTile; ++r)
      for (int c = 0; c < kTile; ++c)
        d[r][c] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), plane, idx[r][c], mask[r][c], 4);
    for (int c = 0; c < kTile; ++c) input_1d(&d[0][c], kTile, &tmp[0][c], kTile);  // B^T d
    for (int i = 0; i < kTile; ++i) input_1d(&tmp[i][0], 1, &v[i][0], 1);           // (B^T d) B
    float* dst = V + ci * 16 + panel_off;
    for (int i = 0; i < kTile; ++i)
      for (int j = 0; j < kTile; ++j) _mm256_storeu_ps(dst + (i * kTile + j) * xi_stride, v[i][j]);
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
// GCC 12's own intrinsic headers trip -Wmaybe-uninitialized on the 512-bit shuffles; nothing here is.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
#pragma GCC diagnostic pop
#endif

// Inverse-transforms T::L tiles [t, t_end) of output channels [co0, co1) from M (36 x Cout x block) into
// the output (reads M up to T::L floats past the block: the buffers have that slack).
template <class T>
void transform_output(const Conv2dShape& s, const WinoPlan& p, const float* M, int64_t t, int64_t t_end,
                      int64_t local, float* out, const float* res, const Epilogue& ep, int64_t co0, int64_t co1) {
  using V = typename T::V;
  constexpr int ld = 4 * T::L + 8;  // a row of 4 L pixels + slack for store_tile_rows' last 8-wide load
  const int64_t xi_stride = s.out_channels * p.block;
  const int lanes = static_cast<int>(t_end - t);
  for (int64_t co = co0; co < co1; ++co) {
    V m[kTile][kTile], tmp[kOut][kTile], y[kOut][kOut];
    const float* src = M + co * p.block + local;
    for (int i = 0; i < kTile; ++i)
      for (int j = 0; j < kTile; ++j) m[i][j] = T::loadu(src + (i * kTile + j) * xi_stride);
    for (int j = 0; j < kTile; ++j) output_1d<T>(&m[0][j], kTile, &tmp[0][j], kTile);
    for (int i = 0; i < kOut; ++i) output_1d<T>(&tmp[i][0], 1, &y[i][0], 1);
    const V bias = T::set1(ep.bias ? ep.bias[co] : 0.0f);
    alignas(64) float buf[kOut][ld] = {};
    for (int i = 0; i < kOut; ++i)
      tiles_to_row(T::add(y[i][0], bias), T::add(y[i][1], bias), T::add(y[i][2], bias), T::add(y[i][3], bias),
                   buf[i]);
    store_tile_rows(p, t, lanes, &buf[0][0], ld, co, out, res, ep);
  }
}

}  // namespace

size_t conv2d_winograd_f43_packed_size(const Conv2dShape& s) {
  return kXi * packed_a_size(s.out_channels, s.in_channels);
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
  const size_t one = packed_a_size(Co, Ci);
  for (int xi = 0; xi < kXi; ++xi) pack_a(false, Co, Ci, u.data() + xi * Co * Ci, Ci, packed + xi * one);
}

namespace {

// The output transform's tiles per call: 16 per zmm with AVX-512, else 8 per ymm.
constexpr int64_t kOutputTiles = planes::VecWide::L;
constexpr auto output_tiles = transform_output<planes::VecWide>;

// All tiles in one block, the work split by phase instead of by tiles: input transform over groups of
// 8 tiles, the 36 GEMMs over xi, the output transform over output channels. On small maps (few tiles,
// many channels) the transformed weights (36 x Cout x Cin floats, 9.4 MB at 256 channels) dominate;
// split by tiles, every thread would stream all of them, split by xi each is read once.
void winograd_by_phase(const Conv2dShape& s, const WinoPlan& p, const float* in, const float* packed,
                       float* out, const Epilogue& ep, ThreadPool* pool) {
  const size_t a_size = packed_a_size(s.out_channels, s.in_channels);
  static thread_local AlignedBuffer v_buf, m_buf;
  float* V = v_buf.ensure(static_cast<size_t>(kXi * s.in_channels * p.b_cols));
  float* M = m_buf.ensure(static_cast<size_t>(kXi * s.out_channels * p.block + 16));
  const int64_t groups = ceil_div(p.tiles, 8);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* in_n = in + n * s.in_channels * s.in_h * s.in_w;
    float* out_n = out + n * s.out_channels * p.oh * p.ow;
    const float* res_n = ep.residual ? ep.residual + n * s.out_channels * p.oh * p.ow : nullptr;
    parallel_for(pool, groups, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g)
        transform_input(s, p, in_n, g * 8, std::min(g * 8 + 8, p.tiles), g * 8, V);
    });
    parallel_for(pool, kXi, [&](int64_t x0, int64_t x1) {
      for (int64_t xi = x0; xi < x1; ++xi)
        sgemm_packed_ab(s.out_channels, p.tiles, s.in_channels, 1.0f, packed + xi * a_size,
                        V + xi * s.in_channels * p.b_cols, 0.0f, M + xi * s.out_channels * p.block, p.block);
    });
    parallel_for(pool, s.out_channels, [&](int64_t c0, int64_t c1) {
      for (int64_t t = 0; t < p.tiles; t += kOutputTiles)
        output_tiles(s, p, M, t, std::min(t + kOutputTiles, p.tiles), t, out_n, res_n, ep, c0, c1);
    });
  }
}

}  // namespace

void conv2d_winograd_f43_avx2(const Conv2dShape& s, const float* in, const float* packed, float* out,
                              const Epilogue& ep, ThreadPool* pool) {
  if (thread_count(pool) > 1) {
    const WinoPlan one = make_plan(s, 1);
    if (one.n_blocks == 1) return winograd_by_phase(s, one, in, packed, out, ep, pool);
  }
  const WinoPlan p = make_plan(s, thread_count(pool));
  const size_t a_size = packed_a_size(s.out_channels, s.in_channels);
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* in_n = in + n * s.in_channels * s.in_h * s.in_w;
    float* out_n = out + n * s.out_channels * p.oh * p.ow;
    const float* res_n = ep.residual ? ep.residual + n * s.out_channels * p.oh * p.ow : nullptr;
    parallel_for(pool, p.n_blocks, [&](int64_t b0, int64_t b1) {
      static thread_local AlignedBuffer v_buf, m_buf;
      float* V = v_buf.ensure(static_cast<size_t>(kXi * s.in_channels * p.b_cols));
      float* M = m_buf.ensure(static_cast<size_t>(kXi * s.out_channels * p.block + 16));
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t t0 = blk * p.block, t1 = std::min(p.tiles, t0 + p.block);
        for (int64_t t = t0; t < t1; t += 8) transform_input(s, p, in_n, t, std::min(t + 8, t1), t - t0, V);
        for (int xi = 0; xi < kXi; ++xi)
          sgemm_packed_ab(s.out_channels, t1 - t0, s.in_channels, 1.0f, packed + xi * a_size,
                          V + xi * s.in_channels * p.b_cols, 0.0f, M + xi * s.out_channels * p.block, p.block);
        for (int64_t t = t0; t < t1; t += kOutputTiles)
          output_tiles(s, p, M, t, std::min(t + kOutputTiles, t1), t - t0, out_n, res_n, ep, 0, s.out_channels);
      }
    });
  }
}

}  // namespace tessel::rt
