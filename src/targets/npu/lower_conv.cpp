// NPU operator interpreters of the matrix family: Conv (plain, grouped, packed for few input channels,
// depthwise on the vector unit), Gemm and MatMul (as a 1x1 convolution over rows). The tiles come from the
// schedule: output tiles of rows x columns, output channels in passes of several DIM-wide gemm blocks that
// share one input load, input channels in blocks, weights resident per pass or streamed per tile.
#include <algorithm>
#include <fmt/format.h>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include "lower_conv.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {

void applyUnarySteps(LowerContext& ctx, const std::vector<EpilogueStep>& steps, int32_t region, SramOperand tile,
                     uint32_t outer, uint32_t inner, uint32_t vecLen) {
  for (const EpilogueStep& e : steps) {
    TESSEL_ASSERT(e.unary && e.saved < 0, "npu lowering: this epilogue takes unary steps only");
    ctx.emit(makeVecUnary(e.op.op, tile, tile, outer, inner, vecLen, e.op.imm0, e.op.imm1), region, region);
  }
}

StagedNorm stageNorm(LowerContext& ctx, Buffer b, uint64_t scales, uint64_t biases, uint64_t words) {
  StagedNorm s;
  s.scale = ctx.region(b, words);
  loadContiguous(ctx, s.scale, 0, scales, words);
  s.bias = ctx.region(b, words);
  loadContiguous(ctx, s.bias, 0, biases, words);
  return s;
}

void applyNorm(LowerContext& ctx, const StagedNorm& norm, const std::vector<EpilogueStep>& steps, int32_t region,
               SramOperand tile, uint32_t outer, uint32_t inner, uint32_t vecLen, uint64_t channel) {
  ctx.emit(makeVecAffine(tile, tile, ctx.at(norm.scale, channel), ctx.at(norm.bias, channel), outer, inner, vecLen), region,
           region, norm.scale, norm.bias);
  applyUnarySteps(ctx, steps, region, tile, outer, inner, vecLen);
}

void applyEpilogue(LowerContext& ctx, const ConvProblem& p, int32_t acc, int64_t rows, int64_t cols, int64_t channels,
                   TileAt at) {
  auto r = static_cast<uint32_t>(rows), c = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(channels);
  SramOperand tile = ctx.at(acc, 0, cols * channels, channels);
  std::map<int, int32_t> saved;  // step -> copy of the tile as it was before that step
  for (const EpilogueStep& e : p.epilogue)
    if (e.saved >= 0) saved[e.saved] = -1;
  for (size_t k = p.residualInAcc ? 1 : 0; k < p.epilogue.size(); ++k) {
    const EpilogueStep& e = p.epilogue[k];
    if (auto it = saved.find(static_cast<int>(k)); it != saved.end()) {
      it->second = ctx.region(Buffer::Output, static_cast<uint64_t>(rows * cols * channels));
      ctx.emit(makeVecUnary(VecOp::Copy, ctx.at(it->second, 0, cols * channels, channels), tile, r, c, v), it->second, acc);
    }
    if (e.unary) {
      ctx.emit(makeVecUnary(e.op.op, tile, tile, r, c, v, e.op.imm0, e.op.imm1), acc, acc);
      continue;
    }
    int32_t other = -1;
    if (e.saved >= 0) {
      other = saved.at(e.saved);
    } else {
      const TensorLoc& o = p.epilogueLoc[k];
      other = ctx.region(Buffer::Output, static_cast<uint64_t>(rows * cols * channels));
      ctx.emit(makeLoad(ctx.at(other, 0, cols * channels, channels), at.in(o.addr, o.pixelStride()), p.OW * o.pixelStride(),
                        o.pixelStride(), r, c, v),
               other);
    }
    ctx.emit(makeVecBinary(e.op.op, tile, tile, ctx.at(other, 0, cols * channels, channels), r, c, v), acc, acc, other);
  }
}

void finishTile(LowerContext& ctx, const ConvProblem& p, int32_t acc, int64_t rows, int64_t cols, int64_t channels,
                int32_t bias, TileAt at, int32_t* poolSums) {
  auto r = static_cast<uint32_t>(rows), c = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(channels);
  SramOperand tile = ctx.at(acc, 0, cols * channels, channels);
  if (bias >= 0) ctx.emit(makeVecBinary(VecOp::Add, tile, tile, ctx.at(bias), r, c, v), acc, acc, bias);
  applyEpilogue(ctx, p, acc, rows, cols, channels, at);
  if (p.storeResult) ctx.emit(makeStore(tile, at.in(p.outAddr, p.outStride), p.OW * p.outStride, p.outStride, r, c, v), -1, acc);
  if (!p.globalPool) return;
  TESSEL_ASSERT(poolSums, "npu lowering: a global pool computed from tiles needs its sums");
  const int64_t image = p.OH * p.OW, pixel = at.pixel % image, n = at.pixel / image;
  const bool first = pixel == 0, last = pixel / p.OW + rows == p.OH && pixel % p.OW + cols == p.OW;
  if (first) *poolSums = ctx.region(Buffer::Output, static_cast<uint64_t>(channels));
  Instruction red;
  red.opcode = Opcode::VecReduce;
  red.vecOp = p.globalMax ? VecOp::ReduceMax : VecOp::ReduceSum;
  red.dst = ctx.at(*poolSums);
  red.srcA = tile;
  red.outer = r, red.inner = c, red.vecLen = v;
  red.accumulate = !first;
  ctx.emit(red, *poolSums, acc);
  if (!last) return;
  const SramOperand vec = ctx.at(*poolSums, 0, channels, channels);
  if (!p.globalMax)
    ctx.emit(makeVecUnary(VecOp::Scale, vec, vec, 1, 1, v, 1.0f / static_cast<float>(image), 0.0f), *poolSums, *poolSums);
  const int64_t stride = p.globalPool->pixelStride();
  ctx.emit(makeStore(vec, p.globalPool->addr + static_cast<uint64_t>(n * stride + at.channel), stride, stride, 1, 1, v), -1,
           *poolSums);
}

