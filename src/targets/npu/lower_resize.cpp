// NPU operator interpreter of Resize in nearest mode with integer upscaling factors (an FPN's or a decoder's
// upsampling): pure data movement. Per tile, a band of input rows is loaded once per column phase into an SRAM
// region holding the rows upsampled along W (the load's SRAM inner stride skips the other phases' pixels), then
// stored once per row phase to the output rows it becomes. Linear/cubic modes, downscaling, fractional factors and
// coordinate modes that do not reduce to out[y, x] = in[y / sH, x / sW] stay on the host.
#include <algorithm>
#include <fmt/format.h>
#include <variant>

#include "lower_context.h"
#include "tessel/ops/registry.h"

namespace tessel::npu::lower {
namespace {

struct NearestUpsample {
  int64_t sH = 1, sW = 1;  ///< integer factors along H and W
};

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

/// The factors of a Resize this lowering computes, or why not.
std::variant<NearestUpsample, std::string> nearestUpsample(const Node& n) {
  const Value* x = n.input(0);
  const Value* y = n.output(0);
  if (!x->type.isStatic() || !y->type.isStatic() || x->type.rank() != 4) return std::string("only rank-4 static shapes");
  if (attrOr(n, "mode", "nearest") != "nearest") return fmt::format("mode '{}' (only nearest)", attrOr(n, "mode", "nearest"));
  if (n.hasAttr("axes")) return std::string("the axes attribute");
  if (attrOr(n, "keep_aspect_ratio_policy", "stretch") != "stretch") return std::string("a keep_aspect_ratio_policy");
  const Shape in = x->type.staticShape(), out = y->type.staticShape();
  if (in[0] != out[0] || in[1] != out[1]) return std::string("resizing the batch or channel axis");
  if (out[2] % in[2] != 0 || out[3] % in[3] != 0)
    return fmt::format("{} -> {} is not an integer upscaling of H and W", shapeToString(in), shapeToString(out));
  const NearestUpsample u{out[2] / in[2], out[3] / in[3]};
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
  const std::string coordinates = attrOr(n, "coordinate_transformation_mode", "half_pixel");
  const std::string rounding = attrOr(n, "nearest_mode", "round_prefer_floor");
  if (!floorsToSource(coordinates, rounding, u.sH) || !floorsToSource(coordinates, rounding, u.sW))
    return fmt::format("coordinate_transformation_mode '{}' with nearest_mode '{}' does not map output x to x / {}",
                       coordinates, rounding, std::max(u.sH, u.sW));
  return u;
}

hw::SupportResult checkResize(const Node& n) {
  const auto u = nearestUpsample(n);
  if (const std::string* why = std::get_if<std::string>(&u)) return refuse("Resize: " + *why + " is not lowered");
  return ok();
}

void lowerResize(const Node& n, LowerContext& ctx) {
  const NearestUpsample u = std::get<NearestUpsample>(nearestUpsample(n));
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

const RegisterOpLowering kResize({"Resize"}, {OpFamily::Alias, checkResize, lowerResize});

}  // namespace
}  // namespace tessel::npu::lower
