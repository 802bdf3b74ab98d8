// Reading convolution, pooling and tensor-view geometry off IR nodes for the NPU target.
#include "geometry.h"

#include <algorithm>
#include <vector>

#include "tessel/ops/registry.h"

namespace tessel::npu {
namespace {
std::vector<int64_t> intsOr(const Node& n, const char* name, std::vector<int64_t> fallback) {
  return n.hasAttr(name) ? n.attrInts(name) : fallback;
}
}  // namespace

PixelView pixelView(const Shape& shape) {
  PixelView v;
  if (shape.empty()) return v;
  v.channels = shape.size() == 4 ? shape[1] : std::max<int64_t>(shape.back(), 1);
  v.pixels = v.channels == 0 ? 0 : shapeSize(shape) / v.channels;
  return v;
}

ConvGeometry convGeometry(const Node& n) {
  ConvGeometry g;
  if (isOp(n, "Conv")) {
    const Shape x = n.input(0)->type.staticShape(), w = n.input(1)->type.staticShape(), y = n.output(0)->type.staticShape();
    g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
    g.M = w[0], g.KH = w[2], g.KW = w[3], g.group = n.hasAttr("group") ? n.attrInt("group") : 1;
    auto s = intsOr(n, "strides", {1, 1}), d = intsOr(n, "dilations", {1, 1}), p = intsOr(n, "pads", {0, 0, 0, 0});
    g.sH = s[0], g.sW = s[1], g.dH = d[0], g.dW = d[1], g.pT = p[0], g.pL = p[1], g.pB = p[2], g.pR = p[3];
    g.OH = y[2], g.OW = y[3];
    return g;
  }
  // Gemm / MatMul: rows of A times a constant B, as a 1x1 convolution over the rows.
  const Shape b = n.input(1)->type.staticShape();
  const bool transB = isOp(n, "Gemm") && n.hasAttr("transB") && n.attrInt("transB") != 0;
  g.C = b[transB ? 1 : 0];
  g.M = b[transB ? 0 : 1];
  g.W = g.OW = pixelView(n.input(0)->type.staticShape()).pixels;
  return g;
}

ConvGeometry packGroups(ConvGeometry g, int64_t pack) {
  if (pack <= 1) return g;
  const int64_t Cg = g.C / g.group, Mg = g.M / g.group;
  g.group = ceilDiv(g.group, pack);
  g.C = g.group * pack * Cg, g.M = g.group * pack * Mg;
  return g;
}

int64_t groupPackFor(const ConvGeometry& g, int64_t dim) {
  if (g.group <= 1 || g.depthwise()) return 1;
  const int64_t most = std::min(g.group, dim / std::max(g.C / g.group, g.M / g.group));
  if (most < 2) return 1;
  // The fewest packed groups, and for that count the fewest groups in each (the least recomputed by the last).
  return ceilDiv(g.group, ceilDiv(g.group, most));
}

std::pair<int64_t, int64_t> ConvGeometry::phaseExtent(int64_t ph, int64_t pw, int64_t py, int64_t px, int64_t th,
                                                      int64_t tw) const {
  int64_t maxRow = -1, maxCol = -1;
  for (int64_t kh = 0; kh < KH; ++kh)
    if ((kh * dH) % ph == py) maxRow = std::max(maxRow, kh * dH / ph);
  for (int64_t kw = 0; kw < KW; ++kw)
    if ((kw * dW) % pw == px) maxCol = std::max(maxCol, kw * dW / pw);
  if (maxRow < 0 || maxCol < 0) return {0, 0};
  return {maxRow + (th - 1) * (sH / ph) + 1, maxCol + (tw - 1) * (sW / pw) + 1};
}

int64_t ConvGeometry::rowTaps(int64_t ph, int64_t py) const {
  int64_t n = 0;
  for (int64_t kh = 0; kh < KH; ++kh) n += (kh * dH) % ph == py;
  return n;
}

int64_t ConvGeometry::colTaps(int64_t pw, int64_t px) const {
  int64_t n = 0;
  for (int64_t kw = 0; kw < KW; ++kw) n += (kw * dW) % pw == px;
  return n;
}

Reduction reductionOf(const std::string& variant) {
  return variant == "packed" ? Reduction::Packed : variant == "stacked" ? Reduction::Stacked : Reduction::PerTap;
}

PoolGeometry poolGeometry(const Node& n) {
  const Shape x = n.input(0)->type.staticShape(), y = n.output(0)->type.staticShape();
  auto k = n.attrInts("kernel_shape");
  auto s = intsOr(n, "strides", {1, 1});
  auto p = intsOr(n, "pads", {0, 0, 0, 0});
  return PoolGeometry{x[0], x[1], x[2], x[3], k[0], k[1], s[0], s[1], p[0], p[1], y[2], y[3], isOp(n, "MaxPool")};
}

}  // namespace tessel::npu
