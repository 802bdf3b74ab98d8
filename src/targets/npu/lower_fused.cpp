// Lowering of a fused group (S0.2): a chain of NPU nodes around preset operators (conv -> relu -> conv -> add
// ...) split along H into row tiles that each compute the whole chain on their rows. A stage's output rows go
// straight into the on-chip input windows of the stages that read them (halo rows into the next tiles' windows
// too, the inter-tile edges of S0.4); only the group's result is stored to DRAM.
#include <algorithm>
#include <fmt/format.h>
#include <limits>
#include <memory>

#include "lower_conv.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

enum class StageKind { Matrix, Depthwise, Pool };

/// One node of the group (with its fused epilogue) and what it reads and feeds.
struct Stage {
  const Node* node = nullptr;
  const NodeTiling* tiling = nullptr;
  StageKind kind = StageKind::Matrix;
  ConvProblem conv;  ///< Matrix / Depthwise
  // Geometry of the window it reads: input H, W, C; output OH, OW, M; kernel, strides, pads, dilations.
  int64_t H = 1, W = 1, C = 1, OH = 1, OW = 1, M = 1, KH = 1, KW = 1, sH = 1, sW = 1, pT = 0, pL = 0, dH = 1, dW = 1;
  int producer = -1;           ///< stage whose output is this stage's input (-1: the group's input)
  bool inputOnChip = false;    ///< reads its producer's rows from an on-chip window (else from DRAM)
  std::vector<int> consumers;  ///< stages reading this stage's output
  bool toDram = false;         ///< the output is stored (it leaves the group)
  float pad = 0;               ///< value of the padding in the windows this stage reads
  int64_t windowCols = 0;      ///< columns of those windows (left padding, the image, right padding)
  /// A stage read only on chip: its epilogue's last step when that is a simple unary op (ReLU, Clip...), applied
  /// by the copies into the consumers' windows instead of in place (one vector pass over the tile less); Copy else.
  Activation intoWindows;
  std::unique_ptr<MatrixConv> matrix;
  std::unique_ptr<DepthwiseConv> depthwise;
  int32_t poolSums = -1;  ///< NodeTiling::globalPool of the group's last stage: the current image's pooled vector
  std::vector<std::pair<int64_t, int64_t>> newRows;  ///< per tile: output rows first computed in it [lo, hi)
  std::map<size_t, OnChipInput> windows;             ///< per tile: the window this stage reads

  /// Input rows (padded coordinates, may be negative or beyond H) of output rows [lo, hi).
  std::pair<int64_t, int64_t> inputRows(int64_t lo, int64_t hi) const {
    return {lo * sH - pT, (hi - 1) * sH - pT + (KH - 1) * dH + 1};
  }
};

class FusedGroup {
 public:
  FusedGroup(LowerContext& ctx, const GroupSchedule& g, uint32_t index) : ctx_(ctx), group_(g), index_(index) {}

  void lower() {
    buildStages();
    planRows();
    const int64_t N = stages_.front().conv.N;
    for (int64_t n = 0; n < N; ++n)
      for (size_t t = 0; t < tiles_; ++t) {
        ctx_.builder.beginTile(index_, static_cast<uint32_t>(n * static_cast<int64_t>(tiles_) + static_cast<int64_t>(t)));
        if (n == 0 && t == 0) loadParameters();
        for (size_t s = 0; s < stages_.size(); ++s) computeStage(s, n, t);
        for (Stage& st : stages_) st.windows.erase(t);
      }
  }

