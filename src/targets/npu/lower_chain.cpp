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

#include "lower_conv.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {

std::string channelChainRefusal(const Graph& body, const Node& dw, const std::vector<const Node*>& dwEpilogue, const Node& conv) {
  if (!isOp(dw, "Conv") || dw.input(0)->type.dims->size() != 4 || !convGeometry(dw).depthwise())
    return fmt::format("'{}' is not a depthwise convolution", dw.name());
  if (!isOp(conv, "Conv")) return fmt::format("'{}' is not a convolution", conv.name());
  const ConvGeometry p = convGeometry(conv), d = convGeometry(dw);
  if (p.KH != 1 || p.KW != 1 || p.sH != 1 || p.sW != 1 || p.pT || p.pL || p.pB || p.pR || p.group != 1)
    return fmt::format("'{}' is not a 1x1 convolution of stride 1 without padding or groups", conv.name());
  if (d.N != 1 && d.N != p.N) return "batch sizes differ";
  const Value* result = dwEpilogue.empty() ? dw.output(0) : dwEpilogue.back()->output(0);
  if (conv.input(0) != result) return fmt::format("'{}' does not read the depthwise result", conv.name());
  const auto steps = epilogueSteps(dw.output(0), dwEpilogue);
  if (!steps || std::any_of(steps->begin(), steps->end(), [](const EpilogueStep& e) { return !e.unary; }))
    return fmt::format("'{}''s epilogue is not made of unary steps", dw.name());
  if (result->uses().size() != 1) return fmt::format("the depthwise result '{}' has other readers", result->name());
  const auto& outs = body.outputs();
  if (std::find(outs.begin(), outs.end(), result) != outs.end())
    return fmt::format("the depthwise result '{}' is an output of the subgraph", result->name());
  return "";
}

namespace {

class ChannelChain {
 public:
  ChannelChain(LowerContext& ctx, const GroupSchedule& g) : ctx_(ctx) {
    std::map<std::string, const Node*> byName;
    for (const auto& n : ctx.body().nodes()) byName[n->name()] = n.get();
    dwNode_ = byName.at(g.tiling[0].node), convNode_ = byName.at(g.tiling[1].node);
    dwt_ = &g.tiling[0], ct_ = &g.tiling[1];
    dwp_ = convProblem(ctx, *dwNode_);
    cp_ = convProblem(ctx, *convNode_);
    TESSEL_ASSERT(dwp_.depthwise() && cp_.C == dwp_.C && cp_.OH == dwp_.OH && cp_.OW == dwp_.OW,
                  "npu lowering: a channel chain needs a depthwise convolution and a 1x1 convolution of its result");
    // The depthwise epilogue's last unary step is applied by the copy into the input buffer (Copy when none).
    steps_ = dwp_.epilogue;
    if (!steps_.empty()) {
      last_ = steps_.back().op;
      steps_.pop_back();
    }
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
    for (int64_t c0 = 0; c0 < dwp_.C; c0 += dwt_->channels) dw_->beginBlock(c0);
    ctx_.builder.setNode(convNode_->name());
    packed_ = packWeights();
    if (ct_->weightsResident) {
      std::vector<float> all;
      for (const auto& b : packed_) all.insert(all.end(), b.begin(), b.end());
      resident_ = ctx_.region(Buffer::Weight, all.size());
      loadContiguous(ctx_, resident_, 0, ctx_.addConstant(all), all.size());
      uint64_t off = 0;
      for (const auto& b : packed_) offsets_.push_back(off), off += b.size();
    } else {
      for (const auto& b : packed_) streamed_.push_back(ctx_.addConstant(b));
    }
    if (!cp_.bias.empty()) {
      bias_ = ctx_.region(Buffer::Output, static_cast<uint64_t>(cp_.M));
      loadContiguous(ctx_, bias_, 0, ctx_.addConstant(cp_.bias), static_cast<uint64_t>(cp_.M));
    }
  }

