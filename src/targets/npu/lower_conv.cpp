// NPU operator interpreters of the matrix family: Conv (plain, grouped, packed for few input channels,
// depthwise on the vector unit), Gemm and MatMul (as a 1x1 convolution over rows). The tiles come from the
// schedule: output tiles of rows x columns, output channels in passes of several DIM-wide gemm blocks that
// share one input load, input channels in blocks, weights resident per pass or streamed per tile.
#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "geometry.h"
#include "lower_context.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

/// A 2-D convolution in NHWC DRAM layout with OIHW weights (already scaled) and an optional bias.
struct ConvProblem : ConvGeometry {
  std::vector<float> weights;  ///< [M][C/group][KH][KW]
  std::vector<float> bias;     ///< [M] or empty
  uint64_t inAddr = 0, outAddr = 0;
  std::optional<Activation> activation;
};

/// Window of one output tile in input coordinates, clipped to the image, with the zero padding around it.
struct InputWindow {
  int64_t y0, x0, rows, cols;               // interior (inside the image)
  uint32_t padTop, padBottom, padLeft, padRight;
  int64_t tileRows, tileCols;               // including padding
};

InputWindow inputWindow(const ConvProblem& p, int64_t oy0, int64_t th, int64_t ox0, int64_t tw) {
  InputWindow w;
  int64_t y0 = oy0 * p.sH - p.pT, y1 = (oy0 + th - 1) * p.sH - p.pT + (p.KH - 1) * p.dH;
  int64_t x0 = ox0 * p.sW - p.pL, x1 = (ox0 + tw - 1) * p.sW - p.pL + (p.KW - 1) * p.dW;
  w.tileRows = y1 - y0 + 1, w.tileCols = x1 - x0 + 1;
  w.padTop = static_cast<uint32_t>(std::max<int64_t>(0, -y0));
  w.padBottom = static_cast<uint32_t>(std::max<int64_t>(0, y1 - (p.H - 1)));
  w.padLeft = static_cast<uint32_t>(std::max<int64_t>(0, -x0));
  w.padRight = static_cast<uint32_t>(std::max<int64_t>(0, x1 - (p.W - 1)));
  w.y0 = y0 + w.padTop, w.x0 = x0 + w.padLeft;
  w.rows = w.tileRows - w.padTop - w.padBottom, w.cols = w.tileCols - w.padLeft - w.padRight;
  TESSEL_ASSERT(w.rows >= 1 && w.cols >= 1 && w.padTop <= 15 && w.padBottom <= 15 && w.padLeft <= 15 &&
                    w.padRight <= 15,
                "npu lowering: convolution tile window outside the image or padding over 15");
  return w;
}

/// Loads the input window of channels [c0, c0 + cb) of image n into a new `inp` region (padded tile layout).
int32_t loadInputTile(LowerContext& ctx, const ConvProblem& p, const InputWindow& w, int64_t n, int64_t c0, int64_t cb) {
  const int32_t r = ctx.region(Buffer::Input, static_cast<uint64_t>(w.tileRows * w.tileCols * cb));
  Instruction ld = makeLoad(ctx.at(r, 0, w.tileCols * cb, cb), p.inAddr + ((n * p.H + w.y0) * p.W + w.x0) * p.C + c0,
                            p.W * p.C, p.C, static_cast<uint32_t>(w.rows), static_cast<uint32_t>(w.cols),
                            static_cast<uint32_t>(cb));
  ld.padTop = static_cast<uint8_t>(w.padTop), ld.padBottom = static_cast<uint8_t>(w.padBottom);
  ld.padLeft = static_cast<uint8_t>(w.padLeft), ld.padRight = static_cast<uint8_t>(w.padRight);
  ctx.emit(ld, r);
  return r;
}

/// Bias add (per-channel vector broadcast over the tile), the fused activation, and the store of a tile of
/// rows x cols pixels x `channels` channels held in `acc` ([pixel][channels]) to output channel `m0`.
void finishTile(LowerContext& ctx, const ConvProblem& p, int32_t acc, int64_t rows, int64_t cols, int64_t channels,
                int32_t bias, uint64_t dramAddr) {
  auto r = static_cast<uint32_t>(rows), c = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(channels);
  SramOperand tile = ctx.at(acc, 0, cols * channels, channels);
  if (bias >= 0) ctx.emit(makeVecBinary(VecOp::Add, tile, tile, ctx.at(bias), r, c, v), acc, acc, bias);
  if (p.activation)
    ctx.emit(makeVecUnary(p.activation->op, tile, tile, r, c, v, p.activation->imm0, p.activation->imm1), acc, acc);
  ctx.emit(makeStore(tile, dramAddr, p.OW * p.M, p.M, r, c, v), -1, acc);
}

