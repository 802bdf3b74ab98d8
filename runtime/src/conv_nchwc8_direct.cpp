// Direct convolution in NCHWc8: tiles of 2 output-channel blocks x 6 pixels or 1 block x 12 pixels; built
// with AVX-512, row tiles of 4 or 2 blocks x 12 pixels in zmm registers (two blocks per register). Grouped
// convolutions run as "block groups" of whole 8-channel blocks (block_groups): each output block reduces over
// its group's input blocks only, and groups narrower than a block are merged with zeros between them.
// The reduction over (input block, kernel row, kernel column) runs from a per-row table of valid taps,
// so the micro-kernel is one flat loop whose accumulators stay in registers; padding taps are dropped
// from the table instead of being tested in the loop. 1x1 stride-1 unpadded convs are run as one long
// row over the flattened H*W map (no short-row remainders on 7x7 / 14x14 maps).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue_avx2.h"

namespace tessel::rt {
namespace {

constexpr int kChunkAlign = 12;  // flattened rows are chunked in multiples of the widest tile

// One tap of the reduction: where its input vectors and its 8x8 weight blocks start.
struct Tap {
  int64_t in_off;  // floats from the image start to input (block cb, row ih, column kx * dil) at ow0 = 0
  int64_t w_off;   // floats from the output block's weights to this tap's [ci][co] 8x8 block
};

struct DirectCtx {
  const Conv2dShape& s;  // possibly the flattened 1x1 shape
  const float* in;       // one image, NCHWc8
  const float* w;        // packed [ob][cb][ky][kx][ci][co]
  float* out;            // one image, NCHWc8
  const float* res;
  const Epilogue& ep;
  const float* bias;   // (out_blocks + 1) * 8 floats: the biases, zeros where there are none
  const float* lohi;   // the clamp's bounds for ReLU / Clip, else null
  int64_t in_blocks, out_blocks, oh_count, ow_count;
  int64_t w_block_stride;  // floats between consecutive output blocks' weights
  const float* w_next = nullptr;  // the weights of the output blocks the task after this one computes, or null
};

// Where a tile's software prefetches (prefetcht1, into L2) start: one 64-byte line per tap walks the next task's
// weights (a tap reads 4 lines of weights per block, so any 4 x NB consecutive tiles of a task fetch all of
// the next one's), which in a model come from L3 or DRAM. Without a next task, the tile's own weights (already
// cached). bench/ab.py, Zen 2, 1 thread: ResNet-18 0.96-0.97, ResNet-50 0.98; isolated (weights warm) 512->512
// 3x3 on 7x7 2918 -> 2647-2724 us, stride 2 from 14x14 3333 -> 3161-3192.
const char* prefetch_start(const DirectCtx& c, int64_t ob, int64_t tile, int n_taps, int nb = 2) {
  if (!c.w_next) return reinterpret_cast<const char*>(c.w + ob * c.w_block_stride);
  return reinterpret_cast<const char*>(c.w_next) + (tile % (4 * nb)) * n_taps * 64;
}

// Taps of output row oh (and, when ow >= 0, only those whose column is inside the input for pixel ow).
int build_taps(const DirectCtx& c, int64_t oh, int64_t ow, std::vector<Tap>& taps) {
  const Conv2dShape& s = c.s;
  const int64_t plane = s.in_h * s.in_w * 8;
  taps.clear();
  for (int64_t cb = 0; cb < c.in_blocks; ++cb)
    for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
      const int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
      if (ih < 0 || ih >= s.in_h) continue;
      for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
        if (ow >= 0) {
          const int64_t iw = ow * s.stride_w - s.pad_left + kx * s.dilation_w;
          if (iw < 0 || iw >= s.in_w) continue;
        }
        taps.push_back({cb * plane + (ih * s.in_w + kx * s.dilation_w) * 8,
                        ((cb * s.kernel_h + ky) * s.kernel_w + kx) * 64});
      }
    }
  return static_cast<int>(taps.size());
}

// The reduction of one tile over all its taps, in inline assembly. Written with intrinsics, GCC kept the
// accumulator array in memory (__m256 may alias the input floats) and stored all twelve back after every
// tap, or, with its loops unrolled early, spilled them: 10-12 % slower on every shape. Here the
// accumulators are ymm0-ymm11 for the whole loop: block 0 pixel j in ymm<j>, block 1 pixel j in ymm<6+j>
// (NB == 2, NW <= 6; NB == 1 takes up to 12 pixels). `.if` on the template arguments drops the unused
// lines, so one text serves every tile shape.
#define TESSEL_C8_PIX2(J, J6, ADDR, XO)                   \
  ".if %c[nw] > " #J "\n\t"                               \
  "vbroadcastss " #XO ADDR ", %%ymm15\n\t"                \
  "vfmadd231ps %%ymm13, %%ymm15, %%ymm" #J "\n\t"         \
  ".if %c[nb] > 1\n\t"                                    \
  "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #J6 "\n\t"        \
  ".endif\n\t"                                            \
  ".endif\n\t"
#define TESSEL_C8_PIX1(J, ADDR, XO)                       \
  ".if %c[nw] > " #J "\n\t"                               \
  "vbroadcastss " #XO ADDR ", %%ymm15\n\t"                \
  "vfmadd231ps %%ymm13, %%ymm15, %%ymm" #J "\n\t"         \
  ".endif\n\t"
#define TESSEL_C8_STEP(XO, WO)                                                                        \
  "vmovaps " #WO "(%%rdx), %%ymm13\n\t"                                                             \
  ".if %c[nb] > 1\n\t"                                                                              \
  "vmovaps " #WO "(%%rdx,%[ws]), %%ymm14\n\t"                                                       \
  ".endif\n\t"                                                                                      \
  TESSEL_C8_PIX2(0, 6, "(%%rax)", XO) TESSEL_C8_PIX2(1, 7, "(%%rax,%[p])", XO)                      \
  TESSEL_C8_PIX2(2, 8, "(%%rax,%[p],2)", XO) TESSEL_C8_PIX2(3, 9, "(%%r11)", XO)                    \
  TESSEL_C8_PIX2(4, 10, "(%%r11,%[p])", XO) TESSEL_C8_PIX2(5, 11, "(%%r11,%[p],2)", XO)             \
  TESSEL_C8_PIX1(6, "(%%r10)", XO) TESSEL_C8_PIX1(7, "(%%r10,%[p])", XO)                            \
  TESSEL_C8_PIX1(8, "(%%r10,%[p],2)", XO) TESSEL_C8_PIX1(9, "(%%r9)", XO)                           \
  TESSEL_C8_PIX1(10, "(%%r9,%[p])", XO) TESSEL_C8_PIX1(11, "(%%r9,%[p],2)", XO)
// The tile's tail, per accumulator: block 0 pixel J (ymm<J>, at J*32 bytes) and block 1 pixel J (ymm<J6>, the
// block stride %%rdx further). OP is the instruction, applied as `OP <memory or register>, ymmJ[, ymmJ]`.
#define TESSEL_C8_RES(J, J6)                                 \
  ".if %c[nw] > " #J "\n\t"                                  \
  "vaddps " #J "*32(%%rax), %%ymm" #J ", %%ymm" #J "\n\t"    \
  ".if %c[nb] > 1\n\t"                                       \
  "vaddps " #J "*32(%%rax,%%rdx), %%ymm" #J6 ", %%ymm" #J6 "\n\t" \
  ".endif\n\t"                                               \
  ".endif\n\t"
