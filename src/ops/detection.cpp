// Detection and sampling: NonMaxSuppression, RoiAlign, GridSample (semantics of ONNX Runtime / PyTorch,
// which produced the published test data).
#include <array>
#include <numeric>

#include "nn_common.h"

namespace tessel {
namespace {

using namespace nn;

// ---------------------------------------------------------------------------------- NonMaxSuppression

/// A box as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2.
struct Box {
  double y1, x1, y2, x2;
  double area() const { return (y2 - y1) * (x2 - x1); }
};

Box readBox(const double* b, bool centerPoint) {
  if (centerPoint) {  // [x_center, y_center, width, height]
    return Box{b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  }
  return Box{std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

double intersectionOverUnion(const Box& a, const Box& b) {
  const double h = std::min(a.y2, b.y2) - std::max(a.y1, b.y1), w = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (h <= 0 || w <= 0) return 0;
  const double inter = h * w, uni = a.area() + b.area() - inter;
  return uni <= 0 ? 0 : inter / uni;
}

void nonMaxSuppressionKernel(KernelContext& ctx) {
  const Tensor& boxesT = ctx.input(0);
  const Tensor& scoresT = ctx.input(1);
  if (boxesT.rank() != 3 || boxesT.dim(2) != 4) ctx.fail("boxes must be [batch, boxes, 4], got {}", shapeToString(boxesT.shape()));
  if (scoresT.rank() != 3 || scoresT.dim(0) != boxesT.dim(0) || scoresT.dim(2) != boxesT.dim(1))
    ctx.fail("scores must be [batch, classes, boxes] = [{}, C, {}], got {}", boxesT.dim(0), boxesT.dim(1),
             shapeToString(scoresT.shape()));
  const int64_t maxPerClass = ctx.hasInput(2) && ctx.input(2).numel() > 0 ? static_cast<int64_t>(ctx.input(2).elementAsDouble(0)) : 0;
  const double iouThreshold = ctx.hasInput(3) && ctx.input(3).numel() > 0 ? ctx.input(3).elementAsDouble(0) : 0.0;
  const bool hasScoreThreshold = ctx.hasInput(4) && ctx.input(4).numel() > 0;
  const double scoreThreshold = hasScoreThreshold ? ctx.input(4).elementAsDouble(0) : 0.0;
  const bool centerPoint = ctx.attrInt("center_point_box") != 0;
  const int64_t batches = boxesT.dim(0), numBoxes = boxesT.dim(1), classes = scoresT.dim(1);
  std::vector<double> boxes = boxesT.toDoubleVector(), scores = scoresT.toDoubleVector();
  std::vector<int64_t> selected;
  for (int64_t b = 0; b < batches && maxPerClass > 0; ++b)
    for (int64_t c = 0; c < classes; ++c) {
      const double* s = scores.data() + (b * classes + c) * numBoxes;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < numBoxes; ++i)
        if (!hasScoreThreshold || s[i] > scoreThreshold) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) { return s[l] > s[r]; });
      std::vector<Box> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= maxPerClass) break;
        Box box = readBox(boxes.data() + (b * numBoxes + i) * 4, centerPoint);
        bool suppressed = false;
        for (const Box& k : kept) suppressed |= intersectionOverUnion(box, k) > iouThreshold;
        if (suppressed) continue;
        kept.push_back(box);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  ctx.setOutput(0, Tensor::fromVector<int64_t>({static_cast<int64_t>(selected.size() / 3), 3}, selected));
}

}  // namespace

TESSEL_REGISTER_OP(NonMaxSuppression) {
  return OpDef("NonMaxSuppression")
      .inputs(2, 5)
      .outputs(1)
      .since(10)
      .attr("center_point_box", AttrKind::Int, int64_t{0})
      .describe("greedy per-class selection of boxes by score, dropping those overlapping a kept box (IoU)")
      .infer([](InferContext& ctx) {
        ctx.setOutputType(0, TensorType(DType::Int64, std::vector<Dim>{Dim::unknown(), Dim::known(3)}));
      })
      .kernel(nonMaxSuppressionKernel)
      .cost(movementCost);
}

// --------------------------------------------------------------------------------------------- RoiAlign

namespace {

/// One bilinear sample of a plane: up to four taps with weights (all zero outside the plane).
struct BilinearTaps {
  int64_t at[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

BilinearTaps roiBilinearTaps(double y, double x, int64_t height, int64_t width) {
  BilinearTaps t;
  if (y < -1.0 || y > static_cast<double>(height) || x < -1.0 || x > static_cast<double>(width)) return t;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t yLow = static_cast<int64_t>(y), xLow = static_cast<int64_t>(x), yHigh, xHigh;
  if (yLow >= height - 1) {
    yHigh = yLow = height - 1;
    y = static_cast<double>(yLow);
  } else {
    yHigh = yLow + 1;
  }
  if (xLow >= width - 1) {
    xHigh = xLow = width - 1;
    x = static_cast<double>(xLow);
  } else {
    xHigh = xLow + 1;
  }
  const double ly = y - static_cast<double>(yLow), lx = x - static_cast<double>(xLow), hy = 1 - ly, hx = 1 - lx;
  t.at[0] = yLow * width + xLow;
  t.at[1] = yLow * width + xHigh;
  t.at[2] = yHigh * width + xLow;
  t.at[3] = yHigh * width + xHigh;
  t.w[0] = hy * hx;
  t.w[1] = hy * lx;
  t.w[2] = ly * hx;
  t.w[3] = ly * lx;
  return t;
}

/// The sampling layout of one region of interest.
struct RoiGrid {
  double startY, startX, binH, binW;
  int64_t gridH, gridW;
};

RoiGrid roiGrid(const KernelContext& ctx, const double* roi, int64_t outH, int64_t outW) {
  const double scale = ctx.attrFloat("spatial_scale");
  const bool halfPixel = ctx.attrString("coordinate_transformation_mode") == "half_pixel";
  const double offset = halfPixel ? 0.5 : 0.0;
  RoiGrid g;
  g.startX = roi[0] * scale - offset;
  g.startY = roi[1] * scale - offset;
  double w = roi[2] * scale - offset - g.startX, h = roi[3] * scale - offset - g.startY;
  if (!halfPixel) {  // legacy: force regions to be at least 1x1
    w = std::max(w, 1.0);
    h = std::max(h, 1.0);
  }
  g.binH = h / static_cast<double>(outH);
  g.binW = w / static_cast<double>(outW);
  const int64_t ratio = ctx.attrInt("sampling_ratio");
  g.gridH = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(h / static_cast<double>(outH)));
  g.gridW = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(w / static_cast<double>(outW)));
  return g;
}

void roiAlignKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& roisT = ctx.input(1);
  const Tensor& batchT = ctx.input(2);
  if (x.rank() != 4) ctx.fail("X must be [N, C, H, W], got {}", shapeToString(x.shape()));
  if (roisT.rank() != 2 || roisT.dim(1) != 4) ctx.fail("rois must be [num_rois, 4], got {}", shapeToString(roisT.shape()));
  if (batchT.numel() != roisT.dim(0)) ctx.fail("batch_indices has {} values, expected {}", batchT.numel(), roisT.dim(0));
  const std::string mode = ctx.attrString("mode");
  if (mode != "avg" && mode != "max") ctx.fail("mode must be 'avg' or 'max', is '{}'", mode);
  const int64_t outH = ctx.attrInt("output_height"), outW = ctx.attrInt("output_width");
  const int64_t C = x.dim(1), H = x.dim(2), W = x.dim(3), R = roisT.dim(0);
  std::vector<double> xs = x.toDoubleVector(), rois = roisT.toDoubleVector();
  std::vector<int64_t> batch = batchT.toInt64Vector();
  std::vector<double> y(static_cast<size_t>(R * C * outH * outW));
  for (int64_t r = 0; r < R; ++r) {
    if (batch[static_cast<size_t>(r)] < 0 || batch[static_cast<size_t>(r)] >= x.dim(0))
      ctx.fail("batch index {} of roi {} is out of range [0, {})", batch[static_cast<size_t>(r)], r, x.dim(0));
    RoiGrid g = roiGrid(ctx, rois.data() + r * 4, outH, outW);
    const double count = static_cast<double>(std::max<int64_t>(g.gridH * g.gridW, 1));
    for (int64_t c = 0; c < C; ++c) {
      const double* plane = xs.data() + (batch[static_cast<size_t>(r)] * C + c) * H * W;
      for (int64_t ph = 0; ph < outH; ++ph)
        for (int64_t pw = 0; pw < outW; ++pw) {
          double acc = 0;
          bool first = true;
          for (int64_t iy = 0; iy < g.gridH; ++iy)
            for (int64_t ix = 0; ix < g.gridW; ++ix) {
              const double sy = g.startY + static_cast<double>(ph) * g.binH + (static_cast<double>(iy) + 0.5) * g.binH / static_cast<double>(g.gridH);
              const double sx = g.startX + static_cast<double>(pw) * g.binW + (static_cast<double>(ix) + 0.5) * g.binW / static_cast<double>(g.gridW);
              BilinearTaps t = roiBilinearTaps(sy, sx, H, W);
              if (mode == "avg") {
                for (int k = 0; k < 4; ++k) acc += t.w[k] * plane[t.at[k]];
              } else {  // ONNX Runtime's max mode: the largest weighted tap of each sample
                double v = t.w[0] * plane[t.at[0]];
                for (int k = 1; k < 4; ++k) v = std::max(v, t.w[k] * plane[t.at[k]]);
                acc = first ? v : std::max(acc, v);
                first = false;
              }
            }
          y[static_cast<size_t>(((r * C + c) * outH + ph) * outW + pw)] = mode == "avg" ? acc / count : acc;
        }
    }
  }
  Tensor& out = ctx.allocateOutput(0, x.dtype(), {R, C, outH, outW});
  dispatchFloat(x.dtype(), "RoiAlign input", [&](auto tag) { storeFromCompute<typename decltype(tag)::type>(out, y); });
}

}  // namespace