namespace {

/// How the input window of an output tile is held on chip. Unphased: one region with the whole window
/// ([row][col][channel], zero padding included). Phased (a strided convolution): one region per stride phase
/// (py, px) holding window rows py, py + sH, ... and columns px, px + sW, ...; a tap then reads its phase with
/// unit strides, so tiles are as large as for a stride-1 convolution of the same output.
struct Phasing {
  int64_t ph = 1, pw = 1;  ///< phases along H and W (the strides when phased, else 1)
  /// Rows and columns phase (py, px) needs for a tile of th x tw outputs (0 when no tap reads it).
  std::pair<int64_t, int64_t> extent(const ConvProblem& p, int64_t py, int64_t px, int64_t th, int64_t tw) const {
    int64_t maxRow = -1, maxCol = -1;
    for (int64_t kh = 0; kh < p.KH; ++kh)
      if ((kh * p.dH) % ph == py) maxRow = std::max(maxRow, kh * p.dH / ph);
    for (int64_t kw = 0; kw < p.KW; ++kw)
      if ((kw * p.dW) % pw == px) maxCol = std::max(maxCol, kw * p.dW / pw);
    if (maxRow < 0 || maxCol < 0) return {0, 0};
    return {maxRow + (th - 1) * (p.sH / ph) + 1, maxCol + (tw - 1) * (p.sW / pw) + 1};
  }
};

/// One gemm's reduction slice: `k` consecutive words of an input pixel's window in phase `phase`'s region,
/// starting at `offset`, and the weight rows they meet (for each k: input channel and kernel tap).
struct ReductionSlice {
  int64_t phase = 0, offset = 0, k = 0;
  std::vector<std::pair<int64_t, int64_t>> rows;  ///< per k: (channel within the group, tap kh*KW+kw)
};

/// The reduction slices of an input block of `cb` channels starting at channel `c0` (within the group), phase
/// by phase (`cols[phase]`: columns of that phase's region). PerTap: per tap, slices of <= DIM channels.
/// Packed: per kernel row, the (kernel column, channel) pairs of a phase are consecutive words (dilation 1
/// along W), cut into slices of <= DIM words. Stacked: every (kernel column, kernel row, channel) of a phase is
/// consecutive (the region holds, per column, the phase's kernel rows side by side), cut into slices of DIM.
std::vector<ReductionSlice> reductionSlices(const ConvProblem& p, const Phasing& ph, Reduction red, int64_t c0, int64_t cb,
                                            const std::vector<int64_t>& cols, int64_t DIM) {
  std::vector<ReductionSlice> out;
  for (int64_t py = 0; py < ph.ph; ++py)
    for (int64_t px = 0; px < ph.pw; ++px) {
      const int64_t phase = py * ph.pw + px, C = cols[static_cast<size_t>(phase)];
      if (C == 0) continue;
      std::vector<int64_t> khs, kws;
      for (int64_t kh = 0; kh < p.KH; ++kh)
        if ((kh * p.dH) % ph.ph == py) khs.push_back(kh);
      for (int64_t kw = 0; kw < p.KW; ++kw)
        if ((kw * p.dW) % ph.pw == px) kws.push_back(kw);
      if (red == Reduction::Stacked) {
        const auto nkh = static_cast<int64_t>(khs.size());
        const int64_t span = static_cast<int64_t>(kws.size()) * nkh * cb;
        for (int64_t s0 = 0; s0 < span; s0 += DIM) {
          ReductionSlice sl{phase, s0, std::min(DIM, span - s0), {}};
          for (int64_t w = s0; w < s0 + sl.k; ++w)
            sl.rows.push_back({c0 + w % cb, khs[static_cast<size_t>(w / cb % nkh)] * p.KW + kws[static_cast<size_t>(w / (cb * nkh))]});
          out.push_back(std::move(sl));
        }
        continue;
      }
      if (red == Reduction::Packed) {
        const int64_t span = static_cast<int64_t>(kws.size()) * cb, step = std::max<int64_t>(1, DIM / cb) * cb;
        for (int64_t kh : khs)
          for (int64_t s0 = 0; s0 < span; s0 += step) {
            ReductionSlice sl{phase, (kh * p.dH / ph.ph * C + kws[0] * p.dW / ph.pw) * cb + s0, std::min(step, span - s0), {}};
            for (int64_t k = 0; k < sl.k; ++k)
              sl.rows.push_back({c0 + (s0 + k) % cb, kh * p.KW + kws[static_cast<size_t>((s0 + k) / cb)]});
            out.push_back(std::move(sl));
          }
        continue;
      }
      for (int64_t k0 = 0; k0 < cb; k0 += DIM)
        for (int64_t kh : khs)
          for (int64_t kw : kws) {
            ReductionSlice sl{phase, (kh * p.dH / ph.ph * C + kw * p.dW / ph.pw) * cb + k0, std::min(DIM, cb - k0), {}};
            for (int64_t k = 0; k < sl.k; ++k) sl.rows.push_back({c0 + k0 + k, kh * p.KW + kw});
            out.push_back(std::move(sl));
          }
    }
  return out;
}

/// Of `count` indices start, start + step, ...: the first and the last inside [0, limit).
std::pair<int64_t, int64_t> inside(int64_t start, int64_t step, int64_t count, int64_t limit) {
  const int64_t first = start >= 0 ? 0 : (-start + step - 1) / step;
  const int64_t last = start + (count - 1) * step < limit ? count - 1 : (limit - 1 - start) / step;
  return {first, std::min(last, count - 1)};
}

/// Writes into `dst` (rows x cols x cb words, at dst's strides) the channels [c0, c0 + cb) of image n at image rows
/// y0, y0 + rowStep, ... and columns x0, x0 + colStep, ...; rows and columns outside the image are zeros (one
/// load with padding, or one fill when the box is all padding). `r` is dst's region.
void loadBox(LowerContext& ctx, const ConvProblem& p, int32_t r, SramOperand dst, int64_t n, int64_t c0, int64_t cb, int64_t y0,
             int64_t rowStep, int64_t rows, int64_t x0, int64_t colStep, int64_t cols) {
  const auto [i0, i1] = inside(y0, rowStep, rows, p.H);
  const auto [j0, j1] = inside(x0, colStep, cols, p.W);
  if (i1 < i0 || j1 < j0 || y0 + i0 * rowStep >= p.H || x0 + j0 * colStep >= p.W) {  // all padding
    ctx.emit(makeVecUnary(VecOp::Fill, dst, dst, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                          static_cast<uint32_t>(cb), 0.0f),
             r);
    return;
  }
  Instruction ld = makeLoad(dst, p.inAddr + ((n * p.H + y0 + i0 * rowStep) * p.W + x0 + j0 * colStep) * p.inStride + c0,
                            rowStep * p.W * p.inStride, colStep * p.inStride, static_cast<uint32_t>(i1 - i0 + 1),
                            static_cast<uint32_t>(j1 - j0 + 1), static_cast<uint32_t>(cb));
  ld.padTop = static_cast<uint8_t>(i0), ld.padBottom = static_cast<uint8_t>(rows - 1 - i1);
  ld.padLeft = static_cast<uint8_t>(j0), ld.padRight = static_cast<uint8_t>(cols - 1 - j1);
  TESSEL_ASSERT(i0 <= 15 && j0 <= 15 && rows - 1 - i1 <= 15 && cols - 1 - j1 <= 15,
                "npu lowering: a convolution tile needs more than 15 rows or columns of padding");
  ctx.emit(ld, r);
}

/// Where a load puts an input window: a new `inp` region (region -1), or `offset` words into an existing one.
struct InputSlot {
  int32_t region = -1;
  uint64_t offset = 0;
};

/// Loads phase (py, px) of the input window of the tile whose first output is (oy0, ox0), channels [c0, c0+cb)
/// of image n, as rows x cols x cb words into `into`; rows and columns outside the image are zeros. Returns the region.
int32_t loadPhase(LowerContext& ctx, const ConvProblem& p, const Phasing& ph, int64_t n, int64_t oy0, int64_t ox0, int64_t c0,
                  int64_t cb, int64_t py, int64_t px, int64_t rows, int64_t cols, InputSlot into = {}) {
  const int32_t r = into.region >= 0 ? into.region : ctx.region(Buffer::Input, static_cast<uint64_t>(rows * cols * cb));
  loadBox(ctx, p, r, ctx.at(r, into.offset, cols * cb, cb), n, c0, cb, oy0 * p.sH - p.pT + py, ph.ph, rows,
          ox0 * p.sW - p.pL + px, ph.pw, cols);
  return r;
}

/// Stacked: loads phase (py, px) of the input of the tile whose first output is (oy0, ox0) as one region row per
/// output row, holding for each of the phase's `cols` columns the phase's kernel rows side by side
/// ([row][col][kernel row][channel]), one load (or fill, when all padding) per kernel row.
int32_t loadStacked(LowerContext& ctx, const ConvProblem& p, const Phasing& ph, int64_t n, int64_t oy0, int64_t ox0, int64_t c0,
                    int64_t cb, int64_t py, int64_t px, int64_t rows, int64_t cols, InputSlot into) {
  std::vector<int64_t> khs;
  for (int64_t kh = 0; kh < p.KH; ++kh)
    if ((kh * p.dH) % ph.ph == py) khs.push_back(kh);
  const int64_t pixel = static_cast<int64_t>(khs.size()) * cb;
  const int32_t r = into.region >= 0 ? into.region : ctx.region(Buffer::Input, static_cast<uint64_t>(rows * cols * pixel));
  for (size_t i = 0; i < khs.size(); ++i)
    loadBox(ctx, p, r, ctx.at(r, into.offset + static_cast<uint64_t>(static_cast<int64_t>(i) * cb), cols * pixel, pixel), n, c0, cb,
            oy0 * p.sH - p.pT + khs[i] * p.dH, p.sH, rows, ox0 * p.sW - p.pL + px, ph.pw, cols);
  return r;
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

}  // namespace

std::vector<float> packPointwiseWeights(const ConvProblem& p, int64_t c0, int64_t cb, int64_t m0, int64_t mk, int64_t n, int64_t dim) {
  std::vector<float> out;
  packWeights(p, reductionSlices(p, Phasing{}, Reduction::PerTap, c0, cb, {1}, dim), 0, m0, mk, n, out);
  return out;
}

struct MatrixConv::Residual {
  ConvProblem p;
  NodeTiling t;
  std::unique_ptr<MatrixConv> conv;
};

namespace {

/// The residual convolution `r` of a convolution (NodeTiling::residualConv) as a problem: its input from DRAM, no bias
/// (added to the other's), no epilogue, nothing stored.
ConvProblem residualProblem(LowerContext& ctx, const Node& r) {
  ConvProblem p;
  static_cast<ConvGeometry&>(p) = convGeometry(r);
  p.weights = constantFloats(r.input(1)->constant());
  const TensorLoc& in = ctx.loc(r.input(0));
  p.inAddr = in.addr, p.inStride = in.pixelStride();
  p.storeResult = false;
  return p;
}

}  // namespace

MatrixConv::MatrixConv(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& t)
    : ctx_(ctx), node_(node), p_(p), t_(t), DIM_(ctx.cfg.dim), Cg_(p.C / p.group), Mg_(p.M / p.group) {
  red_ = reductionOf(t.variant);
  cb_ = red_ != Reduction::PerTap ? Cg_ : std::min(t.inChannels, Cg_);
  pass_ = t.coutPerPass > 0 ? std::min(t.coutPerPass, Mg_) : std::min(t.channels, Mg_);
  gemmN_ = std::min({t.channels, DIM_, Mg_});
  if (t.phased) ph_ = p.sH, pw_ = p.sW;
  if (!t.residualConv.empty()) {
    const Node& r = *ctx.residualConv(node);
    TESSEL_ASSERT(p.residualInAcc && p.group == 1 && !p.maxPool,
                  fmt::format("npu lowering: {}: a residual convolution needs residual_in_acc, groups of one, no max pool", node.name()));
    residual_ = std::make_shared<Residual>();
    residual_->p = residualProblem(ctx, r);
    residual_->t = residualConvTiling(t, r);
    residual_->conv = std::make_unique<MatrixConv>(ctx, r, residual_->p, residual_->t);
    TESSEL_ASSERT(residual_->conv->pass_ == pass_ && residual_->conv->gemmN_ == gemmN_ && residual_->p.OH == p.OH &&
                      residual_->p.OW == p.OW && residual_->p.N == p.N,
                  fmt::format("npu lowering: the residual convolution of {} has other tiles", node.name()));
  }
}

void MatrixConv::startGroup() {
  passBias_.clear(), streamed_.clear();
  if (residual_) residual_->conv->startGroup();
}

void MatrixConv::startTile() {
  tileRegion_ = -1, tileOffset_.clear();
  if (residual_) residual_->conv->startTile();
}

void MatrixConv::accumulateTile(int32_t acc, int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols) {
  started_.assign(static_cast<size_t>(ceilDiv(mk_, gemmN_)), false);
  for (int64_t c0 = 0, block = 0; c0 < Cg_; c0 += cb_, ++block) computeBlock(n, oy0, rows, ox0, cols, c0, block, acc, nullptr);
  TESSEL_ASSERT(std::all_of(started_.begin(), started_.end(), [](bool b) { return b; }),
                fmt::format("npu lowering: the residual convolution {} left part of a tile unwritten", node_.name()));
}

void MatrixConv::forEachTile(int64_t OH, int64_t OW, const std::function<void(int64_t, int64_t, int64_t, int64_t, int64_t)>& tile) {
  for (int64_t g = 0; g < p_.group; ++g) {
    if (t_.inputResident) {  // tiles outer: each tile's input blocks loaded once, read by every pass
      startGroup();
      for (int64_t n = 0; n < p_.N; ++n)
        for (int64_t oy0 = 0; oy0 < OH; oy0 += t_.rows)
          for (int64_t ox0 = 0; ox0 < OW; ox0 += t_.cols) {
            startTile();
            for (int64_t m0 = 0; m0 < Mg_; m0 += pass_) {  // each pass a tile of the window, as without
              ctx_.beginTile(node_, tileIndex_++);
              beginPass(g, m0, std::min(pass_, Mg_ - m0));
              tile(n, oy0, std::min(t_.rows, OH - oy0), ox0, std::min(t_.cols, OW - ox0));
            }
          }
      continue;
    }
    for (int64_t m0 = 0; m0 < Mg_; m0 += pass_) {
      bool first = true;
      for (int64_t n = 0; n < p_.N; ++n)
        for (int64_t oy0 = 0; oy0 < OH; oy0 += t_.rows)
          for (int64_t ox0 = 0; ox0 < OW; ox0 += t_.cols) {
            ctx_.beginTile(node_, tileIndex_++);
            if (first) beginPass(g, m0, std::min(pass_, Mg_ - m0));
            first = false;
            tile(n, oy0, std::min(t_.rows, OH - oy0), ox0, std::min(t_.cols, OW - ox0));
          }
    }
  }
}

void MatrixConv::lower() {
  if (p_.maxPool) return lowerPooled();
  forEachTile(p_.OH, p_.OW, [&](int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols) {
    const int32_t acc = computeTile(n, oy0, rows, ox0, cols, nullptr);
    finishTile(ctx_, p_, acc, rows, cols, mk_, bias_, TileAt{(n * p_.OH + oy0) * p_.OW + ox0, passChannel()}, &poolSums_[m0_]);
  });
}

namespace {

/// Output positions [lo, hi) within [a, b) whose tap k (of a window starting at o * stride - pad) lies in [0, extent).
std::pair<int64_t, int64_t> tapRange(int64_t a, int64_t b, int64_t k, int64_t stride, int64_t pad, int64_t extent) {
  const int64_t first = pad - k > 0 ? (pad - k + stride - 1) / stride : 0;
  const int64_t last = extent - 1 + pad - k >= 0 ? (extent - 1 + pad - k) / stride : -1;
  return {std::max(a, first), std::min(b, last + 1)};
}

}  // namespace

/// Per pooled tile: the convolution over the rows and columns its windows read ([cy0, cy1) x [cx0, cx1), clipped
/// to the map: padding taps are skipped, not filled), then per tap one vector max over the pooled outputs whose
/// tap lies inside the map, the first full-tile taps initialising the pooled tile (a -inf fill when no tap covers
/// all of it), then the bias, the epilogue and the store of the pooled tile. A max commutes with the per-channel
/// bias, so the convolution's tile is pooled as the gemms leave it.
void MatrixConv::lowerPooled() {
  const PoolGeometry& q = *p_.maxPool;
  ConvProblem out = p_;  // the stores and the epilogue address the pool's result
  out.OH = q.OH, out.OW = q.OW;
  forEachTile(q.OH, q.OW, [&](int64_t n, int64_t py0, int64_t pr, int64_t px0, int64_t pc) {
    const int64_t cy0 = std::max<int64_t>(0, py0 * q.sH - q.pT), cy1 = std::min(q.H, (py0 + pr - 1) * q.sH - q.pT + q.KH);
    const int64_t cx0 = std::max<int64_t>(0, px0 * q.sW - q.pL), cx1 = std::min(q.W, (px0 + pc - 1) * q.sW - q.pL + q.KW);
    const int64_t tr = cy1 - cy0, tc = cx1 - cx0, v = mk_;
    const int32_t acc = computeTile(n, cy0, tr, cx0, tc, nullptr);
    const int32_t pooled = ctx_.region(Buffer::Accumulator, static_cast<uint64_t>(pr * pc * v));
    struct Tap {
      int64_t kh, kw, r0, r1, c0, c1;
    };
    std::vector<Tap> taps, whole;
    for (int64_t kh = 0; kh < q.KH; ++kh)
      for (int64_t kw = 0; kw < q.KW; ++kw) {
        const auto [r0, r1] = tapRange(py0, py0 + pr, kh, q.sH, q.pT, q.H);
        const auto [c0, c1] = tapRange(px0, px0 + pc, kw, q.sW, q.pL, q.W);
        if (r0 >= r1 || c0 >= c1) continue;
        (r0 == py0 && r1 == py0 + pr && c0 == px0 && c1 == px0 + pc && whole.size() < 2 ? whole : taps)
            .push_back({kh, kw, r0, r1, c0, c1});
      }
    const auto src = [&](const Tap& t) {  // the tap's conv pixels of its pooled outputs
      const int64_t y = t.r0 * q.sH - q.pT + t.kh - cy0, x = t.c0 * q.sW - q.pL + t.kw - cx0;
      return ctx_.at(acc, static_cast<uint64_t>((y * tc + x) * v), q.sH * tc * v, q.sW * v);
    };
    const auto dst = [&](const Tap& t) {
      return ctx_.at(pooled, static_cast<uint64_t>(((t.r0 - py0) * pc + t.c0 - px0) * v), pc * v, v);
    };
    const auto count = [](int64_t a, int64_t b) { return static_cast<uint32_t>(b - a); };
    const SramOperand tile = ctx_.at(pooled, 0, pc * v, v);
    const auto R = count(0, pr), C = count(0, pc), V = count(0, v);
    if (whole.size() == 2)
      ctx_.emit(makeVecBinary(VecOp::Max, tile, src(whole[0]), src(whole[1]), R, C, V), pooled, acc, acc);
    else if (whole.size() == 1)
      ctx_.emit(makeVecUnary(VecOp::Copy, tile, src(whole[0]), R, C, V), pooled, acc);
    else
      ctx_.emit(makeVecUnary(VecOp::Fill, tile, tile, R, C, V, -std::numeric_limits<float>::infinity()), pooled);
    for (const Tap& t : taps)
      ctx_.emit(makeVecBinary(VecOp::Max, dst(t), dst(t), src(t), count(t.r0, t.r1), count(t.c0, t.c1), V), pooled,
                pooled, acc);
    finishTile(ctx_, out, pooled, pr, pc, v, bias_, TileAt{(n * q.OH + py0) * q.OW + px0, passChannel()});
  });
}

std::vector<int64_t> MatrixConv::phaseCols(int64_t th, int64_t tw) const {
  std::vector<int64_t> cols;
  for (int64_t py = 0; py < ph_; ++py)
    for (int64_t px = 0; px < pw_; ++px) cols.push_back(p_.phaseExtent(ph_, pw_, py, px, th, tw).second);
  return cols;
}

void MatrixConv::beginPass(int64_t g, int64_t m0, int64_t mk) {
  if (residual_) residual_->conv->beginPass(g, m0, mk);  // its weights first: its gemms start each tile
  g_ = g, m0_ = m0, mk_ = mk;
  if (t_.biasLoad && !p_.bias.empty() && !biasDram_) biasDram_ = ctx_.addConstant(p_.bias);
  if (t_.inputResident) {  // begun by an earlier tile: the pass's weights and bias are on chip already
    if (auto it = passBias_.find(m0); it != passBias_.end()) {
      bias_ = it->second;
      return;
    }
  } else {
    streamed_.clear();
  }
  // Staged per pass, or with the passes inside the tiles once per group by its first pass: the resident weights (then
  // every pass's, in one region: regions of passes loaded one by one could be split by the holes other long-lived
  // regions leave and never find room for the last) and the input scale or normalisation vectors.
  const bool groupStart = !t_.inputResident || passBias_.empty();
  if (groupStart) {
    resident_ = scale_ = -1;
    norm_ = {};
    residentOffsets_.clear();
  }
  const Phasing ph{ph_, pw_};
  if (t_.weightsResident && groupStart) {
    // The packing order of the weights does not depend on the tile's size.
    std::vector<float> all;
    const std::vector<int64_t> cols = phaseCols(std::min(t_.rows, p_.OH), std::min(t_.cols, p_.OW));
    for (int64_t m = t_.inputResident ? 0 : m0; m < (t_.inputResident ? Mg_ : m0 + 1); m += pass_)
      for (int64_t c0 = 0; c0 < Cg_; c0 += cb_) {
        residentOffsets_[m].push_back(all.size());
        packWeights(p_, reductionSlices(p_, ph, red_, c0, std::min(cb_, Cg_ - c0), cols, gemmN_), g, m,
                    m == m0 ? mk : std::min(pass_, Mg_ - m), gemmN_, all);
      }
    resident_ = ctx_.region(Buffer::Weight, all.size());
    loadContiguous(ctx_, resident_, 0, ctx_.addConstant(all), all.size());
  }
  bias_ = -1;
  if (!p_.bias.empty() && !biasDram_) {
    bias_ = ctx_.region(Buffer::Output, static_cast<uint64_t>(mk));
    std::vector<float> b(p_.bias.begin() + g * Mg_ + m0, p_.bias.begin() + g * Mg_ + m0 + mk);
    loadContiguous(ctx_, bias_, 0, ctx_.addConstant(b), static_cast<uint64_t>(mk));
  }
  if (t_.inputResident) passBias_[m0] = bias_;
  if (!groupStart) return;
  if (p_.inputScale) {
    scale_ = ctx_.region(Buffer::Output, static_cast<uint64_t>(Cg_));
    loadContiguous(ctx_, scale_, 0, *p_.inputScale + static_cast<uint64_t>(inChannel(g)), static_cast<uint64_t>(Cg_));
  }
  if (p_.inputAffine) {
    const auto first = static_cast<uint64_t>(inChannel(g));
    norm_ = stageNorm(ctx_, Buffer::Output, p_.inputAffine->first + first, p_.inputAffine->second + first, static_cast<uint64_t>(Cg_));
  }
}

void MatrixConv::prepareInput(int32_t region, uint64_t offset, int64_t outer, int64_t inner, int64_t c0, int64_t cb) {
  const SramOperand tile = ctx_.at(region, offset, inner * cb, cb);
  const auto o = static_cast<uint32_t>(outer), i = static_cast<uint32_t>(inner), v = static_cast<uint32_t>(cb);
  if (scale_ >= 0)
    ctx_.emit(makeVecBinary(VecOp::Mul, tile, tile, ctx_.at(scale_, static_cast<uint64_t>(c0)), o, i, v), region, region, scale_);
  if (norm_.scale >= 0) applyNorm(ctx_, norm_, p_.inputSteps, region, tile, o, i, v, static_cast<uint64_t>(c0));
}

int32_t MatrixConv::computeTile(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, const OnChipInput* window) {
  TESSEL_ASSERT(!window || (ph_ == 1 && pw_ == 1 && p_.group == 1 && red_ != Reduction::Stacked && scale_ < 0 &&
                              norm_.scale < 0),
                "npu lowering: an on-chip input needs an unphased, ungrouped, unstacked, unscaled conv");
  const int32_t acc = ctx_.region(Buffer::Accumulator, static_cast<uint64_t>(rows * cols * mk_));
  started_.assign(static_cast<size_t>(ceilDiv(mk_, gemmN_)), p_.residualInAcc || biasDram_.has_value());
  if (biasDram_) {  // NodeTiling::biasLoad (never with a residual in the accumulator): the pass's bias row in every pixel
    TESSEL_ASSERT(!residual_ && !p_.residualInAcc, fmt::format("npu lowering: {}: bias_load with a residual in the accumulator", node_.name()));
    ctx_.emit(makeLoad(ctx_.at(acc, 0, cols * mk_, mk_), *biasDram_ + static_cast<uint64_t>(g_ * Mg_ + m0_), 0, 0,
                       static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), static_cast<uint32_t>(mk_)),
              acc);
  } else if (residual_) {  // the residual convolution's gemms start the tile; every gemm of this one accumulates onto them
    residual_->conv->accumulateTile(acc, n, oy0, rows, ox0, cols);
  } else if (p_.residualInAcc) {  // the residual's tile first; every gemm accumulates onto it
    const TensorLoc& o = p_.epilogueLoc.front();
    const TileAt at{(n * p_.OH + oy0) * p_.OW + ox0, passChannel()};
    ctx_.emit(makeLoad(ctx_.at(acc, 0, cols * mk_, mk_), at.in(o.addr, o.pixelStride()), p_.OW * o.pixelStride(), o.pixelStride(),
                       static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), static_cast<uint32_t>(mk_)),
              acc);
  }
  const int64_t cb = window ? Cg_ : cb_;
  for (int64_t c0 = 0, block = 0; c0 < Cg_; c0 += cb, ++block) computeBlock(n, oy0, rows, ox0, cols, c0, block, acc, window);
  return acc;
}

