// Lowering of a channel chain (GroupSchedule::channelChain): a depthwise convolution and the 1x1 convolution that
// reads its result, as MobileNet's inverted residuals have them (expand -> depthwise -> project). Tile by tile, the
// depthwise convolution computes one channel block at a time; the block's output tile goes through the depthwise
// epilogue straight into the input buffer, where the 1x1 convolution's gemms read it as one block of input
// channels, accumulating over the blocks into one accumulator tile of all output channels. The depthwise result
// never goes to DRAM, and no window holds all its channels: the on-chip footprint is one block's, so the chain
// fits a small input buffer that row-tile fusion (lower_fused.cpp), whose windows hold every channel, does not.
#include <algorithm>
#include <fmt/format.h>
#include <memory>
#include <tuple>

#include "lower_conv.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {

namespace {

bool pointwise(const ConvGeometry& p) {
  return p.KH == 1 && p.KW == 1 && p.sH == 1 && p.sW == 1 && !p.pT && !p.pL && !p.pB && !p.pR && p.group == 1;
}

/// Why the result of `producer` after its `epilogue` cannot stay on chip as the input of `consumer` in a chain: the
/// epilogue is not all unary steps, `consumer` does not read that result or not alone, or it is a subgraph output.
std::string onChipRefusal(const Graph& body, const Node& producer, const std::vector<const Node*>& epilogue, const Node& consumer,
                          const char* what) {
  const Value* result = epilogue.empty() ? producer.output(0) : epilogue.back()->output(0);
  if (consumer.input(0) != result) return fmt::format("'{}' does not read the {} result", consumer.name(), what);
  const auto steps = epilogueSteps(producer.output(0), epilogue);
  if (!steps || std::any_of(steps->begin(), steps->end(), [](const EpilogueStep& e) { return !e.unary; }))
    return fmt::format("'{}''s epilogue is not made of unary steps", producer.name());
  if (result->uses().size() != 1) return fmt::format("the {} result '{}' has other readers", what, result->name());
  const auto& outs = body.outputs();
  if (std::find(outs.begin(), outs.end(), result) != outs.end())
    return fmt::format("the {} result '{}' is an output of the subgraph", what, result->name());
  return "";
}

/// An epilogue without its last step, and that step (Copy when there is none): a chain applies it with the copy of a
/// tile into the input buffer instead of in place.
std::pair<std::vector<EpilogueStep>, Activation> splitLastStep(std::vector<EpilogueStep> steps) {
  Activation last;
  if (!steps.empty()) {
    last = steps.back().op;
    steps.pop_back();
  }
  return {std::move(steps), last};
}

/// One gemm over rows x cols pixels: region `d` from word `dOff` (pixels `pixel` words apart, rows `rowPixels`
/// pixels apart, by default cols) (+)= operand `a` (of region `aRegion`) x the k x n block at word `woff` of region `wgt`.
void emitGemm(LowerContext& ctx, int32_t d, uint64_t dOff, int64_t pixel, int32_t aRegion, SramOperand a, int32_t wgt, uint64_t woff,
              int64_t rows, int64_t cols, int64_t k, int64_t n, bool accumulate, int64_t rowPixels = 0) {
  Instruction gm;
  gm.opcode = Opcode::Gemm;
  gm.srcA = a;
  gm.srcB = ctx.at(wgt, woff);
  gm.dst = ctx.at(d, dOff, static_cast<uint64_t>((rowPixels > 0 ? rowPixels : cols) * pixel), static_cast<uint64_t>(pixel));
  gm.outer = static_cast<uint32_t>(rows), gm.inner = static_cast<uint32_t>(cols);
  gm.gemmK = static_cast<uint32_t>(k), gm.gemmN = static_cast<uint32_t>(n);
  gm.accumulate = accumulate;
  ctx.emit(gm, d, aRegion, wgt);
}

}  // namespace

std::string channelChainRefusal(const Graph& body, const Node& dw, const std::vector<const Node*>& dwEpilogue, const Node& conv) {
  if (!isOp(dw, "Conv") || dw.input(0)->type.dims->size() != 4 || !convGeometry(dw).depthwise())
    return fmt::format("'{}' is not a depthwise convolution", dw.name());
  if (!isOp(conv, "Conv")) return fmt::format("'{}' is not a convolution", conv.name());
  const ConvGeometry p = convGeometry(conv), d = convGeometry(dw);
  if (!pointwise(p)) return fmt::format("'{}' is not a 1x1 convolution of stride 1 without padding or groups", conv.name());
  if (d.N != 1 && d.N != p.N) return "batch sizes differ";
  return onChipRefusal(body, dw, dwEpilogue, conv, "depthwise");
}