#define TESSEL_C8_CLAMP(J, J6)                                                          \
  ".if %c[nw] > " #J "\n\t"                                                             \
  "vmaxps %%ymm12, %%ymm" #J ", %%ymm" #J "\n\t"                                        \
  "vminps %%ymm13, %%ymm" #J ", %%ymm" #J "\n\t"                                        \
  ".if %c[nb] > 1\n\t"                                                                  \
  "vmaxps %%ymm12, %%ymm" #J6 ", %%ymm" #J6 "\n\t"                                      \
  "vminps %%ymm13, %%ymm" #J6 ", %%ymm" #J6 "\n\t"                                      \
  ".endif\n\t"                                                                          \
  ".endif\n\t"
#define TESSEL_C8_OUT(J, J6)                                 \
  ".if %c[nw] > " #J "\n\t"                                  \
  "vmovups %%ymm" #J ", " #J "*32(%%rax)\n\t"                \
  ".if %c[nb] > 1\n\t"                                       \
  "vmovups %%ymm" #J6 ", " #J "*32(%%rax,%%rdx)\n\t"         \
  ".endif\n\t"                                               \
  ".endif\n\t"
#define TESSEL_C8_INIT(J, J6)                                \
  ".if %c[nw] > " #J "\n\t"                                  \
  "vmovaps %%ymm12, %%ymm" #J "\n\t"                         \
  ".if %c[nb] > 1\n\t"                                       \
  "vmovaps %%ymm13, %%ymm" #J6 "\n\t"                        \
  ".endif\n\t"                                               \
  ".endif\n\t"
#define TESSEL_C8_ALL(M)                                                                           \
  M(0, 6) M(1, 7) M(2, 8) M(3, 9) M(4, 10) M(5, 11) M(6, 12) M(7, 13) M(8, 14) M(9, 15) M(10, 16) \
  M(11, 17)

// The tile's start (accumulators at the biases, then the tap loop's label 1) and its end (the prefetch of the
// next task's weights, the loop's step over the taps, then residual, clamp and store), shared by both tap loops.
#define TESSEL_C8_HEAD                  \
  "mov (%[io]), %%rax\n\t"             \
  "vmovaps (%%rax), %%ymm12\n\t"       \
  "vmovaps 32(%%rax), %%ymm13\n\t"     \
  TESSEL_C8_ALL(TESSEL_C8_INIT)         \
  "1:\n\t"
#define TESSEL_C8_TAIL                  \
  "prefetcht1 (%[pf])\n\t"             \
  "add $64, %[pf]\n\t"                 \
  "add $16, %[tp]\n\t"                 \
  "dec %[n]\n\t"                       \
  "jnz 1b\n\t"                         \
  "mov 16(%[io]), %%rax\n\t"           \
  "mov 24(%[io]), %%rdx\n\t"           \
  "test %%rax, %%rax\n\t"              \
  "jz 2f\n\t"                          \
  TESSEL_C8_ALL(TESSEL_C8_RES)          \
  "2:\n\t"                             \
  "mov 32(%[io]), %%rax\n\t"           \
  "test %%rax, %%rax\n\t"              \
  "jz 3f\n\t"                          \
  "vbroadcastss (%%rax), %%ymm12\n\t"  \
  "vbroadcastss 4(%%rax), %%ymm13\n\t" \
  TESSEL_C8_ALL(TESSEL_C8_CLAMP)        \
  "3:\n\t"                             \
  "mov 8(%[io]), %%rax\n\t"            \
  TESSEL_C8_ALL(TESSEL_C8_OUT)

// A tap's addresses for a row tile (both register widths): rax the input of pixels 0-2 (+ 0, 1, 2 pixel strides),
// r11, r10, r9 those of pixels 3-5, 6-8, 9-11; rdx the tile's first block's weights.
#define TESSEL_C8_TAP_BASES             \
  "mov (%[tp]), %%rax\n\t"             \
  "mov 8(%[tp]), %%rdx\n\t"            \
  "lea (%[in],%%rax,4), %%rax\n\t"     \
  "lea (%[w],%%rdx,4), %%rdx\n\t"      \
  "lea (%%rax,%[p],2), %%r11\n\t"      \
  "add %[p], %%r11\n\t"                \
  "lea (%%r11,%[p],2), %%r10\n\t"      \
  "add %[p], %%r10\n\t"                \
  "lea (%%r10,%[p],2), %%r9\n\t"       \
  "add %[p], %%r9\n\t"
// A tap's reduction steps: one input value per pixel (STEPS 1) or the 8 channels of an input block (STEPS 8).
#define TESSEL_C8_TAP_STEPS(STEP)                                              \
  STEP(0, 0)                                                                   \
  ".if %c[steps] > 1\n\t"                                                     \
  STEP(4, 32) STEP(8, 64) STEP(12, 96) STEP(16, 128) STEP(20, 160) STEP(24, 192) \
  STEP(28, 224)                                                                \
  ".endif\n\t"

// Where a tile's results go (the assembly reads these fields at fixed offsets): block b (0 or 1) pixel j of the
// tile is at out + b * block_bytes + j * 32 bytes, its residual (when res is not null) at the same offsets from
// res; every accumulator starts at its block's 8 biases; lohi (when not null) holds the clamp's lower and upper
// bounds, applied after the residual.
struct TileIO {
  const float* bias;    // offset 0: 8 floats for block 0, then 8 for block 1
  float* out;           // offset 8
  const float* res;     // offset 16
  int64_t block_bytes;  // offset 24
  const float* lohi;    // offset 32
};