 private:
  void buildStages() {
    std::map<std::string, const Node*> byName;
    for (const auto& n : ctx_.body().nodes()) byName[n->name()] = n.get();
    std::map<const Value*, int> producerOf;
    for (const NodeTiling& t : group_.tiling) {
      Stage st;
      st.node = byName.at(t.node);
      st.tiling = &t;
      const Node& n = *st.node;
      if (opFamily(n) == OpFamily::Pool) {
        const PoolGeometry q = poolGeometry(n);
        st.kind = StageKind::Pool;
        st.H = q.H, st.W = q.W, st.C = q.C, st.OH = q.OH, st.OW = q.OW, st.M = q.C, st.KH = q.KH, st.KW = q.KW;
        st.sH = q.sH, st.sW = q.sW, st.pT = q.pT, st.pL = q.pL;
        st.pad = q.isMax ? -std::numeric_limits<float>::infinity() : 0.0f;
        st.conv.N = q.N;
      } else {
        st.conv = convProblem(ctx_, n);
        const ConvProblem& p = st.conv;
        st.kind = p.depthwise() ? StageKind::Depthwise : StageKind::Matrix;
        st.H = p.H, st.W = p.W, st.C = p.C, st.OH = p.OH, st.OW = p.OW, st.M = p.M, st.KH = p.KH, st.KW = p.KW;
        st.sH = p.sH, st.sW = p.sW, st.pT = p.pT, st.pL = p.pL, st.dH = p.dH, st.dW = p.dW;
      }
      st.windowCols = std::max(st.pL + st.W, (st.OW - 1) * st.sW + (st.KW - 1) * st.dW + 1);
      auto it = producerOf.find(n.input(0));
      if (it != producerOf.end()) {
        st.producer = it->second;
        st.inputOnChip = std::find(group_.onChip.begin(), group_.onChip.end(), n.input(0)->name()) != group_.onChip.end();
        stages_[static_cast<size_t>(it->second)].consumers.push_back(static_cast<int>(stages_.size()));
      }
      producerOf[ctx_.resultValue(n)] = static_cast<int>(stages_.size());
      stages_.push_back(std::move(st));
    }
    for (Stage& st : stages_) {
      const Value* out = ctx_.resultValue(*st.node);
      size_t onChip = 0;
      for (const Stage& other : stages_) onChip += other.inputOnChip && other.node->input(0) == out;
      st.toDram = out->uses().size() != onChip || ctx_.isBodyOutput(out);
      if (!st.toDram && st.kind != StageKind::Pool && !st.conv.epilogue.empty() && st.conv.epilogue.back().unary &&
          !isComplexVecOp(st.conv.epilogue.back().op.op)) {
        st.intoWindows = st.conv.epilogue.back().op;
        st.conv.epilogue.pop_back();
        st.conv.epilogueLoc.pop_back();
      }
      if (st.kind == StageKind::Matrix) {
        TESSEL_ASSERT(!st.inputOnChip || (!st.tiling->phased && st.conv.group == 1 && st.tiling->variant == "matrix"),
                      "npu lowering: a fused convolution reading on chip must be unphased and ungrouped");
        st.matrix = std::make_unique<MatrixConv>(ctx_, *st.node, st.conv, *st.tiling);
      } else if (st.kind == StageKind::Depthwise) {
        st.depthwise = std::make_unique<DepthwiseConv>(ctx_, *st.node, st.conv, *st.tiling);
      }
    }
  }

  /// The tile plan (S0.2, S0.4): the last stage's rows split evenly into the group's row tiles; every other
  /// stage computes, in each tile, the rows its consumers' windows need that no earlier tile computed.
  void planRows() {
    tiles_ = static_cast<size_t>(std::max<int64_t>(1, group_.rowTiles));
    const Stage& last = stages_.back();
    const int64_t T = ceilDiv(last.OH, static_cast<int64_t>(tiles_));
    for (Stage& st : stages_) st.newRows.assign(tiles_, {0, 0});
    std::vector<int64_t> done(stages_.size(), 0);
    for (size_t t = 0; t < tiles_; ++t)
      for (size_t s = stages_.size(); s-- > 0;) {
        Stage& st = stages_[s];
        int64_t hi = 0;
        if (st.consumers.empty() || st.toDram) hi = std::min(last.OH, static_cast<int64_t>(t + 1) * T) * st.OH / last.OH;
        for (int c : st.consumers) {
          const auto [lo, h] = stages_[static_cast<size_t>(c)].newRows[t];
          if (h > lo) hi = std::max(hi, std::min(st.OH, stages_[static_cast<size_t>(c)].inputRows(lo, h).second));
        }
        if (t + 1 == tiles_) hi = st.OH;
        st.newRows[t] = {done[s], std::max(done[s], hi)};
        done[s] = st.newRows[t].second;
      }
  }