TESSEL_REGISTER_OP(RoiAlign) {
  return OpDef("RoiAlign")
      .inputs(3)
      .outputs(1)
      .since(10)
      .attr("coordinate_transformation_mode", AttrKind::String, std::string("half_pixel"))
      .attr("mode", AttrKind::String, std::string("avg"))
      .attr("output_height", AttrKind::Int, int64_t{1})
      .attr("output_width", AttrKind::Int, int64_t{1})
      .attr("sampling_ratio", AttrKind::Int, int64_t{0})
      .attr("spatial_scale", AttrKind::Float, 1.0f)
      .describe("bilinear average (or max) pooling of regions of interest into fixed-size bins")
      .infer([](InferContext& ctx) {
        const TensorType& xt = ctx.inputType(0);
        const TensorType& rt = ctx.inputType(1);
        if (xt.hasRank() && xt.rank() != 4) ctx.fail("X must be [N, C, H, W], got {}", xt.toString());
        Dim rois = rt.hasRank() && rt.rank() == 2 ? (*rt.dims)[0] : Dim::unknown();
        Dim channels = xt.hasRank() ? (*xt.dims)[1] : Dim::unknown();
        ctx.setOutputType(0, TensorType(xt.dtype, std::vector<Dim>{rois, channels,
                                                                   Dim::known(ctx.node().attrInt("output_height")),
                                                                   Dim::known(ctx.node().attrInt("output_width"))}));
      })
      .kernel(roiAlignKernel)
      .cost(movementCost)
      // Opset 10 had no coordinate_transformation_mode and behaved like 'output_half_pixel'.
      .upgrade([](UpgradeContext& ctx) {
        if (ctx.opsetVersion < 16 && !ctx.node.hasAttr("coordinate_transformation_mode"))
          ctx.node.setAttr("coordinate_transformation_mode", std::string("output_half_pixel"));
      });
}

