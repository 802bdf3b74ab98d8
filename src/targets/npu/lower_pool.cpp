// NPU operator interpreters of the pooling family: MaxPool / AveragePool (windows as strided vector ops over
// a padded input tile) and GlobalAveragePool / GlobalMaxPool (vred over pixel chunks, accumulated).
#include <algorithm>
#include <fmt/format.h>
#include <limits>

#include "lower_conv.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

struct PoolProblem {
  int64_t N, C, H, W, KH, KW, sH, sW, pT, pL, OH, OW;
  bool isMax;
  float scale = 1;  ///< average: 1 / window size
  int64_t pB = 0, pR = 0;        ///< bottom and right padding
  bool countIncludePad = false;  ///< average: padding counts in the divisor (a ceil_mode overhang never does)
};

PoolProblem poolProblem(const Node& n) {
  const Shape x = n.input(0)->type.staticShape(), y = n.output(0)->type.staticShape();
  auto k = n.attrInts("kernel_shape");
  auto s = n.hasAttr("strides") ? n.attrInts("strides") : std::vector<int64_t>{1, 1};
  auto p = n.hasAttr("pads") ? n.attrInts("pads") : std::vector<int64_t>{0, 0, 0, 0};
  PoolProblem q{x[0], x[1], x[2], x[3], k[0], k[1], s[0], s[1], p[0], p[1], y[2], y[3], isOp(n, "MaxPool")};
  q.scale = 1.0f / static_cast<float>(k[0] * k[1]);
  q.pB = p.size() == 4 ? p[2] : 0, q.pR = p.size() == 4 ? p[3] : 0;
  q.countIncludePad = n.hasAttr("count_include_pad") && n.attrInt("count_include_pad") != 0;
  return q;
}

/// The taps of a window along one axis that an average counts: starting at `start` (padding before it negative),
/// `k` taps, an axis of `size` elements with `padEnd` after it; padding counts when `includePad` (an overhang past the
/// padding never does), as the reference divides.
int64_t countedTaps(int64_t start, int64_t k, int64_t size, int64_t padEnd, bool includePad) {
  const int64_t lo = includePad ? start : std::max<int64_t>(start, 0);
  const int64_t hi = std::min(start + k, includePad ? size + padEnd : size);
  return std::max<int64_t>(0, hi - lo);
}

/// An average pool's division of a tile of window sums (rows x cols x c of `acc`, output rows from `oy0` and columns
/// from `ox0`): one `vun scale` by 1 / (KH KW), then, where the counted window is smaller (it reaches outside the
/// image with count_include_pad=0, or past the padding with ceil_mode), one more per such row and column: the count
/// is rows-in-window x columns-in-window, so the two corrections multiply to the exact divisor.
void divideAverage(LowerContext& ctx, const PoolProblem& q, int32_t acc, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols,
                   int64_t ck) {
  const auto r = static_cast<uint32_t>(rows), cl = static_cast<uint32_t>(cols), c = static_cast<uint32_t>(ck);
  ctx.emit(makeVecUnary(VecOp::Scale, ctx.at(acc, 0, cols * ck, ck), ctx.at(acc, 0, cols * ck, ck), r, cl, c, q.scale, 0.0f),
           acc, acc);
  auto factor = [](int64_t k, int64_t counted) { return counted > 0 ? static_cast<float>(k) / static_cast<float>(counted) : 0.0f; };
  for (int64_t i = 0; i < rows; ++i)
    if (const int64_t n = countedTaps((oy0 + i) * q.sH - q.pT, q.KH, q.H, q.pB, q.countIncludePad); n != q.KH) {
      const SramOperand row = ctx.at(acc, static_cast<uint64_t>(i * cols * ck), cols * ck, ck);
      ctx.emit(makeVecUnary(VecOp::Scale, row, row, 1, cl, c, factor(q.KH, n), 0.0f), acc, acc);
    }
  for (int64_t j = 0; j < cols; ++j)
    if (const int64_t n = countedTaps((ox0 + j) * q.sW - q.pL, q.KW, q.W, q.pR, q.countIncludePad); n != q.KW) {
      const SramOperand col = ctx.at(acc, static_cast<uint64_t>(j * ck), cols * ck, ck);
      ctx.emit(makeVecUnary(VecOp::Scale, col, col, r, 1, c, factor(q.KW, n), 0.0f), acc, acc);
    }
}

