// Convolution micro-benchmarks over the shared kernel list: ResNet/MobileNet layer shapes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"

using namespace tessel::rt;

void report_flops(benchmark::State& state, double flops_per_iter, int threads);
ThreadPool* bench_pool(int threads);
std::vector<float> bench_random(size_t n);

namespace {

// TESSEL_BENCH_COLD_WEIGHTS=1: every call's weights come from DRAM (see run_conv).
bool cold_weights() {
  static const bool cold = [] {
    const char* v = std::getenv("TESSEL_BENCH_COLD_WEIGHTS");
    return v != nullptr && v[0] == '1';
  }();
  return cold;
}

Conv2dShape conv_shape(int64_t ci, int64_t hw, int64_t co, int64_t k, int64_t stride, int64_t groups) {
  Conv2dShape s;
  s.in_channels = ci;
  s.in_h = s.in_w = hw;
  s.out_channels = co;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = k / 2;
  s.groups = groups;
  return s;
}

AlignedBuffer aligned_copy(const std::vector<float>& v) {
  AlignedBuffer b(v.size());
  std::copy(v.begin(), v.end(), b.data());
  return b;
}

// Runs the named kernel on the shape; NCHWc8 kernels get NCHWc8 buffers (no reorder timed).
void run_conv(benchmark::State& state, const char* name, Conv2dShape s, bool residual = false) {
  const int threads = static_cast<int>(state.range(0));
  const Conv2dKernel* k = find_conv2d_kernel(name);
  if (k == nullptr || !k->applicable(s)) {
    state.SkipWithError("kernel not applicable");
    return;
  }
  const bool c8 = k->layout == ConvLayout::NCHWc8;
  const int64_t ohw = s.out_h() * s.out_w();
  // Activations 64-byte aligned, as in a model's arena (src/targets/cpu/memory_plan.cpp); a large std::vector
  // starts 16 bytes into a page, so with 2 threads the lines at the edges of each thread's part of the output
  // would be shared, which a model's buffers are not.
  const AlignedBuffer in = aligned_copy(
      bench_random(c8 ? nchwc8_size(1, s.in_channels, s.in_h * s.in_w) : s.in_channels * s.in_h * s.in_w));
  auto w = bench_random(s.out_channels * s.in_per_group() * s.kernel_h * s.kernel_w);
  auto bias = bench_random(s.out_channels);
  AlignedBuffer out = aligned_copy(std::vector<float>(c8 ? nchwc8_size(1, s.out_channels, ohw) : s.out_channels * ohw));
  AlignedBuffer packed(k->packed_weight_size(s));
  k->pack_weights(s, w.data(), packed.data());
  Epilogue ep = Epilogue::with_act(Activation::Relu);
  ep.bias = bias.data();
  const AlignedBuffer res = aligned_copy(std::vector<float>(residual ? out.size() : 0, 0.5f));
  if (residual) ep.residual = res.data();
  if (cold_weights()) {
    // As inside a model: the weights come from DRAM (the other layers' weights went through the caches
    // since the last call), the input and output were just touched by the neighbouring layers.
    static std::vector<char> evict(size_t{64} << 20);
    for (auto _ : state) {
      state.PauseTiming();
      std::fill(evict.begin(), evict.end(), static_cast<char>(evict[0] + 1));
      float sum = 0.0f;
      for (size_t i = 0; i < in.size(); i += 16) sum += in.data()[i];
      for (size_t i = 0; i < out.size(); i += 16) out.data()[i] = sum;
      for (size_t i = 0; i < res.size(); i += 16) sum += res.data()[i];
      benchmark::DoNotOptimize(sum);
      state.ResumeTiming();
      k->run(s, in.data(), packed.data(), out.data(), ep, bench_pool(threads));
    }
  } else {
    for (auto _ : state) k->run(s, in.data(), packed.data(), out.data(), ep, bench_pool(threads));
  }
  report_flops(state, 2.0 * s.macs(), threads);
}

#define CONV_BENCH(fn, kernel, shape)                                                  \
  static void fn(benchmark::State& state) { run_conv(state, kernel, shape); }         \
  BENCHMARK(fn)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

#define CONV_BENCH_RESIDUAL(fn, kernel, shape)                                         \
  static void fn(benchmark::State& state) { run_conv(state, kernel, shape, true); }   \
  BENCHMARK(fn)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

// ResNet-50 layer1 conv3: 1x1 64->256 at 56x56 with the residual Add and Relu fused.
CONV_BENCH_RESIDUAL(BM_conv1x1_64_256_56_residual_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(64, 56, 256, 1, 1, 1))

// ResNet-50 stride-2 convs through im2col: 3x3 128ch 56->28, 1x1 downsample 256->512 56->28.
CONV_BENCH(BM_conv3x3s2_128_56_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(128, 56, 128, 3, 2, 1))
CONV_BENCH(BM_conv1x1s2_256_512_56_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(256, 56, 512, 1, 2, 1))
CONV_BENCH(BM_conv3x3s2_128_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(128, 56, 128, 3, 2, 1))
CONV_BENCH(BM_conv1x1s2_256_512_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(256, 56, 512, 1, 2, 1))
// ResNet-50's / ResNeXt-50's other strided downsamples: 512->1024 from 28x28, 1024->2048 from 14x14; and
// ResNet-18's 64->128 and 128->256.
CONV_BENCH(BM_conv1x1s2_512_1024_28_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(512, 28, 1024, 1, 2, 1))
CONV_BENCH(BM_conv1x1s2_512_1024_28_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(512, 28, 1024, 1, 2, 1))
CONV_BENCH(BM_conv1x1s2_1024_2048_14_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(1024, 14, 2048, 1, 2, 1))
CONV_BENCH(BM_conv1x1s2_1024_2048_14_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(1024, 14, 2048, 1, 2, 1))
CONV_BENCH(BM_conv1x1s2_64_128_56_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(64, 56, 128, 1, 2, 1))
CONV_BENCH(BM_conv1x1s2_64_128_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(64, 56, 128, 1, 2, 1))
CONV_BENCH(BM_conv1x1s2_128_256_28_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(128, 28, 256, 1, 2, 1))
CONV_BENCH(BM_conv1x1s2_128_256_28_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(128, 28, 256, 1, 2, 1))
CONV_BENCH(BM_conv1x1_256_128_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(256, 56, 128, 1, 1, 1))
CONV_BENCH(BM_conv1x1_256_128_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(256, 56, 128, 1, 1, 1))
// ResNeXt-50's layer1/layer2.0 1x1 convs on 56x56: 128->256 (conv3) and 256->256 (layer2.0 conv1).
CONV_BENCH(BM_conv1x1_128_256_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(128, 56, 256, 1, 1, 1))
CONV_BENCH(BM_conv1x1_128_256_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(128, 56, 256, 1, 1, 1))
CONV_BENCH(BM_conv1x1_256_256_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(256, 56, 256, 1, 1, 1))
CONV_BENCH(BM_conv1x1_256_256_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(256, 56, 256, 1, 1, 1))

// ResNet 3x3 64->64 at 56x56.
CONV_BENCH(BM_conv3x3_64_56_winograd_f43, "conv2d_winograd_f43_avx2", conv_shape(64, 56, 64, 3, 1, 1))
CONV_BENCH(BM_conv3x3_64_56_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(64, 56, 64, 3, 1, 1))
CONV_BENCH(BM_conv3x3_64_56_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(64, 56, 64, 3, 1, 1))
// ResNet-50 1x1 256->64 at 56x56.
CONV_BENCH(BM_conv1x1_64_256_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(64, 56, 256, 1, 1, 1))
CONV_BENCH(BM_conv1x1_64_64_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(64, 56, 64, 1, 1, 1))
CONV_BENCH(BM_conv1x1_256_64_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(256, 56, 64, 1, 1, 1))
CONV_BENCH(BM_conv1x1_256_64_56_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(256, 56, 64, 1, 1, 1))
// ResNet-50's NCHWc8 path (--layout auto on AVX2): layer3's 1x1s, the stride-2 3x3s, a layer4 1x1.
CONV_BENCH(BM_conv1x1_256_1024_14_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(256, 14, 1024, 1, 1, 1))
CONV_BENCH(BM_conv1x1_1024_256_14_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(1024, 14, 256, 1, 1, 1))
CONV_BENCH(BM_conv1x1_2048_512_7_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(2048, 7, 512, 1, 1, 1))
CONV_BENCH(BM_conv3x3s2_128_56_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(128, 56, 128, 3, 2, 1))
CONV_BENCH(BM_conv3x3s2_256_28_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(256, 28, 256, 3, 2, 1))
CONV_BENCH(BM_conv3x3s2_512_14_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(512, 14, 512, 3, 2, 1))
// MobileNetV2 depthwise 3x3, 144 channels at 56x56.
CONV_BENCH(BM_dw3x3_144_56_nchwc8, "conv2d_nchwc8_depthwise_avx2", conv_shape(144, 56, 144, 3, 1, 144))
CONV_BENCH(BM_dw3x3_144_56_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(144, 56, 144, 3, 1, 144))
// ResNet layer-4 3x3 512->512 at 7x7 (Winograd tiles waste 1 - 49/64 there).
CONV_BENCH(BM_conv3x3_512_7_winograd_f43, "conv2d_winograd_f43_avx2", conv_shape(512, 7, 512, 3, 1, 1))
CONV_BENCH(BM_conv3x3_512_7_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(512, 7, 512, 3, 1, 1))
CONV_BENCH(BM_conv3x3_512_7_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(512, 7, 512, 3, 1, 1))
CONV_BENCH(BM_conv3x3_512_7_pixel_rows, "conv2d_nchw_gemm_pixel_rows", conv_shape(512, 7, 512, 3, 1, 1))
// ResNet-50 layer4: 1x1 512->2048 with the residual, 2048->512, and the stride-2 3x3 and 1x1 into 7x7.
CONV_BENCH_RESIDUAL(BM_conv1x1_512_2048_7_residual_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(512, 7, 2048, 1, 1, 1))
CONV_BENCH_RESIDUAL(BM_conv1x1_512_2048_7_residual_pixel_rows, "conv2d_nchw_gemm_pixel_rows", conv_shape(512, 7, 2048, 1, 1, 1))
CONV_BENCH(BM_conv1x1_2048_512_7_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(2048, 7, 512, 1, 1, 1))
CONV_BENCH(BM_conv1x1_2048_512_7_pixel_rows, "conv2d_nchw_gemm_pixel_rows", conv_shape(2048, 7, 512, 1, 1, 1))
CONV_BENCH(BM_conv3x3s2_512_14_pixel_rows, "conv2d_nchw_gemm_pixel_rows", conv_shape(512, 14, 512, 3, 2, 1))
CONV_BENCH(BM_conv3x3s2_512_14_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(512, 14, 512, 3, 2, 1))
CONV_BENCH(BM_conv1x1s2_1024_2048_14_pixel_rows, "conv2d_nchw_gemm_pixel_rows", conv_shape(1024, 14, 2048, 1, 2, 1))

// MobileNetV2 depthwise 3x3: stride 2 (96ch 112->56, 144ch 56->28) and small maps (384ch 14x14, 960ch 7x7).
CONV_BENCH(BM_dw3x3s2_96_112_nchwc8, "conv2d_nchwc8_depthwise_avx2", conv_shape(96, 112, 96, 3, 2, 96))
CONV_BENCH(BM_dw3x3s2_96_112_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(96, 112, 96, 3, 2, 96))
CONV_BENCH(BM_dw3x3s2_144_56_nchwc8, "conv2d_nchwc8_depthwise_avx2", conv_shape(144, 56, 144, 3, 2, 144))
CONV_BENCH(BM_dw3x3s2_144_56_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(144, 56, 144, 3, 2, 144))
CONV_BENCH(BM_dw3x3_384_14_nchwc8, "conv2d_nchwc8_depthwise_avx2", conv_shape(384, 14, 384, 3, 1, 384))
CONV_BENCH(BM_dw3x3_384_14_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(384, 14, 384, 3, 1, 384))
CONV_BENCH(BM_dw3x3s2_576_14_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(576, 14, 576, 3, 2, 576))
CONV_BENCH(BM_dw3x3s2_192_28_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(192, 28, 192, 3, 2, 192))
CONV_BENCH(BM_dw3x3_960_7_nchwc8, "conv2d_nchwc8_depthwise_avx2", conv_shape(960, 7, 960, 3, 1, 960))
CONV_BENCH(BM_dw3x3_960_7_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(960, 7, 960, 3, 1, 960))
// MnasNet 1.0 / EfficientNet-B0 depthwise on small output maps (at most 28 wide): 5x5 stride 2 (72ch and
// 144ch 56->28, 240ch 28->14, 672ch 14->7), 5x5 stride 1 (120ch 28x28, 480ch 14x14, 1152ch 7x7), 3x3 (240ch
// 28->14, 480ch 14x14).
CONV_BENCH(BM_dw5x5s2_72_56_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(72, 56, 72, 5, 2, 72))
CONV_BENCH(BM_dw5x5s2_144_56_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(144, 56, 144, 5, 2, 144))
// A wider 5x5 stride-2 map (112 -> 56: four output vectors per row with AVX-512).
CONV_BENCH(BM_dw5x5s2_48_112_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(48, 112, 48, 5, 2, 48))
CONV_BENCH(BM_dw5x5s2_240_28_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(240, 28, 240, 5, 2, 240))
CONV_BENCH(BM_dw5x5_120_28_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(120, 28, 120, 5, 1, 120))
CONV_BENCH(BM_dw5x5_480_14_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(480, 14, 480, 5, 1, 480))
CONV_BENCH(BM_dw5x5s2_672_14_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(672, 14, 672, 5, 2, 672))
CONV_BENCH(BM_dw5x5_1152_7_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(1152, 7, 1152, 5, 1, 1152))
CONV_BENCH(BM_dw3x3s2_240_28_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(240, 28, 240, 3, 2, 240))
CONV_BENCH(BM_dw3x3_480_14_nchw, "conv2d_nchw_depthwise_avx2", conv_shape(480, 14, 480, 3, 1, 480))
// MobileNetV2 1x1 expand/project on small maps.
CONV_BENCH(BM_conv1x1_160_960_7_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(160, 7, 960, 1, 1, 1))
CONV_BENCH(BM_conv1x1_160_960_7_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(160, 7, 960, 1, 1, 1))
CONV_BENCH(BM_conv1x1_160_960_7_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(160, 7, 960, 1, 1, 1))
CONV_BENCH(BM_conv1x1_96_576_14_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(96, 14, 576, 1, 1, 1))
CONV_BENCH(BM_conv1x1_96_576_14_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(96, 14, 576, 1, 1, 1))
CONV_BENCH(BM_conv1x1_64_384_14_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(64, 14, 384, 1, 1, 1))
CONV_BENCH(BM_conv1x1_64_384_14_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(64, 14, 384, 1, 1, 1))
CONV_BENCH(BM_conv1x1_144_32_28_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(144, 28, 32, 1, 1, 1))
CONV_BENCH(BM_conv1x1_144_32_28_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(144, 28, 32, 1, 1, 1))
CONV_BENCH(BM_conv1x1_192_32_28_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(192, 28, 32, 1, 1, 1))
CONV_BENCH(BM_conv1x1_192_32_28_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(192, 28, 32, 1, 1, 1))
CONV_BENCH(BM_conv1x1_32_192_28_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(32, 28, 192, 1, 1, 1))
CONV_BENCH(BM_conv1x1_32_192_28_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(32, 28, 192, 1, 1, 1))
CONV_BENCH(BM_conv1x1_144_24_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(144, 56, 24, 1, 1, 1))
CONV_BENCH(BM_conv1x1_144_24_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(144, 56, 24, 1, 1, 1))
CONV_BENCH(BM_conv1x1_24_144_56_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(24, 56, 144, 1, 1, 1))
CONV_BENCH(BM_conv1x1_24_144_56_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(24, 56, 144, 1, 1, 1))
CONV_BENCH(BM_conv1x1_64_16_55_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(64, 55, 16, 1, 1, 1))
CONV_BENCH(BM_conv1x1_64_16_55_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(64, 55, 16, 1, 1, 1))
CONV_BENCH(BM_conv1x1_16_64_55_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(16, 55, 64, 1, 1, 1))
// MobileNetV2's and MnasNet's 1x1 convs on 112x112 (short reductions, few output channels): 32->16, 16->96, 16->48.
CONV_BENCH(BM_conv1x1_32_16_112_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(32, 112, 16, 1, 1, 1))
CONV_BENCH(BM_conv1x1_16_96_112_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(16, 112, 96, 1, 1, 1))
CONV_BENCH(BM_conv1x1_16_48_112_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(16, 112, 48, 1, 1, 1))
// MnasNet's and EfficientNet's 80->480 expand on 14x14 (196 pixels: 13 column panels, 12 of them whole).
CONV_BENCH(BM_conv1x1_80_480_14_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(80, 14, 480, 1, 1, 1))
// MnasNet 28x28 (49 column panels, uneven over 2 threads): 72->40 and 120->40 (M = 12 q + 4), 40->120, 40->240.
CONV_BENCH(BM_conv1x1_120_40_28_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(120, 28, 40, 1, 1, 1))
CONV_BENCH(BM_conv1x1_72_40_28_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(72, 28, 40, 1, 1, 1))
CONV_BENCH(BM_conv1x1_40_120_28_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(40, 28, 120, 1, 1, 1))
CONV_BENCH(BM_conv1x1_40_240_28_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(40, 28, 240, 1, 1, 1))
CONV_BENCH(BM_conv1x1_16_64_55_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(16, 55, 64, 1, 1, 1))
CONV_BENCH(BM_conv1x1_128_32_27_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(128, 27, 32, 1, 1, 1))
CONV_BENCH(BM_conv1x1_128_32_27_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(128, 27, 32, 1, 1, 1))
CONV_BENCH(BM_conv1x1_32_128_27_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(32, 27, 128, 1, 1, 1))
CONV_BENCH(BM_conv1x1_32_128_27_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(32, 27, 128, 1, 1, 1))
CONV_BENCH(BM_conv1x1_128_512_7_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(128, 7, 512, 1, 1, 1))
CONV_BENCH(BM_conv1x1_128_512_7_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(128, 7, 512, 1, 1, 1))
// MnasNet's projections on 7x7 (192 and 320 outputs: 3 and 5 channel blocks of 64 over 7 tiles of 7 pixels).
CONV_BENCH(BM_conv1x1_1152_192_7_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(1152, 7, 192, 1, 1, 1))
CONV_BENCH(BM_conv1x1_1152_320_7_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(1152, 7, 320, 1, 1, 1))
CONV_BENCH_RESIDUAL(BM_conv1x1_128_512_28_residual_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(128, 28, 512, 1, 1, 1))
CONV_BENCH(BM_conv1x1_960_160_7_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(960, 7, 160, 1, 1, 1))
CONV_BENCH(BM_conv1x1_960_160_7_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(960, 7, 160, 1, 1, 1))
CONV_BENCH(BM_conv1x1_384_64_14_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(384, 14, 64, 1, 1, 1))
CONV_BENCH(BM_conv1x1_384_64_14_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(384, 14, 64, 1, 1, 1))
// ResNet 3x3 on 28x28 and 14x14 maps (Winograd vs im2col vs direct).
CONV_BENCH(BM_conv3x3_128_28_winograd_f43, "conv2d_winograd_f43_avx2", conv_shape(128, 28, 128, 3, 1, 1))
CONV_BENCH(BM_conv3x3_128_28_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(128, 28, 128, 3, 1, 1))
CONV_BENCH(BM_conv3x3_128_28_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(128, 28, 128, 3, 1, 1))
CONV_BENCH(BM_conv3x3_256_14_winograd_f43, "conv2d_winograd_f43_avx2", conv_shape(256, 14, 256, 3, 1, 1))
CONV_BENCH(BM_conv3x3_256_14_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(256, 14, 256, 3, 1, 1))
CONV_BENCH(BM_conv3x3_256_14_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(256, 14, 256, 3, 1, 1))
CONV_BENCH(BM_conv3x3_512_7_nchwc8_direct, "conv2d_nchwc8_direct_avx2", conv_shape(512, 7, 512, 3, 1, 1))

// SqueezeNet 1.1 expand 3x3 convs: few input channels, where Winograd's transforms dominate.
CONV_BENCH(BM_sq3x3_16_64_55_winograd_f43, "conv2d_winograd_f43_avx2", conv_shape(16, 55, 64, 3, 1, 1))
CONV_BENCH(BM_sq3x3_16_64_55_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(16, 55, 64, 3, 1, 1))
CONV_BENCH(BM_sq3x3_32_128_27_winograd_f43, "conv2d_winograd_f43_avx2", conv_shape(32, 27, 128, 3, 1, 1))
CONV_BENCH(BM_sq3x3_32_128_27_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(32, 27, 128, 3, 1, 1))
CONV_BENCH(BM_sq3x3_64_256_13_winograd_f43, "conv2d_winograd_f43_avx2", conv_shape(64, 13, 256, 3, 1, 1))
CONV_BENCH(BM_sq3x3_64_256_13_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(64, 13, 256, 3, 1, 1))
// Stems: ResNet 7x7/2 3->64 at 224, SqueezeNet 3x3/2 3->64 at 224 (K = 147 and 27).
CONV_BENCH(BM_stem7x7s2_3_64_224_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(3, 224, 64, 7, 2, 1))
CONV_BENCH(BM_stem3x3s2_3_64_224_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(3, 224, 64, 3, 2, 1))
CONV_BENCH(BM_stem7x7s2_3_64_224_direct, "conv2d_nchw_direct_small_cin", conv_shape(3, 224, 64, 7, 2, 1))
CONV_BENCH(BM_stem3x3s2_3_64_224_direct, "conv2d_nchw_direct_small_cin", conv_shape(3, 224, 64, 3, 2, 1))
// SqueezeNet's actual stem has no padding: 224 -> 111 (rows not a whole number of vectors).
Conv2dShape unpadded(Conv2dShape s) {
  s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 0;
  return s;
}
CONV_BENCH(BM_stem3x3s2p0_3_64_224_direct, "conv2d_nchw_direct_small_cin", unpadded(conv_shape(3, 224, 64, 3, 2, 1)))
CONV_BENCH(BM_stem3x3s2p0_3_64_224_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", unpadded(conv_shape(3, 224, 64, 3, 2, 1)))

}  // namespace

// ResNeXt-50 32x4d grouped 3x3: layer3 (512, 32 groups of 16, 14x14), layer2 (256, 32 of 8, 28x28), layer4.0
// (1024, 32 of 32, stride 2 from 14x14).
CONV_BENCH(BM_grouped3x3_512_g32_14_grouped, "conv2d_nchw_grouped", conv_shape(512, 14, 512, 3, 1, 32))
CONV_BENCH(BM_grouped3x3_512_g32_14_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(512, 14, 512, 3, 1, 32))
CONV_BENCH(BM_grouped3x3_128_g32_56_grouped, "conv2d_nchw_grouped", conv_shape(128, 56, 128, 3, 1, 32))
CONV_BENCH(BM_grouped3x3_256_g32_28_grouped, "conv2d_nchw_grouped", conv_shape(256, 28, 256, 3, 1, 32))
CONV_BENCH(BM_grouped3x3s2_1024_g32_14_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(1024, 14, 1024, 3, 2, 32))
CONV_BENCH(BM_grouped3x3s2_1024_g32_14_grouped, "conv2d_nchw_grouped", conv_shape(1024, 14, 1024, 3, 2, 32))

// ResNet-50 / ResNeXt-50 bottleneck 1x1 convs (the bulk of both models' FLOPs): the expanding conv3 with its
// residual on 56x56 and 14x14, the reducing conv1 on 56x56 and 14x14.
CONV_BENCH_RESIDUAL(BM_conv1x1_128_256_56_residual_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(128, 56, 256, 1, 1, 1))
CONV_BENCH_RESIDUAL(BM_conv1x1_512_1024_14_residual_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(512, 14, 1024, 1, 1, 1))
CONV_BENCH_RESIDUAL(BM_conv1x1_512_1024_14_residual_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(512, 14, 1024, 1, 1, 1))
CONV_BENCH(BM_conv1x1_1024_512_14_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(1024, 14, 512, 1, 1, 1))
CONV_BENCH(BM_conv1x1_1024_512_14_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(1024, 14, 512, 1, 1, 1))
CONV_BENCH_RESIDUAL(BM_conv1x1_256_512_28_residual_gemm, "conv2d_nchw_1x1_gemm_avx2", conv_shape(256, 28, 512, 1, 1, 1))
CONV_BENCH(BM_conv1x1_512_256_28_pixel_tile, "conv2d_nchw_pixel_tile", conv_shape(512, 28, 256, 1, 1, 1))
// MobileNetV2 / MnasNet / EfficientNet-B0 stem: 3x3/2 3->32 at 224.
CONV_BENCH(BM_stem3x3s2_3_32_224_direct, "conv2d_nchw_direct_small_cin", conv_shape(3, 224, 32, 3, 2, 1))
CONV_BENCH(BM_stem3x3s2_3_32_224_im2col_gemm, "conv2d_nchw_im2col_gemm_avx2", conv_shape(3, 224, 32, 3, 2, 1))