// ------------------------------------------------------------------------------------------- GridSample

namespace {

/// PyTorch's reflection of a coordinate into [twiceLow/2, twiceHigh/2].
double reflectCoordinate(double v, double twiceLow, double twiceHigh) {
  if (twiceLow == twiceHigh) return 0;
  const double low = twiceLow / 2, span = (twiceHigh - twiceLow) / 2;
  v = std::fabs(v - low);
  const double extra = std::fmod(v, span);
  const int64_t flips = static_cast<int64_t>(std::floor(v / span));
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

struct GridSampler {
  std::string padding;
  bool alignCorners;

  double unnormalize(double g, int64_t size) const {
    return alignCorners ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
  }
  /// Applies border / reflection padding to a (possibly fractional) coordinate.
  double pad(double v, int64_t size) const {
    const double hi = static_cast<double>(size - 1);
    if (padding == "border") return std::clamp(v, 0.0, hi);
    if (padding == "reflection") {
      v = alignCorners ? reflectCoordinate(v, 0, 2 * hi) : reflectCoordinate(v, -1, 2 * static_cast<double>(size) - 1);
      return std::clamp(v, 0.0, hi);
    }
    return v;
  }
  /// The pixel value at integer coordinates (0 outside the plane).
  static double at(const double* plane, int64_t H, int64_t W, int64_t y, int64_t x) {
    return (y < 0 || y >= H || x < 0 || x >= W) ? 0.0 : plane[y * W + x];
  }
};

std::array<double, 4> cubicWeights(double t) {
  constexpr double A = -0.75;
  auto near = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto far = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

double sampleBicubic(const GridSampler& s, const double* plane, int64_t H, int64_t W, double y, double x) {
  const double y0 = std::floor(y) - 1, x0 = std::floor(x) - 1;
  std::array<double, 4> wy = cubicWeights(y - std::floor(y)), wx = cubicWeights(x - std::floor(x));
  double r = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const auto py = static_cast<int64_t>(s.pad(y0 + i, H)), px = static_cast<int64_t>(s.pad(x0 + j, W));
      r += wy[static_cast<size_t>(i)] * wx[static_cast<size_t>(j)] * GridSampler::at(plane, H, W, py, px);
    }
  return r;
}

double sampleGrid(const GridSampler& s, const std::string& mode, const double* plane, int64_t H, int64_t W, double gy,
                  double gx) {
  double y = s.unnormalize(gy, H), x = s.unnormalize(gx, W);
  if (mode == "bicubic") return sampleBicubic(s, plane, H, W, y, x);
  y = s.pad(y, H);
  x = s.pad(x, W);
  if (mode == "nearest")
    return GridSampler::at(plane, H, W, static_cast<int64_t>(std::nearbyint(y)), static_cast<int64_t>(std::nearbyint(x)));
  const double fy = std::floor(y), fx = std::floor(x), ly = y - fy, lx = x - fx;
  const auto y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
  return (1 - ly) * (1 - lx) * GridSampler::at(plane, H, W, y0, x0) + (1 - ly) * lx * GridSampler::at(plane, H, W, y0, x0 + 1) +
         ly * (1 - lx) * GridSampler::at(plane, H, W, y0 + 1, x0) + ly * lx * GridSampler::at(plane, H, W, y0 + 1, x0 + 1);
}

void gridSampleKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  if (x.rank() != 4) ctx.fail("X must be [N, C, H, W], got {}", shapeToString(x.shape()));
  if (grid.rank() != 4 || grid.dim(0) != x.dim(0) || grid.dim(3) != 2)
    ctx.fail("grid must be [N, H_out, W_out, 2] with N = {}, got {}", x.dim(0), shapeToString(grid.shape()));
  const std::string mode = ctx.attrString("mode");
  GridSampler s{ctx.attrString("padding_mode"), ctx.attrInt("align_corners") != 0};
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    ctx.fail("mode must be bilinear, nearest or bicubic, is '{}'", mode);
  if (s.padding != "zeros" && s.padding != "border" && s.padding != "reflection")
    ctx.fail("padding_mode must be zeros, border or reflection, is '{}'", s.padding);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), Ho = grid.dim(1), Wo = grid.dim(2);
  std::vector<double> xs = x.toDoubleVector(), gs = grid.toDoubleVector();
  std::vector<double> y(static_cast<size_t>(N * C * Ho * Wo));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < Ho * Wo; ++i) {
        const double* g = gs.data() + (n * Ho * Wo + i) * 2;
        y[static_cast<size_t>((n * C + c) * Ho * Wo + i)] = sampleGrid(s, mode, xs.data() + (n * C + c) * H * W, H, W, g[1], g[0]);
      }
  Tensor& out = ctx.allocateOutput(0, x.dtype(), {N, C, Ho, Wo});
  dispatchFloat(x.dtype(), "GridSample input", [&](auto tag) { storeFromCompute<typename decltype(tag)::type>(out, y); });
}

}  // namespace