/// The window taps of a pool tile folded into `acc` (tile layout [row][col][c]): the first two taps in one binary
/// op (max or sum of the two windows), then one per further tap; a 1x1 window is a copy. `tap(kh, kw)` addresses
/// a tap's window in region `in`.
template <class Tap>
void reduceWindowTaps(LowerContext& ctx, const PoolProblem& q, int32_t acc, int32_t in, uint32_t r, uint32_t cl, uint32_t c,
                      Tap tap) {
  const SramOperand tile = ctx.at(acc, 0, uint64_t{cl} * c, c);
  const VecOp op = q.isMax ? VecOp::Max : VecOp::Add;
  if (q.KH * q.KW == 1) {
    ctx.emit(makeVecUnary(VecOp::Copy, tile, tap(0, 0), r, cl, c), acc, in);
    return;
  }
  ctx.emit(makeVecBinary(op, tile, tap(0, 0), tap(1 / q.KW, 1 % q.KW), r, cl, c), acc, in, in);
  for (int64_t k = 2; k < q.KH * q.KW; ++k) ctx.emit(makeVecBinary(op, tile, tile, tap(k / q.KW, k % q.KW), r, cl, c), acc, acc, in);
}

hw::SupportResult checkPool(const Node& n) {
  if (n.input(0)->type.dims->size() != 4) return refuse("only 2-D pooling (rank-4 input) is lowered");
  if (n.numOutputs() > 1 && n.output(1)) return refuse("the Indices output is not lowered");
  std::string autoPad = n.hasAttr("auto_pad") ? n.attrString("auto_pad") : "NOTSET";
  if (autoPad != "NOTSET" && autoPad != "VALID") return refuse(fmt::format("auto_pad {} is not lowered", autoPad));
  if (n.hasAttr("dilations"))
    for (int64_t d : n.attrInts("dilations"))
      if (d != 1) return refuse("dilated pooling is not lowered");
  if (n.attrInts("kernel_shape").size() != 2) return refuse("kernel_shape must have 2 values");
  return ok();
}