/// The gemms of one input block of one tile: phase regions loaded on first use (or the on-chip window), weights
/// resident or streamed in chunks of whole slices of at most half the weight buffer.
void MatrixConv::computeBlock(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0, int64_t block,
                              int32_t acc, const OnChipInput* window) {
  const Phasing ph{ph_, pw_};
  const int64_t cbk = window ? Cg_ : std::min(cb_, Cg_ - c0);
  const std::vector<int64_t> pcols = window ? std::vector<int64_t>{window->cols} : phaseCols(rows, cols);
  const std::vector<ReductionSlice> slices = reductionSlices(p_, ph, red_, c0, cbk, pcols, gemmN_);
  std::vector<int32_t> regions(pcols.size(), -1);
  std::vector<uint64_t> offsets(pcols.size(), 0);  // of each phase's window in its region
  uint64_t base = 0;  // offset of the tile's first output pixel's window in an on-chip input
  if (window) {
    regions[0] = window->region;
    base = static_cast<uint64_t>(((oy0 * p_.sH - p_.pT - window->rowLo) * window->cols + ox0 * p_.sW) * cbk);
  }
  const uint64_t chunkLimit = std::max<uint64_t>(1, ctx_.cfg.bufferWords(static_cast<size_t>(Buffer::Weight)) / 2);
  int32_t wgt = resident_;
  uint64_t woff = t_.weightsResident ? residentOffsets_.at(m0_).at(static_cast<size_t>(window ? 0 : block)) : 0;
  for (size_t s0 = 0; s0 < slices.size();) {
    size_t s1 = slices.size();
    if (!t_.weightsResident) {
      s1 = s0 + 1;
      uint64_t words = static_cast<uint64_t>(slices[s0].k * mk_);
      while (s1 < slices.size() && words + static_cast<uint64_t>(slices[s1].k * mk_) <= chunkLimit)
        words += static_cast<uint64_t>(slices[s1++].k * mk_);
      // Packed once per pass; every tile streams the same DRAM words.
      auto [it, fresh] = streamed_.try_emplace({m0_, block, s0}, 0, 0);
      if (fresh) {
        std::vector<float> mine;
        packWeights(p_, {slices.begin() + static_cast<long>(s0), slices.begin() + static_cast<long>(s1)}, g_, m0_, mk_, gemmN_, mine);
        it->second = {ctx_.addConstant(mine), mine.size()};
      }
      wgt = ctx_.region(Buffer::Weight, it->second.second);
      loadContiguous(ctx_, wgt, 0, it->second.first, it->second.second);
      woff = 0;
    }
    for (size_t si = s0; si < s1; ++si) {
      const ReductionSlice& sl = slices[si];
      const auto phase = static_cast<size_t>(sl.phase);
      if (regions[phase] < 0) {
        const int64_t py = sl.phase / pw_, px = sl.phase % pw_;
        const auto [prow, pcol] = p_.phaseExtent(ph_, pw_, py, px, rows, cols);
        const bool stacked = red_ == Reduction::Stacked;
        InputSlot into;
        bool load = true;
        if (t_.inputResident) {  // the tile's window: one region for every block and phase, loaded by the first pass
          if (tileRegion_ < 0) layoutTileInput(rows, cols);
          into = {tileRegion_, tileOffset_.at({block, sl.phase})};
          load = m0_ == 0;
        }
        regions[phase] = into.region, offsets[phase] = into.offset;
        if (load) {
          regions[phase] = stacked ? loadStacked(ctx_, p_, ph, n, oy0, ox0, inChannel(g_) + c0, cbk, py, px, rows, pcol, into)
                                   : loadPhase(ctx_, p_, ph, n, oy0, ox0, inChannel(g_) + c0, cbk, py, px, prow, pcol, into);
          // A stacked region holds, per output row, each column's kernel rows side by side: pcol x taps pixels.
          if (scale_ >= 0 || norm_.scale >= 0)
            prepareInput(regions[phase], into.offset, stacked ? rows : prow, stacked ? pcol * p_.rowTaps(ph_, py) : pcol, c0, cbk);
        }
      }
      // Words from one output row (column) to the next in the phase's region.
      const int64_t pixel = (red_ == Reduction::Stacked ? p_.rowTaps(ph_, sl.phase / pw_) : 1) * cbk;
      const int64_t rowStep = red_ == Reduction::Stacked ? pcols[phase] * pixel : p_.sH / ph_ * pcols[phase] * cbk;
      const int64_t colStep = p_.sW / pw_ * pixel;
      for (int64_t j0 = 0; j0 < mk_; j0 += gemmN_) {
        const int64_t nb = std::min(gemmN_, mk_ - j0);
        Instruction gm;
        gm.opcode = Opcode::Gemm;
        gm.srcA = ctx_.at(regions[phase], base + offsets[phase] + static_cast<uint64_t>(sl.offset), rowStep, colStep);
        gm.srcB = ctx_.at(wgt, woff);
        gm.dst = ctx_.at(acc, static_cast<uint64_t>(j0), cols * mk_, mk_);
        gm.outer = static_cast<uint32_t>(rows), gm.inner = static_cast<uint32_t>(cols);
        gm.gemmK = static_cast<uint32_t>(sl.k), gm.gemmN = static_cast<uint32_t>(nb);
        auto&& first = started_[static_cast<size_t>(j0 / gemmN_)];
        gm.accumulate = first;
        first = true;
        ctx_.emit(gm, acc, regions[phase], wgt);
        woff += static_cast<uint64_t>(sl.k * nb);
      }
    }
    s0 = s1;
  }
}

