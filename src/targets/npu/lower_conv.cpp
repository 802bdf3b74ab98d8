// NPU operator interpreters of the matrix family: Conv (plain, grouped, depthwise), Gemm and MatMul (as a
// 1x1 convolution over rows). Output tiles of rows x columns x <=DIM channels sized to the buffers' slots.
#include <algorithm>
#include <fmt/format.h>

#include "geometry.h"
#include "lower_context.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

/// A 2-D convolution in NHWC DRAM layout with OIHW weights (already scaled) and an optional bias.
struct ConvProblem {
  int64_t N = 1, C = 1, H = 1, W = 1, M = 1, KH = 1, KW = 1;
  int64_t sH = 1, sW = 1, dH = 1, dW = 1, pT = 0, pL = 0, pB = 0, pR = 0, group = 1;
  int64_t OH = 1, OW = 1;
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

/// Loads the input window of channels [c0, c0 + cb) of image n into `inp` at `addr` (padded tile layout).
void loadInputTile(LowerContext& ctx, const ConvProblem& p, const InputWindow& w, int64_t n, int64_t c0, int64_t cb,
                   uint32_t addr) {
  Instruction ld = makeLoad(operand(Buffer::Input, addr, w.tileCols * cb, cb),
                            p.inAddr + ((n * p.H + w.y0) * p.W + w.x0) * p.C + c0, p.W * p.C, p.C,
                            static_cast<uint32_t>(w.rows), static_cast<uint32_t>(w.cols), static_cast<uint32_t>(cb));
  ld.padTop = static_cast<uint8_t>(w.padTop), ld.padBottom = static_cast<uint8_t>(w.padBottom);
  ld.padLeft = static_cast<uint8_t>(w.padLeft), ld.padRight = static_cast<uint8_t>(w.padRight);
  ctx.emitter.emit(ld);
}

/// Bias add (per-channel vector in `out` broadcast over the tile), the fused activation, and the store.
void finishTile(LowerContext& ctx, const ConvProblem& p, SramOperand tile, int64_t th, int64_t tw, int64_t nb,
                std::optional<uint32_t> biasAddr, uint64_t dramAddr) {
  auto rows = static_cast<uint32_t>(th), cols = static_cast<uint32_t>(tw), vec = static_cast<uint32_t>(nb);
  if (biasAddr) ctx.emitter.emit(makeVecBinary(VecOp::Add, tile, tile, operand(Buffer::Output, *biasAddr), rows, cols, vec));
  if (p.activation)
    ctx.emitter.emit(makeVecUnary(p.activation->op, tile, tile, rows, cols, vec, p.activation->imm0, p.activation->imm1));
  ctx.emitter.emit(makeStore(tile, dramAddr, p.OW * p.M, p.M, rows, cols, vec));
}

/// Plain and grouped convolution on the matrix unit: per output tile and <=DIM output channels, one Gemm
/// per (input-channel block, kernel tap), accumulating in `acc`.
void lowerConvOnMatrix(LowerContext& ctx, const ConvProblem& p, const NodeTiling& tiling) {
  const int64_t Cg = p.C / p.group, Mg = p.M / p.group, taps = p.KH * p.KW;
  const int64_t cb = tiling.inChannels, nb = tiling.channels, th = tiling.rows, tw = tiling.cols;
  const int64_t cinBlocks = ceilDiv(Cg, cb), coutBlocks = ceilDiv(Mg, nb);
  const uint64_t wgtSlot = ctx.slotWords(Buffer::Weight);
  uint64_t inpCount = 0, accCount = 0, wgtCount = 0, biasCount = 0;
  for (int64_t g = 0; g < p.group; ++g) {
    for (int64_t cob = 0; cob < coutBlocks; ++cob) {
      const int64_t m0 = g * Mg + cob * nb, nbk = std::min(nb, Mg - cob * nb);
      // Pack this output block's weights: one K x nbk block per (input block, tap), in loop order.
      std::vector<float> packed;
      std::vector<uint64_t> blockOffset;
      for (int64_t cib = 0; cib < cinBlocks; ++cib) {
        int64_t cbk = std::min(cb, Cg - cib * cb);
        for (int64_t t = 0; t < taps; ++t) {
          blockOffset.push_back(packed.size());
          for (int64_t k = 0; k < cbk; ++k)
            for (int64_t n = 0; n < nbk; ++n)
              packed.push_back(p.weights[((m0 + n) * Cg + cib * cb + k) * taps + t]);
        }
      }
      blockOffset.push_back(packed.size());
      const uint64_t wDram = ctx.addConstant(packed);
      // Chunks of consecutive blocks that fit one weight slot; a single chunk stays resident for all tiles.
      std::vector<size_t> chunkStart{0};
      for (size_t b = 1; b + 1 < blockOffset.size(); ++b)
        if (blockOffset[b + 1] - blockOffset[chunkStart.back()] > wgtSlot) chunkStart.push_back(b);
      const bool resident = tiling.weightsResident && chunkStart.size() == 1;
      constexpr size_t kNoChunk = ~size_t{0};
      uint32_t chunkBase = 0;
      size_t chunkIndex = kNoChunk;
      auto loadChunk = [&](size_t c) {
        size_t first = chunkStart[c], end = c + 1 < chunkStart.size() ? chunkStart[c + 1] : blockOffset.size() - 1;
        chunkBase = ctx.slot(Buffer::Weight, wgtCount++);
        loadContiguous(ctx.emitter, Buffer::Weight, chunkBase, wDram + blockOffset[first], blockOffset[end] - blockOffset[first]);
        chunkIndex = c;
      };
      if (resident) loadChunk(0);
      std::optional<uint32_t> biasAddr;
      if (!p.bias.empty()) {
        biasAddr = ctx.slot(Buffer::Output, biasCount++);
        std::vector<float> b(p.bias.begin() + m0, p.bias.begin() + m0 + nbk);
        loadContiguous(ctx.emitter, Buffer::Output, *biasAddr, ctx.addConstant(b), static_cast<uint64_t>(nbk));
      }
      for (int64_t n = 0; n < p.N; ++n)
        for (int64_t oy0 = 0; oy0 < p.OH; oy0 += th)
          for (int64_t ox0 = 0; ox0 < p.OW; ox0 += tw) {
            const int64_t rows = std::min(th, p.OH - oy0), cols = std::min(tw, p.OW - ox0);
            InputWindow w = inputWindow(p, oy0, rows, ox0, cols);
            const uint32_t accAddr = ctx.slot(Buffer::Accumulator, accCount++);
            SramOperand acc = operand(Buffer::Accumulator, accAddr, cols * nbk, nbk);
            bool first = true;  // the first Gemm of a tile overwrites the slot; the bias is added after
            size_t block = 0;
            if (!resident) chunkIndex = kNoChunk;  // every tile streams the chunks again
            for (int64_t cib = 0; cib < cinBlocks; ++cib) {
              const int64_t cbk = std::min(cb, Cg - cib * cb);
              const uint32_t inAddr = ctx.slot(Buffer::Input, inpCount++);
              loadInputTile(ctx, p, w, n, g * Cg + cib * cb, cbk, inAddr);
              for (int64_t kh = 0; kh < p.KH; ++kh)
                for (int64_t kw = 0; kw < p.KW; ++kw, ++block) {
                  if (!resident) {
                    size_t want = static_cast<size_t>(std::upper_bound(chunkStart.begin(), chunkStart.end(), block) -
                                                      chunkStart.begin()) - 1;
                    if (want != chunkIndex) loadChunk(want);
                  }
                  Instruction gm;
                  gm.opcode = Opcode::Gemm;
                  gm.srcA = operand(Buffer::Input, inAddr + (kh * p.dH * w.tileCols + kw * p.dW) * cbk,
                                    p.sH * w.tileCols * cbk, p.sW * cbk);
                  gm.srcB = operand(Buffer::Weight, chunkBase + blockOffset[block] - blockOffset[chunkStart[chunkIndex]]);
                  gm.dst = acc;
                  gm.outer = static_cast<uint32_t>(rows), gm.inner = static_cast<uint32_t>(cols);
                  gm.gemmK = static_cast<uint32_t>(cbk), gm.gemmN = static_cast<uint32_t>(nbk);
                  gm.accumulate = !first;
                  first = false;
                  ctx.emitter.emit(gm);
                }
            }
            finishTile(ctx, p, acc, rows, cols, nbk, biasAddr,
                       p.outAddr + ((n * p.OH + oy0) * p.OW + ox0) * p.M + m0);
          }
    }
  }
}

/// Depthwise convolution on the vector unit: per tap one multiply-accumulate with a per-channel weight vector.
void lowerDepthwise(LowerContext& ctx, const ConvProblem& p, const NodeTiling& tiling) {
  const int64_t taps = p.KH * p.KW;
  const int64_t cb = tiling.channels, th = tiling.rows, tw = tiling.cols;
  uint64_t inpCount = 0, accCount = 0, blockCount = 0;
  for (int64_t c0 = 0; c0 < p.C; c0 += cb) {
    const int64_t cbk = std::min(cb, p.C - c0);
    std::vector<float> packed;  // [tap][channel]
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t c = 0; c < cbk; ++c) packed.push_back(p.weights[(c0 + c) * taps + t]);
    const uint32_t wAddr = ctx.slot(Buffer::Weight, blockCount);
    loadContiguous(ctx.emitter, Buffer::Weight, wAddr, ctx.addConstant(packed), packed.size());
    std::optional<uint32_t> biasAddr;
    if (!p.bias.empty()) {
      biasAddr = ctx.slot(Buffer::Output, blockCount);
      std::vector<float> b(p.bias.begin() + c0, p.bias.begin() + c0 + cbk);
      loadContiguous(ctx.emitter, Buffer::Output, *biasAddr, ctx.addConstant(b), static_cast<uint64_t>(cbk));
    }
    ++blockCount;
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t oy0 = 0; oy0 < p.OH; oy0 += th)
        for (int64_t ox0 = 0; ox0 < p.OW; ox0 += tw) {
          const int64_t rows = std::min(th, p.OH - oy0), cols = std::min(tw, p.OW - ox0);
          auto r = static_cast<uint32_t>(rows), cl = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(cbk);
          InputWindow w = inputWindow(p, oy0, rows, ox0, cols);
          const uint32_t inAddr = ctx.slot(Buffer::Input, inpCount++);
          loadInputTile(ctx, p, w, n, c0, cbk, inAddr);
          SramOperand acc = operand(Buffer::Accumulator, ctx.slot(Buffer::Accumulator, accCount++), cols * cbk, cbk);
          if (biasAddr) ctx.emitter.emit(makeVecUnary(VecOp::Copy, acc, operand(Buffer::Output, *biasAddr), r, cl, v));
          for (int64_t t = 0; t < taps; ++t) {
            int64_t kh = t / p.KW, kw = t % p.KW;
            SramOperand window = operand(Buffer::Input, inAddr + (kh * p.dH * w.tileCols + kw * p.dW) * cbk,
                                         p.sH * w.tileCols * cbk, p.sW * cbk);
            SramOperand weight = operand(Buffer::Weight, wAddr + t * cbk);
            bool init = t == 0 && !biasAddr;
            ctx.emitter.emit(makeVecBinary(init ? VecOp::Mul : VecOp::MulAcc, acc, window, weight, r, cl, v));
          }
          if (p.activation)
            ctx.emitter.emit(makeVecUnary(p.activation->op, acc, acc, r, cl, v, p.activation->imm0, p.activation->imm1));
          ctx.emitter.emit(makeStore(acc, p.outAddr + ((n * p.OH + oy0) * p.OW + ox0) * p.M + c0, p.OW * p.M, p.M, r, cl, v));
        }
  }
}