/// One gemm's reduction slice: `k` consecutive words of an input pixel's window starting at `offset`, and the
/// weight rows they meet (for each k: input channel and kernel tap).
struct ReductionSlice {
  int64_t offset = 0, k = 0;
  std::vector<std::pair<int64_t, int64_t>> rows;  ///< per k: (channel within the group, tap kh*KW+kw)
};

/// The reduction slices of an input block of `cb` channels starting at channel `c0` (within the group), loaded
/// as a padded tile with `tileCols` columns. Matrix: per tap, slices of <= DIM channels. Packed: per kernel
/// row, the (kernel column, channel) pairs are consecutive words of the tile (needs dilation 1 along W), cut
/// into slices of <= DIM words.
std::vector<ReductionSlice> reductionSlices(const ConvProblem& p, bool packed, int64_t c0, int64_t cb, int64_t tileCols,
                                            int64_t DIM) {
  std::vector<ReductionSlice> out;
  if (packed) {
    const int64_t span = p.KW * cb, step = std::max<int64_t>(1, DIM / cb) * cb;
    for (int64_t kh = 0; kh < p.KH; ++kh)
      for (int64_t s0 = 0; s0 < span; s0 += step) {
        ReductionSlice sl;
        sl.offset = kh * p.dH * tileCols * cb + s0;
        sl.k = std::min(step, span - s0);
        for (int64_t k = 0; k < sl.k; ++k) sl.rows.push_back({c0 + (s0 + k) % cb, kh * p.KW + (s0 + k) / cb});
        out.push_back(std::move(sl));
      }
    return out;
  }
  for (int64_t k0 = 0; k0 < cb; k0 += DIM)
    for (int64_t kh = 0; kh < p.KH; ++kh)
      for (int64_t kw = 0; kw < p.KW; ++kw) {
        ReductionSlice sl;
        sl.offset = (kh * p.dH * tileCols + kw * p.dW) * cb + k0;
        sl.k = std::min(DIM, cb - k0);
        for (int64_t k = 0; k < sl.k; ++k) sl.rows.push_back({c0 + k0 + k, kh * p.KW + kw});
        out.push_back(std::move(sl));
      }
  return out;
}

/// Packs the weight blocks of one input block for output channels [m0, m0 + mk) of group g: per slice, per
/// DIM-wide output block, a k x n block (row-major), in the order the gemms use them. Appends to `packed`.
void packWeights(const ConvProblem& p, const std::vector<ReductionSlice>& slices, int64_t g, int64_t m0, int64_t mk,
                 int64_t DIM, std::vector<float>& packed) {
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group, taps = p.KH * p.KW;
  for (const ReductionSlice& sl : slices)
    for (int64_t j0 = 0; j0 < mk; j0 += DIM) {
      const int64_t nb = std::min(DIM, mk - j0);
      for (const auto& [c, tap] : sl.rows)
        for (int64_t n = 0; n < nb; ++n) packed.push_back(p.weights[((g * Mg + m0 + j0 + n) * Cg + c) * taps + tap]);
    }
}

