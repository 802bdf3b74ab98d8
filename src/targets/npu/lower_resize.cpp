// NPU operator interpreter of Resize with integer upscaling factors (an FPN's or a decoder's upsampling).
// Nearest mode is pure data movement: per tile, a band of input rows is loaded once per column phase into an SRAM
// region holding the rows upsampled along W (the load's SRAM inner stride skips the other phases' pixels), then
// stored once per row phase to the output rows it becomes. Linear (bilinear) mode, with the coordinate modes that
// give each output phase fixed weights (half_pixel, pytorch_half_pixel, asymmetric), loads a band with a one-pixel
// edge-clamped halo and computes on the vector unit, per column phase and then per row phase, a weighted sum of two
// neighbouring columns / rows (`vun scale` by 1 - w, `vbin mulacc` by a vector filled with w). A one-pixel map in
// any mode is a replication (nearest's DMA). Cubic mode, downscaling, fractional factors, align_corners and the other
// coordinate/rounding modes stay on the host.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <optional>
#include <variant>

#include "lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

/// Output phase p of a linear axis with factor s reads input k + offset and k + offset + 1 (edge-clamped) with
/// weights 1 - weight and weight, for output index k * s + p.
struct LinearPhase {
  int64_t offset = 0;  ///< 0 or -1
  float weight = 0;
};

struct IntegerUpsample {
  int64_t sH = 1, sW = 1;  ///< integer factors along H and W
  bool linear = false;
  std::vector<LinearPhase> rows, cols;  ///< linear: per output phase along H and W
};

/// Largest factor per axis the linear lowering takes (its smallest tile must fit any configuration's slot).
constexpr int64_t kMaxLinearFactor = 8;

std::string attrOr(const Node& n, const char* name, const char* fallback) {
  return n.hasAttr(name) ? n.attrString(name) : fallback;
}

/// Whether the coordinate and rounding modes give source index floor(x / s) for an integer factor s.
bool floorsToSource(const std::string& coordinates, const std::string& rounding, int64_t s) {
  if (s == 1) return coordinates != "tf_crop_and_resize";
  if (coordinates == "half_pixel" || coordinates == "pytorch_half_pixel" || coordinates == "half_pixel_symmetric")
    return rounding == "round_prefer_floor" || rounding == "round_prefer_ceil";  // (x + 0.5) / s - 0.5 is k +- < 0.5
  if (coordinates == "asymmetric") return rounding == "floor" || (rounding == "round_prefer_floor" && s == 2);
  return false;
}

/// The fixed per-phase weights of a linear axis with integer factor s, or nullopt when the coordinate mode does not
/// give them (align_corners: output x reads x * (L - 1) / (sL - 1), whose fraction varies along the axis).
std::optional<std::vector<LinearPhase>> linearPhases(const std::string& coordinates, int64_t s) {
  std::vector<LinearPhase> phases;
  for (int64_t p = 0; p < s; ++p) {
    double f = 0;  // source coordinate of output k * s + p, minus k
    if (coordinates == "asymmetric")
      f = static_cast<double>(p) / static_cast<double>(s);
    else if (coordinates == "half_pixel" || coordinates == "pytorch_half_pixel")  // the same for outputs longer than 1
      f = (static_cast<double>(p) + 0.5) / static_cast<double>(s) - 0.5;
    else if (s != 1)
      return std::nullopt;
    const double fl = std::floor(f);
    phases.push_back({static_cast<int64_t>(fl), static_cast<float>(f - fl)});
  }
  return phases;
}