// The tile: output block b pixel j summed over the taps (n_taps > 0), plus its bias, its residual and the
// clamp of `io`, stored. Pixel j of tap t reads in + taps[t].in_off + j * pix_bytes / 4 (+ ci), block b reads
// w + taps[t].w_off + b * w_stride_bytes / 4. With NB == 2 only pixels 0..5 exist, so ymm12-13 are free
// for the bias and clamp vectors (J6 > 11 never assembles).
// STEPS 8: a tap is one 8-channel input block (8 broadcasts per pixel, 8 weight vectors per block); STEPS 1: a
// tap is one input value per pixel (an NCHW input of a few channels, the stems: one weight vector per block).
template <int NB, int NW, int STEPS>
void reduce_tile(const Tap* taps, int64_t n_taps, const float* in, const float* w, int64_t pix_bytes,
                 int64_t w_stride_bytes, const TileIO& io, const char* pf) {
  static_assert((NB == 1 && NW >= 1 && NW <= 12) || (NB == 2 && NW >= 1 && NW <= 6));
  asm volatile(
      TESSEL_C8_HEAD
      TESSEL_C8_TAP_BASES
      TESSEL_C8_TAP_STEPS(TESSEL_C8_STEP)
      TESSEL_C8_TAIL
      : [tp] "+r"(taps), [n] "+r"(n_taps), [pf] "+r"(pf)
      : [in] "r"(in), [w] "r"(w), [p] "r"(pix_bytes), [ws] "r"(w_stride_bytes), [io] "r"(&io), [nb] "i"(NB),
        [nw] "i"(NW), [steps] "i"(STEPS)
      : "rax", "rdx", "r9", "r10", "r11", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory");
}

// reduce_tile for a tile whose pixels lie anywhere in the image (a flat tile of a small map, spanning rows):
// pixel j of tap t reads px[j] + taps[t].in_off (+ ci), one base register per pixel, so NB == 2 and NW <= 6.
#define TESSEL_C8_STEP_PX(XO, WO)                                                                     \
  "vmovaps " #WO "(%%rdx), %%ymm13\n\t"                                                             \
  "vmovaps " #WO "(%%rdx,%[ws]), %%ymm14\n\t"                                                       \
  TESSEL_C8_PIX2(0, 6, "(%[p0],%%rax)", XO) TESSEL_C8_PIX2(1, 7, "(%[p1],%%rax)", XO)                \
  TESSEL_C8_PIX2(2, 8, "(%[p2],%%rax)", XO) TESSEL_C8_PIX2(3, 9, "(%[p3],%%rax)", XO)                \
  TESSEL_C8_PIX2(4, 10, "(%[p4],%%rax)", XO) TESSEL_C8_PIX2(5, 11, "(%[p5],%%rax)", XO)
template <int NW>
void reduce_tile_px(const Tap* taps, int64_t n_taps, const float* const* px, const float* w, int64_t w_stride_bytes,
                    const TileIO& io, const char* pf) {
  static_assert(NW >= 1 && NW <= 6);
  constexpr int NB = 2;
  asm volatile(
      TESSEL_C8_HEAD
      "mov (%[tp]), %%rax\n\t"
      "mov 8(%[tp]), %%rdx\n\t"
      "shl $2, %%rax\n\t"
      "lea (%[w],%%rdx,4), %%rdx\n\t"
      TESSEL_C8_STEP_PX(0, 0) TESSEL_C8_STEP_PX(4, 32) TESSEL_C8_STEP_PX(8, 64) TESSEL_C8_STEP_PX(12, 96)
      TESSEL_C8_STEP_PX(16, 128) TESSEL_C8_STEP_PX(20, 160) TESSEL_C8_STEP_PX(24, 192) TESSEL_C8_STEP_PX(28, 224)
      TESSEL_C8_TAIL
      : [tp] "+r"(taps), [n] "+r"(n_taps), [pf] "+r"(pf)
      : [w] "r"(w), [ws] "r"(w_stride_bytes), [io] "r"(&io), [p0] "r"(px[0]), [p1] "r"(px[NW > 1 ? 1 : 0]),
        [p2] "r"(px[NW > 2 ? 2 : 0]), [p3] "r"(px[NW > 3 ? 3 : 0]), [p4] "r"(px[NW > 4 ? 4 : 0]),
        [p5] "r"(px[NW > 5 ? 5 : 0]), [nb] "i"(NB), [nw] "i"(NW)
      : "rax", "rdx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory");
}

// The zmm tiles need AVX-512F, DQ (vinsertf32x8, vextractf32x8) and VL (ymm16-31).
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define TESSEL_C8_ZMM 1
#else
#define TESSEL_C8_ZMM 0
#endif
#if TESSEL_C8_ZMM
// AVX-512: a zmm accumulator holds one pixel of two consecutive output blocks (lanes 0-7 block b, 8-15 block
// b + 1), so a tile is NB = 4 blocks x up to 12 pixels (zmm<j> blocks 0-1, zmm<12+j> blocks 2-3 of pixel j: 24
// accumulators) or NB = 2 blocks x up to 12 pixels. The weights keep the AVX2 packing: a step builds each block
// pair's 16 weights from two 8-float rows (vmovaps + vinsertf32x8 from memory), zmm28 and zmm29; each pixel's
// input value is broadcast to zmm30. Stores split every accumulator into its two blocks' NCHWc8 planes.
constexpr bool kZmmTiles = true;
#define TESSEL_Z_PIX(J, J12, ADDR, XO)                    \
  ".if %c[nw] > " #J "\n\t"                               \
  "vbroadcastss " #XO ADDR ", %%zmm30\n\t"                \
  "vfmadd231ps %%zmm28, %%zmm30, %%zmm" #J "\n\t"         \
  ".if %c[nb] > 2\n\t"                                    \
  "vfmadd231ps %%zmm29, %%zmm30, %%zmm" #J12 "\n\t"       \
  ".endif\n\t"                                            \
  ".endif\n\t"
#define TESSEL_Z_WEIGHTS(WO)                                        \
  "vmovaps " #WO "(%%rdx), %%ymm28\n\t"                            \
  "vinsertf32x8 $1, " #WO "(%%rdx,%[ws]), %%zmm28, %%zmm28\n\t"    \
  ".if %c[nb] > 2\n\t"                                             \
  "vmovaps " #WO "(%%rdx,%[ws],2), %%ymm29\n\t"                    \
  "vinsertf32x8 $1, " #WO "(%%r8), %%zmm29, %%zmm29\n\t"           \
  ".endif\n\t"
#define TESSEL_Z_STEP(XO, WO)                                                                            \
  TESSEL_Z_WEIGHTS(WO)                                                                                   \
  TESSEL_Z_PIX(0, 12, "(%%rax)", XO) TESSEL_Z_PIX(1, 13, "(%%rax,%[p])", XO)                             \
  TESSEL_Z_PIX(2, 14, "(%%rax,%[p],2)", XO) TESSEL_Z_PIX(3, 15, "(%%r11)", XO)                           \
  TESSEL_Z_PIX(4, 16, "(%%r11,%[p])", XO) TESSEL_Z_PIX(5, 17, "(%%r11,%[p],2)", XO)                      \
  TESSEL_Z_PIX(6, 18, "(%%r10)", XO) TESSEL_Z_PIX(7, 19, "(%%r10,%[p])", XO)                             \
  TESSEL_Z_PIX(8, 20, "(%%r10,%[p],2)", XO) TESSEL_Z_PIX(9, 21, "(%%r9)", XO)                            \
  TESSEL_Z_PIX(10, 22, "(%%r9,%[p])", XO) TESSEL_Z_PIX(11, 23, "(%%r9,%[p],2)", XO)
// The tail per pixel J: residual (two 8-float rows per accumulator), clamp, store.
#define TESSEL_Z_RES(J, J12)                                          \
  ".if %c[nw] > " #J "\n\t"                                           \
  "vmovups " #J "*32(%%rax), %%ymm30\n\t"                             \
  "vinsertf32x8 $1, " #J "*32(%%rax,%%rdx), %%zmm30, %%zmm30\n\t"     \
  "vaddps %%zmm30, %%zmm" #J ", %%zmm" #J "\n\t"                      \
  ".if %c[nb] > 2\n\t"                                                \
  "vmovups " #J "*32(%%rax,%%rdx,2), %%ymm30\n\t"                     \
  "vinsertf32x8 $1, " #J "*32(%%r8), %%zmm30, %%zmm30\n\t"            \
  "vaddps %%zmm30, %%zmm" #J12 ", %%zmm" #J12 "\n\t"                  \
  ".endif\n\t"                                                        \
  ".endif\n\t"
#define TESSEL_Z_CLAMP(J, J12)                                        \
  ".if %c[nw] > " #J "\n\t"                                           \
  "vmaxps %%zmm28, %%zmm" #J ", %%zmm" #J "\n\t"                      \
  "vminps %%zmm29, %%zmm" #J ", %%zmm" #J "\n\t"                      \
  ".if %c[nb] > 2\n\t"                                                \
  "vmaxps %%zmm28, %%zmm" #J12 ", %%zmm" #J12 "\n\t"                  \
  "vminps %%zmm29, %%zmm" #J12 ", %%zmm" #J12 "\n\t"                  \
  ".endif\n\t"                                                        \
  ".endif\n\t"
#define TESSEL_Z_OUT(J, J12)                                          \
  ".if %c[nw] > " #J "\n\t"                                           \
  "vmovups %%ymm" #J ", " #J "*32(%%rax)\n\t"                         \
  "vextractf32x8 $1, %%zmm" #J ", " #J "*32(%%rax,%%rdx)\n\t"         \
  ".if %c[nb] > 2\n\t"                                                \
  "vmovups %%ymm" #J12 ", " #J "*32(%%rax,%%rdx,2)\n\t"               \
  "vextractf32x8 $1, %%zmm" #J12 ", " #J "*32(%%r8)\n\t"              \
  ".endif\n\t"                                                        \
  ".endif\n\t"
#define TESSEL_Z_INIT(J, J12)                                         \
  ".if %c[nw] > " #J "\n\t"                                           \
  "vmovaps %%zmm28, %%zmm" #J "\n\t"                                  \
  ".if %c[nb] > 2\n\t"                                                \
  "vmovaps %%zmm29, %%zmm" #J12 "\n\t"                                \
  ".endif\n\t"                                                        \
  ".endif\n\t"
#define TESSEL_Z_ALL(M)                                                                                \
  M(0, 12) M(1, 13) M(2, 14) M(3, 15) M(4, 16) M(5, 17) M(6, 18) M(7, 19) M(8, 20) M(9, 21) M(10, 22) \
  M(11, 23)
// r8 = the fourth block's row (3 x the stride from rdx) for the weights of a tap, or for the tile's outputs.
#define TESSEL_Z_R8 "lea (%%rdx,%[ws],2), %%r8\n\t" "add %[ws], %%r8\n\t"
#define TESSEL_Z_HEAD                   \
  "mov (%[io]), %%rax\n\t"             \
  "vmovups (%%rax), %%zmm28\n\t"       \
  ".if %c[nb] > 2\n\t"                 \
  "vmovups 64(%%rax), %%zmm29\n\t"     \
  ".endif\n\t"                         \
  TESSEL_Z_ALL(TESSEL_Z_INIT)           \
  "1:\n\t"
#define TESSEL_Z_TAIL                             \
  "prefetcht1 (%[pf])\n\t"                       \
  "add $64, %[pf]\n\t"                           \
  "add $16, %[tp]\n\t"                           \
  "dec %[n]\n\t"                                 \
  "jnz 1b\n\t"                                   \
  "mov 8(%[io]), %%r9\n\t"                       \
  "mov 24(%[io]), %%rdx\n\t"                     \
  "mov 16(%[io]), %%rax\n\t"                     \
  "test %%rax, %%rax\n\t"                        \
  "jz 2f\n\t"                                    \
  "lea (%%rax,%%rdx,2), %%r8\n\t"                \
  "add %%rdx, %%r8\n\t"                          \
  TESSEL_Z_ALL(TESSEL_Z_RES)                      \
  "2:\n\t"                                       \
  "mov 32(%[io]), %%rax\n\t"                     \
  "test %%rax, %%rax\n\t"                        \
  "jz 3f\n\t"                                    \
  "vbroadcastss (%%rax), %%zmm28\n\t"            \
  "vbroadcastss 4(%%rax), %%zmm29\n\t"           \
  TESSEL_Z_ALL(TESSEL_Z_CLAMP)                    \
  "3:\n\t"                                       \
  "mov %%r9, %%rax\n\t"                          \
  "lea (%%rax,%%rdx,2), %%r8\n\t"                \
  "add %%rdx, %%r8\n\t"                          \
  TESSEL_Z_ALL(TESSEL_Z_OUT)
#define TESSEL_Z_CLOBBERS                                                                                        \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",      \
      "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm28", \
      "xmm29", "xmm30", "cc", "memory"

// reduce_tile with zmm accumulators: NB (2 or 4) blocks x NW (<= 12) pixels, the same taps, pixels and io.
template <int NB, int NW, int STEPS>
void reduce_tile_z(const Tap* taps, int64_t n_taps, const float* in, const float* w, int64_t pix_bytes,
                   int64_t w_stride_bytes, const TileIO& io, const char* pf) {
  static_assert((NB == 2 || NB == 4) && NW >= 1 && NW <= 12);
  asm volatile(
      TESSEL_Z_HEAD
      TESSEL_C8_TAP_BASES
      TESSEL_Z_R8
      TESSEL_C8_TAP_STEPS(TESSEL_Z_STEP)
      TESSEL_Z_TAIL
      : [tp] "+r"(taps), [n] "+r"(n_taps), [pf] "+r"(pf)
      : [in] "r"(in), [w] "r"(w), [p] "r"(pix_bytes), [ws] "r"(w_stride_bytes), [io] "r"(&io), [nb] "i"(NB),
        [nw] "i"(NW), [steps] "i"(STEPS)
      : "rax", "rdx", "r8", "r9", "r10", "r11", TESSEL_Z_CLOBBERS);
}

#undef TESSEL_Z_PIX
#undef TESSEL_Z_WEIGHTS
#undef TESSEL_Z_STEP
#undef TESSEL_Z_RES
#undef TESSEL_Z_CLAMP
#undef TESSEL_Z_OUT
#undef TESSEL_Z_INIT
#undef TESSEL_Z_ALL
#undef TESSEL_Z_R8
#undef TESSEL_Z_HEAD
#undef TESSEL_Z_TAIL
#undef TESSEL_Z_CLOBBERS
#else
constexpr bool kZmmTiles = false;
#endif

// The widest tile a block count takes: 12 pixels of 4 or 2 blocks in zmm accumulators (AVX-512 builds), else
// 12 / NB pixels in ymm accumulators.
constexpr int max_tile_pixels(int nb) { return kZmmTiles && nb >= 2 ? 12 : 12 / nb; }

// reduce_tile in the build's widest registers: zmm for 2 or 4 blocks where the build has AVX-512.
template <int NB, int NW, int STEPS>
void reduce_any(const Tap* taps, int64_t n_taps, const float* in, const float* w, int64_t pix_bytes,
                int64_t w_stride_bytes, const TileIO& io, const char* pf) {
#if TESSEL_C8_ZMM
  if constexpr (NB >= 2) {
    reduce_tile_z<NB, NW, STEPS>(taps, n_taps, in, w, pix_bytes, w_stride_bytes, io, pf);
    return;
  } else
#endif
  reduce_tile<NB, NW, STEPS>(taps, n_taps, in, w, pix_bytes, w_stride_bytes, io, pf);
}

// How many output blocks a tile computes: 4 (AVX-512) or 2 where a block group holds whole tiles of them, else 1.
int64_t tile_blocks(int64_t bg, int64_t ob_per_bg) {
  if (kZmmTiles && (bg == 1 || ob_per_bg % 4 == 0)) return 4;
  return bg == 1 || ob_per_bg % 2 == 0 ? 2 : 1;
}

// f(std::integral_constant<int, NB>, ob) for the nb blocks from ob in tiles of 4 (AVX-512 only), 2 and 1.
template <class F>
void for_block_tiles(int64_t ob, int64_t nb, F f) {
  if constexpr (kZmmTiles) {
    if (nb == 4) {
      f(std::integral_constant<int, 4>{}, ob);
      return;
    }
  }
  if (nb >= 2) {
    f(std::integral_constant<int, 2>{}, ob);
    ob += 2;
    nb -= 2;
  }
  if (nb == 1) f(std::integral_constant<int, 1>{}, ob);
}
#undef TESSEL_C8_STEP_PX
#undef TESSEL_C8_TAP_BASES
#undef TESSEL_C8_TAP_STEPS
#undef TESSEL_C8_PIX2
#undef TESSEL_C8_PIX1
#undef TESSEL_C8_STEP
#undef TESSEL_C8_RES
#undef TESSEL_C8_CLAMP
#undef TESSEL_C8_OUT
#undef TESSEL_C8_INIT
#undef TESSEL_C8_ALL
#undef TESSEL_C8_HEAD
#undef TESSEL_C8_TAIL

// The tile at output offset `off` (floats into the NCHWc8 output, block ob's pixel) for NB output blocks x NW
// consecutive output pixels: `reduce(io)` runs the assembly with its results going to io. Bias, residual and
// ReLU / Clip are applied in the assembly's tail on the way out; other activations go through a small buffer
// (the residual added there too, before the activation).
template <int NB, int NW, class Reduce>
void finish_tile(const DirectCtx& c, int n_taps, int64_t ob, int64_t off, Reduce reduce) {
  const int64_t block_bytes = c.oh_count * c.ow_count * 32;
  const float* bias = c.bias + ob * 8;
  if (c.lohi || c.ep.act == Activation::None) {
    const TileIO io{bias, c.out + off, c.res ? c.res + off : nullptr, block_bytes, c.lohi};
    if (n_taps > 0) {
      reduce(io);
      return;
    }
  }
  alignas(32) float sums[NB * NW][8];
  if (n_taps > 0) {
    reduce(TileIO{bias, &sums[0][0], nullptr, NW * 32, nullptr});
  } else {
    for (int b = 0; b < NB; ++b)
      for (int j = 0; j < NW; ++j) _mm256_store_ps(sums[b * NW + j], _mm256_load_ps(bias + b * 8));
  }
  auto finish = [&](auto act) {
    for (int b = 0; b < NB; ++b)
      for (int j = 0; j < NW; ++j) {
        const int64_t o = off + b * block_bytes / 4 + j * 8;
        __m256 v = _mm256_load_ps(sums[b * NW + j]);
        if (c.res) v = _mm256_add_ps(v, _mm256_loadu_ps(c.res + o));
        _mm256_storeu_ps(c.out + o, act(v));
      }
  };
  // The networks' activations with their loop of their own (the generic switch per vector kept them from
  // being interleaved).
  switch (c.ep.act) {
    case Activation::Silu: finish([](__m256 v) { return vsilu(v); }); break;
    case Activation::HardSwish: finish([](__m256 v) { return vhardswish(v); }); break;
    case Activation::Sigmoid: finish([](__m256 v) { return vsigmoid(v); }); break;
    default: finish([&](__m256 v) { return activate(v, c.ep); }); break;
  }
}

// NB (1 or 2) output blocks (ob..ob+NB-1) x NW consecutive pixels of one output row starting at ow0.
template <int NB, int NW, int STEPS>
__attribute__((noinline)) void direct_tile(const DirectCtx& c, const Tap* taps, int n_taps, int64_t ob, int64_t oh, int64_t ow0) {
  const Conv2dShape& s = c.s;
  constexpr int64_t lanes_in = STEPS == 8 ? 8 : 1;  // floats per input pixel in a tap's plane
  const int64_t pix = s.stride_w * lanes_in;
  const int64_t col0 = (ow0 * s.stride_w - s.pad_left) * lanes_in;  // added to in_off: stays inside the image
  const int64_t off = ((ob * c.oh_count + oh) * c.ow_count + ow0) * 8;
  finish_tile<NB, NW>(c, n_taps, ob, off, [&](const TileIO& io) {
    reduce_any<NB, NW, STEPS>(taps, n_taps, c.in + col0, c.w + ob * c.w_block_stride, pix * 4, c.w_block_stride * 4,
                              io, prefetch_start(c, ob, (oh * c.ow_count + ow0) / max_tile_pixels(NB), n_taps, NB));
  });
}

// Output blocks ob, ob + 1 x NW pixels of the flattened output map from q0 (a flat tile, which may span rows),
// on an input padded on every side (c.s has no padding): pixel q reads from its own window's corner.
template <int NW>
__attribute__((noinline)) void flat_tile(const DirectCtx& c, const Tap* taps, int n_taps, int64_t ob, int64_t q0) {
  const Conv2dShape& s = c.s;
  const float* px[NW];
  for (int j = 0; j < NW; ++j) {
    const int64_t oh = (q0 + j) / c.ow_count, ow = (q0 + j) % c.ow_count;
    px[j] = c.in + (oh * s.stride_h * s.in_w + ow * s.stride_w) * 8;
  }
  finish_tile<2, NW>(c, n_taps, ob, (ob * c.oh_count * c.ow_count + q0) * 8, [&](const TileIO& io) {
    reduce_tile_px<NW>(taps, n_taps, px, c.w + ob * c.w_block_stride, c.w_block_stride * 4, io,
                       prefetch_start(c, ob, q0 / 6, n_taps));
  });
}

using TileFn = void (*)(const DirectCtx&, const Tap*, int, int64_t, int64_t, int64_t);
template <int NB, int STEPS, int... W>
constexpr std::array<TileFn, sizeof...(W)> tile_table(std::integer_sequence<int, W...>) {
  return {direct_tile<NB, W + 1, STEPS>...};
}

// Pixels [ow, end) in the fewest tiles of at most max_tile_pixels(NB), their widths as equal as they can be
// (49 = 4 x 6 + 5 x 5 rather than 8 x 6 + 1): a narrow tile has too few accumulators to hide the FMA
// latency and costs nearly as much as a full one (a 1-pixel tile of 2 blocks: 2 dependent chains).
template <int NB, int STEPS = 8>
void direct_tiles(const DirectCtx& c, const Tap* taps, int n, int64_t ob, int64_t oh, int64_t ow, int64_t end) {
  constexpr int kMax = max_tile_pixels(NB);
  static constexpr auto table = tile_table<NB, STEPS>(std::make_integer_sequence<int, kMax>{});
  const int64_t len = end - ow;
  if (len <= 0) return;
  const int64_t tiles = (len + kMax - 1) / kMax, base = len / tiles, extra = len % tiles;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t w = base + (t < extra ? 1 : 0);
    table[static_cast<size_t>(w - 1)](c, taps, n, ob, oh, ow);
    ow += w;
  }
}

