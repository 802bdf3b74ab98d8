// Tests of the runtime kernels the cpu target compiles node-suite operators to, on shapes the ONNX node
// tests do not reach (odd extents, rank 3, groups with dilation, negative indices, out-of-range operands):
// 16-bit float conversions, Pad, ConvTranspose, ScatterElements, GatherND, Resize taps, N-D pooling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "rt_test_util.h"
#include "tessel/rt/conv_nd.h"
#include "tessel/rt/half.h"
#include "tessel/rt/index_ops.h"
#include "tessel/rt/pool_nd.h"
#include "tessel/rt/resize.h"
#include "tessel/rt/thread_pool.h"

namespace tessel::rt {
namespace {

using test::random_vector;

TEST(RtHalf, EveryFloat16RoundTripsAndTiesRoundToEven) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = f16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
      continue;
    }
    EXPECT_EQ(float_to_f16(f), h) << "bits " << b;
  }
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // halfway: to the even 1.0
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // halfway: up to the even neighbour
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);                           // largest finite half
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);                           // rounds to infinity
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);              // halfway to the smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_f16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // bf16 halfway: to even
  EXPECT_EQ(float_to_bf16_truncate(1.0f + std::ldexp(3.0f, -9)), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3fc0), 1.5f);
}

TEST(RtPad, ReflectEdgeAndConstantOnRank3OddShapes) {
  const int64_t xs[3] = {2, 3, 5};
  std::vector<float> x(30);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const int64_t pads[6] = {1, 2, 4, 0, 1, 3};  // begins, then ends; reflect pads up to extent - 1
  const int64_t ys[3] = {3, 6, 12};
  auto reflect = [](int64_t c, int64_t n) {
    while (c < 0 || c >= n) c = c < 0 ? -c : 2 * (n - 1) - c;
    return c;
  };
  for (PadMode mode : {PadMode::Reflect, PadMode::Edge, PadMode::Constant}) {
    std::vector<float> y(3 * 6 * 12);
    const float fill = -7.0f;
    ASSERT_TRUE(pad_nd(x.data(), xs, pads, 3, mode, &fill, 4, y.data(), ys));
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 6; ++b)
        for (int64_t c = 0; c < 12; ++c) {
          const int64_t s[3] = {a - 1, b - 2, c - 4};
          bool inside = true;
          int64_t off = 0;
          for (int d = 0; d < 3; ++d) {
            int64_t k = s[d];
            if (k < 0 || k >= xs[d]) {
              inside = false;
              k = mode == PadMode::Edge ? std::clamp<int64_t>(k, 0, xs[d] - 1) : reflect(k, xs[d]);
            }
            off = off * xs[d] + k;
          }
          const float want = !inside && mode == PadMode::Constant ? fill : x[static_cast<size_t>(off)];
          EXPECT_EQ(y[static_cast<size_t>((a * 6 + b) * 12 + c)], want) << a << "," << b << "," << c;
        }
  }
  std::vector<float> y(3 * 6 * 12);
  const int64_t wrong[3] = {3, 6, 11};
  EXPECT_FALSE(pad_nd(x.data(), xs, pads, 3, PadMode::Constant, nullptr, 4, y.data(), wrong));
}