void MatrixConv::layoutTileInput(int64_t rows, int64_t cols) {
  uint64_t words = 0;
  for (int64_t c0 = 0, block = 0; c0 < Cg_; c0 += cb_, ++block) {
    const int64_t cbk = std::min(cb_, Cg_ - c0);
    for (int64_t py = 0; py < ph_; ++py)
      for (int64_t px = 0; px < pw_; ++px) {
        const auto [prow, pcol] = p_.phaseExtent(ph_, pw_, py, px, rows, cols);
        if (prow == 0) continue;  // no kernel tap reads this phase
        tileOffset_[{block, py * pw_ + px}] = words;
        words += static_cast<uint64_t>(red_ == Reduction::Stacked ? rows * pcol * p_.rowTaps(ph_, py) * cbk : prow * pcol * cbk);
      }
  }
  tileRegion_ = ctx_.region(Buffer::Input, words, /*workspace=*/true);
}

DepthwiseConv::DepthwiseConv(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& t)
    : ctx_(ctx), node_(node), p_(p), t_(t) {}

void DepthwiseConv::lower() {
  for (int64_t c0 = 0; c0 < p_.C; c0 += t_.channels) {
    bool first = true;
    for (int64_t n = 0; n < p_.N; ++n)
      for (int64_t oy0 = 0; oy0 < p_.OH; oy0 += t_.rows)
        for (int64_t ox0 = 0; ox0 < p_.OW; ox0 += t_.cols) {
          ctx_.beginTile(node_, tileIndex_++);
          if (first) beginBlock(c0, unitsOf(c0, spatialTiles(p_, t_), false));
          first = false;
          const int64_t rows = std::min(t_.rows, p_.OH - oy0), cols = std::min(t_.cols, p_.OW - ox0);
          const int32_t acc = computeTile(n, oy0, rows, ox0, cols, nullptr);
          finishTile(ctx_, p_, acc, rows, cols, cbk_, -1, TileAt{(n * p_.OH + oy0) * p_.OW + ox0, c0_}, &poolSums_);
        }
  }
}

