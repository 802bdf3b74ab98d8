// Pooling micro-benchmarks (NCHW, the layout the generated code uses): ResNet stem MaxPool, SqueezeNet
// ceil_mode MaxPools, an AveragePool 3x3/1 and GlobalAveragePool. Reported as input GB/s read.
#include <benchmark/benchmark.h>

#include <vector>

#include "tessel/rt/pool.h"

using namespace tessel::rt;

ThreadPool* bench_pool(int threads);
std::vector<float> bench_random(size_t n);

namespace {

Pool2dShape pool_shape(int64_t c, int64_t hw, int64_t k, int64_t stride, int64_t pad, bool ceil_mode) {
  Pool2dShape s;
  s.channels = c;
  s.in_h = s.in_w = hw;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = pad;
  s.ceil_mode = ceil_mode;
  return s;
}

void run_pool(benchmark::State& state, bool is_max, Pool2dShape s) {
  const int threads = static_cast<int>(state.range(0));
  auto in = bench_random(s.channels * s.in_h * s.in_w);
  std::vector<float> out(s.channels * s.out_h() * s.out_w());
  for (auto _ : state) (is_max ? maxpool2d_nchw : avgpool2d_nchw)(s, in.data(), out.data(), bench_pool(threads));
  state.counters["GBps_in"] =
      benchmark::Counter(4.0 * in.size() * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

#define POOL_BENCH(fn, is_max, shape)                                         \
  static void fn(benchmark::State& state) { run_pool(state, is_max, shape); } \
  BENCHMARK(fn)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

POOL_BENCH(BM_maxpool3x3s2_64_112_resnet, true, pool_shape(64, 112, 3, 2, 1, false))
POOL_BENCH(BM_maxpool3x3s2_64_111_ceil_squeezenet, true, pool_shape(64, 111, 3, 2, 0, true))
POOL_BENCH(BM_maxpool3x3s2_128_55_ceil_squeezenet, true, pool_shape(128, 55, 3, 2, 0, true))
POOL_BENCH(BM_maxpool3x3s2_256_27_ceil_squeezenet, true, pool_shape(256, 27, 3, 2, 0, true))
POOL_BENCH(BM_avgpool3x3s1_64_56_pad1, false, pool_shape(64, 56, 3, 1, 1, false))
POOL_BENCH(BM_avgpool2x2s2_128_56, false, pool_shape(128, 56, 2, 2, 0, false))

static void BM_global_avgpool_1280_7(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  auto in = bench_random(1280 * 49);
  std::vector<float> out(1280);
  for (auto _ : state) global_avgpool_nchw(1, 1280, 49, in.data(), out.data(), bench_pool(threads));
}
BENCHMARK(BM_global_avgpool_1280_7)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

}  // namespace
