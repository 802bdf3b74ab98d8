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
  int64_t inStride = 1, outStride = 1;  ///< DRAM words from one pixel to the next (channels, or a Concat's)
  std::vector<EpilogueStep> epilogue;
  std::vector<TensorLoc> epilogueLoc;  ///< per step: DRAM location of its tensor operand (binary steps)
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
  Instruction ld = makeLoad(ctx.at(r, 0, w.tileCols * cb, cb), p.inAddr + ((n * p.H + w.y0) * p.W + w.x0) * p.inStride + c0,
                            p.W * p.inStride, p.inStride, static_cast<uint32_t>(w.rows), static_cast<uint32_t>(w.cols),
                            static_cast<uint32_t>(cb));
  ld.padTop = static_cast<uint8_t>(w.padTop), ld.padBottom = static_cast<uint8_t>(w.padBottom);
  ld.padLeft = static_cast<uint8_t>(w.padLeft), ld.padRight = static_cast<uint8_t>(w.padRight);
  ctx.emit(ld, r);
  return r;
}

/// Where a tile's result goes: output pixel `pixel` (n*OH*OW + oy*OW + ox) and channel `channel` on.
struct TileAt {
  int64_t pixel = 0, channel = 0;
  uint64_t in(uint64_t addr, int64_t stride) const { return addr + static_cast<uint64_t>(pixel * stride + channel); }
};

/// Applies the fused epilogue in place to a tile of rows x cols pixels x `channels` channels held in `acc`
/// ([pixel][channels]): unary steps as one vector op each, binary steps after loading the matching tile of
/// their other operand.
void applyEpilogue(LowerContext& ctx, const ConvProblem& p, int32_t acc, int64_t rows, int64_t cols, int64_t channels,
                   TileAt at) {
  auto r = static_cast<uint32_t>(rows), c = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(channels);
  SramOperand tile = ctx.at(acc, 0, cols * channels, channels);
  for (size_t k = 0; k < p.epilogue.size(); ++k) {
    const EpilogueStep& e = p.epilogue[k];
    if (e.unary) {
      ctx.emit(makeVecUnary(e.op.op, tile, tile, r, c, v, e.op.imm0, e.op.imm1), acc, acc);
      continue;
    }
    const TensorLoc& o = p.epilogueLoc[k];
    const int32_t other = ctx.region(Buffer::Output, static_cast<uint64_t>(rows * cols * channels));
    ctx.emit(makeLoad(ctx.at(other, 0, cols * channels, channels), at.in(o.addr, o.pixelStride()), p.OW * o.pixelStride(),
                      o.pixelStride(), r, c, v),
             other);
    ctx.emit(makeVecBinary(e.op.op, tile, tile, ctx.at(other, 0, cols * channels, channels), r, c, v), acc, acc, other);
  }
}