  void loadParameters() {
    for (Stage& st : stages_) {
      ctx_.builder.setNode(st.node->name());
      if (st.matrix) st.matrix->beginPass(0, 0, st.M);
      if (st.depthwise)
        for (int64_t c0 = 0; c0 < st.C; c0 += st.tiling->channels) st.depthwise->beginBlock(c0);
    }
  }

  /// The window stage `c` reads in tile t, created (and its padding filled) on first use.
  const OnChipInput& window(size_t c, size_t t) {
    Stage& st = stages_[c];
    auto it = st.windows.find(t);
    if (it != st.windows.end()) return it->second;
    const auto [lo, hi] = st.inputRows(st.newRows[t].first, st.newRows[t].second);
    OnChipInput w;
    w.rowLo = lo, w.rows = hi - lo, w.cols = st.windowCols;
    w.region = ctx_.region(Buffer::Input, static_cast<uint64_t>(w.rows * w.cols * st.C));
    ctx_.builder.setNode(st.node->name());
    auto fill = [&](int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
      if (rows <= 0 || cols <= 0) return;
      SramOperand box = ctx_.at(w.region, static_cast<uint64_t>((row0 * w.cols + col0) * st.C), w.cols * st.C, st.C);
      ctx_.emit(makeVecUnary(VecOp::Fill, box, box, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                             static_cast<uint32_t>(st.C), st.pad),
                w.region);
    };
    const int64_t top = std::clamp<int64_t>(-lo, 0, w.rows), bottom = std::clamp<int64_t>(hi - st.H, 0, w.rows - top);
    fill(0, top, 0, w.cols);
    fill(w.rows - bottom, bottom, 0, w.cols);
    fill(top, w.rows - top - bottom, 0, st.pL);
    fill(top, w.rows - top - bottom, st.pL + st.W, w.cols - st.pL - st.W);
    if (!st.inputOnChip && w.rows - top - bottom > 0) {  // the rows come from DRAM
      const TensorLoc& x = ctx_.loc(st.node->input(0));
      const int64_t S = x.pixelStride();
      ctx_.emit(makeLoad(ctx_.at(w.region, static_cast<uint64_t>((top * w.cols + st.pL) * st.C), w.cols * st.C, st.C),
                         x.addr + static_cast<uint64_t>((lo + top) * st.W * S), st.W * S, S,
                         static_cast<uint32_t>(w.rows - top - bottom), static_cast<uint32_t>(st.W), static_cast<uint32_t>(st.C)),
                w.region);
    }
    return st.windows[t] = w;
  }

  void computeStage(size_t s, int64_t n, size_t t) {
    Stage& st = stages_[s];
    const auto [lo, hi] = st.newRows[t];
    if (hi <= lo) return;
    // Convolutions load their own input from DRAM; a pool at the start of the group reads a window too.
    const OnChipInput* in = st.inputOnChip || st.kind == StageKind::Pool ? &window(s, t) : nullptr;
    ctx_.builder.setNode(st.node->name());
    const NodeTiling& tl = *st.tiling;
    for (int64_t r0 = lo; r0 < hi; r0 += tl.rows)
      for (int64_t ox0 = 0; ox0 < st.OW; ox0 += tl.cols) {
        const int64_t rows = std::min(tl.rows, hi - r0), cols = std::min(tl.cols, st.OW - ox0);
        const TileAt at{(n * st.OH + r0) * st.OW + ox0, 0};
        if (st.kind == StageKind::Matrix) {
          const int32_t acc = st.matrix->computeTile(n, r0, rows, ox0, cols, in);
          finish(st, acc, n, t, r0, rows, ox0, cols, 0, st.M, st.matrix->bias(), at);
        } else {
          for (int64_t c0 = 0; c0 < st.C; c0 += tl.channels) {
            const int64_t ck = std::min(tl.channels, st.C - c0);
            int32_t acc = -1;
            if (st.kind == StageKind::Depthwise) {
              st.depthwise->useBlock(c0);
              acc = st.depthwise->computeTile(n, r0, rows, ox0, cols, in);
            } else {
              acc = poolTileOnChip(ctx_, *st.node, r0, rows, ox0, cols, c0, ck, *in);
            }
            finish(st, acc, n, t, r0, rows, ox0, cols, c0, ck, -1, TileAt{at.pixel, c0});
          }
        }
      }
  }

