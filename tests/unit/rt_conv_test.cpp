// Tests of every convolution kernel in conv2d_kernels() against a naive NCHW loop (double accumulation).
#include <cmath>
#include <gtest/gtest.h>

#include "rt_test_util.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/pool.h"

namespace tessel::rt {
namespace {

using test::expect_close;
using test::random_vector;

std::vector<double> ref_conv(const Conv2dShape& s, const std::vector<float>& in, const std::vector<float>& w,
                             const Epilogue& ep) {
  const int64_t OH = s.out_h(), OW = s.out_w(), cig = s.in_per_group(), cog = s.out_per_group();
  std::vector<double> out(s.batch * s.out_channels * OH * OW);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t co = 0; co < s.out_channels; ++co)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t g = co / cog;
          double acc = 0;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t ky = 0; ky < s.kernel_h; ++ky)
              for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
                int64_t ih = oh * s.stride_h - s.pad_top + ky * s.dilation_h;
                int64_t iw = ow * s.stride_w - s.pad_left + kx * s.dilation_w;
                if (ih < 0 || ih >= s.in_h || iw < 0 || iw >= s.in_w) continue;
                acc += double(in[((n * s.in_channels + g * cig + ci) * s.in_h + ih) * s.in_w + iw]) *
                       w[((co * cig + ci) * s.kernel_h + ky) * s.kernel_w + kx];
              }
          const int64_t o = ((n * s.out_channels + co) * OH + oh) * OW + ow;
          if (ep.bias) acc += ep.bias[co];
          if (ep.residual) acc += ep.residual[o];
          out[o] = test::ref_activation(acc, ep);
        }
  return out;
}

// Test-side layout conversion, independent of the library's reorder kernels.
std::vector<float> to_nchwc8(const std::vector<float>& x, int64_t N, int64_t C, int64_t hw) {
  const int64_t CB = (C + 7) / 8;
  std::vector<float> y(N * CB * 8 * hw, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < hw; ++p) y[((n * CB + c / 8) * hw + p) * 8 + c % 8] = x[(n * C + c) * hw + p];
  return y;
}
std::vector<float> from_nchwc8(const std::vector<float>& y, int64_t N, int64_t C, int64_t hw) {
  const int64_t CB = (C + 7) / 8;
  std::vector<float> x(N * C * hw);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < hw; ++p) x[(n * C + c) * hw + p] = y[((n * CB + c / 8) * hw + p) * 8 + c % 8];
  return x;
}

Conv2dShape shape(int64_t n, int64_t ci, int64_t h, int64_t w, int64_t co, int64_t k, int64_t stride,
                  int64_t pt, int64_t pl, int64_t pb, int64_t pr, int64_t dil = 1, int64_t groups = 1) {
  Conv2dShape s;
  s.batch = n;
  s.in_channels = ci;
  s.in_h = h;
  s.in_w = w;
  s.out_channels = co;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_top = pt;
  s.pad_left = pl;
  s.pad_bottom = pb;
  s.pad_right = pr;
  s.dilation_h = s.dilation_w = dil;
  s.groups = groups;
  return s;
}

// Runs `k` on shape s with epilogue ep and compares to the reference; returns false if not applicable.
bool check_kernel(const Conv2dKernel& k, const Conv2dShape& s, Epilogue ep, int threads, double tol) {
  if (!k.applicable(s)) return false;
  const int64_t OH = s.out_h(), OW = s.out_w();
  auto in = random_vector(s.batch * s.in_channels * s.in_h * s.in_w, 11 + s.in_h);
  auto w = random_vector(s.out_channels * s.in_per_group() * s.kernel_h * s.kernel_w, 12 + s.out_channels);
  auto bias = random_vector(s.out_channels, 13);
  auto res = random_vector(s.batch * s.out_channels * OH * OW, 14);
  if (ep.bias) ep.bias = bias.data();
  if (ep.residual) ep.residual = res.data();
  auto want = ref_conv(s, in, w, ep);
  AlignedBuffer packed(k.packed_weight_size(s));
  k.pack_weights(s, w.data(), packed.data());
  ThreadPool pool(threads);
  std::vector<float> got;
  if (k.layout == ConvLayout::NCHW) {
    got.assign(want.size(), -7.0f);
    k.run(s, in.data(), packed.data(), got.data(), ep, &pool);
  } else {
    auto in8 = k.nchw_input ? in : to_nchwc8(in, s.batch, s.in_channels, s.in_h * s.in_w);
    auto res8 = to_nchwc8(res, s.batch, s.out_channels, OH * OW);
    if (ep.residual) ep.residual = res8.data();
    std::vector<float> out8(nchwc8_size(s.batch, s.out_channels, OH * OW), -7.0f);
    k.run(s, in8.data(), packed.data(), out8.data(), ep, &pool);
    got = from_nchwc8(out8, s.batch, s.out_channels, OH * OW);
  }
  expect_close(got, want, tol,
               std::string(k.name) + " ci=" + std::to_string(s.in_channels) + " co=" + std::to_string(s.out_channels) +
                   " h=" + std::to_string(s.in_h) + " w=" + std::to_string(s.in_w) + " k=" + std::to_string(s.kernel_h) +
                   " s=" + std::to_string(s.stride_h) + " d=" + std::to_string(s.dilation_h) +
                   " g=" + std::to_string(s.groups) + " act=" + activation_name(ep.act) +
                   " threads=" + std::to_string(threads));
  return true;
}

// Winograd's transforms amplify rounding (entries up to 8 in A, 5 in B): looser, documented tolerance.
double tolerance_for(const Conv2dKernel& k) {
  return std::string(k.name).find("winograd") != std::string::npos ? 5e-5 : 1e-5;
}