void DepthwiseConv::beginBlock(int64_t c0, DepthwiseBlockUnits units) {
  c0_ = c0, cbk_ = std::min(t_.channels, p_.C - c0);
  cur_ = Block{};
  if (units.vector) vectorParameters();
  if (units.matrix && t_.matrixEvery > 0) matrixParameters();
  blocks_[c0] = cur_;
}

void DepthwiseConv::vectorParameters() {
  const int64_t taps = p_.KH * p_.KW;
  std::vector<float> packed;  // [tap][channel]
  for (int64_t tap = 0; tap < taps; ++tap)
    for (int64_t c = 0; c < cbk_; ++c) packed.push_back(p_.weights[(c0_ + c) * taps + tap]);
  cur_.wgt = ctx_.region(Buffer::Weight, packed.size());
  loadContiguous(ctx_, cur_.wgt, 0, ctx_.addConstant(packed), packed.size());
  if (!p_.bias.empty()) {
    cur_.bias = ctx_.region(Buffer::Output, static_cast<uint64_t>(cbk_));
    std::vector<float> b(p_.bias.begin() + c0_, p_.bias.begin() + c0_ + cbk_);
    loadContiguous(ctx_, cur_.bias, 0, ctx_.addConstant(b), static_cast<uint64_t>(cbk_));
  }
}