void lowerPool(const Node& n, LowerContext& ctx) {
  const PoolProblem q = poolProblem(n);
  // NodeTiling::inputNorm: the normalisation's scales and biases for all channels, staged once in the weight buffer
  // (which pools do not use otherwise); every loaded window is mapped in place before its taps.
  const std::optional<InputNorm> norm = ctx.inputNorm(n);
  StagedNorm staged;  // by the first tile
  const TensorLoc& x = ctx.loc(norm ? norm->full : n.input(0));
  const TensorLoc& y = ctx.loc(ctx.resultValue(n));
  const std::vector<EpilogueStep> epilogue = ctx.epilogue(n);
  const NodeTiling& tiling = ctx.tiling(n);
  const int64_t cb = tiling.channels, th = tiling.rows, tw = tiling.cols;
  const int64_t sx = x.pixelStride(), sy = y.pixelStride();
  auto inRows = [&](int64_t rows) { return (rows - 1) * q.sH + q.KH; };
  auto inCols = [&](int64_t cols) { return (cols - 1) * q.sW + q.KW; };
  const float fill = q.isMax ? -std::numeric_limits<float>::infinity() : 0.0f;
  // "pool": windows in `inp`, results in `acc`; "pool-wide": windows in the (larger) `acc`, results in `out`.
  const bool wide = tiling.variant == "pool-wide";
  const Buffer windowBuffer = wide ? Buffer::Accumulator : Buffer::Input, resultBuffer = wide ? Buffer::Output : Buffer::Accumulator;
  uint32_t count = 0;
  for (int64_t n0 = 0; n0 < q.N; ++n0)
    for (int64_t c0 = 0; c0 < q.C; c0 += cb)
      for (int64_t oy0 = 0; oy0 < q.OH; oy0 += th)
        for (int64_t ox0 = 0; ox0 < q.OW; ox0 += tw) {
          ctx.beginTile(n, count++);
          if (norm && staged.scale < 0)
            staged = stageNorm(ctx, Buffer::Weight, ctx.addConstant(norm->scale), ctx.addConstant(norm->bias), static_cast<uint64_t>(q.C));
          const int64_t ck = std::min(cb, q.C - c0), rows = std::min(th, q.OH - oy0), cols = std::min(tw, q.OW - ox0);
          const int64_t ht = inRows(rows), wt = inCols(cols);
          const int64_t y0 = oy0 * q.sH - q.pT, x0 = ox0 * q.sW - q.pL;
          const int64_t iy0 = std::max<int64_t>(0, y0), iy1 = std::min(q.H - 1, y0 + ht - 1);
          const int64_t ix0 = std::max<int64_t>(0, x0), ix1 = std::min(q.W - 1, x0 + wt - 1);
          const int32_t in = ctx.region(windowBuffer, static_cast<uint64_t>(ht * wt * ck));
          auto c = static_cast<uint32_t>(ck);
          if (iy0 != y0 || ix0 != x0 || iy1 != y0 + ht - 1 || ix1 != x0 + wt - 1)
            ctx.emit(makeVecUnary(VecOp::Fill, ctx.at(in, 0, wt * ck, ck), ctx.at(in, 0, wt * ck, ck), static_cast<uint32_t>(ht),
                                  static_cast<uint32_t>(wt), c, fill),
                     in);
          const uint64_t interior = static_cast<uint64_t>(((iy0 - y0) * wt + (ix0 - x0)) * ck);
          ctx.emit(makeLoad(ctx.at(in, interior, wt * ck, ck), x.addr + ((n0 * q.H + iy0) * q.W + ix0) * sx + c0, q.W * sx,
                            sx, static_cast<uint32_t>(iy1 - iy0 + 1), static_cast<uint32_t>(ix1 - ix0 + 1), c),
                   in);
          if (norm)  // whole windows (no padding): every word of the region was loaded
            applyNorm(ctx, staged, norm->steps, in, ctx.at(in, 0, wt * ck, ck), static_cast<uint32_t>(ht), static_cast<uint32_t>(wt), c,
                      static_cast<uint64_t>(c0));
          const int32_t acc = ctx.region(resultBuffer, static_cast<uint64_t>(rows * cols * ck));
          SramOperand tile = ctx.at(acc, 0, cols * ck, ck);
          auto r = static_cast<uint32_t>(rows), cl = static_cast<uint32_t>(cols);
          reduceWindowTaps(ctx, q, acc, in, r, cl, c,
                           [&](int64_t kh, int64_t kw) { return ctx.at(in, (kh * wt + kw) * ck, q.sH * wt * ck, q.sW * ck); });
          if (!q.isMax) divideAverage(ctx, q, acc, oy0, rows, ox0, cols, ck);
          applyUnarySteps(ctx, epilogue, acc, tile, r, cl, c);
          ctx.emit(makeStore(tile, y.addr + ((n0 * q.OH + oy0) * q.OW + ox0) * sy + c0, q.OW * sy, sy, r, cl, c), -1, acc);
        }
}

hw::SupportResult checkGlobalPool(const Node& n) {
  if (n.input(0)->type.dims->size() != 4) return refuse("only rank-4 inputs are lowered");
  return ok();
}