std::string expandChainRefusal(const Graph& body, const Node& expand, const std::vector<const Node*>& epilogue, const Node& dw) {
  if (!isOp(expand, "Conv") || expand.input(0)->type.dims->size() != 4) return fmt::format("'{}' is not a convolution", expand.name());
  if (!pointwise(convGeometry(expand)))
    return fmt::format("'{}' is not a 1x1 convolution of stride 1 without padding or groups", expand.name());
  return onChipRefusal(body, expand, epilogue, dw, "expand");
}

namespace {

/// A stage's weights packed per depthwise block: all resident in one region loaded once, or each block's loaded by
/// every tile that uses it.
class BlockWeights {
 public:
  void stage(LowerContext& ctx, std::vector<std::vector<float>> packed, bool resident) {
    packed_ = std::move(packed);
    if (resident) {
      std::vector<float> all;
      for (const auto& b : packed_) offsets_.push_back(all.size()), all.insert(all.end(), b.begin(), b.end());
      resident_ = ctx.region(Buffer::Weight, all.size());
      loadContiguous(ctx, resident_, 0, ctx.addConstant(all), all.size());
    } else {
      for (const auto& b : packed_) streamed_.push_back(ctx.addConstant(b));
    }
  }
  /// The region holding block `block`'s weights (loaded now when streamed) and their offset in it.
  std::pair<int32_t, uint64_t> block(LowerContext& ctx, size_t block) const {
    if (resident_ >= 0) return {resident_, offsets_[block]};
    const int32_t r = ctx.region(Buffer::Weight, packed_[block].size());
    loadContiguous(ctx, r, 0, streamed_[block], packed_[block].size());
    return {r, 0};
  }

 private:
  std::vector<std::vector<float>> packed_;
  std::vector<uint64_t> offsets_;   ///< resident: each block's offset in the region
  std::vector<uint64_t> streamed_;  ///< streamed: each block's DRAM address
  int32_t resident_ = -1;
};

class ChannelChain {
 public:
  ChannelChain(LowerContext& ctx, const GroupSchedule& g) : ctx_(ctx) {
    std::map<std::string, const Node*> byName;
    for (const auto& n : ctx.body().nodes()) byName[n->name()] = n.get();
    const size_t d = g.tiling.size() == 3 ? 1 : 0;  // with an expand stage first
    dwNode_ = byName.at(g.tiling[d].node), convNode_ = byName.at(g.tiling[d + 1].node);
    dwt_ = &g.tiling[d], ct_ = &g.tiling[d + 1];
    if (d == 1) {
      exNode_ = byName.at(g.tiling[0].node), ext_ = &g.tiling[0];
      exp_ = convProblem(ctx, *exNode_);
      std::tie(exSteps_, exLast_) = splitLastStep(exp_.epilogue);
    }
    dwp_ = convProblem(ctx, *dwNode_);
    cp_ = convProblem(ctx, *convNode_);
    TESSEL_ASSERT(dwp_.depthwise() && cp_.C == dwp_.C && cp_.OH == dwp_.OH && cp_.OW == dwp_.OW,
                  "npu lowering: a channel chain needs a depthwise convolution and a 1x1 convolution of its result");
    // The depthwise epilogue's last unary step is applied by the copy into the input buffer (Copy when none).
    std::tie(steps_, last_) = splitLastStep(dwp_.epilogue);
    dw_ = std::make_unique<DepthwiseConv>(ctx, *dwNode_, dwp_, *dwt_);
  }

  void lower() {
    const int64_t rowsT = dwt_->rows, colsT = dwt_->cols;
    uint32_t tile = 0;
    for (int64_t n = 0; n < cp_.N; ++n)
      for (int64_t oy0 = 0; oy0 < cp_.OH; oy0 += rowsT)
        for (int64_t ox0 = 0; ox0 < cp_.OW; ox0 += colsT) {
          ctx_.beginTile(*dwNode_, tile);
          if (tile++ == 0) loadParameters();
          computeTile(n, oy0, std::min(rowsT, cp_.OH - oy0), ox0, std::min(colsT, cp_.OW - ox0));
        }
  }