void DepthwiseConv::matrixParameters() {
  const int64_t taps = p_.KH * p_.KW, DIM = ctx_.cfg.dim;
  // Per DIM channels j: per tap a k x k diagonal block (k = the channels of j), then the bias row (1 x k).
  std::vector<float> blocks;
  for (int64_t j = 0; j < cbk_; j += DIM) {
    const int64_t k = std::min(DIM, cbk_ - j);
    for (int64_t tap = 0; tap < taps; ++tap)
      for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < k; ++c) blocks.push_back(r == c ? p_.weights[(c0_ + j + r) * taps + tap] : 0.0f);
    if (!p_.bias.empty())
      for (int64_t c = 0; c < k; ++c) blocks.push_back(p_.bias[c0_ + j + c]);
  }
  cur_.mmWgt = ctx_.region(Buffer::Weight, blocks.size());
  loadContiguous(ctx_, cur_.mmWgt, 0, ctx_.addConstant(blocks), blocks.size());
  if (!p_.bias.empty()) {
    cur_.one = ctx_.region(Buffer::Input, 1);
    loadContiguous(ctx_, cur_.one, 0, ctx_.addConstant({1.0f}), 1);
  }
}

void DepthwiseConv::useBlock(int64_t c0) {
  c0_ = c0, cbk_ = std::min(t_.channels, p_.C - c0);
  cur_ = blocks_.at(c0);
}

