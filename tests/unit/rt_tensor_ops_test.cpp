// Tests of the runtime's transformer kernels against naive loops (double accumulation): Transpose with
// every kind of permutation, batched MatMul with broadcast batch offsets, and attention (rows blocked,
// several heads, 1 and 2 threads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "rt_test_util.h"
#include "tessel/rt/attention.h"
#include "tessel/rt/gemm.h"
#include "tessel/rt/indexing.h"
#include "tessel/rt/transpose.h"

namespace tessel::rt {
namespace {

using test::expect_close;
using test::random_vector;

std::vector<double> ref_transpose(const std::vector<float>& x, const std::vector<int64_t>& shape,
                                  const std::vector<int64_t>& perm) {
  const int r = static_cast<int>(shape.size());
  std::vector<int64_t> stride(r, 1), ydims(r);
  for (int a = r - 2; a >= 0; --a) stride[a] = stride[a + 1] * shape[a + 1];
  for (int k = 0; k < r; ++k) ydims[k] = shape[perm[k]];
  std::vector<double> y(x.size());
  std::vector<int64_t> idx(r, 0);
  for (size_t j = 0; j < y.size(); ++j) {
    int64_t off = 0;
    for (int k = 0; k < r; ++k) off += idx[k] * stride[perm[k]];
    y[j] = x[off];
    for (int k = r - 1; k >= 0; --k) {
      if (++idx[k] < ydims[k]) break;
      idx[k] = 0;
    }
  }
  return y;
}

TEST(RtTensorOps, TransposeEveryPermutationKind) {
  const struct {
    std::vector<int64_t> shape, perm;
  } cases[] = {
      {{1, 5, 3, 4}, {0, 2, 1, 3}},    // head split: the innermost axis stays
      {{1, 5, 3, 4}, {0, 2, 3, 1}},    // K transposed for Q K^T: the innermost axis moves
      {{7, 9}, {1, 0}},                // 2-D
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
      {{3, 1, 4}, {1, 2, 0}},          // a size-1 axis
      {{2, 3, 4}, {0, 1, 2}},          // identity
      {{4, 1, 1, 6}, {3, 1, 2, 0}},
      {{2, 3, 4, 5}, {2, 3, 0, 1}},    // merged pairs
      // Batches of 2-D transposes (tiled): ViT's K^T, tiles cut short on both sides, permuted outer axes.
      {{1, 12, 197, 64}, {0, 1, 3, 2}},
      {{2, 37, 45}, {0, 2, 1}},
      {{4, 6, 17, 19}, {1, 0, 3, 2}},
      {{3, 33, 16}, {2, 0, 1}},        // 16 x 99: one tile row
  };
  for (const auto& c : cases)
    for (int threads : {1, 2}) {
      const int64_t n = std::accumulate(c.shape.begin(), c.shape.end(), int64_t{1}, std::multiplies<>());
      auto x = random_vector(static_cast<size_t>(n), 3);
      std::vector<float> y(x.size(), -7.0f);
      ThreadPool pool(threads);
      transpose(x.data(), c.shape.data(), c.perm.data(), static_cast<int>(c.shape.size()), y.data(), &pool);
      expect_close(y, ref_transpose(x, c.shape, c.perm), 0.0, "transpose rank " + std::to_string(c.shape.size()));
    }
}

TEST(RtTensorOps, MatmulBatchedWithBroadcastOffsets) {
  // A [2, 3, M, K] x B [3, K, N]: B broadcast over the first batch axis.
  const int64_t M = 13, K = 21, N = 17, batch = 6;
  auto a = random_vector(static_cast<size_t>(batch * M * K), 5);
  auto b = random_vector(static_cast<size_t>(3 * K * N), 6);
  std::vector<int64_t> a_off(batch), b_off(batch);
  for (int64_t i = 0; i < batch; ++i) a_off[i] = i * M * K, b_off[i] = (i % 3) * K * N;
  std::vector<double> want(static_cast<size_t>(batch * M * N));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(a[a_off[i] + m * K + k]) * b[b_off[i] + k * N + n];
        want[(i * M + m) * N + n] = acc;
      }
  for (int threads : {1, 2, 8}) {  // 8 > batch: each GEMM threaded instead
    std::vector<float> c(want.size(), -7.0f);
    ThreadPool pool(threads);
    matmul_batched(a.data(), a_off.data(), b.data(), b_off.data(), c.data(), batch, M, N, K, &pool);
    expect_close(c, want, 1e-5, "matmul_batched threads=" + std::to_string(threads));
  }
}

TEST(RtTensorOps, AttentionMatchesSoftmaxOfScaledScores) {
  const struct {
    int64_t batch, M, d, T, dv;
  } cases[] = {{2, 8, 8, 8, 8}, {3, 37, 16, 29, 12}, {1, 1, 4, 1, 4}, {2, 700, 8, 50, 8},  // several row blocks
               {12, 197, 64, 197, 64},   // ViT-B/16: heads of 197 rows in 3 blocks
               {1, 900, 8, 40, 5}};      // one problem in several row blocks: at 2 threads, (problem, block) tasks
  for (const auto& c : cases)
    for (int threads : {1, 2}) {
      auto q = random_vector(static_cast<size_t>(c.batch * c.M * c.d), 7, -2.0f, 2.0f);
      auto kt = random_vector(static_cast<size_t>(c.batch * c.d * c.T), 8, -2.0f, 2.0f);
      auto v = random_vector(static_cast<size_t>(c.batch * c.T * c.dv), 9);
      const float scale = 1.0f / std::sqrt(float(c.d));
      std::vector<double> want(static_cast<size_t>(c.batch * c.M * c.dv));
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t m = 0; m < c.M; ++m) {
          std::vector<double> s(c.T);
          double mx = -1e300, sum = 0;
          for (int64_t t = 0; t < c.T; ++t) {
            double acc = 0;
            for (int64_t k = 0; k < c.d; ++k) acc += double(q[(b * c.M + m) * c.d + k]) * kt[(b * c.d + k) * c.T + t];
            s[t] = acc * scale;
            mx = std::max(mx, s[t]);
          }
          for (double& e : s) sum += (e = std::exp(e - mx));
          for (int64_t j = 0; j < c.dv; ++j) {
            double acc = 0;
            for (int64_t t = 0; t < c.T; ++t) acc += s[t] / sum * v[(b * c.T + t) * c.dv + j];
            want[(b * c.M + m) * c.dv + j] = acc;
          }
        }
      std::vector<float> out(want.size(), -7.0f);
      ThreadPool pool(threads);
      attention(q.data(), kt.data(), v.data(), out.data(), c.batch, c.M, c.d, c.T, c.dv, scale, &pool);
      expect_close(out, want, 1e-5, "attention M=" + std::to_string(c.M) + " T=" + std::to_string(c.T));
    }
}