// Output columns [lo, hi) whose taps never touch the left/right padding.
void interior_columns(const Conv2dShape& s, int64_t* lo, int64_t* hi) {
  const int64_t OW = s.out_w(), span = s.dilation_w * (s.kernel_w - 1);
  *lo = std::min(OW, (s.pad_left + s.stride_w - 1) / s.stride_w);
  const int64_t last_ok = s.in_w - 1 - span + s.pad_left;
  *hi = last_ok < 0 ? *lo : std::max(*lo, std::min(OW, last_ok / s.stride_w + 1));
}

// Pixels [p0, p1) of output row oh for output blocks ob (and ob + 1 when NB == 2).
template <int NB>
void direct_row_range(const DirectCtx& c, int64_t ob, int64_t oh, int64_t p0, int64_t p1, int64_t lo,
                      int64_t hi, std::vector<Tap>& taps) {
  int64_t ow = p0;
  for (; ow < std::min(lo, p1); ++ow) {  // left border: per-pixel tap tables
    const int n = build_taps(c, oh, ow, taps);
    direct_tile<NB, 1, 8>(c, taps.data(), n, ob, oh, ow);
  }
  const int64_t mid_end = std::min(hi, p1);
  if (ow < mid_end) {
    const int n = build_taps(c, oh, -1, taps);
    direct_tiles<NB>(c, taps.data(), n, ob, oh, ow, mid_end);
    ow = mid_end;
  }
  for (; ow < p1; ++ow) {  // right border
    const int n = build_taps(c, oh, ow, taps);
    direct_tile<NB, 1, 8>(c, taps.data(), n, ob, oh, ow);
  }
}