/// The factors (and linear weights) of a Resize this lowering computes, or why not.
std::variant<IntegerUpsample, std::string> integerUpsample(const Node& n) {
  const Value* x = n.input(0);
  const Value* y = n.output(0);
  if (!x->type.isStatic() || !y->type.isStatic() || x->type.rank() != 4) return std::string("only rank-4 static shapes");
  const std::string mode = attrOr(n, "mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic") return fmt::format("mode '{}' (only nearest and linear)", mode);
  if (mode == "cubic" && (x->type.staticShape()[2] != 1 || x->type.staticShape()[3] != 1))
    return std::string("mode 'cubic' (only nearest and linear)");
  if (n.hasAttr("axes")) return std::string("the axes attribute");
  if (attrOr(n, "keep_aspect_ratio_policy", "stretch") != "stretch") return std::string("a keep_aspect_ratio_policy");
  const Shape in = x->type.staticShape(), out = y->type.staticShape();
  if (in[0] != out[0] || in[1] != out[1]) return std::string("resizing the batch or channel axis");
  if (out[2] % in[2] != 0 || out[3] % in[3] != 0)
    return fmt::format("{} -> {} is not an integer upscaling of H and W", shapeToString(in), shapeToString(out));
  IntegerUpsample u{out[2] / in[2], out[3] / in[3], mode == "linear", {}, {}};
  const std::string coordinates = attrOr(n, "coordinate_transformation_mode", "half_pixel");
  // A one-pixel map (DeepLabV3's image pooling, upsampled back to the feature map): every output reads the pixel, in
  // any mode and coordinate mode but tf_crop_and_resize (whose roi may extrapolate), so it is a replication, the
  // nearest lowering with factors H x W (no interpolation, however large the factors).
  const bool onePixel = in[2] == 1 && in[3] == 1 && coordinates != "tf_crop_and_resize";
  if (onePixel) u.linear = false;
  // Scales given as a constant (opset 10: input 1; opset 11+: input 2; roi has 8 values) must be those factors:
  // the reference computes coordinates from them, not from the shapes.
  for (size_t i = 1; i <= 2; ++i)
    if (n.hasInput(i) && n.input(i)->isConstant() && n.input(i)->type.dtype == DType::Float32 &&
        n.input(i)->constant().numel() == 4) {
      const std::vector<double> want{1, 1, static_cast<double>(u.sH), static_cast<double>(u.sW)};
      const Tensor& s = n.input(i)->constant();
      for (int64_t k = 0; k < 4; ++k)
        if (s.elementAsDouble(k) != want[static_cast<size_t>(k)]) return std::string("scales that are not integers");
    }
  if (onePixel) return u;
  if (u.linear) {
    if (u.sH > kMaxLinearFactor || u.sW > kMaxLinearFactor)
      return fmt::format("linear factors {}x{} (at most {} per axis)", u.sH, u.sW, kMaxLinearFactor);
    auto rows = linearPhases(coordinates, u.sH), cols = linearPhases(coordinates, u.sW);
    if (!rows || !cols)
      return fmt::format("linear mode with coordinate_transformation_mode '{}' (its weights vary along the axis)",
                         coordinates);
    u.rows = *rows, u.cols = *cols;
    return u;
  }
  const std::string rounding = attrOr(n, "nearest_mode", "round_prefer_floor");
  if (!floorsToSource(coordinates, rounding, u.sH) || !floorsToSource(coordinates, rounding, u.sW))
    return fmt::format("coordinate_transformation_mode '{}' with nearest_mode '{}' does not map output x to x / {}",
                       coordinates, rounding, std::max(u.sH, u.sW));
  return u;
}

hw::SupportResult checkResize(const Node& n) {
  const auto u = integerUpsample(n);
  if (const std::string* why = std::get_if<std::string>(&u)) return refuse("Resize: " + *why + " is not lowered");
  return ok();
}