/// Plain, grouped and packed convolution on the matrix unit. Per group and pass of output channels: weights
/// (resident for the pass, or streamed per tile and input block) and bias; per output tile: the input blocks,
/// each loaded once and used by every gemm block of the pass, accumulating into one [pixel][channels] tile.
void lowerConvOnMatrix(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& t) {
  const int64_t DIM = ctx.cfg.dim, Cg = p.C / p.group, Mg = p.M / p.group;
  const bool packed = t.variant == "packed";
  const int64_t cb = packed ? Cg : std::min(t.inChannels, Cg), th = t.rows, tw = t.cols;
  const int64_t pass = t.coutPerPass > 0 ? std::min(t.coutPerPass, Mg) : std::min(t.channels, Mg);
  const int64_t gemmN = std::min({t.channels, DIM, Mg});
  uint32_t tileIndex = 0;
  for (int64_t g = 0; g < p.group; ++g)
    for (int64_t m0 = 0; m0 < Mg; m0 += pass) {
      const int64_t mk = std::min(pass, Mg - m0);
      int32_t resident = -1, bias = -1;
      std::vector<uint64_t> residentOffset;  // per input block: its weights' offset in the resident region
      std::map<std::pair<int64_t, size_t>, std::pair<uint64_t, uint64_t>> streamed;  // (block, first slice) -> DRAM, words
      bool firstTile = true;
      for (int64_t n = 0; n < p.N; ++n)
        for (int64_t oy0 = 0; oy0 < p.OH; oy0 += th)
          for (int64_t ox0 = 0; ox0 < p.OW; ox0 += tw) {
            ctx.beginTile(node, tileIndex++);
            const int64_t rows = std::min(th, p.OH - oy0), cols = std::min(tw, p.OW - ox0);
            const InputWindow w = inputWindow(p, oy0, rows, ox0, cols);
            if (firstTile) {
              if (t.weightsResident) {
                std::vector<float> all;
                for (int64_t c0 = 0; c0 < Cg; c0 += cb) {
                  residentOffset.push_back(all.size());
                  packWeights(p, reductionSlices(p, packed, c0, std::min(cb, Cg - c0), w.tileCols, gemmN), g, m0, mk, gemmN, all);
                }
                resident = ctx.region(Buffer::Weight, all.size());
                loadContiguous(ctx, resident, 0, ctx.addConstant(all), all.size());
              }
              if (!p.bias.empty()) {
                bias = ctx.region(Buffer::Output, static_cast<uint64_t>(mk));
                std::vector<float> b(p.bias.begin() + g * Mg + m0, p.bias.begin() + g * Mg + m0 + mk);
                loadContiguous(ctx, bias, 0, ctx.addConstant(b), static_cast<uint64_t>(mk));
              }
              firstTile = false;
            }
            const int32_t acc = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rows * cols * mk));
            std::vector<bool> started(static_cast<size_t>(ceilDiv(mk, gemmN)), false);
            for (int64_t c0 = 0, block = 0; c0 < Cg; c0 += cb, ++block) {
              const int64_t cbk = std::min(cb, Cg - c0);
              const int32_t in = loadInputTile(ctx, p, w, n, g * Cg + c0, cbk);
              const std::vector<ReductionSlice> slices = reductionSlices(p, packed, c0, cbk, w.tileCols, gemmN);
              // Streamed weights come in chunks of whole slices of at most half the weight buffer (double buffering).
              const uint64_t chunkLimit = std::max<uint64_t>(1, ctx.cfg.bufferWords(static_cast<size_t>(Buffer::Weight)) / 2);
              int32_t wgt = resident;
              uint64_t woff = t.weightsResident ? residentOffset[static_cast<size_t>(block)] : 0;
              for (size_t s0 = 0; s0 < slices.size();) {
                size_t s1 = s0 + 1;
                if (!t.weightsResident) {
                  auto words = [&](size_t a, size_t b) {
                    uint64_t w = 0;
                    for (size_t k = a; k < b; ++k) w += static_cast<uint64_t>(slices[k].k * mk);
                    return w;
                  };
                  while (s1 < slices.size() && words(s0, s1 + 1) <= chunkLimit) ++s1;
                  // Packed once per pass; every tile streams the same DRAM words.
                  auto [it, fresh] = streamed.try_emplace({block, s0}, 0, 0);
                  if (fresh) {
                    std::vector<float> mine;
                    packWeights(p, std::vector<ReductionSlice>(slices.begin() + static_cast<long>(s0), slices.begin() + static_cast<long>(s1)),
                                g, m0, mk, gemmN, mine);
                    it->second = {ctx.addConstant(mine), mine.size()};
                  }
                  wgt = ctx.region(Buffer::Weight, it->second.second);
                  loadContiguous(ctx, wgt, 0, it->second.first, it->second.second);
                  woff = 0;
                } else {
                  s1 = slices.size();
                }
                for (size_t si = s0; si < s1; ++si) {
                  const ReductionSlice& sl = slices[si];
                  for (int64_t j0 = 0; j0 < mk; j0 += gemmN) {
                    const int64_t nb = std::min(gemmN, mk - j0);
                    Instruction gm;
                    gm.opcode = Opcode::Gemm;
                    gm.srcA = ctx.at(in, sl.offset, p.sH * w.tileCols * cbk, p.sW * cbk);
                    gm.srcB = ctx.at(wgt, woff);
                    gm.dst = ctx.at(acc, j0, cols * mk, mk);
                    gm.outer = static_cast<uint32_t>(rows), gm.inner = static_cast<uint32_t>(cols);
                    gm.gemmK = static_cast<uint32_t>(sl.k), gm.gemmN = static_cast<uint32_t>(nb);
                    auto&& first = started[static_cast<size_t>(j0 / gemmN)];
                    gm.accumulate = first;
                    first = true;
                    ctx.emit(gm, acc, in, wgt);
                    woff += static_cast<uint64_t>(sl.k * nb);
                  }
                }
                s0 = s1;
              }
            }
            finishTile(ctx, p, acc, rows, cols, mk, bias, p.outAddr + ((n * p.OH + oy0) * p.OW + ox0) * p.M + g * Mg + m0);
          }
    }
}