TEST(RtConvTranspose, GroupsStridesDilationsAndPadsMatchTheGatherForm) {
  ConvNdShape p;
  p.batch = 2, p.in_channels = 4, p.out_channels = 6, p.groups = 2;
  const int64_t in[3] = {1, 3, 4}, k[3] = {1, 2, 3}, st[3] = {1, 3, 2}, dil[3] = {1, 2, 1}, pad[3] = {0, 1, 2};
  for (int d = 0; d < 3; ++d) {
    p.in[d] = in[d], p.kernel[d] = k[d], p.stride[d] = st[d], p.dilation[d] = dil[d], p.pad[d] = pad[d];
    p.out[d] = (in[d] - 1) * st[d] + (k[d] - 1) * dil[d] + 1 - 2 * pad[d];
  }
  const int64_t mg = 3, cg = 2, in_size = 12, out_size = p.out[0] * p.out[1] * p.out[2], k_size = 6;
  const std::vector<float> x = random_vector(static_cast<size_t>(2 * 4 * in_size), 1),
                           w = random_vector(static_cast<size_t>(4 * mg * k_size), 2), b = random_vector(6, 3);
  std::vector<float> y(static_cast<size_t>(2 * 6 * out_size));
  conv_transpose_nd(p, x.data(), w.data(), b.data(), y.data());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t m = 0; m < 6; ++m)
      for (int64_t oh = 0; oh < p.out[1]; ++oh)
        for (int64_t ow = 0; ow < p.out[2]; ++ow) {
          // Output (oh, ow) gathers input (ih, iw) through tap (kh, kw) when ih * stride + kh * dilation - pad == oh.
          double want = b[static_cast<size_t>(m)];
          const int64_t g = m / mg;
          for (int64_t c = g * cg; c < (g + 1) * cg; ++c)
            for (int64_t kh = 0; kh < k[1]; ++kh)
              for (int64_t kw = 0; kw < k[2]; ++kw) {
                const int64_t th = oh + pad[1] - kh * dil[1], tw = ow + pad[2] - kw * dil[2];
                if (th % st[1] || tw % st[2] || th < 0 || tw < 0 || th / st[1] >= in[1] || tw / st[2] >= in[2]) continue;
                want += static_cast<double>(x[static_cast<size_t>((n * 4 + c) * in_size + th / st[1] * in[2] + tw / st[2])]) *
                        w[static_cast<size_t>((c * mg + m % mg) * k_size + kh * k[2] + kw)];
              }
          EXPECT_NEAR(y[static_cast<size_t>((n * 6 + m) * out_size + oh * p.out[2] + ow)], want, 1e-5);
        }
}

TEST(RtScatterGather, NegativeIndicesReductionsAndRangeChecks) {
  const int64_t xs[2] = {3, 4}, is[2] = {2, 4};
  std::vector<int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const int64_t idx[8] = {-1, 0, 2, -3, -1, 1, 0, 0};  // rows along axis 0, negative from the end
  const int32_t upd[8] = {10, 20, 30, 40, 1, 2, 3, 4};
  ASSERT_TRUE(scatter_elements(y.data(), xs, idx, upd, is, 2, 0, ScatterReduction::Add));
  const std::vector<int32_t> want = {0, 21, 5, 47, 4, 7, 6, 7, 19, 9, 40, 11};
  EXPECT_EQ(y, want);
  const int64_t bad[8] = {3, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_FALSE(scatter_elements(y.data(), xs, bad, upd, is, 2, 0, ScatterReduction::None));

  // GatherND with one batch axis: data [2, 3, 2], indices [2, 1, 1] -> rows of 2.
  const int64_t ds[3] = {2, 3, 2};
  const float data[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const int64_t tuples[2] = {-1, 1};
  float out[4] = {};
  ASSERT_TRUE(gather_nd(data, ds, 3, 1, tuples, 1, 1, 2, 4, out));
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{4, 5, 8, 9}));
  const int64_t outside[2] = {3, 0};
  EXPECT_FALSE(gather_nd(data, ds, 3, 1, outside, 1, 1, 2, 4, out));
}

TEST(RtResizeTaps, TensorProductOfPerAxisTapsAndExtrapolation) {
  // x [2, 3] -> y [2, 2]: axis 0 identity; axis 1 averages columns (0, 1) and takes column 2 or extrapolates.
  const float x[6] = {1, 2, 3, 4, 5, 6};
  const int64_t in[2] = {2, 3}, out[2] = {2, 2};
  const int64_t first[6] = {0, 1, 2, 2, 4, 5};
  const int64_t index[5] = {0, 1, 0, 1, 2};
  const double weight[5] = {1, 1, 0.5, 0.5, 1};
  const uint8_t outside[4] = {0, 0, 0, 0};
  float y[4] = {};
  resize_taps(x, y, 2, in, out, first, index, weight, outside, -1.0);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{1.5f, 3, 4.5f, 6}));
  const uint8_t last_outside[4] = {0, 0, 0, 1};
  resize_taps(x, y, 2, in, out, first, index, weight, last_outside, -1.0);
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{1.5f, -1, 4.5f, -1}));
}