TESSEL_REGISTER_OP(GridSample) {
  return OpDef("GridSample")
      .inputs(2)
      .outputs(1)
      .since(16)
      .attr("align_corners", AttrKind::Int, int64_t{0})
      .attr("mode", AttrKind::String, std::string("bilinear"))
      .attr("padding_mode", AttrKind::String, std::string("zeros"))
      .describe("samples X at normalised grid positions (bilinear, nearest or bicubic) with a padding rule")
      .infer([](InferContext& ctx) {
        const TensorType& xt = ctx.inputType(0);
        const TensorType& gt = ctx.inputType(1);
        if (xt.hasRank() && xt.rank() != 4) ctx.fail("X must be [N, C, H, W], got {}", xt.toString());
        if (gt.hasRank() && gt.rank() != 4) ctx.fail("grid must be [N, H_out, W_out, 2], got {}", gt.toString());
        std::vector<Dim> dims{Dim::unknown(), Dim::unknown(), Dim::unknown(), Dim::unknown()};
        if (xt.hasRank()) dims[0] = (*xt.dims)[0], dims[1] = (*xt.dims)[1];
        if (gt.hasRank()) dims[2] = (*gt.dims)[1], dims[3] = (*gt.dims)[2];
        ctx.setOutputType(0, TensorType(xt.dtype, dims));
      })
      .kernel(gridSampleKernel)
      .cost(movementCost);
}

}  // namespace tessel