 private:
  /// The depthwise blocks' weights and biases, the 1x1 convolution's bias and, when resident, its weights: once, in
  /// the first tile (they stay for the group).
  void loadParameters() {
    ctx_.builder.setNode(dwNode_->name());
    for (int64_t c0 = 0; c0 < dwp_.C; c0 += dwt_->channels)
      dw_->beginBlock(c0, dw_->unitsOf(c0, spatialTiles(dwp_, *dwt_), true));  // lower()'s tiles
    ctx_.builder.setNode(convNode_->name());
    weights_.stage(ctx_, packWeights(), ct_->weightsResident);
    if (!cp_.bias.empty() && ct_->biasLoad) {
      biasDram_ = ctx_.addConstant(cp_.bias);  // broadcast into each tile's accumulator by a load
    } else if (!cp_.bias.empty()) {
      // biasGemm: on the matrix unit, a gemm of the word 1.0 by the bias row starts each output block's accumulation;
      // else a vector add per tile.
      bias_ = ctx_.region(ct_->biasGemm ? Buffer::Weight : Buffer::Output, static_cast<uint64_t>(cp_.M));
      loadContiguous(ctx_, bias_, 0, ctx_.addConstant(cp_.bias), static_cast<uint64_t>(cp_.M));
    }
    // The bias gemms' input, one word holding 1.0 that both stages' bias gemms read.
    if ((!cp_.bias.empty() && ct_->biasGemm) || (exNode_ && !exp_.bias.empty() && ext_->biasGemm)) {
      one_ = ctx_.region(Buffer::Input, 1);
      loadContiguous(ctx_, one_, 0, ctx_.addConstant({1.0f}), 1);
    }
    if (!exNode_) return;
    ctx_.builder.setNode(exNode_->name());
    exWeights_.stage(ctx_, packExpandWeights(), ext_->weightsResident);
    if (!exp_.bias.empty() && ext_->biasLoad) {
      exBiasDram_ = ctx_.addConstant(exp_.bias);  // broadcast into each block's expanded pixels by a load
    } else if (!exp_.bias.empty() && !ext_->biasGemm) {  // else the bias rows ride in the packed weights
      exBias_ = ctx_.region(Buffer::Output, static_cast<uint64_t>(exp_.M));
      loadContiguous(ctx_, exBias_, 0, ctx_.addConstant(exp_.bias), static_cast<uint64_t>(exp_.M));
    }
  }

  /// The expand convolution's weights per depthwise block (its output channels c0 on): per slice of at most DIM
  /// input channels, per output block of at most DIM of the block's channels, a k x n block row-major.
  std::vector<std::vector<float>> packExpandWeights() const {
    const int64_t DIM = ctx_.cfg.dim;
    std::vector<std::vector<float>> out;
    for (int64_t c0 = 0; c0 < dwp_.C; c0 += dwt_->channels) {
      const int64_t ck = std::min(dwt_->channels, dwp_.C - c0), N = std::min(DIM, ck);
      std::vector<float> b;
      if (!exp_.bias.empty() && ext_->biasGemm)  // the block's bias row first (1 x ck: one row per output block)
        b.assign(exp_.bias.begin() + c0, exp_.bias.begin() + c0 + ck);
      const std::vector<float> w = packPointwiseWeights(exp_, 0, exp_.C, c0, ck, N, DIM);
      b.insert(b.end(), w.begin(), w.end());
      out.push_back(std::move(b));
    }
    return out;
  }

