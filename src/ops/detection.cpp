// Detection and sampling: NonMaxSuppression, RoiAlign, GridSample (semantics of ONNX Runtime / PyTorch,
// which produced the published test data).
#include <array>
#include <numeric>

#include "nn_common.h"
#include "tessel/ops/sampling.h"

namespace tessel {
namespace {

using namespace nn;

// ---------------------------------------------------------------------------------- NonMaxSuppression

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
  rt::non_max_suppression(boxes.data(), scores.data(), batches, numBoxes, classes, maxPerClass, iouThreshold,
                          hasScoreThreshold, scoreThreshold, centerPoint, selected);
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

struct GridSampler {
  std::string padding;
  bool alignCorners;
};

}  // namespace

rt::GridMode gridModeOf(const std::string& mode) {
  return mode == "nearest" ? rt::GridMode::Nearest : mode == "bicubic" ? rt::GridMode::Bicubic : rt::GridMode::Bilinear;
}
rt::GridPadding gridPaddingOf(const std::string& padding) {
  return padding == "border" ? rt::GridPadding::Border : padding == "reflection" ? rt::GridPadding::Reflection
                                                                                  : rt::GridPadding::Zeros;
}

namespace {

void gridSampleKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  if (x.rank() != 4) ctx.fail("X must be [N, C, H, W], got {}", shapeToString(x.shape()));
  if (grid.rank() != 4 || grid.dim(0) != x.dim(0) || grid.dim(3) != 2)
    ctx.fail("grid must be [N, H_out, W_out, 2] with N = {}, got {}", x.dim(0), shapeToString(grid.shape()));
  const std::string mode = ctx.attrString("mode");
  const GridSampler s{ctx.attrString("padding_mode"), ctx.attrInt("align_corners") != 0};
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    ctx.fail("mode must be bilinear, nearest or bicubic, is '{}'", mode);
  if (s.padding != "zeros" && s.padding != "border" && s.padding != "reflection")
    ctx.fail("padding_mode must be zeros, border or reflection, is '{}'", s.padding);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), Ho = grid.dim(1), Wo = grid.dim(2);
  std::vector<double> xs = x.toDoubleVector(), gs = grid.toDoubleVector();
  std::vector<double> y(static_cast<size_t>(N * C * Ho * Wo));
  rt::grid_sample(xs.data(), gs.data(), y.data(), N, C, H, W, Ho, Wo, gridModeOf(mode), gridPaddingOf(s.padding),
                  s.alignCorners);
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