// The number of block groups: 1 for a dense convolution (channels padded to whole blocks); for a grouped one
// the most groups of whole 8-channel blocks (in and out) that each hold whole original groups, or 0 when that
// would more than double the multiply-adds (ResNeXt's 4-channel groups: two per block group, half the
// products zeros; a depthwise convolution would do 8x its work and has its own kernel).
int64_t block_groups(const Conv2dShape& s) {
  if (s.groups == 1) return 1;
  if (s.is_depthwise() || s.in_channels % 8 != 0 || s.out_channels % 8 != 0) return 0;
  for (int64_t g = s.groups; g >= 1 && g * 2 >= s.groups; --g)
    if (s.groups % g == 0 && (s.in_channels / g) % 8 == 0 && (s.out_channels / g) % 8 == 0) return g;
  return 0;
}

// What the tiles' assembly tail reads besides the output: each block's 8 biases (whole blocks, zeros past the
// channels or without a bias; one block more, read and unused by single-block tiles) and the clamp bounds.
struct TileEpilogue {
  const float* bias;
  alignas(8) float clamp[2];
  bool clamped;  // ReLU or Clip
  const float* lohi() const { return clamped ? clamp : nullptr; }
};

TileEpilogue tile_epilogue(const Epilogue& ep, int64_t out_channels) {
  static thread_local AlignedBuffer bias_buf;
  const int64_t floats = ((out_channels + 7) / 8 + 1) * 8;
  float* bias = bias_buf.ensure(static_cast<size_t>(floats));
  std::fill(bias, bias + floats, 0.0f);
  if (ep.bias) std::copy(ep.bias, ep.bias + out_channels, bias);
  const bool clip = ep.act == Activation::Clip;
  return {bias, {clip ? ep.alpha : 0.0f, clip ? ep.beta : std::numeric_limits<float>::infinity()},
          clip || ep.act == Activation::Relu};
}