  /// The depthwise window of block c0 computed by the expand stage from the tile's input pixels `x` (rows y0..y0+ir,
  /// columns x0..x0+ic of the block's input, all its channels): the expand gemms into the accumulator, its bias and
  /// epilogue, the copy into the window (its last unary step on the way), and the window's padding ring zeroed (the
  /// expand of a padding pixel is not zero). With NodeTiling::windowInAcc the gemms write the window's inside in
  /// the accumulator directly, the last step is applied in place and the ring is zeroed there: no copy, and no
  /// window in the input buffer. A block whose taps run on the matrix unit (NodeTiling::matrixEvery) has its window
  /// in the input buffer either way, where the gemms read it; the copy there applies the last step, as in place.
  int32_t expandWindow(int32_t x, int64_t wy0, int64_t wx0, int64_t wr, int64_t wc, int64_t y0, int64_t x0, int64_t ir,
                       int64_t ic, int64_t c0, size_t block) {
    const int64_t DIM = ctx_.cfg.dim, K = exp_.C, ck = std::min(dwt_->channels, dwp_.C - c0), N = std::min(DIM, ck);
    const bool inAcc = dwt_->windowInAcc && !dw_->nextTileOnMatrix();
    const int64_t top = y0 - wy0, left = x0 - wx0;
    // Where the expanded pixels go: a region of their own, or the inside of the window (rows wc pixels apart).
    const uint64_t inside = inAcc ? static_cast<uint64_t>((top * wc + left) * ck) : 0;
    const int64_t rowPixels = inAcc ? wc : ic;
    ctx_.builder.setNode(exNode_->name());
    auto [wgt, woff] = exWeights_.block(ctx_, block);
    const int32_t e = ctx_.region(Buffer::Accumulator, static_cast<uint64_t>(inAcc ? wr * wc * ck : ir * ic * ck));
    // The bias on the matrix unit (a gemm of the word 1.0 by the bias row, K = 1), which the chain's vector unit,
    // busy with the depthwise taps and the copies, does not have to spare.
    const bool bias = !exp_.bias.empty() && ext_->biasGemm;
    if (bias)
      for (int64_t j0 = 0; j0 < ck; j0 += N) {
        const int64_t nb = std::min(N, ck - j0);
        emitGemm(ctx_, e, inside + static_cast<uint64_t>(j0), ck, one_, ctx_.at(one_, 0, 0, 0), wgt, woff, ir, ic, 1, nb, false,
                 rowPixels);
        woff += static_cast<uint64_t>(nb);
      }
    // NodeTiling::biasLoad: the bias broadcast into the expanded pixels by the load unit (DRAM strides 0).
    const bool biasLoaded = !exp_.bias.empty() && ext_->biasLoad;
    if (biasLoaded)
      ctx_.emit(makeLoad(ctx_.at(e, inside, rowPixels * ck, ck), exBiasDram_ + static_cast<uint64_t>(c0), 0, 0, static_cast<uint32_t>(ir),
                         static_cast<uint32_t>(ic), static_cast<uint32_t>(ck)),
                e);
    for (int64_t k0 = 0; k0 < K; k0 += DIM)
      for (int64_t j0 = 0; j0 < ck; j0 += N) {
        const int64_t k = std::min(DIM, K - k0), nb = std::min(N, ck - j0);
        emitGemm(ctx_, e, inside + static_cast<uint64_t>(j0), ck, x, ctx_.at(x, static_cast<uint64_t>(k0), ic * K, K), wgt, woff, ir,
                 ic, k, nb, bias || biasLoaded || k0 > 0, rowPixels);
        woff += static_cast<uint64_t>(k * nb);
      }
    const auto r = static_cast<uint32_t>(ir), c = static_cast<uint32_t>(ic), v = static_cast<uint32_t>(ck);
    const SramOperand etile = ctx_.at(e, inside, rowPixels * ck, ck);
    if (exBias_ >= 0)
      ctx_.emit(makeVecBinary(VecOp::Add, etile, etile, ctx_.at(exBias_, static_cast<uint64_t>(c0)), r, c, v), e, e, exBias_);
    applyUnarySteps(ctx_, exSteps_, e, etile, r, c, v);
    ctx_.builder.setNode(dwNode_->name());
    int32_t w = e;
    if (inAcc) {
      if (exLast_.op != VecOp::Copy) ctx_.emit(makeVecUnary(exLast_.op, etile, etile, r, c, v, exLast_.imm0, exLast_.imm1), e, e);
    } else {
      w = ctx_.region(Buffer::Input, static_cast<uint64_t>(wr * wc * ck));
      ctx_.emit(makeVecUnary(exLast_.op, ctx_.at(w, static_cast<uint64_t>((top * wc + left) * ck), wc * ck, ck), etile, r, c, v,
                             exLast_.imm0, exLast_.imm1),
                w, e);
    }
    auto fill = [&](int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
      if (rows <= 0 || cols <= 0) return;
      const SramOperand box = ctx_.at(w, static_cast<uint64_t>((row0 * wc + col0) * ck), wc * ck, ck);
      ctx_.emit(makeVecUnary(VecOp::Fill, box, box, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), v, 0.0f), w);
    };
    fill(0, top, 0, wc);
    fill(top + ir, wr - top - ir, 0, wc);
    fill(top, ir, 0, left);
    fill(top, ir, left + ic, wc - left - ic);
    return w;
  }