std::vector<Conv2dShape> dense_shapes() {
  return {
      shape(1, 3, 7, 9, 5, 3, 1, 1, 1, 1, 1),          // odd everything, channels < 8
      shape(1, 17, 13, 11, 19, 3, 1, 1, 1, 1, 1),      // 3x3 s1 "same", channels not multiple of 8
      shape(2, 16, 15, 17, 24, 3, 1, 0, 2, 1, 0),      // batch 2, asymmetric pads
      shape(1, 9, 16, 16, 10, 3, 2, 1, 1, 1, 1),       // stride 2
      shape(1, 5, 17, 19, 7, 3, 3, 2, 0, 1, 2),        // stride 3, asymmetric pads
      shape(1, 8, 14, 15, 9, 3, 1, 2, 2, 2, 2, 2),     // dilation 2
      shape(1, 24, 11, 13, 30, 1, 1, 0, 0, 0, 0),      // 1x1
      shape(1, 12, 9, 9, 20, 1, 2, 0, 0, 0, 0),        // 1x1 stride 2
      shape(1, 3, 23, 21, 16, 7, 2, 3, 3, 3, 3),       // 7x7 stem-like
      shape(1, 8, 6, 6, 12, 5, 1, 2, 1, 0, 2),         // 5x5
      shape(1, 32, 26, 30, 40, 3, 1, 1, 1, 1, 1),      // several Winograd tile groups, split by tiles at 2-3 threads
      shape(1, 16, 8, 7, 50, 3, 1, 1, 1, 1, 1),        // one Winograd tile group, split by channel blocks
      shape(1, 64, 61, 59, 13, 3, 1, 1, 1, 1, 1),      // several Winograd blocks (V of one fills half of L2)
      shape(2, 24, 20, 9, 16, 3, 1, 0, 1, 1, 0),       // NCHWc8 Winograd: batch 2, asymmetric pads, 12+4 channels
      shape(1, 8, 5, 6, 8, 3, 1, 1, 1, 1, 1),          // NCHWc8 Winograd: one channel block, 4 tiles (a partial 8)
      shape(1, 12, 10, 10, 18, 3, 1, 1, 1, 1, 1, 1, 3),  // groups 3
      shape(1, 24, 7, 7, 32, 3, 1, 1, 1, 1, 1),        // 7x7 map: NCHWc8 flat tiles across rows
      shape(2, 16, 13, 14, 16, 3, 2, 1, 0, 1, 1),      // flat tiles: stride 2, asymmetric pads, batch 2
      shape(1, 8, 9, 9, 16, 3, 1, 2, 2, 2, 2, 2),      // flat tiles: dilation 2
      shape(1, 32, 7, 7, 32, 3, 1, 1, 1, 1, 1, 1, 2),  // flat tiles: two block groups
      shape(1, 16, 5, 5, 16, 5, 1, 2, 2, 2, 2),        // flat tiles: 5x5 on 5x5
      shape(1, 16, 9, 7, 8, 1, 1, 0, 0, 0, 0, 1, 4),     // grouped 1x1
      // NCHWc8 direct tiles of 4 output blocks (AVX-512 builds: two blocks per zmm) and their remainders
      shape(1, 16, 11, 19, 48, 3, 1, 1, 1, 1, 1),      // 6 blocks: 4 + 2, rows of 19
      shape(1, 24, 9, 30, 56, 1, 1, 0, 0, 0, 0),       // 1x1 on a flattened row of 270, 7 blocks: 4 + 2 + 1
      shape(2, 32, 10, 13, 64, 3, 2, 1, 0, 1, 1, 1, 2),  // 2 block groups of 4 blocks, stride 2, batch 2
      shape(1, 32, 12, 12, 32, 3, 1, 1, 1, 1, 1, 1, 2),  // 2 block groups of 2 blocks (pairs only)
      // atrous (dilated taps: one GEMM per tap over its live outputs): the centre tap reads the whole map
      shape(1, 8, 9, 11, 12, 3, 1, 6, 6, 6, 6, 6),
      shape(2, 10, 7, 8, 9, 3, 1, 4, 5, 8, 5, 6),      // no tap covers the output; one tap reads padding only
      shape(1, 128, 10, 12, 20, 3, 1, 2, 2, 2, 2, 2),  // 128 channels, d = 2: taps' rows 10 of 12 wide, GEMM into the rows
  };
}

std::vector<Conv2dShape> depthwise_shapes() {
  return {
      shape(1, 13, 11, 14, 13, 3, 1, 1, 1, 1, 1, 1, 13),
      shape(2, 8, 17, 33, 8, 3, 2, 1, 1, 1, 1, 1, 8),
      shape(1, 20, 28, 29, 20, 3, 2, 0, 1, 1, 0, 1, 20),
      shape(1, 9, 12, 40, 9, 5, 1, 2, 2, 2, 2, 1, 9),
      shape(1, 11, 15, 15, 11, 3, 1, 2, 2, 2, 2, 2, 11),
      shape(1, 7, 19, 23, 7, 3, 3, 1, 0, 0, 1, 1, 7),
      shape(1, 24, 29, 45, 24, 5, 2, 2, 2, 2, 2, 1, 24),  // MnasNet-like 5x5 stride 2, rows of 23 (2 x 16 lanes)
      shape(1, 20, 27, 27, 20, 5, 2, 2, 2, 2, 2, 1, 20),  // 5x5 stride 2 to 14x14 (channels in lanes, 25 taps)
      shape(1, 37, 13, 13, 37, 5, 1, 2, 2, 2, 2, 1, 37),  // 5x5 stride 1 on 13x13, a partial lane block
  };
}

TEST(RtConv, EveryKernelOnDenseShapesWithBiasResidualRelu) {
  Epilogue ep = Epilogue::with_act(Activation::Relu);
  float dummy = 0;
  ep.bias = &dummy;
  ep.residual = &dummy;
  int runs = 0;
  for (const auto& k : conv2d_kernels())
    for (const auto& s : dense_shapes())
      for (int threads : {1, 2, 3}) runs += check_kernel(k, s, ep, threads, tolerance_for(k));
  EXPECT_GE(runs, 90);  // every applicable (kernel, shape, threads) combination
}

TEST(RtConv, EveryKernelOnDepthwiseShapes) {
  float dummy = 0;
  int runs = 0;
  for (const auto& k : conv2d_kernels())
    for (const auto& s : depthwise_shapes())
      for (int threads : {1, 2}) {
        Epilogue ep = Epilogue::relu6();
        ep.bias = &dummy;
        ep.residual = threads == 2 ? &dummy : nullptr;
        runs += check_kernel(k, s, ep, threads, tolerance_for(k));
      }
  EXPECT_EQ(runs, 3 * 9 * 2);  // nchw depthwise, nchwc8 depthwise and the im2col fallback
}

TEST(RtConv, EveryKernelEveryActivation) {
  float dummy = 0;
  const auto dense = shape(1, 10, 9, 11, 12, 3, 1, 1, 1, 1, 1);
  const auto dw = shape(1, 10, 9, 11, 10, 3, 1, 1, 1, 1, 1, 1, 10);
  const auto stem = shape(1, 3, 21, 35, 11, 3, 2, 0, 1, 1, 0);  // few input channels, 17-wide rows
  // 50-wide rows of 16 channels: the stem's whole register blocks (3 vectors x 8 channels) take its straight-line
  // store, the last 2 columns the edge store.
  const auto wide_stem = shape(1, 3, 9, 100, 16, 3, 2, 1, 1, 1, 1);
  const auto small_map = shape(1, 16, 6, 7, 16, 3, 1, 1, 1, 1, 1);  // NCHWc8 flat tiles (rows of 7)
  for (Epilogue ep : test::all_activations()) {
    ep.bias = &dummy;
    for (const auto& k : conv2d_kernels()) {
      check_kernel(k, dense, ep, 1, tolerance_for(k));
      check_kernel(k, dw, ep, 2, tolerance_for(k));
      check_kernel(k, small_map, ep, 2, tolerance_for(k));
      Epilogue with_residual = ep;
      with_residual.residual = &dummy;
      check_kernel(k, stem, with_residual, 1, tolerance_for(k));
      check_kernel(k, wide_stem, with_residual, 2, tolerance_for(k));
      check_kernel(k, wide_stem, ep, 1, tolerance_for(k));
    }
  }
}