void lowerGlobalPool(const Node& n, LowerContext& ctx) {
  const Shape xs = n.input(0)->type.staticShape();
  const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
  const bool isMax = isOp(n, "GlobalMaxPool");
  const TensorLoc& x = ctx.loc(n.input(0));
  const TensorLoc& y = ctx.loc(n.output(0));
  const int64_t cb = ctx.tiling(n).channels, np = ctx.tiling(n).cols;
  const int64_t sx = x.pixelStride(), sy = y.pixelStride();
  uint32_t count = 0;
  for (int64_t n0 = 0; n0 < N; ++n0)
    for (int64_t c0 = 0; c0 < C; c0 += cb) {
      ctx.beginTile(n, count++);
      const auto c = static_cast<uint32_t>(std::min(cb, C - c0));
      const int32_t sum = ctx.region(Buffer::Accumulator, c);
      for (int64_t p0 = 0; p0 < HW; p0 += np) {
        const auto pk = static_cast<uint32_t>(std::min(np, HW - p0));
        const int32_t chunk = ctx.region(Buffer::Input, uint64_t{pk} * c);
        ctx.emit(makeLoad(ctx.at(chunk, 0, pk * c, c), x.addr + (n0 * HW + p0) * sx + c0, 0, sx, 1, pk, c), chunk);
        Instruction red;
        red.opcode = Opcode::VecReduce;
        red.vecOp = isMax ? VecOp::ReduceMax : VecOp::ReduceSum;
        red.dst = ctx.at(sum);
        red.srcA = ctx.at(chunk, 0, pk * c, c);
        red.outer = 1, red.inner = pk, red.vecLen = c;
        red.accumulate = p0 > 0;
        ctx.emit(red, sum, chunk);
      }
      SramOperand vec = ctx.at(sum, 0, c, c);
      if (!isMax) ctx.emit(makeVecUnary(VecOp::Scale, vec, vec, 1, 1, c, 1.0f / static_cast<float>(HW), 0.0f), sum, sum);
      ctx.emit(makeStore(vec, y.addr + n0 * sy + c0, sy, sy, 1, 1, c), -1, sum);
    }
}

}  // namespace

int32_t poolTileOnChip(LowerContext& ctx, const Node& node, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0,
                       int64_t ck, const OnChipInput& window) {
  const PoolProblem q = poolProblem(node);
  const int64_t C = q.C, wc = window.cols;
  const int64_t base = ((oy0 * q.sH - q.pT - window.rowLo) * wc + ox0 * q.sW) * C + c0;
  const int32_t acc = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rows * cols * ck));
  SramOperand tile = ctx.at(acc, 0, cols * ck, ck);
  auto r = static_cast<uint32_t>(rows), cl = static_cast<uint32_t>(cols), c = static_cast<uint32_t>(ck);
  reduceWindowTaps(ctx, q, acc, window.region, r, cl, c, [&](int64_t kh, int64_t kw) {
    return ctx.at(window.region, static_cast<uint64_t>(base + (kh * wc + kw) * C), q.sH * wc * C, q.sW * C);
  });
  if (!q.isMax) divideAverage(ctx, q, acc, oy0, rows, ox0, cols, ck);
  applyUnarySteps(ctx, ctx.epilogue(node), acc, tile, r, cl, c);
  return acc;
}

bool globalPoolFromTiles(const Node& pool, const Node& producer, const Value* result) {
  return (isOp(pool, "GlobalAveragePool") || isOp(pool, "GlobalMaxPool")) && isOp(producer, "Conv") && pool.input(0) == result &&
         result->type.isStatic() && result->type.staticShape().size() == 4;
}

bool maxPoolFromTiles(const Graph& body, const Node& pool, const Node& conv) {
  if (!isOp(pool, "MaxPool") || !isOp(conv, "Conv") || pool.input(0) != conv.output(0) || !checkPool(pool).supported) return false;
  const Value* map = conv.output(0);
  if (map->uses().size() != 1 || !map->type.isStatic() || map->type.staticShape().size() != 4) return false;
  const std::vector<Value*>& outs = body.outputs();
  return std::find(outs.begin(), outs.end(), map) == outs.end() && !convGeometry(conv).depthwise();
}

namespace {

const RegisterOpLowering kPools({"MaxPool", "AveragePool"}, {OpFamily::Pool, checkPool, lowerPool});
const RegisterOpLowering kGlobalPools({"GlobalAveragePool", "GlobalMaxPool"}, {OpFamily::GlobalPool, checkGlobalPool, lowerGlobalPool});

}  // namespace
}  // namespace tessel::npu::lower