TEST(RtTensorOps, GatherRowsOfAnyWidthAndRejectsOutOfRange) {
  // data [3][5][4] of int16 (8-byte rows), indices along axis 1, negative ones from the end.
  const int64_t outer = 3, dim = 5, inner = 4;
  std::vector<int16_t> data(outer * dim * inner);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int16_t>(i * 7 - 50);
  const std::vector<int64_t> idx = {4, -1, 0, 2, -5, 3};
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<int16_t> out(outer * idx.size() * inner, -1);
    ASSERT_TRUE(gather(data.data(), outer, dim, inner * 2, idx.data(), nullptr, static_cast<int64_t>(idx.size()),
                       out.data(), &pool));
    for (int64_t o = 0; o < outer; ++o)
      for (size_t i = 0; i < idx.size(); ++i) {
        const int64_t row = idx[i] < 0 ? idx[i] + dim : idx[i];
        for (int64_t j = 0; j < inner; ++j)
          ASSERT_EQ(out[(o * idx.size() + i) * inner + j], data[(o * dim + row) * inner + j]) << o << " " << i;
      }
    const std::vector<int32_t> bad = {1, 5};
    std::vector<int16_t> untouched(outer * bad.size() * inner, 9);
    EXPECT_FALSE(gather(data.data(), outer, dim, inner * 2, nullptr, bad.data(), 2, untouched.data(), &pool));
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](int16_t v) { return v == 9; }));
  }
}

TEST(RtTensorOps, StridedCopyWithNegativeStepsAndOffsets) {
  // x [4][6][5] floats; y = x[1::2, 5:0:-2, 0:5:3] -> [2][3][2]
  const int64_t xs[] = {4, 6, 5}, starts[] = {1, 5, 0}, steps[] = {2, -2, 3}, ys[] = {2, 3, 2};
  auto x = random_vector(4 * 6 * 5, 21);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> y(12, -7.0f);
    strided_copy(x.data(), xs, starts, steps, ys, 3, sizeof(float), y.data(), &pool);
    std::vector<double> want;
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 2; ++c) want.push_back(x[((1 + 2 * a) * 6 + (5 - 2 * b)) * 5 + 3 * c]);
    expect_close(y, want, 0.0, "strided_copy");
  }
}

}  // namespace
}  // namespace tessel::rt
