// Tests of SGEMM (plain, pre-packed A, pre-packed B, GEMV path) against a naive double loop.
#include <gtest/gtest.h>

#include "rt_test_util.h"
#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/gemm.h"

namespace tessel::rt {
namespace {

using test::expect_close;
using test::random_vector;

struct GemmCase {
  int64_t M, N, K;
  bool ta, tb;
  float alpha, beta;
};

// Naive reference: C = alpha op(A) op(B) + beta C0, then bias/residual/activation, in double.
std::vector<double> ref_gemm(const GemmCase& g, const std::vector<float>& A, const std::vector<float>& B,
                             const std::vector<float>& C0, const Epilogue& ep) {
  int64_t lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
  std::vector<double> C(g.M * g.N);
  for (int64_t i = 0; i < g.M; ++i)
    for (int64_t j = 0; j < g.N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < g.K; ++k) {
        double a = g.ta ? A[k * lda + i] : A[i * lda + k];
        double b = g.tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      double v = g.alpha * s + (g.beta != 0 ? g.beta * C0[i * g.N + j] : 0.0);
      if (ep.bias) v += ep.bias_per_column ? ep.bias[j] : ep.bias[i];
      if (ep.residual) v += ep.residual[i * g.N + j];
      C[i * g.N + j] = test::ref_activation(v, ep);
    }
  return C;
}

enum class Variant { Plain, PackedA, PackedB };

void run_case(const GemmCase& g, const Epilogue& ep_in, Variant variant, int threads) {
  int64_t lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
  auto A = random_vector(g.M * g.K + 1, 1 + g.M * 7 + g.K);
  auto B = random_vector(g.K * g.N + 1, 2 + g.N * 5 + g.K);
  auto C = random_vector(g.M * g.N, 3);
  auto bias = random_vector(std::max(g.M, g.N), 4);
  auto res = random_vector(g.M * g.N, 5);
  Epilogue ep = ep_in;
  if (ep.bias) ep.bias = bias.data();
  if (ep.residual) ep.residual = res.data();
  auto want = ref_gemm(g, A, B, C, ep);
  ThreadPool pool(threads);
  if (variant == Variant::Plain) {
    sgemm(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.data(), lda, B.data(), ldb, g.beta, C.data(), g.N, ep, &pool);
  } else if (variant == Variant::PackedA) {
    AlignedBuffer pa(packed_a_size(g.M, g.K));
    pack_a(g.ta, g.M, g.K, A.data(), lda, pa.data());
    sgemm_packed_a(g.M, g.N, g.K, g.alpha, pa.data(), g.tb, B.data(), ldb, g.beta, C.data(), g.N, ep, &pool);
  } else {
    AlignedBuffer pb(packed_b_size(g.N, g.K));
    pack_b(g.tb, g.N, g.K, B.data(), ldb, pb.data());
    sgemm_packed_b(g.ta, g.M, g.N, g.K, g.alpha, A.data(), lda, pb.data(), g.beta, C.data(), g.N, ep, &pool);
  }
  expect_close(C, want, 2e-6 * std::max<double>(1.0, std::sqrt(double(g.K))),
               "M=" + std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K) +
                   " ta=" + std::to_string(g.ta) + " tb=" + std::to_string(g.tb) + " act=" +
                   activation_name(ep.act) + " variant=" + std::to_string(int(variant)) +
                   " threads=" + std::to_string(threads));
}

TEST(RtGemm, OddShapesAllTransposesAllVariants) {
  const int64_t sizes[] = {1, 3, 7, 17, 63, 100};
  for (Variant v : {Variant::Plain, Variant::PackedA, Variant::PackedB})
    for (int64_t M : sizes)
      for (int64_t N : sizes)
        for (int64_t K : {1, 7, 63, 300})
          for (int t = 0; t < 4; ++t)
            run_case({M, N, K, bool(t & 1), bool(t & 2), 1.0f, 0.0f}, {}, v, (M + N) % 2 ? 2 : 1);
}

TEST(RtGemm, AlphaBetaAccumulate) {
  for (Variant v : {Variant::Plain, Variant::PackedA, Variant::PackedB})
    for (int threads : {1, 2}) {
      run_case({17, 33, 300, false, false, 0.5f, 2.0f}, {}, v, threads);
      run_case({1, 100, 257, false, true, -1.5f, 1.0f}, {}, v, threads);
      run_case({64, 3, 520, true, false, 1.0f, -0.5f}, {}, v, threads);
    }
}

// Few rows of C (<= 32: the AVX-512 path reads B unpacked, with masked loads at the right edge), several
// K blocks (K > 384) so later blocks accumulate into C, odd N, alpha/beta and a residual epilogue.
TEST(RtGemm, FewRowsUnpackedBManyKBlocks) {
  float dummy = 0;
  Epilogue ep = Epilogue::with_act(Activation::Relu);
  ep.bias = &dummy;
  ep.residual = &dummy;
  for (int64_t M : {1, 6, 12, 13, 24, 25, 31, 32, 33, 63, 64, 65})  // B unpacked up to 32 (64 on AMD) rows
    for (int64_t N : {5, 16, 33, 70})
      for (int threads : {1, 2}) {
        run_case({M, N, 800, false, false, 1.0f, 0.0f}, ep, Variant::PackedA, threads);
        run_case({M, N, 390, false, false, 0.5f, 1.5f}, {}, Variant::Plain, threads);
      }
}

// Short reductions with B read in place (a 1x1 expand on a large map: K = 16 x 12544 pixels in MobileNetV3): the
// row blocks sweep the columns in chunks of 1024, so N past one, two and several chunks, ragged last chunks and
// tiles, N not a multiple of 16, K below and at the bound of that order (32) and just past it, 1 and 2 threads
// (whose column blocks start inside a chunk), with bias, residual and ReLU.
TEST(RtGemm, ShortKUnpackedBInColumnChunks) {
  float dummy = 0;
  Epilogue ep = Epilogue::with_act(Activation::Relu);
  ep.bias = &dummy;
  int runs = 0;
  for (int64_t K : {3, 16, 32, 33})
    for (int64_t M : {4, 16, 25, 64})
      for (int64_t N : {1000, 1024, 1057, 2100, 3170}) {
        ep.residual = runs % 2 ? &dummy : nullptr;
        run_case({M, N, K, false, false, 1.0f, 0.0f}, ep, Variant::PackedA, 1 + runs % 2);
        ++runs;
      }
  EXPECT_EQ(runs, 80);
}

// Bottom-edge tiles of 8 rows (M = 12 q + 7 or 8) and of 4 (M = 12 q + 1 .. 4), which compute only the rows that
// exist, with the single-pass epilogue (one K block: bias, residual, ReLU or Clip) and B read in place or packed.
TEST(RtGemm, EdgeRowTilesWithTheSinglePassEpilogue) {
  float dummy = 0;
  int runs = 0;
  for (int64_t M : {4, 7, 8, 16, 20, 32, 40, 44, 128, 259})
    for (Activation act : {Activation::Relu, Activation::Clip}) {
      Epilogue ep = Epilogue::with_act(act);
      ep.alpha = -0.5f;
      ep.beta = 0.75f;
      ep.bias = &dummy;
      ep.residual = runs % 2 ? &dummy : nullptr;
      for (int64_t N : {33, 100}) {
        run_case({M, N, 64 + 3 * M, false, false, 1.0f, 0.0f}, ep, Variant::PackedA, 1 + runs % 2);
        run_case({M, N, 300, false, false, 1.0f, 0.0f}, ep, Variant::Plain, 2 - runs % 2);
        ++runs;
      }
    }
  EXPECT_EQ(runs, 40);
}

// Few column panels that do not divide over 2 threads (a 14x14 map: 196 columns, 13 panels) with many row tiles:
// gemm_driver splits the rows instead (whole 12- or 6-row tiles per thread), the last row chunk ragged.
TEST(RtGemm, RowSplitOnFewColumnPanels) {
  float dummy = 0;
  Epilogue ep = Epilogue::with_act(Activation::Relu);
  ep.bias = &dummy;
  ep.residual = &dummy;
  // M = 40 and 128 end in a 4- or 8-row edge tile: on 784 columns (49 panels) 40 stays on the column split
  // and 480 takes the rows (gemm_driver's tile_rows).
  for (int64_t M : {480, 100, 259, 40, 128})
    for (int64_t N : {196, 49, 100, 784}) {
      run_case({M, N, 80, false, false, 1.0f, 0.0f}, ep, Variant::PackedA, 2);
      run_case({M, N, 200, false, false, 1.0f, 0.0f}, {}, Variant::Plain, 2);
    }
}

TEST(RtGemm, LargeShapesBothThreadCounts) {
  for (int threads : {1, 2}) {
    run_case({64, 784, 576, false, false, 1.0f, 0.0f}, {}, Variant::PackedA, threads);
    run_case({130, 50, 1200, false, true, 1.0f, 0.0f}, {}, Variant::Plain, threads);
    run_case({1, 1000, 512, false, true, 1.0f, 0.0f}, {}, Variant::PackedB, threads);
  }
}

TEST(RtGemm, EveryEpilogueWithBiasAndResidual) {
  float dummy = 0;
  for (Epilogue ep : test::all_activations())
    for (bool per_col : {false, true})
      for (Variant v : {Variant::Plain, Variant::PackedA, Variant::PackedB})
        for (int threads : {1, 2}) {
          ep.bias = &dummy;  // replaced by real data in run_case
          ep.residual = &dummy;
          ep.bias_per_column = per_col;
          run_case({13, 37, 70, false, false, 1.0f, 0.0f}, ep, v, threads);
          run_case({1, 21, 40, false, true, 1.0f, 0.5f}, ep, v, threads);
        }
}

TEST(RtGemm, ZeroKGivesBetaCPlusEpilogue) {
  run_case({5, 9, 0, false, false, 1.0f, 0.5f}, Epilogue::with_act(Activation::Relu), Variant::Plain, 1);
}

// Buffers of 4 MiB and more (packed weights, arenas) start on a 2 MiB boundary, so that the kernel can back them
// with huge pages; small ones keep the cache-line alignment; growing keeps both, and every float is usable.
TEST(RtAlignedBuffer, LargeBuffersOnHugePageBoundariesSmallOnCacheLines) {
  constexpr size_t kHuge = size_t{2} << 20;
  AlignedBuffer small(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  EXPECT_EQ(small.size(), 1000u);
  AlignedBuffer large((size_t{5} << 20) / sizeof(float) + 3);  // 5 MiB and a bit: not whole pages
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % kHuge, 0u);
  large.zero();
  large.data()[large.size() - 1] = 7.0f;  // the last float is inside the allocation
  EXPECT_EQ(large.data()[large.size() - 1], 7.0f);
  EXPECT_EQ(large.data()[0], 0.0f);
  float* grown = small.ensure((size_t{6} << 20) / sizeof(float));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(grown) % kHuge, 0u);
  EXPECT_EQ(small.ensure(10), grown);  // never shrinks
}

}  // namespace
}  // namespace tessel::rt
