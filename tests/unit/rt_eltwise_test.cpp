// Tests of element-wise kernels: documented max errors of the vector math, broadcasting, softmax, layernorm.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "rt_test_util.h"
#include "tessel/rt/eltwise.h"

namespace tessel::rt {
namespace {

using test::expect_close;
using test::random_vector;

// Max error of unary(op) over a dense sweep of [lo, hi], absolute or relative to |f(x)|.
double max_error(UnaryOp op, double (*f)(double), double lo, double hi, bool relative) {
  const int64_t n = 200001;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(lo + (hi - lo) * i / (n - 1));
  unary(op, x.data(), y.data(), n);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = f(x[i]);
    double err = std::fabs(y[i] - want);
    if (relative) err /= std::max(std::fabs(want), 1e-300);
    if (!(err <= worst)) worst = std::isnan(err) ? 1e30 : err;
  }
  return worst;
}

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu_d(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_d(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double exp_d(double x) { return std::exp(x); }
double tanh_d(double x) { return std::tanh(x); }
double erf_d(double x) { return std::erf(x); }
double log_d(double x) { return std::log(x); }

TEST(RtEltwise, VectorMathMeetsDocumentedErrors) {
  EXPECT_LE(max_error(UnaryOp::Exp, exp_d, -80, 80, true), 3e-7);
  EXPECT_LE(max_error(UnaryOp::Tanh, tanh_d, -20, 20, false), 3e-7);
  EXPECT_LE(max_error(UnaryOp::Sigmoid, sigmoid_d, -20, 20, false), 2e-7);
  EXPECT_LE(max_error(UnaryOp::Sigmoid, sigmoid_d, -200, 200, false), 2e-7);
  EXPECT_LE(max_error(UnaryOp::Silu, silu_d, -4, 4, false), 8e-7);  // |x| times the sigmoid's 2e-7
  EXPECT_LE(max_error(UnaryOp::Silu, silu_d, -100, 100, false), 4e-6);
  EXPECT_LE(max_error(UnaryOp::Erf, erf_d, -6, 6, false), 4e-7);
  EXPECT_LE(max_error(UnaryOp::Gelu, gelu_d, -6, 6, false), 1e-6);
  EXPECT_LE(max_error(UnaryOp::Log, log_d, 1e-3, 1e3, false), 4e-7);
  // Over many binades: relative-to-log error stays tiny.
  std::vector<float> x = {1e-30f, 1e-10f, 3e5f, 1e30f, 1.0f, 0.0f, -1.0f};
  std::vector<float> y(x.size());
  unary(UnaryOp::Log, x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], std::log(double(x[i])), 2e-6 * std::fabs(std::log(double(x[i]))));
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_TRUE(std::isinf(y[5]) && y[5] < 0);
  EXPECT_TRUE(std::isnan(y[6]));
}

// The sigmoid saturates to 1 and to 2^-126 (its exponent's clamp) at the infinities and keeps a NaN: the clamp
// must neither turn infinities into NaN nor a NaN into a number; in the standalone op and in SiLU.
TEST(RtEltwise, SigmoidAndSiluAtInfinitiesAndNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {inf, -inf, nan, 1e30f, -1e30f, 0.0f}, y(x.size()), s(x.size());
  unary(UnaryOp::Sigmoid, x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_LE(y[1], 1.2e-38f);
  EXPECT_GE(y[1], 0.0f);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_LE(y[4], 1.2e-38f);
  EXPECT_EQ(y[5], 0.5f);
  unary(UnaryOp::Silu, x.data(), s.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(s[0], inf);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 1e30f);
  EXPECT_EQ(s[5], 0.0f);
}

TEST(RtEltwise, SimpleUnaryOpsAndTails) {
  for (int64_t n : {1, 7, 8, 9, 100001}) {
    auto x = random_vector(n, 3, -4, 4);
    std::vector<float> y(n);
    ThreadPool pool(2);
    unary(UnaryOp::Abs, x.data(), y.data(), n, &pool);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], std::fabs(x[i]));
    unary(UnaryOp::Relu, x.data(), y.data(), n, &pool);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f);
    unary(UnaryOp::Reciprocal, x.data(), y.data(), n, &pool);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], 1.0 / x[i], 1e-6 * std::fabs(1.0 / x[i]));
  }
}

double apply(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Max: return std::max(a, b);
    case BinaryOp::Min: return std::min(a, b);
  }
  return 0;
}

TEST(RtEltwise, BinarySameScalarChannel) {
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min};
  auto a = random_vector(3 * 5 * 17, 1), b = random_vector(3 * 5 * 17, 2, 0.5f, 2.0f);
  ThreadPool pool(2);
  for (BinaryOp op : ops) {
    std::vector<float> y(a.size());
    std::vector<double> want(a.size());
    binary_same(op, a.data(), b.data(), y.data(), a.size(), &pool);
    for (size_t i = 0; i < a.size(); ++i) want[i] = apply(op, a[i], b[i]);
    expect_close(y, want, 1e-6, "same");
    binary_scalar(op, a.data(), 1.5f, true, y.data(), a.size(), &pool);
    for (size_t i = 0; i < a.size(); ++i) want[i] = apply(op, 1.5, a[i]);
    expect_close(y, want, 1e-6, "scalar first");
    binary_channel(op, a.data(), b.data(), y.data(), 3, 5, 17, &pool);
    for (size_t i = 0; i < a.size(); ++i) want[i] = apply(op, a[i], b[(i / 17) % 5]);
    expect_close(y, want, 1e-6, "channel");
  }
}