// resize_2d (the compiled separable path) against resize_taps (per element, in double) on random tap lists:
// 0-4 taps per coordinate at any input index with any weight (negative: cubic), odd extents, up- and
// down-sampling, 1 and 3 threads; bands of 64 output rows, so OH > 64 crosses a band boundary.
TEST(RtResize2d, MatchesTheTensorProductOfTapsOnRandomTapLists) {
  std::mt19937 rng(7);
  ThreadPool three(3);
  const int64_t sizes[][4] = {{5, 7, 40, 56}, {37, 29, 11, 13}, {1, 1, 3, 2}, {9, 65, 130, 17}, {3, 4, 3, 4}};
  for (const auto& sz : sizes) {
    const int64_t H = sz[0], W = sz[1], OH = sz[2], OW = sz[3], planes = 3;
    auto taps = [&](int64_t out, int64_t in, std::vector<int64_t>* first, std::vector<int64_t>* index,
                    std::vector<double>* weight) {
      for (int64_t c = 0; c < out; ++c) {
        first->push_back(static_cast<int64_t>(index->size()));
        const int n = static_cast<int>(rng() % 5);
        for (int t = 0; t < n; ++t) {
          index->push_back(static_cast<int64_t>(rng() % static_cast<uint32_t>(in)));
          weight->push_back(std::uniform_real_distribution<double>(-0.5, 1.5)(rng));
        }
      }
      first->push_back(static_cast<int64_t>(index->size()));
    };
    std::vector<int64_t> rf, ri, cf, ci;
    std::vector<double> rw, cw;
    taps(OH, H, &rf, &ri, &rw);
    taps(OW, W, &cf, &ci, &cw);
    // resize_taps: axis 0 (planes) identity, then the row and column taps.
    std::vector<int64_t> first, index;
    std::vector<double> weight;
    for (int64_t p = 0; p < planes; ++p) first.push_back(p), index.push_back(p), weight.push_back(1.0);
    first.push_back(planes);
    const int64_t row_base = static_cast<int64_t>(index.size());
    for (int64_t f : rf) first.push_back(row_base + f);
    index.insert(index.end(), ri.begin(), ri.end());
    weight.insert(weight.end(), rw.begin(), rw.end());
    const int64_t col_base = static_cast<int64_t>(index.size());
    for (int64_t f : cf) first.push_back(col_base + f);
    index.insert(index.end(), ci.begin(), ci.end());
    weight.insert(weight.end(), cw.begin(), cw.end());
    const std::vector<uint8_t> outside(static_cast<size_t>(planes + OH + OW), 0);
    const int64_t in_shape[3] = {planes, H, W}, out_shape[3] = {planes, OH, OW};
    const std::vector<float> x = random_vector(static_cast<size_t>(planes * H * W), static_cast<uint32_t>(H * W));
    std::vector<float> want(static_cast<size_t>(planes * OH * OW));
    resize_taps(x.data(), want.data(), 3, in_shape, out_shape, first.data(), index.data(), weight.data(), outside.data(), 0.0);
    const std::vector<float> rwf(rw.begin(), rw.end()), cwf(cw.begin(), cw.end());
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &three}) {
      std::vector<float> got(want.size(), std::nanf(""));
      resize_2d(x.data(), got.data(), planes, H, W, OH, OW, rf.data(), ri.data(), rwf.data(), cf.data(), ci.data(),
                cwf.data(), pool);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << H << "x" << W << " -> " << OH << "x" << OW << " at " << i;
    }
  }
}

TEST(RtPoolNd, DilatedMaxPoolIndicesAndAverageWithPadding) {
  PoolNdShape p;
  p.planes = 2;
  p.in[2] = 7, p.kernel[2] = 3, p.dilation[2] = 2, p.stride[2] = 2, p.pad_begin[2] = 1, p.pad_end[2] = 1;
  p.out[2] = 3;  // (7 + 2 - 5) / 2 + 1
  const std::vector<float> x = random_vector(14, 5);
  float y[6];
  int64_t at[6];
  pool_nd<float, float>(p, PoolNdKind::Max, x.data(), y, at, false, 1.0, false);
  for (int64_t plane = 0; plane < 2; ++plane)
    for (int64_t o = 0; o < 3; ++o) {
      int64_t best = -1;
      for (int64_t k = 0; k < 3; ++k) {
        const int64_t i = o * 2 - 1 + k * 2;
        if (i >= 0 && i < 7 && (best < 0 || x[static_cast<size_t>(plane * 7 + i)] > x[static_cast<size_t>(best)]))
          best = plane * 7 + i;
      }
      EXPECT_EQ(at[plane * 3 + o], best);
      EXPECT_EQ(y[plane * 3 + o], x[static_cast<size_t>(best)]);
    }
  pool_nd<float, float>(p, PoolNdKind::Average, x.data(), y, nullptr, true, 1.0, false);
  EXPECT_NEAR(y[0], (x[1] + x[3]) / 3.0, 1e-6);  // taps -1 (padding, counted), 1, 3
}

}  // namespace
}  // namespace tessel::rt