TEST(RtConv, NoEpilogueAndSelection) {
  for (const auto& k : conv2d_kernels()) check_kernel(k, shape(1, 16, 12, 12, 16, 3, 1, 1, 1, 1, 1), {}, 1, tolerance_for(k));
  const auto s3 = shape(1, 64, 56, 56, 64, 3, 1, 1, 1, 1, 1);
  EXPECT_STREQ(select_conv2d_kernel(s3, ConvLayout::NCHW)->name, "conv2d_winograd_f43_avx2");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 64, 8, 8, 32, 1, 1, 0, 0, 0, 0), ConvLayout::NCHW)->name,
               "conv2d_nchw_1x1_gemm_avx2");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 8, 8, 8, 8, 3, 1, 1, 1, 1, 1, 1, 8), ConvLayout::NCHWc8)->name,
               "conv2d_nchwc8_depthwise_avx2");
  EXPECT_NE(find_conv2d_kernel("conv2d_nchwc8_direct_avx2"), nullptr);
  EXPECT_EQ(find_conv2d_kernel("no_such_kernel"), nullptr);
}

// Squeeze-and-excitation's convolutions of a 1x1 map go to the GEMV kernel with either ISA's selection: reductions
// and output counts that leave partial 16-column panels and partial 2-step K loops, batch 2 (each image's bias
// and residual offsets), the gated activations, and thread counts on both sides of its 64k-MAC threading limit.
TEST(RtConv, OnePixelPointwiseConvIsAGemv) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_1x1_gemv");
  ASSERT_NE(k, nullptr);
  const std::vector<Conv2dShape> shapes = {
      shape(1, 48, 1, 1, 1152, 1, 1, 0, 0, 0, 0),  // EfficientNet-B0's excitation, 73k MACs: threaded
      shape(1, 1152, 1, 1, 48, 1, 1, 0, 0, 0, 0),  // its squeeze (3 panels)
      shape(2, 13, 1, 1, 37, 1, 1, 0, 0, 0, 0),    // odd K, 2 full panels + 5 columns, batch 2
      shape(1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0),      // one channel
      shape(3, 300, 1, 1, 250, 1, 1, 0, 0, 0, 0),  // 75k MACs per image, batch 3
  };
  float dummy = 0;
  int runs = 0;
  for (const auto& s : shapes) {
    for (bool avx512 : {false, true})
      EXPECT_STREQ(select_conv2d_kernel(s, ConvLayout::NCHW, avx512)->name, "conv2d_nchw_1x1_gemv");
    for (Epilogue ep : test::all_activations())
      for (int threads : {1, 2, 3}) {
        ep.bias = &dummy;
        ep.residual = threads == 2 ? &dummy : nullptr;
        runs += check_kernel(*k, s, ep, threads, tolerance_for(*k));
      }
  }
  EXPECT_EQ(runs, static_cast<int>(shapes.size() * test::all_activations().size() * 3));
  // A 1x1 map with padding, stride or groups is not a GEMV.
  EXPECT_FALSE(k->applicable(shape(1, 8, 1, 1, 8, 1, 1, 1, 1, 1, 1)));
  EXPECT_FALSE(k->applicable(shape(1, 8, 1, 1, 8, 1, 1, 0, 0, 0, 0, 1, 2)));
  EXPECT_FALSE(k->applicable(shape(1, 8, 2, 1, 8, 1, 1, 0, 0, 0, 0)));
}

TEST(RtConv, WinogradSelectedOnlyForMapsWithEnoughTiles) {
  // 7x7 (4 tiles) goes to pixel rows (49 pixels pad to 54 rows, not 64 columns), 8x8 (4 tiles) to im2col,
  // 12x12 (9 tiles) and 14x14 (16 tiles) to Winograd.
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 512, 7, 7, 512, 3, 1, 1, 1, 1, 1), ConvLayout::NCHW)->name,
               "conv2d_nchw_gemm_pixel_rows");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 64, 8, 8, 64, 3, 1, 1, 1, 1, 1), ConvLayout::NCHW)->name,
               "conv2d_nchw_im2col_gemm_avx2");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 64, 12, 12, 64, 3, 1, 1, 1, 1, 1), ConvLayout::NCHW)->name,
               "conv2d_winograd_f43_avx2");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 256, 14, 14, 256, 3, 1, 1, 1, 1, 1), ConvLayout::NCHW)->name,
               "conv2d_winograd_f43_avx2");
  // Stride 2 never takes Winograd; dense NCHWc8 takes its Winograd twin on the same maps, else the direct kernel.
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 64, 56, 56, 128, 3, 2, 1, 1, 1, 1), ConvLayout::NCHW)->name,
               "conv2d_nchw_im2col_gemm_avx2");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 64, 7, 7, 64, 3, 1, 1, 1, 1, 1), ConvLayout::NCHWc8)->name,
               "conv2d_nchwc8_direct_avx2");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 64, 14, 14, 64, 3, 1, 1, 1, 1, 1), ConvLayout::NCHWc8)->name,
               "conv2d_winograd_f43_nchwc8_avx2");
  EXPECT_STREQ(select_conv2d_kernel(shape(1, 64, 56, 56, 128, 3, 2, 1, 1, 1, 1), ConvLayout::NCHWc8)->name,
               "conv2d_nchwc8_direct_avx2");
}

// The pixel-tile kernel where selection takes it (reductions of 256 and more): several 512-long
// reduction blocks (partial sums in the output), channel counts that leave a partial 64-block and a
// partial vector, pixel counts that leave 1-6 pixels after the 7-pixel tiles, the in-place 1x1 path and
// the im2col path (stride, padding, dilation), and both thread splits (channel blocks when the map is
// small, pixels when it is large).
// 1x1 in place on 2 threads with few whole channel blocks of 64 (MnasNet's 1152 -> 192 and -> 320 on 7x7): one
// task per (block, tile), blocks outermost, split anywhere between tiles; and a partial block (not that split).
TEST(RtConv, PixelTilePointwiseFewBlocksTwoThreads) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_pixel_tile");
  ASSERT_NE(k, nullptr);
  const std::vector<Conv2dShape> shapes = {
      shape(1, 1152, 7, 7, 320, 1, 1, 0, 0, 0, 0),  // 5 blocks x 7 tiles, K = 1152 (3 reduction blocks)
      shape(2, 576, 7, 7, 192, 1, 1, 0, 0, 0, 0),   // 3 blocks, batch 2
      shape(1, 256, 14, 14, 128, 1, 1, 0, 0, 0, 0), // 2 blocks x 28 tiles
      shape(1, 300, 9, 5, 64, 1, 1, 0, 0, 0, 0),    // 1 block, 45 pixels (tail of 3)
      shape(1, 300, 7, 7, 96, 1, 1, 0, 0, 0, 0),    // 64 + 32 channels: the tile-chunk split
  };
  int64_t ran = 0;
  for (const auto& s : shapes)
    for (Activation act : {Activation::Relu, Activation::Sigmoid}) {
      Epilogue ep = Epilogue::with_act(act);
      float dummy = 0;
      ep.bias = &dummy;
      ep.residual = act == Activation::Relu ? &dummy : nullptr;
      ran += check_kernel(*k, s, ep, 2, 2e-5 * std::sqrt(double(s.in_channels) / 64));
    }
  EXPECT_EQ(ran, 10);
}