  /// Bias, epilogue, then the store (the group's result) and/or copies into the consumers' windows.
  void finish(Stage& st, int32_t acc, int64_t n, size_t t, int64_t r0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0,
              int64_t ck, int32_t bias, TileAt at) {
    if (st.toDram && st.kind != StageKind::Pool) {
      TESSEL_ASSERT(!st.conv.globalPool || (st.kind == StageKind::Matrix && &st == &stages_.back()),
                    "npu lowering: a fused group reduces a global pool in its last, matrix-unit stage only");
      finishTile(ctx_, st.conv, acc, rows, cols, ck, bias, at, &st.poolSums);
    } else if (st.toDram) {  // a pool: its epilogue is applied already (poolTileOnChip)
      const TensorLoc& y = ctx_.loc(ctx_.resultValue(*st.node));
      ctx_.emit(makeStore(ctx_.at(acc, 0, cols * ck, ck), at.in(y.addr, y.pixelStride()), st.OW * y.pixelStride(),
                          y.pixelStride(), static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), static_cast<uint32_t>(ck)),
                -1, acc);
    } else if (st.kind != StageKind::Pool) {
      SramOperand tile = ctx_.at(acc, 0, cols * ck, ck);
      auto r = static_cast<uint32_t>(rows), c = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(ck);
      if (bias >= 0) ctx_.emit(makeVecBinary(VecOp::Add, tile, tile, ctx_.at(bias), r, c, v), acc, acc, bias);
      applyEpilogue(ctx_, st.conv, acc, rows, cols, ck, at);
    }
    (void)n;
    for (int c : st.consumers)
      if (stages_[static_cast<size_t>(c)].inputOnChip) copyToWindows(static_cast<size_t>(c), t, st.intoWindows, acc, r0, rows, ox0, cols, c0, ck);
  }

  /// Copies output rows [r0, r0 + rows) of a stage into every window of consumer `c` that holds some of them:
  /// the current tile's and, for the halo, later tiles'; `f` (the stage's intoWindows) is applied on the way.
  void copyToWindows(size_t c, size_t t, const Activation& f, int32_t acc, int64_t r0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0, int64_t ck) {
    Stage& con = stages_[c];
    for (size_t u = t; u < tiles_; ++u) {
      const auto [nlo, nhi] = con.newRows[u];
      if (nhi <= nlo) continue;
      const auto [wlo, whi] = con.inputRows(nlo, nhi);
      if (wlo >= r0 + rows) break;
      const int64_t a = std::max(r0, wlo), b = std::min(r0 + rows, whi);
      if (b <= a) continue;
      const OnChipInput& w = window(c, u);
      SramOperand src = ctx_.at(acc, static_cast<uint64_t>((a - r0) * cols * ck), cols * ck, ck);
      SramOperand dst = ctx_.at(w.region, static_cast<uint64_t>(((a - w.rowLo) * w.cols + con.pL + ox0) * con.C + c0),
                                w.cols * con.C, con.C);
      ctx_.emit(makeVecUnary(f.op, dst, src, static_cast<uint32_t>(b - a), static_cast<uint32_t>(cols), static_cast<uint32_t>(ck),
                             f.imm0, f.imm1),
                w.region, acc);
    }
  }

  LowerContext& ctx_;
  const GroupSchedule& group_;
  uint32_t index_;
  std::vector<Stage> stages_;
  size_t tiles_ = 1;
};

}  // namespace

void lowerFusedGroup(LowerContext& ctx, const GroupSchedule& group, uint32_t groupIndex) {
  FusedGroup(ctx, group, groupIndex).lower();
}

}  // namespace tessel::npu::lower