void lowerNearest(const Node& n, const IntegerUpsample& u, LowerContext& ctx) {
  const NodeTiling& t = ctx.tiling(n);
  ctx.allocate(n.output(0));
  const TensorLoc x = ctx.loc(n.input(0)), y = ctx.loc(n.output(0));
  const Shape s = n.input(0)->type.staticShape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3], OH = H * u.sH, OW = W * u.sW;
  const int64_t xs = x.pixelStride(), ys = y.pixelStride();
  // One tile: rk input rows x wk input columns x ck channels, upsampled along W in SRAM (rk x wk*sW x ck words),
  // within the node's tile budget (its alias tiling: half the smallest buffer).
  const int64_t slot = std::max<int64_t>(1, t.channels * t.cols);
  const int64_t ck = std::clamp<int64_t>(slot / u.sW, 1, C);
  const int64_t wk = std::clamp<int64_t>(slot / (u.sW * ck), 1, W);
  const int64_t rk = std::clamp<int64_t>(slot / (wk * u.sW * ck), 1, H);
  uint32_t tile = 0;
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c0 = 0; c0 < C; c0 += ck)
      for (int64_t r0 = 0; r0 < H; r0 += rk)
        for (int64_t x0 = 0; x0 < W; x0 += wk) {
          ctx.beginTile(n, tile++);
          const int64_t cc = std::min(ck, C - c0), rr = std::min(rk, H - r0), ww = std::min(wk, W - x0);
          const int64_t rowWords = ww * u.sW * cc;
          const int32_t r = ctx.region(Buffer::Input, static_cast<uint64_t>(rr * rowWords));
          const uint64_t from = x.addr + static_cast<uint64_t>(((b * H + r0) * W + x0) * xs + c0);
          for (int64_t px = 0; px < u.sW; ++px)
            ctx.emit(makeLoad(ctx.at(r, static_cast<uint64_t>(px * cc), rowWords, u.sW * cc), from, W * xs, xs,
                              static_cast<uint32_t>(rr), static_cast<uint32_t>(ww), static_cast<uint32_t>(cc)),
                     r);
          for (int64_t py = 0; py < u.sH; ++py) {
            const uint64_t to = y.addr + static_cast<uint64_t>(((b * OH + r0 * u.sH + py) * OW + x0 * u.sW) * ys + c0);
            ctx.emit(makeStore(ctx.at(r, 0, rowWords, cc), to, u.sH * OW * ys, ys, static_cast<uint32_t>(rr),
                               static_cast<uint32_t>(ww * u.sW), static_cast<uint32_t>(cc)),
                     -1, r);
          }
        }
}

/// Tile sizes of the linear lowering: rk input rows x wk input columns x ck channels, such that the input band with
/// its halo ((rk+2) x (wk+2) x ck, in `inp`), the rows upsampled along W ((rk+2) x wk*sW x ck, in `wgt`) and the
/// output ((rk*sH) x (wk*sW) x ck, in `out`) each fit the node's slot (half the smallest buffer). Of the channel
/// blocks C, C/2, C/4, ..., the one loading the fewest words (each tile loads its halo again), with a price per tile
/// for its instructions.
struct LinearTile {
  int64_t rk = 1, wk = 1, ck = 1;
};

LinearTile linearTile(int64_t slot, int64_t H, int64_t W, int64_t C, int64_t sH, int64_t sW) {
  constexpr int64_t kCount = 65535, kWordsPerTile = 256;
  auto fits = [&](int64_t r, int64_t w, int64_t c) {
    return (r + 2) * (w + 2) * c <= slot && (r + 2) * w * sW * c <= slot && r * sH * w * sW * c <= slot &&
           r * sH <= kCount && w * sW <= kCount && w + 2 <= kCount && c <= kCount;
  };
  LinearTile best;
  int64_t bestCost = -1;
  for (int64_t ck = C; ck >= 1; ck = ck == 1 ? 0 : (ck + 1) / 2) {
    if (!fits(1, 1, ck)) continue;
    LinearTile k{1, 1, ck};
    while (k.wk < W && fits(1, k.wk + 1, ck)) ++k.wk;
    while (k.rk < H && fits(k.rk + 1, k.wk, ck)) ++k.rk;
    const int64_t tiles = ((H + k.rk - 1) / k.rk) * ((W + k.wk - 1) / k.wk) * ((C + ck - 1) / ck);
    const int64_t cost = tiles * ((k.rk + 2) * (k.wk + 2) * ck + kWordsPerTile);
    if (bestCost < 0 || cost < bestCost) best = k, bestCost = cost;
  }
  TESSEL_ASSERT(bestCost >= 0, "npu lowering: no linear Resize tile fits the slot");
  return best;
}