  /// The 1x1 convolution's weights per depthwise block: per slice of at most DIM of the block's channels, per
  /// output block of at most DIM channels (the tiling's gemm width), a k x n block row-major.
  std::vector<std::vector<float>> packWeights() const {
    const int64_t DIM = ctx_.cfg.dim, N = std::min({ct_->channels, DIM, cp_.M});
    std::vector<std::vector<float>> out;
    for (int64_t c0 = 0; c0 < cp_.C; c0 += dwt_->channels) {
      const int64_t ck = std::min(dwt_->channels, cp_.C - c0);
      std::vector<float> b;
      for (int64_t k0 = 0; k0 < ck; k0 += DIM)
        for (int64_t j0 = 0; j0 < cp_.M; j0 += N) {
          const int64_t k = std::min(DIM, ck - k0), nb = std::min(N, cp_.M - j0);
          for (int64_t r = 0; r < k; ++r)
            for (int64_t j = 0; j < nb; ++j) b.push_back(cp_.weights[(j0 + j) * cp_.C + c0 + k0 + r]);
        }
      out.push_back(std::move(b));
    }
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
    // Each block's window is loaded before the previous block's result is copied out: regions are allocated in the
    // order they are made, so the load of block b + 1 does not wait for block b's copy.
    ctx_.builder.setNode(dwNode_->name());
    int32_t next = dw_->loadWindow(n, oy0, rows, ox0, cols, 0);
    size_t block = 0;
    for (int64_t c0 = 0; c0 < dwp_.C; c0 += dwt_->channels, ++block) {
      const int64_t ck = std::min(dwt_->channels, dwp_.C - c0);
      const auto v = static_cast<uint32_t>(ck);
      ctx_.builder.setNode(dwNode_->name());
      const int32_t window = next;
      if (c0 + dwt_->channels < dwp_.C) next = dw_->loadWindow(n, oy0, rows, ox0, cols, c0 + dwt_->channels);
      dw_->useBlock(c0);
      const int32_t dacc = dw_->computeTile(n, oy0, rows, ox0, cols, nullptr, window);
      const SramOperand dtile = ctx_.at(dacc, 0, cols * ck, ck);
      applyUnarySteps(ctx_, steps_, dacc, dtile, r, c, v);
      const int32_t in = ctx_.region(Buffer::Input, static_cast<uint64_t>(rows * cols * ck));
      ctx_.emit(makeVecUnary(last_.op, ctx_.at(in, 0, cols * ck, ck), dtile, r, c, v, last_.imm0, last_.imm1), in, dacc);
      ctx_.builder.setNode(convNode_->name());
      int32_t wgt = resident_;
      uint64_t woff = ct_->weightsResident ? offsets_[block] : 0;
      if (!ct_->weightsResident) {
        wgt = ctx_.region(Buffer::Weight, packed_[block].size());
        loadContiguous(ctx_, wgt, 0, streamed_[block], packed_[block].size());
      }
      for (int64_t k0 = 0; k0 < ck; k0 += DIM)
        for (int64_t j0 = 0; j0 < M; j0 += N) {
          const int64_t k = std::min(DIM, ck - k0), nb = std::min(N, M - j0);
          Instruction gm;
          gm.opcode = Opcode::Gemm;
          gm.srcA = ctx_.at(in, static_cast<uint64_t>(k0), cols * ck, ck);
          gm.srcB = ctx_.at(wgt, woff);
          gm.dst = ctx_.at(acc, static_cast<uint64_t>(j0), cols * M, M);
          gm.outer = r, gm.inner = c;
          gm.gemmK = static_cast<uint32_t>(k), gm.gemmN = static_cast<uint32_t>(nb);
          gm.accumulate = started || k0 > 0 || c0 > 0;
          ctx_.emit(gm, acc, in, wgt);
          woff += static_cast<uint64_t>(k * nb);
        }
    }
    finishTile(ctx_, cp_, acc, rows, cols, M, bias_, at, &poolSums_);
  }

  LowerContext& ctx_;
  const Node *dwNode_ = nullptr, *convNode_ = nullptr;
  const NodeTiling *dwt_ = nullptr, *ct_ = nullptr;
  ConvProblem dwp_, cp_;
  std::vector<EpilogueStep> steps_;  ///< the depthwise epilogue but its last step
  Activation last_;                  ///< that last step (Copy when none), applied by the copy into the input buffer
  std::unique_ptr<DepthwiseConv> dw_;
  std::vector<std::vector<float>> packed_;  ///< the 1x1 weights per depthwise block
  std::vector<uint64_t> offsets_;           ///< resident: each block's offset in the region
  std::vector<uint64_t> streamed_;          ///< streamed: each block's DRAM address
  int32_t resident_ = -1, bias_ = -1;
  int32_t poolSums_ = -1;  ///< NodeTiling::globalPool of the 1x1 convolution: the current image's pooled vector
};

}  // namespace

void lowerChannelChain(LowerContext& ctx, const GroupSchedule& group) {
  TESSEL_ASSERT(group.channelChain && group.tiling.size() == 2, "npu lowering: not a channel chain");
  ChannelChain(ctx, group).lower();
}

}  // namespace tessel::npu::lower