void DepthwiseConv::matrixTaps(int32_t acc, int32_t in, int64_t base, int64_t winCols, int64_t winChannels, int64_t rows,
                               int64_t cols) {
  const int64_t taps = p_.KH * p_.KW, DIM = ctx_.cfg.dim;
  uint64_t woff = 0;
  for (int64_t j = 0; j < cbk_; j += DIM) {
    const int64_t k = std::min(DIM, cbk_ - j);
    Instruction gm;
    gm.opcode = Opcode::Gemm;
    gm.dst = ctx_.at(acc, static_cast<uint64_t>(j), cols * cbk_, cbk_);
    gm.outer = static_cast<uint32_t>(rows), gm.inner = static_cast<uint32_t>(cols);
    gm.gemmK = static_cast<uint32_t>(k), gm.gemmN = static_cast<uint32_t>(k);
    const uint64_t biasRow = woff + static_cast<uint64_t>(taps * k * k);
    if (cur_.one >= 0) {
      Instruction b = gm;
      b.srcA = ctx_.at(cur_.one, 0, 0, 0);
      b.srcB = ctx_.at(cur_.mmWgt, biasRow);
      b.gemmK = 1;
      ctx_.emit(b, acc, cur_.one, cur_.mmWgt);
    }
    for (int64_t tap = 0; tap < taps; ++tap) {
      const int64_t kh = tap / p_.KW, kw = tap % p_.KW;
      gm.srcA = ctx_.at(in, static_cast<uint64_t>(base + (kh * p_.dH * winCols + kw * p_.dW) * winChannels + j),
                        p_.sH * winCols * winChannels, p_.sW * winChannels);
      gm.srcB = ctx_.at(cur_.mmWgt, woff + static_cast<uint64_t>(tap * k * k));
      gm.accumulate = cur_.one >= 0 || tap > 0;
      ctx_.emit(gm, acc, in, cur_.mmWgt);
    }
    woff = biasRow + (cur_.one >= 0 ? static_cast<uint64_t>(k) : 0);
  }
}

int32_t DepthwiseConv::loadWindow(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0) {
  return loadPhase(ctx_, p_, Phasing{}, n, oy0, ox0, c0, std::min(t_.channels, p_.C - c0), 0, 0, p_.inRows(rows), p_.inCols(cols));
}

int32_t DepthwiseConv::computeTile(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, const OnChipInput* window,
                                   int32_t loaded) {
  const int64_t taps = p_.KH * p_.KW;
  auto r = static_cast<uint32_t>(rows), cl = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(cbk_);
  int32_t in = -1;
  int64_t base = 0, winCols = 0, winChannels = cbk_;
  if (window) {
    in = window->region, winCols = window->cols, winChannels = p_.C;
    base = ((oy0 * p_.sH - p_.pT - window->rowLo) * winCols + ox0 * p_.sW) * winChannels + c0_;
  } else {
    winCols = p_.inCols(cols);
    in = loaded >= 0 ? loaded : loadWindow(n, oy0, rows, ox0, cols, c0_);
  }
  const int32_t acc = ctx_.region(Buffer::Accumulator, static_cast<uint64_t>(rows * cols * cbk_));
  const bool onMatrix = depthwiseTileOnMatrix(tilesComputed_++, t_.matrixEvery);
  TESSEL_ASSERT(onMatrix ? cur_.mmWgt >= 0 : cur_.wgt >= 0,
                fmt::format("npu lowering: depthwise block {} of '{}' computes a tile on the {} unit without its parameters", c0_,
                            node_.name(), onMatrix ? "matrix" : "vector"));
  if (onMatrix) {
    matrixTaps(acc, in, base, winCols, winChannels, rows, cols);
    return acc;
  }
  SramOperand tile = ctx_.at(acc, 0, cols * cbk_, cbk_);
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t kh = tap / p_.KW, kw = tap % p_.KW;
    SramOperand src = ctx_.at(in, static_cast<uint64_t>(base + (kh * p_.dH * winCols + kw * p_.dW) * winChannels),
                              p_.sH * winCols * winChannels, p_.sW * winChannels);
    SramOperand w = ctx_.at(cur_.wgt, static_cast<uint64_t>(tap * cbk_));
    if (tap == 0 && cur_.bias >= 0) {
      // The first tap and the bias in one per-channel affine: tile = window * w0[c] + bias[c].
      ctx_.emit(makeVecAffine(tile, src, w, ctx_.at(cur_.bias), r, cl, v), acc, in, cur_.wgt, cur_.bias);
      continue;
    }
    ctx_.emit(makeVecBinary(tap == 0 ? VecOp::Mul : VecOp::MulAcc, tile, src, w, r, cl, v), acc, in, cur_.wgt);
  }
  return acc;
}