/// The shape of one phase's result in one interpolation pass and the operands' strides (words): along the
/// interpolated axis (outer or inner), `axisStride` src words from j to j + 1 and `phaseStep` dst words from one
/// phase to the next.
struct PassGrid {
  int64_t outer, inner, vec, srcOuter, srcInner, dstOuter, dstInner, phaseStep, axisStride;
};

/// One pass of the separable interpolation: for each phase p, dst(j * s + p) = (1 - w_p) * src(j + 1 + offset_p) +
/// w_p * src(j + 2 + offset_p) along the axis (src has a one-element halo on each side); w_p is the ck-word vector
/// at `(weightBase + p) * ck` in `weights`.
void interpolate(LowerContext& ctx, const std::vector<LinearPhase>& phases, int32_t weights, int64_t weightBase,
                 int64_t ck, int32_t src, int32_t dst, const PassGrid& g) {
  const auto o = static_cast<uint32_t>(g.outer), i = static_cast<uint32_t>(g.inner), c = static_cast<uint32_t>(g.vec);
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  for (size_t p = 0; p < phases.size(); ++p) {
    const LinearPhase& ph = phases[p];
    const SramOperand d = ctx.at(dst, u(static_cast<int64_t>(p) * g.phaseStep), u(g.dstOuter), u(g.dstInner));
    const SramOperand a = ctx.at(src, u((1 + ph.offset) * g.axisStride), u(g.srcOuter), u(g.srcInner));
    ctx.emit(makeVecUnary(VecOp::Scale, d, a, o, i, c, 1.0f - ph.weight, 0.0f), dst, src);
    if (ph.weight == 0) continue;
    const SramOperand b = ctx.at(src, u((2 + ph.offset) * g.axisStride), u(g.srcOuter), u(g.srcInner));
    const SramOperand w = ctx.at(weights, u((weightBase + static_cast<int64_t>(p)) * ck));
    ctx.emit(makeVecBinary(VecOp::MulAcc, d, b, w, o, i, c), dst, src, weights);
  }
}