// This thread's buffer for a copy of the input (strided 1x1 inputs subsampled, rows with their padding).
float* copy_buffer(size_t floats) {
  static thread_local AlignedBuffer buf;
  return buf.ensure(floats);
}

// Flat tiles where row tiles would leave registers idle: a row of OW pixels takes ceil(OW / 6) tiles of 2
// blocks, so 7x7 maps ran as tiles of 4 + 3 pixels (8 and 6 of the 12 accumulators; ResNet-50's 512 3x3 on
// 7x7 at 45 % of the FMA peak) and 14x14 ones as 5 + 5 + 4. Flat tiles of 6 cover the map's H x W pixels
// across rows. Only for pairs of output blocks (one base register per pixel leaves none for a 12-pixel tile).
bool flat_tiles_pay_off(const Conv2dShape& s, int64_t bg) {
  if (s.is_pointwise() || bg == 0 || ((s.out_channels + 7) / 8 / bg) % 2 != 0) return false;
  const int64_t OW = s.out_w(), row_tiles = (OW + 5) / 6;
  return OW * 10 < row_tiles * 6 * 9;  // row tiles fill under 90 % of their pixels
}

void direct_flat(const Conv2dShape& shape, const float* in, const float* packed, float* out, const Epilogue& ep,
                 ThreadPool* pool) {
  // The input with its zero padding on every side: every tap of every pixel is inside it.
  Conv2dShape s = shape;
  s.in_h += shape.pad_top + shape.pad_bottom;
  s.in_w += shape.pad_left + shape.pad_right;
  s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 0;
  const int64_t blocks_total = (s.in_channels + 7) / 8, plane = s.in_h * s.in_w * 8;
  const bool padded = s.in_h != shape.in_h || s.in_w != shape.in_w;
  float* copy = padded ? copy_buffer(static_cast<size_t>(s.batch * blocks_total * plane)) : nullptr;
  if (padded)
    parallel_for(pool, s.batch * blocks_total * s.in_h, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t blk = r / s.in_h, y = r % s.in_h - shape.pad_top;
        float* dst = copy + r * s.in_w * 8;
        std::fill(dst, dst + s.in_w * 8, 0.0f);
        if (y >= 0 && y < shape.in_h) {
          const float* src = in + (blk * shape.in_h + y) * shape.in_w * 8;
          std::copy(src, src + shape.in_w * 8, dst + shape.pad_left * 8);
        }
      }
    });
  const float* src = padded ? copy : in;
  const int64_t bg = block_groups(s), in_blocks = blocks_total / bg, out_blocks = (s.out_channels + 7) / 8;
  const int64_t ob_per_bg = out_blocks / bg, pairs = out_blocks / 2;
  const int64_t OH = s.out_h(), OW = s.out_w(), P = OH * OW;
  std::vector<Tap> taps;
  for (int64_t cb = 0; cb < in_blocks; ++cb)
    for (int64_t ky = 0; ky < s.kernel_h; ++ky)
      for (int64_t kx = 0; kx < s.kernel_w; ++kx)
        taps.push_back({cb * plane + (ky * s.dilation_h * s.in_w + kx * s.dilation_w) * 8,
                        ((cb * s.kernel_h + ky) * s.kernel_w + kx) * 64});
  const int n_taps = static_cast<int>(taps.size());
  // P pixels in the fewest tiles of at most 6, their widths as equal as they can be.
  const int64_t tiles = (P + 5) / 6, base = P / tiles, extra = P % tiles;
  static constexpr std::array<void (*)(const DirectCtx&, const Tap*, int, int64_t, int64_t), 6> table = {
      flat_tile<1>, flat_tile<2>, flat_tile<3>, flat_tile<4>, flat_tile<5>, flat_tile<6>};
  const int64_t w_block_stride = in_blocks * s.kernel_h * s.kernel_w * 64;
  const TileEpilogue te = tile_epilogue(ep, s.out_channels);
  // Tiles of one pair of output blocks run together: the pair's weights stay in L2 for all of them.
  parallel_for(pool, s.batch * pairs * tiles, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task % tiles, ob = task / tiles % pairs * 2, n = task / (tiles * pairs);
      const int64_t in_group = ob / ob_per_bg * in_blocks * plane;
      const int64_t out_img = n * out_blocks * P * 8;
      const DirectCtx c{s, src + n * blocks_total * plane + in_group, packed, out + out_img,
                        ep.residual ? ep.residual + out_img : nullptr, ep, te.bias, te.lohi(), in_blocks, out_blocks,
                        OH, OW, w_block_stride, ob + 2 < out_blocks ? packed + (ob + 2) * w_block_stride : nullptr};
      const int64_t q0 = t * base + std::min(t, extra), w = base + (t < extra ? 1 : 0);
      table[static_cast<size_t>(w - 1)](c, taps.data(), n_taps, ob, q0);
    }
  });
}

}  // namespace