namespace {

void lowerConvProblem(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& tiling) {
  if (p.depthwise()) return DepthwiseConv(ctx, node, p, tiling).lower();
  MatrixConv(ctx, node, p, tiling).lower();
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

void lowerMatrixNode(const Node& n, LowerContext& ctx) {
  const ConvProblem p = convProblem(ctx, n);
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

hw::SupportResult checkMatMul(const Node& n) {
  if (n.input(0)->type.dims->size() < 2) return refuse("A must have rank >= 2");
  if (!n.input(1)->isConstant() || n.input(1)->constant().rank() != 2) return refuse("B is not a rank-2 constant");
  return ok();
}

const RegisterOpLowering kConv({"Conv"}, {OpFamily::Matrix, checkConv, lowerMatrixNode});
const RegisterOpLowering kGemm({"Gemm"}, {OpFamily::Matrix, checkGemm, lowerMatrixNode});
const RegisterOpLowering kMatMul({"MatMul"}, {OpFamily::Matrix, checkMatMul, lowerMatrixNode});

}  // namespace

ConvProblem convProblem(LowerContext& ctx, const Node& n) {
  ConvProblem p;
  static_cast<ConvGeometry&>(p) = convGeometry(n);
  if (n.opType() == "Conv") {
    p.weights = constantFloats(n.input(1)->constant());
    if (n.hasInput(2)) p.bias = constantFloats(n.input(2)->constant());
    if (const int64_t pack = ctx.tiling(n).groupPack; pack > 1) {
      // Groups packed (NodeTiling::groupPack): output channel j of packed group k reads the pack * Cg channels of
      // its packed group, zero except the Cg of its own original group; the last packed group takes the last pack
      // original groups.
      const int64_t G = p.group, Cg = p.C / G, Mg = p.M / G, taps = p.KH * p.KW;
      const ConvGeometry q = packGroups(p, pack);
      std::vector<float> wide(static_cast<size_t>(q.M * pack * Cg * taps), 0.0f), bias;
      for (int64_t k = 0; k < q.group; ++k) {
        const int64_t firstGroup = std::min(k * pack, G - pack);
        for (int64_t j = 0; j < pack * Mg; ++j) {
          const int64_t m = firstGroup * Mg + j, sub = j / Mg;  // the original output channel, its group's place
          for (int64_t c = 0; c < Cg * taps; ++c)
            wide[static_cast<size_t>(((k * pack * Mg + j) * pack * Cg + sub * Cg) * taps + c)] =
                p.weights[static_cast<size_t>(m * Cg * taps + c)];
          if (!p.bias.empty()) bias.push_back(p.bias[static_cast<size_t>(m)]);
        }
      }
      p.weights = std::move(wide);
      if (!p.bias.empty()) p.bias = std::move(bias);
      p.tailShiftIn = (q.group * pack - G) * Cg, p.tailShiftOut = (q.group * pack - G) * Mg;
      static_cast<ConvGeometry&>(p) = q;
    }
  } else {
    // Gemm / MatMul: rows of A times B as a 1x1 convolution; weights [N][K], alpha and beta folded in.
    const Tensor& B = n.input(1)->constant();
    const bool gemm = n.opType() == "Gemm", tb = gemm && n.attrInt("transB") != 0;
    const float alpha = gemm ? n.attrFloat("alpha") : 1.0f, beta = gemm ? n.attrFloat("beta") : 1.0f;
    const int64_t K = p.C, N = p.M;
    std::vector<float> b = constantFloats(B);
    p.weights.resize(static_cast<size_t>(K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) p.weights[j * K + k] = alpha * (tb ? b[j * K + k] : b[k * N + j]);
    if (gemm && n.hasInput(2)) {
      std::vector<float> c = constantFloats(n.input(2)->constant());
      for (int64_t j = 0; j < N; ++j) p.bias.push_back(beta * c[c.size() == 1 ? 0 : j]);
    }
  }
  const Value* input = n.input(0);
  if (const std::optional<InputScale> scale = ctx.inputScale(n)) {
    input = scale->full;
    p.inputScale = ctx.loc(scale->vector).addr;
  }
  if (std::optional<InputNorm> norm = ctx.inputNorm(n)) {
    input = norm->full;
    p.inputAffine = {ctx.addConstant(norm->scale), ctx.addConstant(norm->bias)};
    p.inputSteps = norm->steps;
  }
  if (const Node* pool = ctx.maxPool(n)) p.maxPool = poolGeometry(*pool);
  if (const Node* pool = ctx.globalPool(n)) {
    ctx.allocate(pool->output(0));
    p.globalPool = ctx.loc(pool->output(0));
    p.globalMax = isOp(*pool, "GlobalMaxPool");
    p.storeResult = pool->input(0)->uses().size() > 1 || ctx.isBodyOutput(pool->input(0));
  }
  const TensorLoc& in = ctx.loc(input);
  const TensorLoc& out = ctx.loc(ctx.resultValue(n));
  p.inAddr = in.addr, p.inStride = in.pixelStride();
  p.outAddr = out.addr, p.outStride = out.pixelStride();
  p.epilogue = ctx.epilogue(n);
  // NodeTiling::residualConv: the residual Add's other operand is computed in the accumulator, never stored; its
  // convolution's bias is added with this one's.
  const Node* residual = ctx.residualConv(n);
  for (const EpilogueStep& e : p.epilogue)
    p.epilogueLoc.push_back(e.other && e.saved < 0 && !(residual && p.epilogueLoc.empty()) ? ctx.loc(e.other) : TensorLoc{});
  if (residual && residual->hasInput(2)) {
    const std::vector<float> b = constantFloats(residual->input(2)->constant());
    if (p.bias.empty()) p.bias.assign(b.size(), 0.0f);
    for (size_t j = 0; j < b.size(); ++j) p.bias[j] += b[j];
  }
  p.residualInAcc = ctx.tiling(n).residualInAcc;
  TESSEL_ASSERT(!p.residualInAcc || (residualFirst(p.epilogue) && ctx.tiling(n).groupPack == 1),
                fmt::format("npu lowering: {}: residual_in_acc without a residual Add first in the epilogue", n.name()));
  return p;
}

}  // namespace tessel::npu::lower
