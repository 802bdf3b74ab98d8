// Tests of pooling kernels (NCHW and NCHWc8) against a naive loop over the padded window.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rt_test_util.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/pool.h"

namespace tessel::rt {
namespace {

using test::expect_close;
using test::random_vector;

// Naive pooling; the count_include_pad divisor counts window cells inside [-pad, in + pad_end).
std::vector<double> ref_pool(const Pool2dShape& s, const std::vector<float>& in, bool is_max) {
  const int64_t OH = s.out_h(), OW = s.out_w();
  std::vector<double> out(s.batch * s.channels * OH * OW);
  for (int64_t p = 0; p < s.batch * s.channels; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double m = -INFINITY, sum = 0;
        int64_t real = 0, padded = 0;
        for (int64_t ky = 0; ky < s.kernel_h; ++ky)
          for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
            const int64_t ih = oh * s.stride_h - s.pad_top + ky, iw = ow * s.stride_w - s.pad_left + kx;
            if (ih < s.in_h + s.pad_bottom && iw < s.in_w + s.pad_right) ++padded;
            if (ih < 0 || iw < 0 || ih >= s.in_h || iw >= s.in_w) continue;
            const double v = in[(p * s.in_h + ih) * s.in_w + iw];
            m = std::max(m, v);
            sum += v;
            ++real;
          }
        out[(p * OH + oh) * OW + ow] = is_max ? m : sum / (s.count_include_pad ? padded : std::max<int64_t>(real, 1));
      }
  return out;
}

Pool2dShape pshape(int64_t c, int64_t h, int64_t w, int64_t k, int64_t st, int64_t pt, int64_t pl, int64_t pb,
                   int64_t pr, bool ceil_mode, bool include_pad) {
  Pool2dShape s;
  s.batch = 2;
  s.channels = c;
  s.in_h = h;
  s.in_w = w;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = st;
  s.pad_top = pt;
  s.pad_left = pl;
  s.pad_bottom = pb;
  s.pad_right = pr;
  s.ceil_mode = ceil_mode;
  s.count_include_pad = include_pad;
  return s;
}

std::vector<float> to8(const std::vector<float>& x, int64_t NC, int64_t C, int64_t hw) {
  std::vector<float> y((NC / C) * ((C + 7) / 8) * 8 * hw, 0.0f);
  reorder_nchw_to_nchwc8(NC / C, C, hw, x.data(), y.data());
  return y;
}

TEST(RtPool, MaxAndAverageAllModesBothLayouts) {
  const Pool2dShape shapes[] = {
      pshape(3, 7, 9, 3, 2, 1, 1, 1, 1, false, false), pshape(5, 8, 8, 2, 2, 0, 0, 0, 0, false, false),
      pshape(9, 13, 11, 3, 2, 1, 0, 1, 1, true, false), pshape(9, 13, 11, 3, 2, 1, 0, 1, 1, true, true),
      pshape(4, 10, 10, 3, 3, 1, 1, 0, 0, true, true),  pshape(16, 112, 112, 3, 2, 1, 1, 1, 1, false, false),
      pshape(1, 6, 6, 5, 1, 2, 2, 2, 2, false, true),   pshape(7, 5, 6, 2, 3, 0, 1, 1, 0, true, false),
  };
  ThreadPool pool(2);
  for (const auto& s : shapes) {
    const int64_t OH = s.out_h(), OW = s.out_w(), NC = s.batch * s.channels;
    auto in = random_vector(NC * s.in_h * s.in_w, 31);
    for (bool is_max : {true, false}) {
      auto want = ref_pool(s, in, is_max);
      std::vector<float> got(want.size());
      (is_max ? maxpool2d_nchw : avgpool2d_nchw)(s, in.data(), got.data(), &pool);
      const std::string what = std::string(is_max ? "max" : "avg") + " c=" + std::to_string(s.channels) +
                               " h=" + std::to_string(s.in_h) + " ceil=" + std::to_string(s.ceil_mode) +
                               " incl=" + std::to_string(s.count_include_pad);
      expect_close(got, want, 1e-6, what + " nchw");
      auto in8 = to8(in, NC, s.channels, s.in_h * s.in_w);
      std::vector<float> out8(s.batch * ((s.channels + 7) / 8) * 8 * OH * OW);
      (is_max ? maxpool2d_nchwc8 : avgpool2d_nchwc8)(s, in8.data(), out8.data(), &pool);
      std::vector<float> back(want.size());
      reorder_nchwc8_to_nchw(s.batch, s.channels, OH * OW, out8.data(), back.data());
      expect_close(back, want, 1e-6, what + " nchwc8");
    }
  }
}

// NCHW pools on odd geometry (the row-stride 1/2 path): maps from 1x1 up past 4 vectors of 16 lanes,
// widths that are not multiples of 8 or 16, kernels 2/3/5, strides 1 and 2, zero, symmetric and
// asymmetric pads, ceil_mode and both count_include_pad modes.
TEST(RtPool, NchwOddGeometryAllModes) {
  const int64_t sizes[][2] = {{1, 1}, {2, 3}, {3, 7}, {7, 7}, {5, 9}, {6, 16}, {4, 17}, {13, 13},
                              {3, 31}, {27, 27}, {4, 33}, {2, 55}, {3, 64}, {2, 65}, {3, 111}};
  // The last pads exceed the kernel and a vector: windows and whole vectors entirely in padding.
  const int64_t pads[][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {0, 1, 1, 0}, {1, 0, 0, 1}, {6, 17, 2, 9}};
  int checked = 0;
  for (int64_t k : {2, 3, 5})
    for (int64_t st : {1, 2})
      for (const auto& hw : sizes)
        for (const auto& p : pads)
          for (bool ceil_mode : {false, true}) {
            Pool2dShape s = pshape(3, hw[0], hw[1], k, st, p[0], p[1], p[2], p[3], ceil_mode, checked % 2 == 1);
            s.batch = 1 + checked % 2;
            if (s.out_h() < 1 || s.out_w() < 1) continue;
            const int64_t NC = s.batch * s.channels;
            auto in = random_vector(NC * s.in_h * s.in_w, 51 + checked);
            ThreadPool pool(1 + checked % 2);
            for (bool is_max : {true, false}) {
              auto want = ref_pool(s, in, is_max);
              std::vector<float> got(want.size(), -7.0f);
              (is_max ? maxpool2d_nchw : avgpool2d_nchw)(s, in.data(), got.data(), &pool);
              expect_close(got, want, 1e-6,
                           std::string(is_max ? "max" : "avg") + " k=" + std::to_string(k) + " s=" + std::to_string(st) +
                               " h=" + std::to_string(s.in_h) + " w=" + std::to_string(s.in_w) + " pads=" +
                               std::to_string(p[0]) + std::to_string(p[1]) + std::to_string(p[2]) +
                               std::to_string(p[3]) + " ceil=" + std::to_string(ceil_mode) +
                               " incl=" + std::to_string(s.count_include_pad));
            }
            ++checked;
          }
  EXPECT_GT(checked, 400);
}

// Different strides and kernel extents along the two axes (the row stride picks the path; the
// column stride and kernel height are free), including a stride-3 row that takes the generic loop.
TEST(RtPool, NchwUnequalAxes) {
  for (int64_t sh : {1, 2, 3})
    for (int64_t sw : {1, 2, 3}) {
      Pool2dShape s = pshape(4, 12, 21, 3, 1, 1, 0, 1, 2, sh == 2, sw == 1);
      s.kernel_h = 2;
      s.kernel_w = 3;
      s.stride_h = sh;
      s.stride_w = sw;
      auto in = random_vector(s.batch * s.channels * s.in_h * s.in_w, 61);
      for (bool is_max : {true, false}) {
        auto want = ref_pool(s, in, is_max);
        std::vector<float> got(want.size(), -7.0f);
        (is_max ? maxpool2d_nchw : avgpool2d_nchw)(s, in.data(), got.data(), nullptr);
        expect_close(got, want, 1e-6, "sh=" + std::to_string(sh) + " sw=" + std::to_string(sw));
      }
    }
}

TEST(RtPool, CeilModeOutputSizes) {
  // 5 wide, k=2, s=2: floor -> 2, ceil -> 3; a window starting in the end padding is dropped.
  EXPECT_EQ(pshape(1, 5, 5, 2, 2, 0, 0, 0, 0, false, false).out_w(), 2);
  EXPECT_EQ(pshape(1, 5, 5, 2, 2, 0, 0, 0, 0, true, false).out_w(), 3);
  EXPECT_EQ(pshape(1, 4, 4, 2, 2, 1, 1, 1, 1, true, false).out_w(), 3);
  EXPECT_EQ(pshape(1, 112, 112, 3, 2, 0, 0, 0, 0, true, false).out_w(), 56);  // SqueezeNet
}

TEST(RtPool, GlobalAverageBothLayouts) {
  for (int64_t C : {3, 8, 13}) {
    for (int64_t hw : {1, 7, 49, 50}) {
      auto in = random_vector(2 * C * hw, 41);
      std::vector<double> want(2 * C);
      for (int64_t p = 0; p < 2 * C; ++p) {
        double s = 0;
        for (int64_t i = 0; i < hw; ++i) s += in[p * hw + i];
        want[p] = s / hw;
      }
      std::vector<float> got(2 * C);
      ThreadPool pool(2);
      global_avgpool_nchw(2, C, hw, in.data(), got.data(), &pool);
      expect_close(got, want, 1e-6, "global nchw");
      auto in8 = to8(in, 2 * C, C, hw);
      std::vector<float> out8(2 * ((C + 7) / 8) * 8), back(2 * C);
      global_avgpool_nchwc8(2, C, hw, in8.data(), out8.data(), &pool);
      reorder_nchwc8_to_nchw(2, C, 1, out8.data(), back.data());
      expect_close(back, want, 1e-6, "global nchwc8");
    }
  }
}

}  // namespace
}  // namespace tessel::rt
