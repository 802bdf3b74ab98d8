// Kernel micro-benchmarks: measures the core clock (dependent-FMA loop), then GEMM/conv GFLOP/s as %
// of one core's AVX2 peak (2 FMA ports x 8 lanes x 2 FLOP per cycle = 32 FLOP/cycle).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <time.h>

#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/gemm.h"
#include "tessel/rt/thread_pool.h"

namespace {

using namespace tessel::rt;

double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Clock in GHz from a chain of dependent FMAs (4-cycle latency on Intel since Skylake), timed in
// thread CPU time so that preemption by other processes does not lower the estimate.
double measure_ghz() {
  __m256 x = _mm256_set1_ps(1.0f), m = _mm256_set1_ps(0.9999999f), a = _mm256_set1_ps(1e-7f);
  const long iters = 100'000'000;
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = thread_seconds();
    for (long i = 0; i < iters; ++i) {
      x = _mm256_fmadd_ps(x, m, a);
      __asm__ volatile("" : "+x"(x));  // keep the chain: one FMA per iteration
    }
    best = std::min(best, thread_seconds() - t0);
  }
  benchmark::DoNotOptimize(x);
  return iters * 4.0 / best / 1e9;
}

double g_peak_gflops = 0;  // one core

std::vector<float> random_floats(size_t n) {
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

ThreadPool* pool_for(int threads) {
  static std::unique_ptr<ThreadPool> pools[3];
  if (!pools[threads]) pools[threads] = std::make_unique<ThreadPool>(threads);
  return pools[threads].get();
}

}  // namespace

/// Records GFLOP/s and % of the peak of the cores used. Rates use the calling thread's CPU time, so
/// they stay meaningful while other processes share the 2 cores; with 2 threads that assumes the
/// worker did as much work as the caller (parallel_for splits evenly).
void report_flops(benchmark::State& state, double flops_per_iter, int threads) {
  state.counters["GFLOPs"] = benchmark::Counter(flops_per_iter * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
  state.counters["pct_peak"] = benchmark::Counter(
      100.0 * flops_per_iter * state.iterations() / 1e9 / (g_peak_gflops * threads), benchmark::Counter::kIsRate);
  state.counters["threads"] = threads;
}

ThreadPool* bench_pool(int threads) { return pool_for(threads); }
std::vector<float> bench_random(size_t n) { return random_floats(n); }
double bench_peak_gflops() { return g_peak_gflops; }

// C[M x N] = Wpacked[M x K] * B[K x N] (conv-as-GEMM shape).
static void BM_sgemm_packed_a(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  auto A = random_floats(M * K), B = random_floats(K * N);
  std::vector<float> C(M * N);
  AlignedBuffer pa(packed_a_size(M, K));
  pack_a(false, M, K, A.data(), K, pa.data());
  for (auto _ : state)
    sgemm_packed_a(M, N, K, 1.0f, pa.data(), false, B.data(), N, 0.0f, C.data(), N, {}, pool_for(threads));
  report_flops(state, 2.0 * M * N * K, threads);
}
BENCHMARK(BM_sgemm_packed_a)
    ->Args({64, 3136, 576, 1})->Args({64, 3136, 576, 2})
    ->Args({256, 784, 1152, 1})->Args({256, 784, 1152, 2})
    ->Args({512, 49, 4608, 1})->Args({512, 49, 4608, 2})
    ->Unit(benchmark::kMicrosecond);

static void BM_sgemm_plain(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  auto A = random_floats(M * K), B = random_floats(K * N);
  std::vector<float> C(M * N);
  for (auto _ : state)
    sgemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N, {}, pool_for(threads));
  report_flops(state, 2.0 * M * N * K, threads);
}
BENCHMARK(BM_sgemm_plain)->Args({256, 784, 1152, 1})->Args({512, 512, 512, 1})->Unit(benchmark::kMicrosecond);

// Transformer layers: activations [M x K] times pre-packed weights [K x N] (ViT-B/16: 197 tokens; QKV,
// MLP up, MLP down).
static void BM_sgemm_packed_b(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  auto A = random_floats(M * K), W = random_floats(N * K);
  std::vector<float> C(M * N);
  AlignedBuffer pb(packed_b_size(N, K));
  pack_b(true, N, K, W.data(), K, pb.data());
  for (auto _ : state)
    sgemm_packed_b(false, M, N, K, 1.0f, A.data(), K, pb.data(), 0.0f, C.data(), N, {}, pool_for(threads));
  report_flops(state, 2.0 * M * N * K, threads);
}
BENCHMARK(BM_sgemm_packed_b)
    ->Args({197, 2304, 768, 1})->Args({197, 3072, 768, 1})->Args({197, 768, 3072, 1})->Args({197, 3072, 768, 2})
    ->Unit(benchmark::kMicrosecond);

// FC layer at batch 1: 1 x 2048 -> 1000 with pre-packed weights (memory bound GEMV).
static void BM_gemv_fc(benchmark::State& state) {
  const int64_t N = 1000, K = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  auto A = random_floats(K), W = random_floats(N * K);
  std::vector<float> C(N);
  AlignedBuffer pb(packed_b_size(N, K));
  pack_b(true, N, K, W.data(), K, pb.data());
  for (auto _ : state)
    sgemm_packed_b(false, 1, N, K, 1.0f, A.data(), K, pb.data(), 0.0f, C.data(), N, {}, pool_for(threads));
  report_flops(state, 2.0 * N * K, threads);
}
BENCHMARK(BM_gemv_fc)->Args({512, 1})->Args({2048, 1})->Args({2048, 2})->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  double ghz = measure_ghz();
  g_peak_gflops = ghz * 32.0;
  std::printf("measured clock %.2f GHz -> one-core AVX2 FMA peak %.1f GFLOP/s\n", ghz, g_peak_gflops);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