  /// The 1x1 convolution's weights per depthwise block: per slice of at most DIM of the block's channels, per
  /// output block of at most DIM channels (the tiling's gemm width), a k x n block row-major.
  std::vector<std::vector<float>> packWeights() const {
    const int64_t DIM = ctx_.cfg.dim, N = std::min({ct_->channels, DIM, cp_.M});
    std::vector<std::vector<float>> out;
    for (int64_t c0 = 0; c0 < cp_.C; c0 += dwt_->channels)
      out.push_back(packPointwiseWeights(cp_, c0, std::min(dwt_->channels, cp_.C - c0), 0, cp_.M, N, DIM));
    return out;
  }

  void computeTile(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols) {
    const int64_t DIM = ctx_.cfg.dim, N = std::min({ct_->channels, DIM, cp_.M}), M = cp_.M;
    auto r = static_cast<uint32_t>(rows), c = static_cast<uint32_t>(cols);
    const TileAt at{(n * cp_.OH + oy0) * cp_.OW + ox0, 0};
    ctx_.builder.setNode(convNode_->name());
    const int32_t acc = ctx_.region(Buffer::Accumulator, static_cast<uint64_t>(rows * cols * M));
    bool started = cp_.residualInAcc;
    if (cp_.residualInAcc) {  // the residual's tile first; every gemm accumulates onto it
      const TensorLoc& o = cp_.epilogueLoc.front();
      ctx_.emit(makeLoad(ctx_.at(acc, 0, cols * M, M), at.in(o.addr, o.pixelStride()), cp_.OW * o.pixelStride(), o.pixelStride(),
                         r, c, static_cast<uint32_t>(M)),
                acc);
    }
    const bool biasGemm = !cp_.bias.empty() && ct_->biasGemm;
    if (!cp_.bias.empty() && ct_->biasLoad) {  // NodeTiling::biasLoad (never with residualInAcc)
      ctx_.emit(makeLoad(ctx_.at(acc, 0, cols * M, M), biasDram_, 0, 0, r, c, static_cast<uint32_t>(M)), acc);
      started = true;
    }
    if (biasGemm) {
      for (int64_t j0 = 0; j0 < M; j0 += N)
        emitGemm(ctx_, acc, static_cast<uint64_t>(j0), M, one_, ctx_.at(one_, 0, 0, 0), bias_, static_cast<uint64_t>(j0), rows, cols,
                 1, std::min(N, M - j0), started);
      started = true;
    }
    // With an expand stage: the tile's input pixels (the depthwise window's part inside the image, all the expand's
    // input channels), loaded once; each block's window is computed from them.
    const int64_t wy0 = oy0 * dwp_.sH - dwp_.pT, wx0 = ox0 * dwp_.sW - dwp_.pL, wr = dwp_.inRows(rows), wc = dwp_.inCols(cols);
    const int64_t y0 = std::max<int64_t>(0, wy0), x0 = std::max<int64_t>(0, wx0);
    const int64_t ir = std::min(dwp_.H, wy0 + wr) - y0, ic = std::min(dwp_.W, wx0 + wc) - x0;
    int32_t x = -1, next = -1;
    if (exNode_) {
      TESSEL_ASSERT(ir > 0 && ic > 0, "npu lowering: a channel chain's depthwise window lies outside the image");
      ctx_.builder.setNode(exNode_->name());
      const TensorLoc& xl = ctx_.loc(exNode_->input(0));
      const int64_t xs = xl.pixelStride(), K = exp_.C;
      x = ctx_.region(Buffer::Input, static_cast<uint64_t>(ir * ic * K));
      ctx_.emit(makeLoad(ctx_.at(x, 0, ic * K, K), xl.addr + static_cast<uint64_t>(((n * dwp_.H + y0) * dwp_.W + x0) * xs),
                         dwp_.W * xs, xs, static_cast<uint32_t>(ir), static_cast<uint32_t>(ic), static_cast<uint32_t>(K)),
                x);
    } else {
      // Each block's window is loaded before the previous block's result is copied out: regions are allocated in
      // the order they are made, so the load of block b + 1 does not wait for block b's copy.
      ctx_.builder.setNode(dwNode_->name());
      next = dw_->loadWindow(n, oy0, rows, ox0, cols, 0);
    }
    size_t block = 0;
    for (int64_t c0 = 0; c0 < dwp_.C; c0 += dwt_->channels, ++block) {
      const int64_t ck = std::min(dwt_->channels, dwp_.C - c0);
      const auto v = static_cast<uint32_t>(ck);
      int32_t window = next;
      if (exNode_) {
        window = expandWindow(x, wy0, wx0, wr, wc, y0, x0, ir, ic, c0, block);
      } else if (c0 + dwt_->channels < dwp_.C) {
        ctx_.builder.setNode(dwNode_->name());
        next = dw_->loadWindow(n, oy0, rows, ox0, cols, c0 + dwt_->channels);
      }
      ctx_.builder.setNode(dwNode_->name());
      dw_->useBlock(c0);
      const int32_t dacc = dw_->computeTile(n, oy0, rows, ox0, cols, nullptr, window);
      const SramOperand dtile = ctx_.at(dacc, 0, cols * ck, ck);
      applyUnarySteps(ctx_, steps_, dacc, dtile, r, c, v);
      const int32_t in = ctx_.region(Buffer::Input, static_cast<uint64_t>(rows * cols * ck));
      ctx_.emit(makeVecUnary(last_.op, ctx_.at(in, 0, cols * ck, ck), dtile, r, c, v, last_.imm0, last_.imm1), in, dacc);
      ctx_.builder.setNode(convNode_->name());
      auto [wgt, woff] = weights_.block(ctx_, block);
      for (int64_t k0 = 0; k0 < ck; k0 += DIM)
        for (int64_t j0 = 0; j0 < M; j0 += N) {
          const int64_t k = std::min(DIM, ck - k0), nb = std::min(N, M - j0);
          emitGemm(ctx_, acc, static_cast<uint64_t>(j0), M, in, ctx_.at(in, static_cast<uint64_t>(k0), cols * ck, ck), wgt, woff, rows,
                   cols, k, nb, started || k0 > 0 || c0 > 0);
          woff += static_cast<uint64_t>(k * nb);
        }
    }
    finishTile(ctx_, cp_, acc, rows, cols, M, biasGemm ? -1 : bias_, at, &poolSums_);  // a bias gemm added it already
  }