void lowerLinear(const Node& n, const IntegerUpsample& u, LowerContext& ctx) {
  const NodeTiling& t = ctx.tiling(n);
  ctx.allocate(n.output(0));
  const TensorLoc x = ctx.loc(n.input(0)), y = ctx.loc(n.output(0));
  const Shape s = n.input(0)->type.staticShape();
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3], OH = H * u.sH, OW = W * u.sW;
  const int64_t xs = x.pixelStride(), ys = y.pixelStride();
  // The slot is half the smallest buffer the tile uses, not the node's tiling (sized by its output, which may be smaller
  // than one tile's halo: a 1x1 map upsampled to 3x2 needs a 3x3 input band, its output has 6 words).
  const int64_t slot = static_cast<int64_t>(std::min({ctx.cfg.bufferWords(static_cast<size_t>(Buffer::Input)),
                                                      ctx.cfg.bufferWords(static_cast<size_t>(Buffer::Weight)),
                                                      ctx.cfg.bufferWords(static_cast<size_t>(Buffer::Output))}) / 2);
  const LinearTile k = linearTile(std::max<int64_t>({1, t.channels * t.cols, slot}), H, W, C, u.sH, u.sW);
  const int64_t ck = k.ck;
  auto w32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  auto u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  int32_t weights = -1;  // the column phases' weights, then the rows', ck words each (filled by the first tile, kept)
  uint32_t tile = 0;
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c0 = 0; c0 < C; c0 += ck)
      for (int64_t r0 = 0; r0 < H; r0 += k.rk)
        for (int64_t x0 = 0; x0 < W; x0 += k.wk) {
          ctx.beginTile(n, tile++);
          const int64_t cc = std::min(ck, C - c0), rr = std::min(k.rk, H - r0), ww = std::min(k.wk, W - x0);
          if (weights < 0) {
            std::vector<float> all;
            for (const LinearPhase& p : u.cols) all.push_back(p.weight);
            for (const LinearPhase& p : u.rows) all.push_back(p.weight);
            weights = ctx.region(Buffer::Accumulator, u64(static_cast<int64_t>(all.size()) * ck));
            for (size_t i = 0; i < all.size(); ++i) {
              const SramOperand v = ctx.at(weights, i * u64(ck));
              ctx.emit(makeVecUnary(VecOp::Fill, v, v, 1, 1, w32(ck), all[i]), weights);
            }
          }
          // The band with its halo: rows r0-1 .. r0+rr, columns x0-1 .. x0+ww; those outside the image are copies of
          // the edge (the reference clamps source indices).
          const int64_t aw = ww + 2, aRow = aw * cc;
          const int32_t band = ctx.region(Buffer::Input, u64((rr + 2) * aRow));
          const int64_t rlo = std::max<int64_t>(r0 - 1, 0), rhi = std::min(r0 + rr, H - 1);
          const int64_t clo = std::max<int64_t>(x0 - 1, 0), chi = std::min(x0 + ww, W - 1);
          const int64_t top = rlo - (r0 - 1), left = clo - (x0 - 1), rows = rhi - rlo + 1;
          ctx.emit(makeLoad(ctx.at(band, u64(top * aRow + left * cc), u64(aRow), u64(cc)),
                            x.addr + u64(((b * H + rlo) * W + clo) * xs + c0), u64(W * xs), u64(xs), w32(rows),
                            w32(chi - clo + 1), w32(cc)),
                   band);
          auto copyColumn = [&](int64_t from, int64_t to) {
            const SramOperand d = ctx.at(band, u64(top * aRow + to * cc), u64(aRow));
            const SramOperand a = ctx.at(band, u64(top * aRow + from * cc), u64(aRow));
            ctx.emit(makeVecUnary(VecOp::Copy, d, a, w32(rows), 1, w32(cc)), band, band);
          };
          if (left == 1) copyColumn(1, 0);
          if (x0 + ww == W) copyColumn(ww, ww + 1);
          auto copyRow = [&](int64_t from, int64_t to) {
            const SramOperand d = ctx.at(band, u64(to * aRow), 0, u64(cc)), a = ctx.at(band, u64(from * aRow), 0, u64(cc));
            ctx.emit(makeVecUnary(VecOp::Copy, d, a, 1, w32(aw), w32(cc)), band, band);
          };
          if (top == 1) copyRow(1, 0);
          if (r0 + rr == H) copyRow(rr, rr + 1);
          // Along W: rr+2 rows of ww*sW pixels; then along H: rr*sH rows (the row phases' weights follow the columns').
          const int64_t bRow = ww * u.sW * cc;
          const int32_t wide = ctx.region(Buffer::Weight, u64((rr + 2) * bRow));
          interpolate(ctx, u.cols, weights, 0, ck, band, wide, {rr + 2, ww, cc, aRow, cc, bRow, u.sW * cc, cc, cc});
          const int32_t result = ctx.region(Buffer::Output, u64(rr * u.sH * bRow));
          interpolate(ctx, u.rows, weights, u.sW, ck, wide, result,
                      {rr, ww * u.sW, cc, bRow, cc, u.sH * bRow, cc, bRow, bRow});
          ctx.emit(makeStore(ctx.at(result, 0, u64(bRow), u64(cc)),
                             y.addr + u64(((b * OH + r0 * u.sH) * OW + x0 * u.sW) * ys + c0), u64(OW * ys), u64(ys),
                             w32(rr * u.sH), w32(ww * u.sW), w32(cc)),
                   -1, result);
        }
}

void lowerResize(const Node& n, LowerContext& ctx) {
  const IntegerUpsample u = std::get<IntegerUpsample>(integerUpsample(n));
  if (u.linear)
    lowerLinear(n, u, ctx);
  else
    lowerNearest(n, u, ctx);
}

const RegisterOpLowering kResize({"Resize"}, {OpFamily::Alias, checkResize, lowerResize});

}  // namespace
}  // namespace tessel::npu::lower