bool conv2d_nchwc8_direct_applicable(const Conv2dShape& s) { return block_groups(s) > 0; }

// Packed [ob][cb][ky][kx][ci][co] with cb over the input blocks of ob's block group.
size_t conv2d_nchwc8_direct_packed_size(const Conv2dShape& s) {
  const int64_t bg = std::max<int64_t>(1, block_groups(s));
  return static_cast<size_t>((s.out_channels + 7) / 8 * ((s.in_channels + 7) / 8 / bg) * s.kernel_h * s.kernel_w * 64);
}

void conv2d_nchwc8_direct_pack(const Conv2dShape& s, const float* weights, float* packed) {
  const int64_t bg = std::max<int64_t>(1, block_groups(s));
  const int64_t ob_count = (s.out_channels + 7) / 8, cb_count = (s.in_channels + 7) / 8 / bg;
  const int64_t ob_per_bg = ob_count / bg, ipg = s.in_per_group(), opg = s.out_per_group();
  const int64_t taps = s.kernel_h * s.kernel_w;
  for (int64_t ob = 0; ob < ob_count; ++ob)
    for (int64_t cb = 0; cb < cb_count; ++cb)
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t ci = 0; ci < 8; ++ci)
          for (int64_t co = 0; co < 8; ++co) {
            const int64_t o = ob * 8 + co, i = (ob / ob_per_bg * cb_count + cb) * 8 + ci;  // global channels
            const bool real = o < s.out_channels && i < s.in_channels && i / ipg == o / opg;
            packed[(((ob * cb_count + cb) * taps + t) * 8 + ci) * 8 + co] =
                real ? weights[(o * ipg + i % ipg) * taps + t] : 0.0f;
          }
}

void conv2d_nchwc8_direct_avx2(const Conv2dShape& shape, const float* in, const float* packed, float* out,
                               const Epilogue& ep, ThreadPool* pool) {
  // A strided unpadded 1x1 conv (ResNet's downsampling shortcuts) is a 1x1 conv of the pixels it reads: they
  // are copied out first, so the conv runs on the flattened path. In rows, each output row's tiles read every
  // input block at stride-2 columns and the pairs of output blocks re-read the whole input (ResNeXt-50's
  // 512->1024 on 28x28: 3.6 ms against 2.4 for the NCHW GEMM on phase planes).
  if (shape.kernel_h == 1 && shape.kernel_w == 1 && (shape.stride_h > 1 || shape.stride_w > 1) &&
      shape.pad_top == 0 && shape.pad_left == 0 && shape.pad_bottom == 0 && shape.pad_right == 0) {
    Conv2dShape p = shape;
    p.in_h = shape.out_h();
    p.in_w = shape.out_w();
    p.stride_h = p.stride_w = 1;
    const int64_t blocks = shape.batch * ((shape.in_channels + 7) / 8), plane = p.in_h * p.in_w;
    float* sub = copy_buffer(static_cast<size_t>(blocks * plane * 8));
    parallel_for(pool, blocks * p.in_h, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / p.in_h, oh = r % p.in_h;
        const float* src = in + (b * shape.in_h + oh * shape.stride_h) * shape.in_w * 8;
        float* dst = sub + r * p.in_w * 8;
        for (int64_t ow = 0; ow < p.in_w; ++ow)
          _mm256_store_ps(dst + ow * 8, _mm256_loadu_ps(src + ow * shape.stride_w * 8));
      }
    });
    conv2d_nchwc8_direct_avx2(p, sub, packed, out, ep, pool);
    return;
  }
  if (flat_tiles_pay_off(shape, block_groups(shape))) {
    direct_flat(shape, in, packed, out, ep, pool);
    return;
  }
  // Left and right padding: the rows are copied with their zero columns, so that every output column is
  // interior. Otherwise the border columns took 1-pixel tiles of per-pixel tap tables, whose two
  // accumulators wait on their own FMAs: a 3x3 on 7x7 maps spent as long on its 2 border columns as on the
  // 5 others (ResNeXt-50's 1024 grouped 3x3 on 7x7 at 49 % of the FMA peak).
  if (!shape.is_pointwise() && (shape.pad_left > 0 || shape.pad_right > 0)) {
    Conv2dShape p = shape;
    p.in_w = shape.in_w + shape.pad_left + shape.pad_right;
    p.pad_left = p.pad_right = 0;
    const int64_t rows = shape.batch * ((shape.in_channels + 7) / 8) * shape.in_h;
    float* padded = copy_buffer(static_cast<size_t>(rows * p.in_w * 8));
    parallel_for(pool, rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* src = in + r * shape.in_w * 8;
        float* dst = padded + r * p.in_w * 8;
        std::fill(dst, dst + shape.pad_left * 8, 0.0f);
        std::copy(src, src + shape.in_w * 8, dst + shape.pad_left * 8);
        std::fill(dst + (shape.pad_left + shape.in_w) * 8, dst + p.in_w * 8, 0.0f);
      }
    });
    conv2d_nchwc8_direct_avx2(p, padded, packed, out, ep, pool);
    return;
  }
  // A 1x1 stride-1 unpadded conv is the same computation on one row of H*W pixels.
  Conv2dShape s = shape;
  const bool flat = s.is_pointwise();
  if (flat) {
    s.in_w *= s.in_h;
    s.in_h = 1;
  }
  const int64_t bg = block_groups(s);
  const int64_t in_blocks = (s.in_channels + 7) / 8 / bg, out_blocks = (s.out_channels + 7) / 8;
  const int64_t ob_per_bg = out_blocks / bg;  // a tile's blocks belong to one block group:
  const int64_t unit = tile_blocks(bg, ob_per_bg);  // no tile straddles two
  const int64_t OH = s.out_h(), OW = s.out_w();
  int64_t lo, hi;
  interior_columns(s, &lo, &hi);
  // Work items: (image, output-block pair, row, column chunk); long flattened rows are chunked so that
  // both threads get work on small channel counts.
  const int64_t block_tiles = (out_blocks + unit - 1) / unit;  // tiles' output blocks: quads, pairs or single
  // The last chunk takes the remainder (196 = 48 + 48 + 48 + 52, not 4 x 48 + 4): tiled as evenly as
  // direct_tiles can, with no lone narrow tile.
  const int64_t chunk = flat ? std::max<int64_t>(48, (OW + 7) / 8 / kChunkAlign * kChunkAlign) : OW;
  const int64_t chunks = std::max<int64_t>(1, OW / chunk);
  const int64_t w_block_stride = in_blocks * s.kernel_h * s.kernel_w * 64;
  const TileEpilogue te = tile_epilogue(ep, s.out_channels);
  const float *bias = te.bias, *lohi = te.lohi();
  parallel_for(pool, s.batch * block_tiles * OH * chunks, [&](int64_t b, int64_t e) {
    static thread_local std::vector<Tap> taps;
    for (int64_t task = b; task < e; ++task) {
      // A flattened 1x1 visits every output-block pair of one chunk before the next chunk: the chunk's input
      // (up to 384 pixels of every channel) stays in L2 for all the pairs and each pair's weights are small.
      // Pairs outermost streamed the whole input from L3 once per pair: 256->512 on 28x28 2371 -> 2174 us,
      // 512->1024 on 14x14 2327 -> 2216 (Zen 2, 1 thread). Rows of a 3x3 keep pairs outermost (their
      // weights are the larger part; no gain either way).
      int64_t ch, oh, ob;
      if (flat) {
        ob = task % block_tiles;
        ch = task / block_tiles % chunks;
        oh = task / (block_tiles * chunks) % OH;
      } else {
        ch = task % chunks;
        oh = task / chunks % OH;
        ob = task / (chunks * OH) % block_tiles;
      }
      ob *= unit;
      const int64_t in_group = ob / ob_per_bg * in_blocks * s.in_h * s.in_w * 8;  // the block group's input
      const int64_t n = task / (chunks * OH * block_tiles);
      const int64_t out_img = n * out_blocks * OH * OW * 8;
      const int64_t next_ob = ob + unit;  // the next task's blocks: the next tile's (flat: same chunk)
      DirectCtx c{s, in + n * in_blocks * bg * s.in_h * s.in_w * 8 + in_group, packed, out + out_img,
                  ep.residual ? ep.residual + out_img : nullptr, ep, bias, lohi, in_blocks, out_blocks, OH, OW,
                  w_block_stride, next_ob < out_blocks ? packed + next_ob * w_block_stride : nullptr};
      const int64_t p0 = ch * chunk, p1 = ch + 1 == chunks ? OW : p0 + chunk;
      for_block_tiles(ob, std::min(unit, out_blocks - ob), [&](auto nb, int64_t b) {
        direct_row_range<decltype(nb)::value>(c, b, oh, p0, p1, lo, hi, taps);
      });
    }
  });
}

}  // namespace tessel::rt