/// Depthwise convolution on the vector unit: per tap one multiply-accumulate with a per-channel weight vector.
void lowerDepthwise(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& t) {
  const int64_t taps = p.KH * p.KW, cb = t.channels, th = t.rows, tw = t.cols;
  uint32_t tileIndex = 0;
  for (int64_t c0 = 0; c0 < p.C; c0 += cb) {
    const int64_t cbk = std::min(cb, p.C - c0);
    int32_t wgt = -1, bias = -1;
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t oy0 = 0; oy0 < p.OH; oy0 += th)
        for (int64_t ox0 = 0; ox0 < p.OW; ox0 += tw) {
          ctx.beginTile(node, tileIndex++);
          if (wgt < 0) {
            std::vector<float> packed;  // [tap][channel]
            for (int64_t tap = 0; tap < taps; ++tap)
              for (int64_t c = 0; c < cbk; ++c) packed.push_back(p.weights[(c0 + c) * taps + tap]);
            wgt = ctx.region(Buffer::Weight, packed.size());
            loadContiguous(ctx, wgt, 0, ctx.addConstant(packed), packed.size());
            if (!p.bias.empty()) {
              bias = ctx.region(Buffer::Output, static_cast<uint64_t>(cbk));
              std::vector<float> b(p.bias.begin() + c0, p.bias.begin() + c0 + cbk);
              loadContiguous(ctx, bias, 0, ctx.addConstant(b), static_cast<uint64_t>(cbk));
            }
          }
          const int64_t rows = std::min(th, p.OH - oy0), cols = std::min(tw, p.OW - ox0);
          auto r = static_cast<uint32_t>(rows), cl = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(cbk);
          const InputWindow w = inputWindow(p, oy0, rows, ox0, cols);
          const int32_t in = loadInputTile(ctx, p, w, n, c0, cbk);
          const int32_t acc = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rows * cols * cbk));
          SramOperand tile = ctx.at(acc, 0, cols * cbk, cbk);
          if (bias >= 0) ctx.emit(makeVecUnary(VecOp::Copy, tile, ctx.at(bias), r, cl, v), acc, bias);
          for (int64_t tap = 0; tap < taps; ++tap) {
            const int64_t kh = tap / p.KW, kw = tap % p.KW;
            SramOperand window = ctx.at(in, (kh * p.dH * w.tileCols + kw * p.dW) * cbk, p.sH * w.tileCols * cbk, p.sW * cbk);
            const bool init = tap == 0 && bias < 0;
            ctx.emit(makeVecBinary(init ? VecOp::Mul : VecOp::MulAcc, tile, window, ctx.at(wgt, tap * cbk), r, cl, v), acc, in, wgt);
          }
          if (p.activation)
            ctx.emit(makeVecUnary(p.activation->op, tile, tile, r, cl, v, p.activation->imm0, p.activation->imm1), acc, acc);
          ctx.emit(makeStore(tile, p.outAddr + ((n * p.OH + oy0) * p.OW + ox0) * p.M + c0, p.OW * p.M, p.M, r, cl, v), -1, acc);
        }
  }
}

void lowerConvProblem(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& tiling) {
  if (p.depthwise()) return lowerDepthwise(ctx, node, p, tiling);
  lowerConvOnMatrix(ctx, node, p, tiling);
}

std::vector<int64_t> intsOr(const Node& n, const char* name, std::vector<int64_t> fallback) {
  return n.hasAttr(name) ? n.attrInts(name) : fallback;
}