/// Bias add (per-channel vector broadcast over the tile), the fused epilogue, and the store of a tile of
/// rows x cols pixels x `channels` channels held in `acc` ([pixel][channels]).
void finishTile(LowerContext& ctx, const ConvProblem& p, int32_t acc, int64_t rows, int64_t cols, int64_t channels,
                int32_t bias, TileAt at) {
  auto r = static_cast<uint32_t>(rows), c = static_cast<uint32_t>(cols), v = static_cast<uint32_t>(channels);
  SramOperand tile = ctx.at(acc, 0, cols * channels, channels);
  if (bias >= 0) ctx.emit(makeVecBinary(VecOp::Add, tile, tile, ctx.at(bias), r, c, v), acc, acc, bias);
  applyEpilogue(ctx, p, acc, rows, cols, channels, at);
  ctx.emit(makeStore(tile, at.in(p.outAddr, p.outStride), p.OW * p.outStride, p.outStride, r, c, v), -1, acc);
}

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
/// by phase (`cols[phase]`: columns of that phase's region). Matrix: per tap, slices of <= DIM channels.
/// Packed: per kernel row, the (kernel column, channel) pairs of a phase are consecutive words (dilation 1
/// along W), cut into slices of <= DIM words.
std::vector<ReductionSlice> reductionSlices(const ConvProblem& p, const Phasing& ph, bool packed, int64_t c0, int64_t cb,
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
      if (packed) {
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

/// Loads phase (py, px) of the input window of the tile whose first output is (oy0, ox0), channels [c0, c0+cb)
/// of image n, into a new `inp` region of rows x cols x cb; rows and columns outside the image are zeros.
int32_t loadPhase(LowerContext& ctx, const ConvProblem& p, const Phasing& ph, int64_t n, int64_t oy0, int64_t ox0, int64_t c0,
                  int64_t cb, int64_t py, int64_t px, int64_t rows, int64_t cols) {
  const int32_t r = ctx.region(Buffer::Input, static_cast<uint64_t>(rows * cols * cb));
  const int64_t y0 = oy0 * p.sH - p.pT + py, x0 = ox0 * p.sW - p.pL + px;  // image row/col of the region's (0, 0)
  auto inside = [](int64_t start, int64_t step, int64_t count, int64_t limit) {  // first and last index in [0, limit)
    int64_t first = start >= 0 ? 0 : (-start + step - 1) / step;
    int64_t last = start + (count - 1) * step < limit ? count - 1 : (limit - 1 - start) / step;
    return std::pair<int64_t, int64_t>{first, std::min(last, count - 1)};
  };
  const auto [i0, i1] = inside(y0, ph.ph, rows, p.H);
  const auto [j0, j1] = inside(x0, ph.pw, cols, p.W);
  SramOperand region = ctx.at(r, 0, cols * cb, cb);
  if (i1 < i0 || j1 < j0 || y0 + i0 * ph.ph >= p.H || x0 + j0 * ph.pw >= p.W) {  // all padding
    ctx.emit(makeVecUnary(VecOp::Fill, region, region, static_cast<uint32_t>(rows), static_cast<uint32_t>(cols),
                          static_cast<uint32_t>(cb), 0.0f),
             r);
    return r;
  }
  Instruction ld = makeLoad(ctx.at(r, 0, cols * cb, cb),
                            p.inAddr + ((n * p.H + y0 + i0 * ph.ph) * p.W + x0 + j0 * ph.pw) * p.inStride + c0,
                            ph.ph * p.W * p.inStride, ph.pw * p.inStride, static_cast<uint32_t>(i1 - i0 + 1),
                            static_cast<uint32_t>(j1 - j0 + 1), static_cast<uint32_t>(cb));
  ld.padTop = static_cast<uint8_t>(i0), ld.padBottom = static_cast<uint8_t>(rows - 1 - i1);
  ld.padLeft = static_cast<uint8_t>(j0), ld.padRight = static_cast<uint8_t>(cols - 1 - j1);
  TESSEL_ASSERT(i0 <= 15 && j0 <= 15 && rows - 1 - i1 <= 15 && cols - 1 - j1 <= 15,
                "npu lowering: a convolution tile needs more than 15 rows or columns of padding");
  ctx.emit(ld, r);
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

/// Plain, grouped, packed and phased convolution on the matrix unit. Per group and pass of output channels:
/// weights (resident for the pass, or streamed per tile and input block) and bias; per output tile: the input
/// blocks (each phase region loaded once and used by every gemm block of the pass), accumulating into one
/// [pixel][channels] tile.
class MatrixConv {
 public:
  MatrixConv(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& t)
      : ctx_(ctx), node_(node), p_(p), t_(t), DIM_(ctx.cfg.dim), Cg_(p.C / p.group), Mg_(p.M / p.group) {
    packed_ = t.variant == "packed";
    cb_ = packed_ ? Cg_ : std::min(t.inChannels, Cg_);
    pass_ = t.coutPerPass > 0 ? std::min(t.coutPerPass, Mg_) : std::min(t.channels, Mg_);
    gemmN_ = std::min({t.channels, DIM_, Mg_});
    if (t.phased) ph_.ph = p.sH, ph_.pw = p.sW;
  }

  void lower() {
    for (int64_t g = 0; g < p_.group; ++g)
      for (int64_t m0 = 0; m0 < Mg_; m0 += pass_) lowerPass(g, m0, std::min(pass_, Mg_ - m0));
  }

 private:
  /// Columns of each phase region for a tile of th x tw outputs.
  std::vector<int64_t> phaseCols(int64_t th, int64_t tw) const {
    std::vector<int64_t> cols;
    for (int64_t py = 0; py < ph_.ph; ++py)
      for (int64_t px = 0; px < ph_.pw; ++px) cols.push_back(ph_.extent(p_, py, px, th, tw).second);
    return cols;
  }

  void lowerPass(int64_t g, int64_t m0, int64_t mk) {
    int32_t resident = -1, bias = -1;
    std::vector<uint64_t> residentOffset;  // per input block: its weights' offset in the resident region
    streamed_.clear();
    bool firstTile = true;
    for (int64_t n = 0; n < p_.N; ++n)
      for (int64_t oy0 = 0; oy0 < p_.OH; oy0 += t_.rows)
        for (int64_t ox0 = 0; ox0 < p_.OW; ox0 += t_.cols) {
          ctx_.beginTile(node_, tileIndex_++);
          const int64_t rows = std::min(t_.rows, p_.OH - oy0), cols = std::min(t_.cols, p_.OW - ox0);
          if (firstTile) {
            if (t_.weightsResident) {
              std::vector<float> all;
              for (int64_t c0 = 0; c0 < Cg_; c0 += cb_) {
                residentOffset.push_back(all.size());
                packWeights(p_, reductionSlices(p_, ph_, packed_, c0, std::min(cb_, Cg_ - c0), phaseCols(rows, cols), gemmN_), g,
                            m0, mk, gemmN_, all);
              }
              resident = ctx_.region(Buffer::Weight, all.size());
              loadContiguous(ctx_, resident, 0, ctx_.addConstant(all), all.size());
            }
            if (!p_.bias.empty()) {
              bias = ctx_.region(Buffer::Output, static_cast<uint64_t>(mk));
              std::vector<float> b(p_.bias.begin() + g * Mg_ + m0, p_.bias.begin() + g * Mg_ + m0 + mk);
              loadContiguous(ctx_, bias, 0, ctx_.addConstant(b), static_cast<uint64_t>(mk));
            }
            firstTile = false;
          }
          const int32_t acc = ctx_.region(Buffer::Accumulator, static_cast<uint64_t>(rows * cols * mk));
          started_.assign(static_cast<size_t>(ceilDiv(mk, gemmN_)), false);
          for (int64_t c0 = 0, block = 0; c0 < Cg_; c0 += cb_, ++block)
            lowerBlock(n, oy0, ox0, rows, cols, g, m0, mk, c0, block, acc, resident,
                       t_.weightsResident ? residentOffset[static_cast<size_t>(block)] : 0);
          finishTile(ctx_, p_, acc, rows, cols, mk, bias, TileAt{(n * p_.OH + oy0) * p_.OW + ox0, g * Mg_ + m0});
        }
  }

  /// The gemms of one input block of one tile: phase regions loaded on first use, weights resident or streamed
  /// in chunks of whole slices of at most half the weight buffer.
  void lowerBlock(int64_t n, int64_t oy0, int64_t ox0, int64_t rows, int64_t cols, int64_t g, int64_t m0, int64_t mk,
                  int64_t c0, int64_t block, int32_t acc, int32_t resident, uint64_t residentOffset) {
    const int64_t cbk = std::min(cb_, Cg_ - c0);
    const std::vector<int64_t> pcols = phaseCols(rows, cols);
    const std::vector<ReductionSlice> slices = reductionSlices(p_, ph_, packed_, c0, cbk, pcols, gemmN_);
    std::vector<int32_t> regions(pcols.size(), -1);
    const uint64_t chunkLimit = std::max<uint64_t>(1, ctx_.cfg.bufferWords(static_cast<size_t>(Buffer::Weight)) / 2);
    int32_t wgt = resident;
    uint64_t woff = residentOffset;
    for (size_t s0 = 0; s0 < slices.size();) {
      size_t s1 = slices.size();
      if (!t_.weightsResident) {
        s1 = s0 + 1;
        uint64_t words = static_cast<uint64_t>(slices[s0].k * mk);
        while (s1 < slices.size() && words + static_cast<uint64_t>(slices[s1].k * mk) <= chunkLimit)
          words += static_cast<uint64_t>(slices[s1++].k * mk);
        // Packed once per pass; every tile streams the same DRAM words.
        auto [it, fresh] = streamed_.try_emplace({block, s0}, 0, 0);
        if (fresh) {
          std::vector<float> mine;
          packWeights(p_, {slices.begin() + static_cast<long>(s0), slices.begin() + static_cast<long>(s1)}, g, m0, mk, gemmN_, mine);
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
          const int64_t py = sl.phase / ph_.pw, px = sl.phase % ph_.pw;
          const auto [prow, pcol] = ph_.extent(p_, py, px, rows, cols);
          regions[phase] = loadPhase(ctx_, p_, ph_, n, oy0, ox0, g * Cg_ + c0, cbk, py, px, prow, pcol);
        }
        for (int64_t j0 = 0; j0 < mk; j0 += gemmN_) {
          const int64_t nb = std::min(gemmN_, mk - j0);
          Instruction gm;
          gm.opcode = Opcode::Gemm;
          gm.srcA = ctx_.at(regions[phase], sl.offset, p_.sH / ph_.ph * pcols[phase] * cbk, p_.sW / ph_.pw * cbk);
          gm.srcB = ctx_.at(wgt, woff);
          gm.dst = ctx_.at(acc, j0, cols * mk, mk);
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

  LowerContext& ctx_;
  const Node& node_;
  const ConvProblem& p_;
  const NodeTiling& t_;
  const int64_t DIM_, Cg_, Mg_;
  bool packed_ = false;
  int64_t cb_ = 1, pass_ = 1, gemmN_ = 1;
  Phasing ph_;
  uint32_t tileIndex_ = 0;
  std::vector<bool> started_;
  std::map<std::pair<int64_t, size_t>, std::pair<uint64_t, uint64_t>> streamed_;  // (block, first slice) -> DRAM, words
};

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
          const TileAt at{(n * p.OH + oy0) * p.OW + ox0, c0};
          applyEpilogue(ctx, p, acc, rows, cols, cbk, at);
          ctx.emit(makeStore(tile, at.in(p.outAddr, p.outStride), p.OW * p.outStride, p.outStride, r, cl, v), -1, acc);
        }
  }
}

void lowerConvProblem(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& tiling) {
  if (p.depthwise()) return lowerDepthwise(ctx, node, p, tiling);
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

/// The node's DRAM operands (input, result, epilogue tensors) and its fused epilogue.
void setOperands(LowerContext& ctx, const Node& n, ConvProblem& p) {
  const TensorLoc& in = ctx.loc(n.input(0));
  const TensorLoc& out = ctx.loc(ctx.resultValue(n));
  p.inAddr = in.addr, p.inStride = in.pixelStride();
  p.outAddr = out.addr, p.outStride = out.pixelStride();
  p.epilogue = ctx.epilogue(n);
  for (const EpilogueStep& e : p.epilogue) p.epilogueLoc.push_back(e.other ? ctx.loc(e.other) : TensorLoc{});
}

void lowerConv(const Node& n, LowerContext& ctx) {
  ConvProblem p;
  static_cast<ConvGeometry&>(p) = convGeometry(n);
  p.weights = constantFloats(n.input(1)->constant());
  if (n.hasInput(2)) p.bias = constantFloats(n.input(2)->constant());
  setOperands(ctx, n, p);
  lowerConvProblem(ctx, n, p, ctx.tiling(n));
}

/// Gemm/MatMul as a 1x1 convolution over the rows of A (rows = pixels, the last axis = channels).
void lowerRowsTimesMatrix(const Node& n, LowerContext& ctx, const std::vector<float>& bT, std::vector<float> bias) {
  ConvProblem p;
  static_cast<ConvGeometry&>(p) = convGeometry(n);
  p.weights = bT;
  p.bias = std::move(bias);
  setOperands(ctx, n, p);
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

const RegisterOpLowering kConv({"Conv"}, {OpFamily::Matrix, checkConv, lowerConv});
const RegisterOpLowering kGemm({"Gemm"}, {OpFamily::Matrix, checkGemm, lowerGemm});
const RegisterOpLowering kMatMul({"MatMul"}, {OpFamily::Matrix, checkMatMul, lowerMatMul});

}  // namespace
}  // namespace tessel::npu::lower