void lowerConvProblem(LowerContext& ctx, const ConvProblem& p, const NodeTiling& tiling) {
  if (p.group > 1 && p.group == p.C && p.group == p.M) return lowerDepthwise(ctx, p, tiling);
  lowerConvOnMatrix(ctx, p, tiling);
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
  const TensorLoc& x = ctx.loc(n.input(0));
  const Shape ws = n.input(1)->constant().shape();
  ConvProblem p;
  p.N = x.shape[0], p.C = x.shape[1], p.H = x.shape[2], p.W = x.shape[3];
  p.M = ws[0], p.KH = ws[2], p.KW = ws[3], p.group = n.attrInt("group");
  auto s = intsOr(n, "strides", {1, 1}), d = intsOr(n, "dilations", {1, 1}), pads = intsOr(n, "pads", {0, 0, 0, 0});
  p.sH = s[0], p.sW = s[1], p.dH = d[0], p.dW = d[1], p.pT = pads[0], p.pL = pads[1], p.pB = pads[2], p.pR = pads[3];
  const Shape ys = n.output(0)->type.staticShape();
  p.OH = ys[2], p.OW = ys[3];
  p.weights = constantFloats(n.input(1)->constant());
  if (n.hasInput(2)) p.bias = constantFloats(n.input(2)->constant());
  p.inAddr = x.addr;
  p.outAddr = ctx.loc(ctx.resultValue(n)).addr;
  p.activation = ctx.fusedActivation(n);
  lowerConvProblem(ctx, p, ctx.tiling(n));
}

/// Gemm/MatMul as a 1x1 convolution over the rows of A (rows = pixels, the last axis = channels).
void lowerRowsTimesMatrix(const Node& n, LowerContext& ctx, const std::vector<float>& bT, int64_t K, int64_t Nout,
                          std::vector<float> bias) {
  const TensorLoc& a = ctx.loc(n.input(0));
  ConvProblem p;
  p.C = K, p.W = a.pixels(), p.M = Nout, p.OW = p.W;
  p.weights = bT;
  p.bias = std::move(bias);
  p.inAddr = a.addr;
  p.outAddr = ctx.loc(ctx.resultValue(n)).addr;
  p.activation = ctx.fusedActivation(n);
  lowerConvProblem(ctx, p, ctx.tiling(n));
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
  lowerRowsTimesMatrix(n, ctx, w, K, N, bias);
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
  lowerRowsTimesMatrix(n, ctx, w, K, N, {});
}

const RegisterOpLowering kConv({"Conv"}, {checkConv, lowerConv});
const RegisterOpLowering kGemm({"Gemm"}, {checkGemm, lowerGemm});
const RegisterOpLowering kMatMul({"MatMul"}, {checkMatMul, lowerMatMul});

}  // namespace
}  // namespace tessel::npu::lower