hw::SupportResult checkConv(const Node& n) {
  if (n.input(0)->type.dims->size() != 4) return refuse("only 2-D convolutions (rank-4 input) are lowered");
  if (!n.input(1)->isConstant()) return refuse("weights are not a constant");
  if (n.hasInput(2) && !n.input(2)->isConstant()) return refuse("bias is not a constant");
  std::string autoPad = n.hasAttr("auto_pad") ? n.attrString("auto_pad") : "NOTSET";
  if (autoPad != "NOTSET" && autoPad != "VALID") return refuse(fmt::format("auto_pad {} is not lowered", autoPad));
  for (int64_t pad : intsOr(n, "pads", {0, 0, 0, 0}))
    if (pad > 15) return refuse(fmt::format("padding {} exceeds the load instruction's 15", pad));
  return ok();
}

void lowerConv(const Node& n, LowerContext& ctx) {
  ConvProblem p;
  static_cast<ConvGeometry&>(p) = convGeometry(n);
  p.weights = constantFloats(n.input(1)->constant());
  if (n.hasInput(2)) p.bias = constantFloats(n.input(2)->constant());
  p.inAddr = ctx.loc(n.input(0)).addr;
  p.outAddr = ctx.loc(ctx.resultValue(n)).addr;
  p.activation = ctx.fusedActivation(n);
  lowerConvProblem(ctx, n, p, ctx.tiling(n));
}

/// Gemm/MatMul as a 1x1 convolution over the rows of A (rows = pixels, the last axis = channels).
void lowerRowsTimesMatrix(const Node& n, LowerContext& ctx, const std::vector<float>& bT, std::vector<float> bias) {
  ConvProblem p;
  static_cast<ConvGeometry&>(p) = convGeometry(n);
  p.weights = bT;
  p.bias = std::move(bias);
  p.inAddr = ctx.loc(n.input(0)).addr;
  p.outAddr = ctx.loc(ctx.resultValue(n)).addr;
  p.activation = ctx.fusedActivation(n);
  lowerConvProblem(ctx, n, p, ctx.tiling(n));
}

hw::SupportResult checkGemm(const Node& n) {
  if (n.attrInt("transA") != 0) return refuse("transA=1 is not lowered");
  if (n.input(0)->type.dims->size() != 2) return refuse("A must have rank 2");
  if (!n.input(1)->isConstant() || n.input(1)->constant().rank() != 2) return refuse("B is not a rank-2 constant");
  if (n.hasInput(2)) {
    if (!n.input(2)->isConstant()) return refuse("C is not a constant");
    int64_t N = n.output(0)->type.staticShape()[1], c = n.input(2)->constant().numel();
    if (c != N && c != 1) return refuse("C must be a vector of N values or a scalar");
  }
  return ok();
}

void lowerGemm(const Node& n, LowerContext& ctx) {
  const Tensor& B = n.input(1)->constant();
  bool tb = n.attrInt("transB") != 0;
  const int64_t K = B.shape()[tb ? 1 : 0], N = B.shape()[tb ? 0 : 1];
  const float alpha = n.attrFloat("alpha"), beta = n.attrFloat("beta");
  std::vector<float> b = constantFloats(B), w(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) w[j * K + k] = alpha * (tb ? b[j * K + k] : b[k * N + j]);
  std::vector<float> bias;
  if (n.hasInput(2)) {
    std::vector<float> c = constantFloats(n.input(2)->constant());
    for (int64_t j = 0; j < N; ++j) bias.push_back(beta * c[c.size() == 1 ? 0 : j]);
  }
  lowerRowsTimesMatrix(n, ctx, w, bias);
}

hw::SupportResult checkMatMul(const Node& n) {
  if (n.input(0)->type.dims->size() < 2) return refuse("A must have rank >= 2");
  if (!n.input(1)->isConstant() || n.input(1)->constant().rank() != 2) return refuse("B is not a rank-2 constant");
  return ok();
}

void lowerMatMul(const Node& n, LowerContext& ctx) {
  const Tensor& B = n.input(1)->constant();
  const int64_t K = B.shape()[0], N = B.shape()[1];
  std::vector<float> b = constantFloats(B), w(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) w[j * K + k] = b[k * N + j];
  lowerRowsTimesMatrix(n, ctx, w, {});
}

const RegisterOpLowering kConv({"Conv"}, {checkConv, lowerConv});
const RegisterOpLowering kGemm({"Gemm"}, {checkGemm, lowerGemm});
const RegisterOpLowering kMatMul({"MatMul"}, {checkMatMul, lowerMatMul});

}  // namespace
}  // namespace tessel::npu::lower