TEST(RtConv, PixelTileLongReductions) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_pixel_tile");
  ASSERT_NE(k, nullptr);
  const std::vector<Conv2dShape> shapes = {
      shape(1, 600, 7, 7, 70, 1, 1, 0, 0, 0, 0),         // 1x1 in place, K = 600 (2 blocks), 64 + 6 channels
      shape(1, 1100, 5, 6, 17, 1, 1, 0, 0, 0, 0),        // 1x1, 3 K blocks, 30 pixels (tail of 2), 17 channels
      shape(1, 300, 23, 29, 33, 1, 1, 0, 0, 0, 0),       // 1x1, 667 pixels (95 tiles + 2): pixel split
      shape(2, 64, 9, 11, 130, 3, 2, 1, 1, 1, 1),        // 3x3 s2 im2col, K = 576, 3 channel blocks, batch 2
      shape(1, 40, 30, 31, 20, 3, 1, 1, 1, 1, 1),        // 3x3 im2col, 930 pixels, K = 360
      shape(1, 32, 12, 13, 48, 3, 1, 2, 2, 2, 2, 2),     // dilation 2, K = 288
      shape(1, 256, 14, 14, 96, 1, 2, 0, 0, 0, 0),       // 1x1 stride 2 (im2col), 49 pixels
      shape(1, 512, 7, 7, 512, 3, 1, 1, 1, 1, 1),        // ResNet layer4 3x3, K = 4608
  };
  int64_t ran = 0;
  for (const auto& s : shapes)
    for (int threads : {1, 2}) {
      Epilogue ep = threads == 1 ? Epilogue::with_act(Activation::Relu) : Epilogue::with_act(Activation::HardSwish);
      float dummy = 0;
      ep.bias = &dummy;
      ep.residual = threads == 1 ? &dummy : nullptr;
      // Long reductions of random +-1 values: the tolerance scales with sqrt(K).
      ran += check_kernel(*k, s, ep, threads, 2e-5 * std::sqrt(double(s.in_channels * s.kernel_h * s.kernel_w) / 64));
    }
  EXPECT_EQ(ran, 16);
  // Selection: only on an AVX-512 target, from K = 256, on maps up to 14x14, and on 28x28 for im2col shapes
  // and 1x1 with K >= 512; from K = 128 on 7x7 maps and for at most 32 output channels up to 28x28.
  const struct {
    Conv2dShape s;
    bool avx512;
    const char* kernel;
  } choices[] = {
      {shape(1, 512, 7, 7, 512, 3, 1, 1, 1, 1, 1), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 1024, 14, 14, 2048, 1, 2, 0, 0, 0, 0), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 512, 28, 28, 128, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 256, 28, 28, 64, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_1x1_gemm_avx2"},
      {shape(1, 256, 56, 56, 64, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_1x1_gemm_avx2"},
      {shape(1, 128, 56, 56, 128, 3, 2, 1, 1, 1, 1), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 128, 112, 112, 128, 3, 2, 1, 1, 1, 1), true, "conv2d_nchw_im2col_gemm_avx2"},
      {shape(1, 128, 7, 7, 512, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_pixel_tile"},  // 62 vs 77 us (Zen 4)
      {shape(1, 256, 14, 14, 256, 3, 1, 1, 1, 1, 1), true, "conv2d_winograd_f43_avx2"},
      {shape(1, 512, 7, 7, 512, 3, 1, 1, 1, 1, 1), false, "conv2d_nchw_gemm_pixel_rows"},  // 4.6 -> 3.4 ms, Zen 5
      {shape(1, 160, 7, 7, 960, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 160, 7, 7, 960, 1, 1, 0, 0, 0, 0), false, "conv2d_nchw_1x1_gemm_avx2"},
      {shape(1, 2048, 7, 7, 512, 1, 1, 0, 0, 0, 0), false, "conv2d_nchw_1x1_gemm_avx2"},  // 1536 vs 1621 us (Zen 2)
      {shape(1, 1152, 7, 7, 192, 1, 1, 0, 0, 0, 0), false, "conv2d_nchw_1x1_gemm_avx2"},  // 320 vs 433 us (Zen 2)
      {shape(1, 256, 8, 8, 256, 3, 1, 1, 1, 1, 1), false, "conv2d_nchw_im2col_gemm_avx2"},  // 64 pixels: no padding
      {shape(1, 96, 7, 7, 576, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_1x1_gemm_avx2"},
      {shape(1, 144, 28, 28, 32, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 144, 28, 28, 48, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_1x1_gemm_avx2"},
      {shape(1, 144, 56, 56, 24, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_1x1_gemm_avx2"},
      {shape(1, 32, 28, 28, 192, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_1x1_gemm_avx2"},
      // Strided on phase planes from K = 32 up to 28x28 outputs; 1x1 on 56x56 on the GEMM.
      {shape(1, 64, 56, 56, 128, 1, 2, 0, 0, 0, 0), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 48, 56, 56, 104, 1, 2, 0, 0, 0, 0), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 16, 56, 56, 104, 1, 2, 0, 0, 0, 0), true, "conv2d_nchw_im2col_gemm_avx2"},
      {shape(1, 256, 56, 56, 128, 1, 1, 0, 0, 0, 0), true, "conv2d_nchw_1x1_gemm_avx2"},
      // Grouped: 32 output channels per group (ResNeXt's layer4) on pixel tiles, fewer on the grouped kernel.
      {shape(1, 1024, 7, 7, 1024, 3, 1, 1, 1, 1, 1, 1, 32), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 1024, 14, 14, 1024, 3, 2, 1, 1, 1, 1, 1, 32), true, "conv2d_nchw_pixel_tile"},
      {shape(1, 1024, 7, 7, 1024, 3, 1, 1, 1, 1, 1, 1, 32), false, "conv2d_nchw_grouped"},
      {shape(1, 512, 14, 14, 512, 3, 1, 1, 1, 1, 1, 1, 32), true, "conv2d_nchw_grouped"},
      {shape(1, 48, 56, 56, 48, 3, 2, 1, 1, 1, 1, 1, 6), true, "conv2d_nchw_grouped"},
  };
  for (const auto& c : choices)
    EXPECT_STREQ(select_conv2d_kernel(c.s, ConvLayout::NCHW, c.avx512)->name, c.kernel)
        << "ci=" << c.s.in_channels << " hw=" << c.s.in_h << " k=" << c.s.kernel_h << " s=" << c.s.stride_h
        << " avx512=" << c.avx512;
}

// Pixel tiles over phase planes (every pixel-tile convolution with a kernel or stride, no dilation): widths
// that leave 1-6 pixels after a row's 7-pixel tiles, widths of one tile or less, strides 1 and 2 in each
// direction, asymmetric and oversized pads, 1x1 to 7x7 and rectangular kernels, 1-3 reduction blocks that
// start and end inside taps (Cin 300: blocks of 512 steps), bands of one output row (Cin 1100 at stride 2:
// one row's planes exceed the band budget), grouped convolutions with partial channel blocks, batch 2, and
// 1-3 threads (row split on tall maps, channel-block split on short ones).
TEST(RtConv, PixelTilePhasePlanesOddGeometry) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_pixel_tile");
  ASSERT_NE(k, nullptr);
  Conv2dShape rect = shape(1, 24, 13, 17, 40, 3, 1, 0, 2, 1, 0);
  rect.kernel_h = 2, rect.kernel_w = 5, rect.stride_h = 1, rect.stride_w = 2;
  const std::vector<Conv2dShape> shapes = {
      shape(1, 300, 9, 23, 70, 3, 1, 1, 1, 1, 1),         // 23 = 3 x 7 + 2, K = 2700 (6 blocks inside taps)
      shape(2, 64, 17, 31, 130, 3, 2, 1, 1, 1, 1),        // stride 2, odd sizes, 16 columns (2 + 2 per row)
      shape(1, 40, 6, 5, 20, 3, 1, 1, 1, 1, 1),          // rows of 5 pixels (one short tile)
      shape(1, 16, 12, 12, 33, 5, 2, 2, 1, 0, 3),         // 5x5/2, asymmetric pads
      shape(1, 8, 11, 19, 17, 7, 1, 3, 3, 3, 3),          // 7x7/1, 49 taps of 8 channels
      shape(1, 32, 9, 9, 48, 3, 1, 4, 0, 5, 1),           // pads past the kernel: rows and columns of zeros
      shape(1, 300, 14, 14, 64, 1, 2, 0, 0, 0, 0),        // 1x1 stride 2: one phase
      shape(1, 1100, 6, 40, 24, 3, 2, 1, 1, 1, 1),        // one-row bands
      rect,                                               // 2x5 kernel, strides 1 x 2
      shape(1, 64, 7, 7, 96, 3, 1, 1, 1, 1, 1, 1, 2),     // grouped: 48 per group (64 + partial vector)
      shape(2, 96, 15, 15, 96, 3, 2, 1, 1, 1, 1, 1, 3),   // grouped, stride 2, odd map, batch 2
      shape(1, 40, 10, 9, 36, 3, 1, 1, 1, 1, 1, 1, 4),    // grouped: 9 per group (one partial vector)
  };
  int64_t ran = 0;
  for (const auto& s : shapes)
    for (int threads : {1, 2, 3}) {
      Epilogue ep = threads == 2 ? Epilogue::with_act(Activation::HardSwish) : Epilogue::with_act(Activation::Relu);
      float dummy = 0;
      ep.bias = &dummy;
      ep.residual = threads != 3 ? &dummy : nullptr;
      const double taps = double(s.in_per_group() * s.kernel_h * s.kernel_w);
      ran += check_kernel(*k, s, ep, threads, 2e-5 * std::sqrt(taps / 64));
    }
  EXPECT_EQ(ran, 36);
}

// The layer shapes the networks actually have, where the kernels take their fast paths: depthwise on
// 7x7/14x14/odd maps (row blocking, full-width border tiles), stride 2 with odd sizes, 1x1 flattened
// maps whose pixel count is not a multiple of the 6-pixel tile, 3x3 direct with several tiles per row.
TEST(RtConv, NetworkShapesOnEveryApplicableKernel) {
  const std::vector<Conv2dShape> shapes = {
      shape(1, 24, 7, 7, 24, 3, 1, 1, 1, 1, 1, 1, 24),      // MobileNet 7x7 depthwise (4-row blocking)
      shape(1, 16, 14, 14, 16, 3, 1, 1, 1, 1, 1, 1, 16),    // 14x14 depthwise (2x2 blocking)
      shape(1, 9, 5, 3, 9, 3, 1, 1, 1, 1, 1, 1, 9),         // map narrower than a tile
      shape(1, 16, 28, 28, 16, 3, 2, 0, 0, 1, 1, 1, 16),    // stride 2, TF-style bottom/right pad
      shape(2, 12, 57, 45, 12, 3, 2, 1, 1, 1, 1, 1, 12),    // stride 2, odd sizes, batch 2
      shape(1, 40, 7, 7, 72, 1, 1, 0, 0, 0, 0),             // 1x1 on 7x7 (49 pixels)
      shape(1, 24, 14, 14, 20, 1, 1, 0, 0, 0, 0),           // 1x1, 196 pixels, 2.5 output blocks
      shape(1, 16, 56, 9, 24, 1, 1, 0, 0, 0, 0),            // 1x1, 504 pixels: several flat chunks
      shape(1, 24, 20, 23, 16, 3, 1, 1, 1, 1, 1),           // 3x3, rows with 6-tiles and a 3-remainder
      shape(1, 16, 7, 7, 24, 3, 1, 1, 1, 1, 1),             // 3x3 on 7x7 (im2col by selection)
      // Stems (few input channels): input rows split into stride phases once and shared by the output
      // rows that read them; widths past several 16-wide vectors.
      shape(1, 3, 30, 100, 20, 3, 2, 1, 1, 1, 1),           // SqueezeNet-like 3x3/2
      shape(1, 3, 40, 45, 16, 7, 2, 3, 3, 3, 3),            // ResNet-like 7x7/2
      shape(1, 2, 19, 37, 9, 3, 2, 2, 1, 0, 2, 2),          // dilation 2, stride 2, asymmetric pads
      shape(1, 4, 20, 50, 8, 5, 3, 2, 2, 2, 2),             // stride 3
      // Grouped (conv2d_nchw_grouped): RegNet's 8 channels per group at stride 2 on odd sizes, 8 in and 12
      // out per group (a partial 8-channel block), ResNeXt's 32 per group, 5x5 with wide rows.
      shape(1, 48, 29, 31, 48, 3, 2, 1, 1, 1, 1, 1, 6),
      shape(1, 32, 14, 37, 48, 3, 1, 1, 1, 1, 1, 1, 4),
      shape(2, 64, 7, 7, 64, 3, 1, 1, 1, 1, 1, 1, 2),
      shape(1, 16, 9, 70, 16, 5, 1, 2, 1, 2, 0, 1, 4),
      // ResNeXt's layer3, 16 per group on 14x14: 14 one-vector rows, register tiles of 3, 3, 3, 3 and 2 vectors
      // with 16 lanes; 11 rows: 3, 3, 3 and 2 (the 7x7 shape above ends in a 1-vector tile).
      shape(1, 64, 14, 14, 64, 3, 1, 1, 1, 1, 1, 1, 4),
      shape(1, 32, 11, 11, 32, 3, 1, 1, 1, 1, 1, 1, 2),
      // ResNeXt's layer1, 4 per group (with 16 lanes: register tiles of 4 channels x 6 vectors): 11 one-vector
      // rows (6 + 5), 10 (6 + 4), 7 (6 + 1), rows of three vectors with 2 outputs per group (21: 6 + 6 + 6 + 3).
      shape(1, 8, 11, 14, 8, 3, 1, 1, 1, 1, 1, 1, 2),
      shape(1, 12, 10, 16, 12, 3, 1, 1, 1, 1, 1, 1, 3),
      shape(2, 8, 7, 9, 8, 3, 1, 1, 1, 1, 1, 1, 2),
      shape(1, 8, 7, 40, 4, 3, 1, 1, 1, 1, 1, 1, 2),
      // NCHWc8 block groups: ResNeXt's layer1 (4 channels per group, two merged per block group) at stride 2
      // on odd sizes, 8 per group (one block each: single-block tiles), 1x1 grouped with 16 per group.
      shape(1, 64, 15, 13, 64, 3, 2, 1, 1, 1, 1, 1, 16),
      shape(1, 32, 9, 10, 32, 3, 1, 1, 1, 1, 1, 1, 4),
      shape(1, 64, 6, 9, 32, 1, 1, 0, 0, 0, 0, 1, 4),
  };
  float dummy = 0;
  int runs = 0;
  for (const auto& k : conv2d_kernels())
    for (const auto& s : shapes)
      for (int threads : {1, 2}) {
        Epilogue ep = threads == 1 ? Epilogue::relu6() : Epilogue::with_act(Activation::Relu);
        ep.bias = &dummy;
        ep.residual = &dummy;
        runs += check_kernel(k, s, ep, threads, tolerance_for(k));
      }
  EXPECT_GE(runs, 40);
}

// The NCHW depthwise kernel's 3x3 stride-1/2 path on odd geometry: widths below, at and just past
// multiples of the 8/16-lane vectors and of the 4-vector column tiles, 1x1 and 1xN maps, heights that
// leave 1-3 rows after the 4-row blocks, and symmetric, zero and asymmetric pads (pad 2 on one side
// makes a vector in the middle of a row reach past the row's end at widths 16v + 17). Every
// applicable kernel runs, so the NCHWc8 and im2col kernels see the same shapes.
TEST(RtConv, DepthwiseOddGeometryEveryPath) {
  const int64_t sizes[][2] = {{1, 1},  {1, 9},   {2, 3},  {3, 1},  {5, 7},  {7, 7},  {9, 8},  {6, 15}, {4, 16},
                              {3, 17}, {14, 14}, {5, 31}, {4, 33}, {3, 47}, {6, 49}, {3, 64}, {2, 65}, {5, 100}};
  // The last pads exceed the kernel and a 16-lane vector: whole vectors and rows of padding.
  const int64_t pads[][4] = {{1, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 1, 0}, {1, 0, 0, 1},
                             {0, 0, 2, 2}, {2, 2, 0, 0}, {3, 20, 4, 18}};
  float dummy = 0;
  int runs = 0, nchw_runs = 0;
  for (int64_t stride : {1, 2})
    for (const auto& hw : sizes)
      for (const auto& p : pads) {
        const int64_t C = 3 + (hw[1] % 4);
        const auto s = shape(1, C, hw[0], hw[1], C, 3, stride, p[0], p[1], p[2], p[3], 1, C);
        if (s.out_h() < 1 || s.out_w() < 1) continue;
        const int threads = 1 + (runs % 2);
        Epilogue ep = Epilogue::relu6();
        ep.bias = &dummy;
        if (runs % 3 == 0) ep.residual = &dummy;
        for (const auto& k : conv2d_kernels()) {
          const bool ran = check_kernel(k, s, ep, threads, tolerance_for(k));
          if (ran && std::string(k.name) == "conv2d_nchw_depthwise_avx2") ++nchw_runs;
        }
        ++runs;
      }
  EXPECT_GT(runs, 180);
  EXPECT_EQ(nchw_runs, runs);  // the NCHW depthwise kernel applies to every one of them
}

// Depthwise epilogues on the fast path at both vector widths (7 wide: 8 lanes; 20 wide: 16 lanes with
// AVX-512): activations fused in the store (none, Relu, Clip) and the others applied after the plane,
// each with and without a residual, batch 2.
TEST(RtConv, DepthwiseEpiloguesBothWidths) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_depthwise_avx2");
  ASSERT_NE(k, nullptr);
  float dummy = 0;
  for (const auto& s : {shape(2, 5, 9, 7, 5, 3, 1, 1, 1, 1, 1, 1, 5), shape(2, 6, 11, 40, 6, 3, 2, 1, 1, 1, 1, 1, 6)})
    for (Epilogue ep : test::all_activations())
      for (bool with_res : {false, true}) {
        ep.bias = &dummy;
        ep.residual = with_res ? &dummy : nullptr;
        check_kernel(*k, s, ep, 2, 1e-5);
      }
}

// The NCHW depthwise kernel on small maps (up to 28 output columns: channels in lanes, the input
// transposed in just before the rows that read it), kernel widths 3 and 5 at strides 1 and 2: channel
// counts around the 8/16-lane blocks (a partial last block), odd and even widths, output widths from 1
// to past 28 (rows cut into unequal runs of pixels), output maps whose last lane group is partial,
// zero, symmetric, asymmetric and larger-than-kernel pads, kernels taller or wider than square and
// unequal strides, batch 1 and 2, 1 and 2 threads, bias or none, with and without a residual.
TEST(RtConv, DepthwiseSmallMapsKernel3And5) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_depthwise_avx2");
  ASSERT_NE(k, nullptr);
  const int64_t geo[][3] = {{5, 1, 1},   {13, 7, 9},   {16, 14, 14}, {19, 15, 29}, {33, 28, 28},
                            {7, 56, 56}, {40, 27, 31}, {17, 11, 57}, {3, 30, 58},  {24, 9, 60}};
  const int64_t pads[][4] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {0, 0, 0, 0}, {0, 2, 1, 0}, {3, 1, 0, 6}};
  const int64_t kernels[][4] = {{3, 3, 1, 1}, {3, 3, 2, 2}, {5, 5, 1, 1}, {5, 5, 2, 2}, {3, 5, 1, 2}, {5, 3, 2, 1}};
  const std::vector<Epilogue> acts = test::all_activations();
  float dummy = 0;
  int runs = 0;
  for (const auto& kk : kernels)
    for (const auto& g : geo)
      for (const auto& p : pads) {
        auto s = shape(1 + runs % 2, g[0], g[1], g[2], g[0], kk[0], kk[2], p[0], p[1], p[2], p[3], 1, g[0]);
        s.kernel_w = kk[1];
        s.stride_w = kk[3];
        if (s.out_h() < 1 || s.out_w() < 1) continue;
        Epilogue ep = acts[runs % acts.size()];
        if (runs % 4 != 3) ep.bias = &dummy;
        if (runs % 3 != 0) ep.residual = &dummy;
        EXPECT_TRUE(check_kernel(*k, s, ep, 1 + runs % 2, 1e-5));
        ++runs;
      }
  EXPECT_GT(runs, 250);
}

// Maps of at most 64 outputs at stride 1 whose rows keep the input width (the AVX-512 flat path: one run of up to
// 4 vectors per channel, taps as shifted loads with the lanes of other rows masked): kernel heights 1, 3 and 5 with
// width 3, top/bottom pads that make the output taller or shorter than the input and left/right pads 0+2, 1+1 and
// 2+0, outputs of exactly 16, 32, 48 and 64 pixels and ragged ones, channel counts around the 4-channel groups,
// every epilogue, with and without bias and residual, batch 1 and 2, 1 and 2 threads. Planes past 64 outputs and
// rows that change width take the other paths, checked alike.
TEST(RtConv, DepthwiseSmallPlanesFlat) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_depthwise_avx2");
  ASSERT_NE(k, nullptr);
  const int64_t hw[][2] = {{7, 7}, {8, 8}, {1, 64}, {2, 32}, {4, 4}, {3, 16}, {5, 9}, {6, 11}, {1, 1}, {9, 7}, {8, 9}};
  const int64_t pads[][4] = {{1, 1, 1, 1}, {0, 0, 2, 2}, {2, 2, 0, 0}, {0, 1, 0, 1}, {3, 1, 2, 1}, {1, 2, 1, 0}};
  const std::vector<Epilogue> acts = test::all_activations();
  float dummy = 0;
  int runs = 0;
  for (int64_t kh : {1, 3, 5})
    for (const auto& g : hw)
      for (const auto& p : pads) {
        const int64_t C = 2 + runs % 8;  // groups > 1: a single channel is not depthwise
        auto s = shape(1 + runs % 2, C, g[0], g[1], C, 3, 1, p[0], p[1], p[2], p[3], 1, C);
        s.kernel_h = kh;
        if (s.out_h() < 1 || s.out_w() < 1) continue;
        Epilogue ep = acts[runs % acts.size()];
        if (runs % 4 != 3) ep.bias = &dummy;
        if (runs % 3 != 0) ep.residual = &dummy;
        EXPECT_TRUE(check_kernel(*k, s, ep, 1 + (runs / 2) % 2, 1e-5)) << "kh " << kh << " map " << g[0] << "x" << g[1];
        ++runs;
      }
  EXPECT_GT(runs, 150);
}

// Every epilogue on the small-map paths (5x5 stride 2 to 8x15, 3x3 stride 1 at 28x28, 5x5 stride 1 at
// 14x14 with 8-lane runs of 7): the activations fused in the transposing store (none, Relu, Clip) and
// the others applied to the finished planes, with and without bias and residual.
TEST(RtConv, DepthwiseSmallMapsEveryEpilogue) {
  const Conv2dKernel* k = find_conv2d_kernel("conv2d_nchw_depthwise_avx2");
  ASSERT_NE(k, nullptr);
  float dummy = 0;
  int runs = 0;
  for (const auto& s : {shape(2, 19, 15, 29, 19, 5, 2, 2, 2, 2, 2, 1, 19), shape(1, 33, 28, 28, 33, 3, 1, 1, 1, 1, 1, 1, 33),
                        shape(1, 21, 14, 14, 21, 5, 1, 2, 2, 2, 2, 1, 21)})
    for (Epilogue ep : test::all_activations())
      for (int extras = 0; extras < 4; ++extras) {
        ep.bias = extras & 1 ? &dummy : nullptr;
        ep.residual = extras & 2 ? &dummy : nullptr;
        runs += check_kernel(*k, s, ep, 2, 1e-5);
      }
  EXPECT_EQ(runs, 3 * 10 * 4);
}

// Naive max pooling of a double NCHW tensor (windows clipped to the input; -inf when none is inside).
std::vector<double> ref_maxpool(const Pool2dShape& p, const std::vector<double>& x) {
  const int64_t PH = p.out_h(), PW = p.out_w();
  std::vector<double> y(p.batch * p.channels * PH * PW);
  for (int64_t nc = 0; nc < p.batch * p.channels; ++nc)
    for (int64_t py = 0; py < PH; ++py)
      for (int64_t px = 0; px < PW; ++px) {
        double m = -INFINITY;
        for (int64_t ky = 0; ky < p.kernel_h; ++ky)
          for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
            const int64_t iy = py * p.stride_h - p.pad_top + ky, ix = px * p.stride_w - p.pad_left + kx;
            if (iy >= 0 && iy < p.in_h && ix >= 0 && ix < p.in_w) m = std::max(m, x[(nc * p.in_h + iy) * p.in_w + ix]);
          }
        y[(nc * PH + py) * PW + px] = m;
      }
  return y;
}

// The fused stem conv + max pool against the reference conv followed by the reference pool: the stems of
// SqueezeNet (3x3/2, pool 3/2 ceil) and ResNet (7x7/2 pad 3, pool 3/2 pad 1), and odd geometries (pool
// 2x2, stride 1, kernel taller than wide, asymmetric pads, windows that end in padding), 1-3 threads.
TEST(RtConv, StemConvWithMaxPoolMatchesConvThenPool) {
  struct Case {
    Conv2dShape conv;
    int64_t kh, kw, sh, sw, pt, pl, pb, pr;
    bool ceil;
  };
  const std::vector<Case> cases = {
      {shape(1, 3, 47, 45, 64, 3, 2, 0, 0, 0, 0), 3, 3, 2, 2, 0, 0, 0, 0, true},    // SqueezeNet 1.1 stem
      {shape(1, 3, 40, 38, 64, 7, 2, 3, 3, 3, 3), 3, 3, 2, 2, 1, 1, 1, 1, false},   // ResNet stem
      {shape(2, 1, 19, 23, 13, 3, 1, 1, 1, 1, 1), 2, 2, 2, 2, 0, 0, 0, 0, false},   // batch 2, Cout 13, pool 2/2
      {shape(1, 2, 17, 33, 9, 5, 2, 2, 1, 0, 2), 3, 2, 1, 1, 1, 0, 2, 1, false},    // pool stride 1, asymmetric
      {shape(1, 4, 30, 70, 24, 3, 2, 1, 1, 1, 1), 4, 3, 3, 2, 2, 1, 1, 2, true},    // ceil, windows into padding
      {shape(1, 3, 9, 8, 8, 3, 1, 0, 0, 0, 0), 3, 3, 2, 2, 0, 0, 0, 0, false},      // one pooled row
  };
  for (const Case& c : cases)
    for (Epilogue ep : {Epilogue::with_act(Activation::Relu), Epilogue::none(), Epilogue::with_act(Activation::Silu)})
      for (int threads : {1, 2, 3}) {
        const Conv2dShape& s = c.conv;
        Pool2dShape p;
        p.batch = s.batch, p.channels = s.out_channels, p.in_h = s.out_h(), p.in_w = s.out_w();
        p.kernel_h = c.kh, p.kernel_w = c.kw, p.stride_h = c.sh, p.stride_w = c.sw;
        p.pad_top = c.pt, p.pad_left = c.pl, p.pad_bottom = c.pb, p.pad_right = c.pr, p.ceil_mode = c.ceil;
        ASSERT_TRUE(conv2d_nchw_direct_small_cin_maxpool_applicable(s, p));
        auto in = random_vector(s.batch * s.in_channels * s.in_h * s.in_w, 21 + s.in_w);
        auto w = random_vector(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w, 22 + s.out_channels);
        auto bias = random_vector(s.out_channels, 23);
        ep.bias = bias.data();
        auto want = ref_maxpool(p, ref_conv(s, in, w, ep));
        AlignedBuffer packed(conv2d_nchw_direct_small_cin_packed_size(s));
        conv2d_nchw_direct_small_cin_pack(s, w.data(), packed.data());
        ThreadPool pool(threads);
        std::vector<float> got(want.size(), -7.0f);
        conv2d_nchw_direct_small_cin_maxpool(s, p, in.data(), packed.data(), got.data(), ep, &pool);
        expect_close(got, want, 1e-5,
                     "stem+maxpool k=" + std::to_string(s.kernel_h) + " pool " + std::to_string(c.kh) + "x" +
                         std::to_string(c.kw) + "/" + std::to_string(c.sh) + " act=" + activation_name(ep.act) +
                         " threads=" + std::to_string(threads));
      }
}

// The pointwise GEMM conv writing channel c at c * stride (a ShuffleNet branch straight into its shuffled planes):
// every plane matches the dense kernel's reference, with bias, residual (read dense) and each activation, at 1 to 3
// threads, and the planes between are left alone.
TEST(RtConv, PointwiseGemmStridedOutputPlanes) {
  const Conv2dShape s = shape(1, 7, 9, 23, 5, 1, 1, 0, 0, 0, 0);
  const int64_t hw = 9 * 23, stride = 3;
  auto in = random_vector(7 * hw, 31), w = random_vector(5 * 7, 32), bias = random_vector(5, 33),
       res = random_vector(5 * hw, 34);
  AlignedBuffer packed(conv2d_nchw_im2col_gemm_packed_size(s));
  conv2d_nchw_im2col_gemm_pack(s, w.data(), packed.data());
  int runs = 0;
  for (Epilogue ep : test::all_activations())
    for (int threads : {1, 2, 3}) {
      ep.bias = bias.data();
      ep.residual = runs % 2 ? res.data() : nullptr;
      auto want = ref_conv(s, in, w, ep);
      ThreadPool pool(threads);
      std::vector<float> got(5 * stride * hw, -7.0f);
      conv2d_nchw_1x1_gemm_strided(s, in.data(), packed.data(), got.data() + hw, stride * hw, ep, &pool);
      std::vector<float> planes, between;
      for (int64_t c = 0; c < 5 * stride; ++c)
        (c % stride == 1 ? planes : between).insert((c % stride == 1 ? planes : between).end(),
                                                    got.begin() + c * hw, got.begin() + (c + 1) * hw);
      expect_close(planes, want, 1e-5, std::string("strided 1x1 act=") + activation_name(ep.act));
      EXPECT_EQ(between, std::vector<float>(between.size(), -7.0f));
      ++runs;
    }
  EXPECT_GT(runs, 20);
}

// An inverted residual block in bands (rt::conv_chain_nchw) against the three convolutions one after another
// (the naive loop, each stage rounded to float as the unfused kernels store it): 3x3 and 5x5, stride 1 and 2, odd
// map sizes, asymmetric padding, 1 band to one per output row (the last band short, the scratch rows it reads
// past the map zero), the projection with and without a residual, at 1 to 3 threads (a thread's first band
// expands every row; later ones keep the K - S rows of the band before).
TEST(RtConv, InvertedResidualChainInBandsMatchesTheThreeConvs) {
  struct Case {
    int64_t c, e, p, h, w, k, stride, pt, pl, pb, pr;
  };
  const Case cases[] = {{5, 12, 5, 13, 17, 3, 1, 1, 1, 1, 1},  {4, 24, 6, 21, 19, 3, 2, 1, 1, 1, 1},
                        {3, 20, 7, 15, 30, 5, 1, 2, 2, 2, 2},  {6, 17, 4, 29, 23, 5, 2, 2, 2, 2, 2},
                        {8, 32, 8, 12, 56, 3, 2, 0, 0, 1, 1},  {2, 9, 3, 7, 9, 3, 1, 1, 1, 1, 1},
                        {4, 16, 4, 33, 34, 3, 1, 1, 1, 1, 1}};
  int runs = 0;
  for (const Case& k : cases) {
    ConvChain c;
    c.expand = shape(1, k.c, k.h, k.w, k.e, 1, 1, 0, 0, 0, 0);
    c.depthwise = shape(1, k.e, k.h, k.w, k.e, k.k, k.stride, k.pt, k.pl, k.pb, k.pr, 1, k.e);
    const int64_t OH = c.depthwise.out_h(), OW = c.depthwise.out_w();
    c.project = shape(1, k.e, OH, OW, k.p, 1, 1, 0, 0, 0, 0);
    auto in = random_vector(k.c * k.h * k.w, 41), we = random_vector(k.e * k.c, 42),
         wd = random_vector(k.e * k.k * k.k, 43), wp = random_vector(k.p * k.e, 44), be = random_vector(k.e, 45),
         bd = random_vector(k.e, 46), bp = random_vector(k.p, 47), res = random_vector(k.p * OH * OW, 48);
    Epilogue ee = Epilogue::relu6(), ed = Epilogue::relu6(), ep;
    ee.bias = be.data(), ed.bias = bd.data(), ep.bias = bp.data();
    auto to_float = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    const auto mid = to_float(ref_conv(c.depthwise, to_float(ref_conv(c.expand, in, we, ee)), wd, ed));
    AlignedBuffer pe(conv2d_nchw_im2col_gemm_packed_size(c.expand)), pp(conv2d_nchw_im2col_gemm_packed_size(c.project));
    conv2d_nchw_im2col_gemm_pack(c.expand, we.data(), pe.data());
    conv2d_nchw_im2col_gemm_pack(c.project, wp.data(), pp.data());
    for (bool residual : {false, true}) {
      ep.residual = residual ? res.data() : nullptr;
      const auto want = ref_conv(c.project, mid, wp, ep);
      for (int64_t bands : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, OH})
        for (int threads : {1, 2, 3}) {
          c.min_bands = bands;
          c.bands_per_thread = threads == 2 ? 3 : 1;  // 2 threads: up to 6 bands, so each thread runs several
          ASSERT_TRUE(conv_chain_applicable(c));
          ThreadPool pool(threads);
          std::vector<float> got(want.size(), -7.0f);
          conv_chain_nchw(c, in.data(), pe.data(), wd.data(), pp.data(), got.data(), ee, ed, ep, &pool);
          expect_close(got, want, 1e-4,
                       "chain " + std::to_string(k.k) + "x" + std::to_string(k.k) + "/" + std::to_string(k.stride) +
                           " on " + std::to_string(k.h) + "x" + std::to_string(k.w) + " bands " +
                           std::to_string(bands) + " threads " + std::to_string(threads) +
                           (residual ? " residual" : ""));
          ++runs;
        }
    }
  }
  EXPECT_EQ(runs, 7 * 2 * 5 * 3);
  // Band heights: OH over max(min_bands, bands_per_thread x threads), rounded up (a short last band).
  ConvChain c;
  c.depthwise = shape(1, 144, 56, 56, 144, 3, 2, 1, 1, 1, 1, 1, 144);
  c.min_bands = 2;
  c.bands_per_thread = 1;
  EXPECT_EQ(conv_chain_band_rows(c, 1), 14);
  EXPECT_EQ(conv_chain_band_rows(c, 2), 14);
  EXPECT_EQ(conv_chain_band_rows(c, 3), 10);
  c.min_bands = 5;
  EXPECT_EQ(conv_chain_band_rows(c, 2), 6);
  c.bands_per_thread = 4;
  EXPECT_EQ(conv_chain_band_rows(c, 1), 6);   // one thread: min_bands only
  EXPECT_EQ(conv_chain_band_rows(c, 2), 4);   // 8 bands
  EXPECT_EQ(conv_chain_band_rows(c, 16), 1);  // at most one band per row
}

TEST(RtConv, ReorderRoundTripAndPadding) {
  for (int64_t C : {1, 8, 13, 24}) {
    auto x = random_vector(2 * C * 15, 21);
    std::vector<float> y(nchwc8_size(2, C, 15), -1.0f), back(x.size());
    ThreadPool pool(2);
    reorder_nchw_to_nchwc8(2, C, 15, x.data(), y.data(), &pool);
    EXPECT_EQ(y, to_nchwc8(x, 2, C, 15)) << C;  // includes zero padding lanes
    reorder_nchwc8_to_nchw(2, C, 15, y.data(), back.data(), &pool);
    EXPECT_EQ(back, x) << C;
  }
}

}  // namespace
}  // namespace tessel::rt