  LowerContext& ctx_;
  const Node *dwNode_ = nullptr, *convNode_ = nullptr;
  const NodeTiling *dwt_ = nullptr, *ct_ = nullptr;
  ConvProblem dwp_, cp_;
  // The expand stage (a 1x1 convolution making the depthwise input), when the chain has one.
  const Node* exNode_ = nullptr;
  const NodeTiling* ext_ = nullptr;
  ConvProblem exp_;
  std::vector<EpilogueStep> exSteps_;  ///< its epilogue but the last step
  Activation exLast_;                  ///< that last step (Copy when none), applied by the copy into the window
  BlockWeights exWeights_;  ///< its weights per depthwise block
  int32_t exBias_ = -1;     ///< its bias, added by the vector unit (no biasGemm)
  std::vector<EpilogueStep> steps_;  ///< the depthwise epilogue but its last step
  Activation last_;                  ///< that last step (Copy when none), applied by the copy into the input buffer
  std::unique_ptr<DepthwiseConv> dw_;
  BlockWeights weights_;  ///< the 1x1 weights per depthwise block
  int32_t bias_ = -1, one_ = -1;  ///< bias_: the 1x1 bias row (weight buffer); one_: a word of 1.0
  uint64_t biasDram_ = 0, exBiasDram_ = 0;  ///< NodeTiling::biasLoad: the 1x1 and expand biases in DRAM
  int32_t poolSums_ = -1;  ///< NodeTiling::globalPool of the 1x1 convolution: the current image's pooled vector
};

}  // namespace

void lowerChannelChain(LowerContext& ctx, const GroupSchedule& group) {
  TESSEL_ASSERT(group.channelChain && (group.tiling.size() == 2 || group.tiling.size() == 3), "npu lowering: not a channel chain");
  ChannelChain(ctx, group).lower();
}

}  // namespace tessel::npu::lower