namespace tessel::rt {

bool conv2d_stem_nchwc8_applicable(const Conv2dShape& s) {
  return s.groups == 1 && s.in_channels <= 4 && s.kernel_h == 3 && s.kernel_w == 3 && s.dilation_h == 1 &&
         s.dilation_w == 1;
}

// Packed [ob][ci][ky][kx][co]: one 8-channel weight vector per tap and output block.
size_t conv2d_stem_nchwc8_packed_size(const Conv2dShape& s) {
  return static_cast<size_t>((s.out_channels + 7) / 8 * s.in_channels * s.kernel_h * s.kernel_w * 8);
}

void conv2d_stem_nchwc8_pack(const Conv2dShape& s, const float* weights, float* packed) {
  const int64_t taps = s.in_channels * s.kernel_h * s.kernel_w;
  for (int64_t ob = 0; ob < (s.out_channels + 7) / 8; ++ob)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t co = 0; co < 8; ++co) {
        const int64_t o = ob * 8 + co;
        packed[(ob * taps + t) * 8 + co] = o < s.out_channels ? weights[o * taps + t] : 0.0f;
      }
}

// The input is copied with its zero padding on every side (a few channels: 600 KB for a 224x224 image), so
// each output row has one tap table of Cin x KH x KW single values, and the NCHWc8 register tiles (1 value
// broadcast per pixel and tap, one weight vector per output block) cover whole rows. MobileNetV2's 3->32
// 3x3/2 stem wrote NCHW through the few-channel kernel and was reordered to NCHWc8 after it.
void conv2d_stem_nchwc8_avx2(const Conv2dShape& shape, const float* in, const float* packed, float* out,
                             const Epilogue& ep, ThreadPool* pool) {
  Conv2dShape s = shape;
  s.in_h += shape.pad_top + shape.pad_bottom;
  s.in_w += shape.pad_left + shape.pad_right;
  s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 0;
  const int64_t planes = s.batch * s.in_channels, plane = s.in_h * s.in_w;
  float* padded = copy_buffer(static_cast<size_t>(planes * plane));
  parallel_for(pool, planes * s.in_h, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t pl = r / s.in_h, y = r % s.in_h - shape.pad_top;
      float* dst = padded + r * s.in_w;
      std::fill(dst, dst + s.in_w, 0.0f);
      if (y >= 0 && y < shape.in_h)
        std::copy(in + (pl * shape.in_h + y) * shape.in_w, in + (pl * shape.in_h + y + 1) * shape.in_w,
                  dst + shape.pad_left);
    }
  });
  const int64_t out_blocks = (s.out_channels + 7) / 8, OH = s.out_h(), OW = s.out_w();
  const int64_t pairs = (out_blocks + 1) / 2, w_block_stride = s.in_channels * s.kernel_h * s.kernel_w * 8;
  const TileEpilogue te = tile_epilogue(ep, s.out_channels);
  const float *bias = te.bias, *lohi = te.lohi();
  parallel_for(pool, s.batch * pairs * OH, [&](int64_t b, int64_t e) {
    std::vector<Tap> taps;
    for (int64_t task = b; task < e; ++task) {
      const int64_t oh = task % OH, ob = task / OH % pairs * 2, n = task / (OH * pairs);
      taps.clear();
      for (int64_t ci = 0; ci < s.in_channels; ++ci)
        for (int64_t ky = 0; ky < s.kernel_h; ++ky)
          for (int64_t kx = 0; kx < s.kernel_w; ++kx)
            taps.push_back({ci * plane + (oh * s.stride_h + ky) * s.in_w + kx, ((ci * s.kernel_h + ky) * s.kernel_w + kx) * 8});
      const int64_t out_img = n * out_blocks * OH * OW * 8;
      DirectCtx c{s, padded + n * s.in_channels * plane, packed, out + out_img,
                  ep.residual ? ep.residual + out_img : nullptr, ep, bias, lohi, 0, out_blocks, OH, OW, w_block_stride};
      const int n_taps = static_cast<int>(taps.size());
      if (ob + 1 < out_blocks)
        direct_tiles<2, 1>(c, taps.data(), n_taps, ob, oh, 0, OW);
      else
        direct_tiles<1, 1>(c, taps.data(), n_taps, ob, oh, 0, OW);
    }
  });
}

}  // namespace tessel::rt
