// The convolution kernel list: name, layout, applicability, packing and entry point of each kernel.
#include <cstring>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"

namespace tessel::rt {
namespace {

bool always(const Conv2dShape&) { return true; }
bool is_1x1_s1_p0(const Conv2dShape& s) { return s.is_pointwise(); }
bool is_depthwise(const Conv2dShape& s) { return s.is_depthwise(); }
bool is_winograd_f43(const Conv2dShape& s) {
  return s.kernel_h == 3 && s.kernel_w == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dilation_h == 1 &&
         s.dilation_w == 1 && s.groups == 1 && s.in_channels >= 8 && s.out_channels >= 8;
}
// Winograd pays off only with enough 4x4 output tiles per image for its 36 small GEMMs: measured on
// 512->512 at 7x7 (4 tiles) it ran at 46 GF/s-equivalent against 58 GF/s for im2col, while 14x14
// (16 tiles) and larger maps ran at 120-145 GF/s-equivalent against 53-61.
constexpr int64_t kWinogradMinTiles = 9;
int64_t winograd_tiles(const Conv2dShape& s) { return ((s.out_h() + 3) / 4) * ((s.out_w() + 3) / 4); }
bool winograd_pays_off(const Conv2dShape& s) { return winograd_tiles(s) >= kWinogradMinTiles; }
// Pixel tiles (AVX-512 only) against im2col/1x1 GEMM, measured on ResNet's layers at 1 thread: ahead on
// every map of up to 14x14 from a reduction of 256 (7x7 3x3: 89-118 GF/s against 52-79; 1x1 K=2048 on
// 7x7: 82-126 against 63-95), and on 28x28 for the im2col shapes (3x3 and 1x1 stride 2: 77-91 against
// 46-75) and 1x1 with K >= 512; behind on 56x56 and for 1x1 K=256 on 28x28, where the GEMM's packed B
// panels are reused better; and below K = 256 the transposing store costs more than the GEMM loses.
// Two exceptions from K = 128, measured on MobileNetV2/SqueezeNet layers (Zen 4, minima of 5 runs):
// 7x7 maps, whose 49 pixels the GEMM pads to 64 columns (160->960: 143 against 179 us at 1 thread,
// 78 against 117 at 2), and at most 32 output channels on maps up to 28x28, where the GEMM reads its B
// as K strided rows (192->32 on 28x28: 91 against 103 us; 144->32: 70 against 77; 128->32 on 27x27:
// 58 against 64); expands (K = 16-32) and 56x56 maps stay on the GEMM (24->144 on 56x56: 332 against 250).
// Since strided convolutions read phase planes instead of packing im2col panels (conv_pixel_tile.cpp), they
// win at stride 2 on maps up to 28x28 from K = 32 as well (Zen 5, AMD EPYC family 26, 1 thread, `tessel
// compile --tune`'s timings: ResNet-18's 1x1/2 64->128 on 56x56 0.093 against 0.105 ms, 128->256 on 28x28
// 0.080 against 0.088; RegNetY's 48->104 0.072 against 0.078). The in-place 1x1 on 56x56 also won at 1
// thread from K = 256 with 128+ outputs (256->128: 1.05 against 1.15 ms in ResNet-50, 1.18 against 1.32 in
// ResNeXt-50), but not clearly at 2 threads (ResNeXt's 0.57-0.70 against 0.64-0.71 ms): left on the GEMM.
constexpr int64_t kPixelTileMinK = 256, kPixelTileMinKSmall = 128, kPixelTileMinKStrided = 32;
bool pixel_tile_pays_off(const Conv2dShape& s) {
  const int64_t k = s.in_per_group() * s.kernel_h * s.kernel_w, plane = s.out_h() * s.out_w();
  if (s.stride_h == 2 && s.stride_w == 2 && s.dilation_h == 1 && s.dilation_w == 1 && s.kernel_h <= 7 &&
      s.kernel_w <= 7 && k >= kPixelTileMinKStrided && plane <= 784)
    return true;
  if (k >= kPixelTileMinKSmall && k < kPixelTileMinK)
    return plane <= 49 || (plane <= 784 && s.out_channels <= 32);
  if (k < kPixelTileMinK) return false;
  return plane <= 196 || (plane <= 784 && (!s.is_pointwise() || k >= 512));
}

// With few tiles and few output channels Winograd's transforms outweigh its products, and its transformed
// weights are 4x the raw ones (36 against 9 values per channel pair), read once per inference. DenseNet-121's
// 24 convs 128->32 3x3 on 14x14 (16 tiles), on Zen 5 (AMD EPYC family 26): pixel tiles instead took the
// whole model from 1.00 to 1.01x its time at 1 thread and to 0.93x at 2 (bench/ab.py, 6 rounds), where
// Winograd's threads both read all the weights and one thread's products barely outrun one's transforms.
bool pixel_tile_beats_winograd(const Conv2dShape& s) {
  return s.out_channels <= 32 && winograd_tiles(s) <= 16 && pixel_tile_pays_off(s);
}

// Grouped convolutions with at least 32 output channels per group go to pixel tiles over phase planes (two
// weight vectors per step against the grouped kernel's 8-channel register tiles, whose rows of 7 or 14
// pixels leave most of a 16-lane vector empty). ResNeXt-50 32x4d on Zen 5 (AMD EPYC family 26), 1 thread,
// `tessel compile --tune`'s timings: 1024->1024 (32 groups) on 7x7 0.31 against 0.67 ms, the same at
// stride 2 from 14x14 0.56 against 0.76; with 16 per group (512 on 14x14) 0.45 against 0.38, and 8 per
// group on 28x28 and 56x56 2.7-3.8x slower, so those stay grouped.
bool pixel_tile_beats_grouped(const Conv2dShape& s) { return s.out_per_group() >= 32; }

// Pixels as GEMM rows (AVX2) where the 16-column panels would pad the map's pixels by more than a tenth
// over 6-row panels (7x7 maps: 49 pixels, 54 rows against 64 columns) and the reduction is long. Measured
// on Zen 5 with --isa avx2 (AMD EPYC family 26, 1 thread): ResNet-50's 512->512 3x3 on 7x7 (K = 4608)
// 4.6 -> 3.4 ms, its 2048->512 1x1 (K = 2048) 1.71 -> 1.62, but 512->2048 (K = 512) 1.70 -> 1.69 and
// MobileNetV2 (7x7 1x1 convs with K = 160-960) slower as a whole (1.10x, noisy): hence K >= 1024.
// On an AVX2-only Zen 2 (AMD EPYC family 23 model 49, 1 thread) the 1x1 convs lose even there: 2048->512
// 1621 against 1536 us for the 1x1 GEMM, EfficientNet-B0's 1152->192 433 against 320 (the 3x3 512->512
// keeps its gain: 3501 against 4147 for im2col): hence only convolutions that need an im2col.
constexpr int64_t kPixelRowsMinK = 1024;
bool pixel_rows_pay_off(const Conv2dShape& s) {
  const int64_t plane = s.out_h() * s.out_w(), k = s.in_per_group() * s.kernel_h * s.kernel_w;
  const int64_t rows = (plane + 5) / 6 * 6, cols = (plane + 15) / 16 * 16;
  return !s.is_pointwise() && k >= kPixelRowsMinK && rows * 11 < cols * 10;
}

size_t depthwise_nchw_size(const Conv2dShape& s) { return static_cast<size_t>(s.in_channels * s.kernel_h * s.kernel_w); }
void depthwise_nchw_pack(const Conv2dShape& s, const float* w, float* packed) {
  std::memcpy(packed, w, depthwise_nchw_size(s) * sizeof(float));
}

}  // namespace

const std::vector<Conv2dKernel>& conv2d_kernels() {
  static const std::vector<Conv2dKernel> kernels = {
      {"conv2d_nchw_depthwise_avx2", ConvLayout::NCHW, is_depthwise, depthwise_nchw_size, depthwise_nchw_pack,
       conv2d_nchw_depthwise_avx2},
      {"conv2d_nchw_1x1_gemv", ConvLayout::NCHW, conv2d_nchw_1x1_gemv_applicable, conv2d_nchw_1x1_gemv_packed_size,
       conv2d_nchw_1x1_gemv_pack, conv2d_nchw_1x1_gemv},
      {"conv2d_nchw_grouped", ConvLayout::NCHW, conv2d_nchw_grouped_applicable, conv2d_nchw_grouped_packed_size,
       conv2d_nchw_grouped_pack, conv2d_nchw_grouped},
      {"conv2d_winograd_f43_avx2", ConvLayout::NCHW, is_winograd_f43, conv2d_winograd_f43_packed_size,
       conv2d_winograd_f43_pack, conv2d_winograd_f43_avx2},
      {"conv2d_nchw_direct_small_cin", ConvLayout::NCHW, conv2d_nchw_direct_small_cin_applicable,
       conv2d_nchw_direct_small_cin_packed_size, conv2d_nchw_direct_small_cin_pack, conv2d_nchw_direct_small_cin},
      {"conv2d_nchw_dilated_taps", ConvLayout::NCHW, conv2d_nchw_dilated_taps_applicable,
       conv2d_nchw_dilated_taps_packed_size, conv2d_nchw_dilated_taps_pack, conv2d_nchw_dilated_taps},
      {"conv2d_nchw_pixel_tile", ConvLayout::NCHW, conv2d_nchw_pixel_tile_applicable,
       conv2d_nchw_pixel_tile_packed_size, conv2d_nchw_pixel_tile_pack, conv2d_nchw_pixel_tile, true},
      {"conv2d_nchw_gemm_pixel_rows", ConvLayout::NCHW, conv2d_nchw_gemm_pixel_rows_applicable,
       conv2d_nchw_gemm_pixel_rows_packed_size, conv2d_nchw_gemm_pixel_rows_pack, conv2d_nchw_gemm_pixel_rows},
      {"conv2d_nchw_1x1_gemm_avx2", ConvLayout::NCHW, is_1x1_s1_p0, conv2d_nchw_im2col_gemm_packed_size,
       conv2d_nchw_im2col_gemm_pack, conv2d_nchw_1x1_gemm_avx2},
      {"conv2d_nchw_im2col_gemm_avx2", ConvLayout::NCHW, always, conv2d_nchw_im2col_gemm_packed_size,
       conv2d_nchw_im2col_gemm_pack, conv2d_nchw_im2col_gemm_avx2},
      {"conv2d_winograd_f43_nchwc8_avx2", ConvLayout::NCHWc8, conv2d_winograd_f43_nchwc8_applicable,
       conv2d_winograd_f43_packed_size, conv2d_winograd_f43_pack, conv2d_winograd_f43_nchwc8_avx2},
      {"conv2d_nchwc8_depthwise_avx2", ConvLayout::NCHWc8, is_depthwise, conv2d_nchwc8_depthwise_packed_size,
       conv2d_nchwc8_depthwise_pack, conv2d_nchwc8_depthwise_avx2},
      {"conv2d_stem_nchwc8_avx2", ConvLayout::NCHWc8, conv2d_stem_nchwc8_applicable, conv2d_stem_nchwc8_packed_size,
       conv2d_stem_nchwc8_pack, conv2d_stem_nchwc8_avx2, false, true},
      {"conv2d_nchwc8_direct_avx2", ConvLayout::NCHWc8, conv2d_nchwc8_direct_applicable, conv2d_nchwc8_direct_packed_size,
       conv2d_nchwc8_direct_pack, conv2d_nchwc8_direct_avx2},
  };
  return kernels;
}

const Conv2dKernel* find_conv2d_kernel(const char* name) {
  for (const auto& k : conv2d_kernels())
    if (std::strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

void pack_scaled_conv_weights(const Conv2dKernel& k, const Conv2dShape& s, const float* weights, const float* scale,
                              float* packed) {
  const int64_t M = s.out_channels, C = s.in_channels, taps = s.kernel_h * s.kernel_w;
  static thread_local AlignedBuffer buf;
  float* w = buf.ensure(static_cast<size_t>(M * C * taps));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) {
      const float* src = weights + (m * C + c) * taps;
      float* dst = w + (m * C + c) * taps;
      for (int64_t t = 0; t < taps; ++t) dst[t] = src[t] * scale[c];
    }
  k.pack_weights(s, w, packed);
}

const Conv2dKernel* select_conv2d_kernel(const Conv2dShape& shape, ConvLayout layout, bool avx512) {
  for (const auto& k : conv2d_kernels()) {
    if (k.layout != layout || !k.applicable(shape) || (k.avx512_only && !avx512)) continue;
    // Shape-based choices.
    if (k.run == conv2d_winograd_f43_avx2 &&
        (!winograd_pays_off(shape) || (avx512 && pixel_tile_beats_winograd(shape))))
      continue;
    if (k.run == conv2d_winograd_f43_nchwc8_avx2 && !winograd_pays_off(shape)) continue;
    if (k.run == conv2d_nchw_grouped && avx512 && pixel_tile_beats_grouped(shape) &&
        conv2d_nchw_pixel_tile_applicable(shape))
      continue;
    if (k.run == conv2d_nchw_pixel_tile &&
        (shape.groups == 1 ? !pixel_tile_pays_off(shape) : !pixel_tile_beats_grouped(shape)))
      continue;
    if (k.run == conv2d_nchw_gemm_pixel_rows && (avx512 || !pixel_rows_pay_off(shape))) continue;
    return &k;
  }
  return nullptr;
}

}  // namespace tessel::rt