TEST(RtEltwise, GeneralBroadcasting) {
  // y[2,3,4,5] = a[3,1,5] op b[2,1,4,1]
  const int64_t as[] = {3, 1, 5}, bs[] = {2, 1, 4, 1}, ys[] = {2, 3, 4, 5};
  auto a = random_vector(15, 5), b = random_vector(8, 6, 0.5f, 2.0f);
  std::vector<float> y(120);
  std::vector<double> want(120);
  binary_broadcast(BinaryOp::Div, a.data(), as, 3, b.data(), bs, 4, y.data(), ys, 4);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 5; ++l) want[((i * 3 + j) * 4 + k) * 5 + l] = double(a[j * 5 + l]) / b[i * 4 + k];
  expect_close(y, want, 1e-6, "broadcast");
  // Scalar-shaped b (rank 0) and inner broadcast of a.
  const int64_t a2[] = {4, 1}, y2[] = {4, 9};
  std::vector<float> out(36);
  float s = 2.0f;
  binary_broadcast(BinaryOp::Mul, a.data(), a2, 2, &s, nullptr, 0, out.data(), y2, 2);
  for (int i = 0; i < 36; ++i) EXPECT_EQ(out[i], a[i / 9] * 2.0f);
}

TEST(RtEltwise, SoftmaxLogSoftmaxLayerNorm) {
  for (int64_t cols : {1, 7, 8, 1000}) {
    const int64_t rows = 5;
    auto x = random_vector(rows * cols, 7, -30, 30);
    auto g = random_vector(cols, 8), be = random_vector(cols, 9);
    std::vector<float> y(x.size());
    std::vector<double> ws(x.size()), wl(x.size()), wn(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0, mean = 0, var = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(x[r * cols + c]));
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - mx);
      for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
      mean /= cols;
      for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
      var /= cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double v = x[r * cols + c];
        ws[r * cols + c] = std::exp(v - mx) / sum;
        wl[r * cols + c] = v - mx - std::log(sum);
        wn[r * cols + c] = (v - mean) / std::sqrt(var + 1e-5) * g[c] + be[c];
      }
    }
    ThreadPool pool(2);
    softmax(x.data(), y.data(), rows, cols, &pool);
    expect_close(y, ws, 1e-6, "softmax");
    log_softmax(x.data(), y.data(), rows, cols, &pool);
    expect_close(y, wl, 1e-6, "log_softmax");
    layer_norm(x.data(), g.data(), be.data(), y.data(), rows, cols, 1e-5f, &pool);
    expect_close(y, wn, 2e-6, "layer_norm");
  }
}

// apply_residual_activation: data = act(data + residual) for every activation, with and without a
// residual, on lengths with and without a vector tail; bias is ignored by contract.
TEST(RtEltwise, ResidualActivationMatchesReference) {
  float ignored_bias = 100.0f;
  for (Epilogue ep : test::all_activations()) {
    ep.bias = &ignored_bias;
    for (int64_t n : {1, 8, 13, 64, 67})
      for (bool with_res : {false, true}) {
        auto x = random_vector(n, 31, -4.0f, 4.0f), r = random_vector(n, 32, -2.0f, 2.0f);
        std::vector<double> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = test::ref_activation(double(x[i]) + (with_res ? r[i] : 0.0), ep);
        apply_residual_activation(x.data(), with_res ? r.data() : nullptr, n, ep);
        expect_close(x, want, 2e-6, std::string(activation_name(ep.act)) + " n=" + std::to_string(n));
      }
  }
}

// channel_affine: y = act(x * scale[c] + shift[c]) for every activation, inner sizes with and without a vector
// tail, 1 and 2 threads, in place.
TEST(RtEltwise, ChannelAffineEveryActivation) {
  auto scale = random_vector(5, 41, 0.5f, 2.0f), shift = random_vector(5, 42);
  for (Epilogue ep : test::all_activations())
    for (int64_t inner : {1, 8, 17})
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        auto x = random_vector(3 * 5 * inner, 43, -3.0f, 3.0f);
        std::vector<double> want(x.size());
        for (size_t i = 0; i < x.size(); ++i)
          want[i] = test::ref_activation(double(x[i]) * scale[(i / inner) % 5] + shift[(i / inner) % 5], ep);
        channel_affine(x.data(), scale.data(), shift.data(), x.data(), 3, 5, inner, ep, &pool);
        expect_close(x, want, 2e-6, std::string(activation_name(ep.act)) + " inner=" + std::to_string(inner));
      }
}

}  // namespace
}  // namespace tessel::rt
