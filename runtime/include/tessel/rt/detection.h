// Detection and sampling kernels in double for generated code (the reference interpreter's semantics):
// NonMaxSuppression (ONNX Runtime's selection order) and GridSample (PyTorch's grid_sample, 4-D).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tessel::rt {

/// NonMaxSuppression over boxes [batches, num_boxes, 4] and scores [batches, classes, num_boxes]: per batch
/// and class, boxes above the score threshold (when has_score_threshold) by descending score (stable), kept
/// unless their IoU with a kept box exceeds iou_threshold, at most max_per_class. Appends (batch, class, box)
/// triples to `selected`.
template <class T>
void non_max_suppression(const T* boxes, const T* scores, int64_t batches, int64_t num_boxes, int64_t classes,
                         int64_t max_per_class, double iou_threshold, bool has_score_threshold,
                         double score_threshold, bool center_point, std::vector<int64_t>& selected) {
  struct Box {
    double y1, x1, y2, x2;
    double area() const { return (y2 - y1) * (x2 - x1); }
  };
  auto read = [&](const T* p) {
    const double b[4] = {static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2]),
                         static_cast<double>(p[3])};
    if (center_point) return Box{b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
    return Box{std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
  };
  auto iou = [](const Box& a, const Box& b) {
    const double h = std::min(a.y2, b.y2) - std::max(a.y1, b.y1), w = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
    if (h <= 0 || w <= 0) return 0.0;
    const double inter = h * w, uni = a.area() + b.area() - inter;
    return uni <= 0 ? 0.0 : inter / uni;
  };
  for (int64_t b = 0; b < batches && max_per_class > 0; ++b)
    for (int64_t c = 0; c < classes; ++c) {
      const T* s = scores + (b * classes + c) * num_boxes;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < num_boxes; ++i)
        if (!has_score_threshold || static_cast<double>(s[i]) > score_threshold) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) { return s[l] > s[r]; });
      std::vector<Box> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_per_class) break;
        const Box box = read(boxes + (b * num_boxes + i) * 4);
        bool suppressed = false;
        for (const Box& k : kept) suppressed |= iou(box, k) > iou_threshold;
        if (suppressed) continue;
        kept.push_back(box);
        selected.insert(selected.end(), {b, c, i});
      }
    }
}

enum class GridMode { Bilinear, Nearest, Bicubic };
enum class GridPadding { Zeros, Border, Reflection };

/// GridSample of x [N, C, H, W] at grid [N, Ho, Wo, 2] (x, y in [-1, 1]) into y [N, C, Ho, Wo], in double.
template <class T>
void grid_sample(const T* x, const T* grid, T* y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                 GridMode mode, GridPadding padding, bool align_corners) {
  auto unnormalize = [&](double g, int64_t size) {
    return align_corners ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
  };
  auto reflect = [](double v, double twice_low, double twice_high) {  // PyTorch's reflection into the range
    if (twice_low == twice_high) return 0.0;
    const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
    v = std::fabs(v - low);
    const double extra = std::fmod(v, span);
    const int64_t flips = static_cast<int64_t>(std::floor(v / span));
    return flips % 2 == 0 ? extra + low : span - extra + low;
  };
  auto pad = [&](double v, int64_t size) {
    const double hi = static_cast<double>(size - 1);
    if (padding == GridPadding::Border) return std::clamp(v, 0.0, hi);
    if (padding == GridPadding::Reflection) {
      v = align_corners ? reflect(v, 0, 2 * hi) : reflect(v, -1, 2 * static_cast<double>(size) - 1);
      return std::clamp(v, 0.0, hi);
    }
    return v;
  };
  auto cubic = [](double t) {
    constexpr double A = -0.75;
    auto near = [](double v) { return ((A + 2) * v - (A + 3)) * v * v + 1; };
    auto far = [](double v) { return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A; };
    return std::array<double, 4>{far(t + 1), near(t), near(1 - t), far(2 - t)};
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const T* plane = x + (n * C + c) * H * W;
      auto at = [&](int64_t r, int64_t q) {
        return (r < 0 || r >= H || q < 0 || q >= W) ? 0.0 : static_cast<double>(plane[r * W + q]);
      };
      for (int64_t i = 0; i < Ho * Wo; ++i) {
        const T* g = grid + (n * Ho * Wo + i) * 2;
        double gy = unnormalize(static_cast<double>(g[1]), H), gx = unnormalize(static_cast<double>(g[0]), W), v = 0;
        if (mode == GridMode::Bicubic) {
          const double y0 = std::floor(gy) - 1, x0 = std::floor(gx) - 1;
          const auto wy = cubic(gy - std::floor(gy)), wx = cubic(gx - std::floor(gx));
          for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b)
              v += wy[static_cast<size_t>(a)] * wx[static_cast<size_t>(b)] *
                   at(static_cast<int64_t>(pad(y0 + a, H)), static_cast<int64_t>(pad(x0 + b, W)));
        } else {
          gy = pad(gy, H), gx = pad(gx, W);
          if (mode == GridMode::Nearest) {
            v = at(static_cast<int64_t>(std::nearbyint(gy)), static_cast<int64_t>(std::nearbyint(gx)));
          } else {
            const double fy = std::floor(gy), fx = std::floor(gx), ly = gy - fy, lx = gx - fx;
            const auto y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
            v = (1 - ly) * (1 - lx) * at(y0, x0) + (1 - ly) * lx * at(y0, x0 + 1) + ly * (1 - lx) * at(y0 + 1, x0) +
                ly * lx * at(y0 + 1, x0 + 1);
          }
        }
        y[(n * C + c) * Ho * Wo + i] = static_cast<T>(v);
      }
    }
}

}  // namespace tessel::rt
