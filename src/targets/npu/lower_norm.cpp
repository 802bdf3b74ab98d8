// NPU operator interpreters of the row normalisations on the vector unit: Softmax over the last axis (below) and
// LayerNormalization over the last axis: a transformer's LayerNorm, which pass
// fuse-transformer-patterns makes of the exporters' ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div chain.
// All on the vector unit, per tile of R rows (pixels) of C channels, every row whole on chip:
//   load X (R x C, `inp`); X -= its row's first element (in 16 lanes by a `vun copy` with source inner stride 0): the
//   sums below then add values near zero, not near the mean (accuracy; LayerNorm is shift-invariant);
//   per row, `vred reduce_sum` of its C/16 vectors into 16 lane sums (`acc`, zero-filled first);
//   a butterfly leaves the row's sum in every lane: the 16 lane sums are copied next to themselves (32 words), then
//   4 `vbin add`s of the 32 words with themselves shifted by 8, 4, 2 and 1 (each writes both halves);
//   mean = sum / C (`vun scale`); D = X - mean in place (`vbin sub`, the mean read with inner stride 0);
//   Y = D * D (`out`); the same reduction and butterfly of Y; rstd = 1 / sqrt(sum / C + epsilon) (`vun rsqrt`);
//   Y = D * rstd; Y = Y * gamma + beta (`vaffine`, skipped when gamma is 1 and beta 0); unary epilogue steps; store Y.
// The variance is the mean of the squared deviations from the mean (two passes), as the reference computes it: no
// cancellation when the mean is large against the spread.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <limits>

#include "lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

constexpr int64_t kLanesWords = 16;  ///< words of one row's lane sums (the butterfly works on twice that)

/// Rows (pixels) of a tensor as the NPU stores it and their length: the channels, the contiguous axis.
struct NormShape {
  int64_t rows = 1, channels = 1;
};

NormShape storedRows(const Value* v) {
  const Shape s = v->type.staticShape();
  NormShape r;
  r.channels = s.empty() ? 1 : s[static_cast<size_t>(channelAxis(s.size()))];
  r.rows = r.channels == 0 ? 0 : shapeSize(s) / r.channels;
  return r;
}

/// The rows a row operation (LayerNormalization, Softmax, a reduction) works on: its input's.
NormShape normShape(const Node& n) { return storedRows(n.input(0)); }

hw::SupportResult checkLayerNorm(const Node& n) {
  const Shape x = n.input(0)->type.staticShape();
  if (x.size() < 2 || x.size() == 4)
    return refuse(fmt::format("LayerNormalization of rank {} is not lowered (ranks 2, 3 and 5+: rank 4 is stored channels-last)",
                              x.size()));
  const int64_t axis = n.hasAttr("axis") ? n.attrInt("axis") : -1;
  if (axis != -1 && axis != static_cast<int64_t>(x.size()) - 1)
    return refuse(fmt::format("LayerNormalization over axes {}.. is not lowered (the last axis only)", axis));
  for (size_t i = 1; i < n.numOutputs(); ++i)
    if (n.output(i)) return refuse("LayerNormalization's Mean and InvStdDev outputs are not lowered");
  for (size_t i = 1; i < n.numInputs(); ++i)
    if (n.input(i) && !n.input(i)->isConstant()) return refuse("LayerNormalization's scale and bias must be constants");
  if (x.back() > kMaxInstructionCount)
    return refuse(fmt::format("LayerNormalization over {} channels (at most {})", x.back(), kMaxInstructionCount));
  return ok();
}

/// Rows per tile: X and Y each within half of `inp` and `out`, the three rows of lanes (shift, sums) within half of `acc`.
int64_t rowsPerTile(const hw::NpuConfig& cfg, const NormShape& s) {
  return std::min({s.rows, bufferWords(cfg, Buffer::Input) / 2 / s.channels, bufferWords(cfg, Buffer::Output) / 2 / s.channels,
                   bufferWords(cfg, Buffer::Accumulator) / 2 / (6 * kLanesWords), kMaxInstructionCount});
}

hw::SupportResult layerNormFits(const Node& n, const hw::NpuConfig& cfg) {
  const NormShape s = normShape(n);
  if (rowsPerTile(cfg, s) < 1 || 2 * s.channels > bufferWords(cfg, Buffer::Weight) / 2)
    return refuse(fmt::format("LayerNormalization over {} channels: a row does not fit half of the input and output buffers "
                              "({} and {} words) on this configuration",
                              s.channels, bufferWords(cfg, Buffer::Input), bufferWords(cfg, Buffer::Output)));
  return ok();
}

/// The row reduction (`reduce`: ReduceSum or ReduceMax) of `src` (R rows of C words, row stride C) in every lane of
/// `lanes` (R rows of 32 words): per row a `vred` of its C/16 vectors into 16 lane values (onto a fill of the op's
/// identity), then a butterfly of `combine` (Add or Max) with shifts 8, 4, 2, 1 over the lane values copied beside
/// themselves.
void rowReduce(LowerContext& ctx, VecOp reduce, VecOp combine, int32_t src, int32_t lanes32, int64_t R, int64_t C) {
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  const int64_t blocks = C / kLanesWords, rest = C % kLanesWords, row = 2 * kLanesWords;
  const SramOperand lanes = ctx.at(lanes32, 0, row, 0);
  const float identity = reduce == VecOp::ReduceMax ? -std::numeric_limits<float>::infinity() : 0.0f;
  ctx.emit(makeVecUnary(VecOp::Fill, lanes, lanes, u(R), 1, u(kLanesWords), identity), lanes32);
  for (int64_t r = 0; r < R; ++r) {
    auto vred = [&](int64_t offset, int64_t outer, int64_t vecLen) {
      Instruction red;
      red.opcode = Opcode::VecReduce;
      red.vecOp = reduce;
      red.dst = ctx.at(lanes32, static_cast<uint64_t>(r * row));
      red.srcA = ctx.at(src, static_cast<uint64_t>(r * C + offset), kLanesWords, 0);
      red.outer = u(outer), red.inner = 1, red.vecLen = u(vecLen);
      red.accumulate = true;
      ctx.emit(red, lanes32, src);
    };
    if (blocks > 0) vred(0, blocks, kLanesWords);
    if (rest > 0) vred(blocks * kLanesWords, 1, rest);
  }
  // The butterfly: lane i of both halves becomes combine(lane i, lane (i + h) mod 16) for h = 8, 4, 2, 1.
  ctx.emit(makeVecUnary(VecOp::Copy, ctx.at(lanes32, kLanesWords, row, 0), lanes, u(R), 1, u(kLanesWords)), lanes32, lanes32);
  for (int64_t h = kLanesWords / 2; h >= 1; h /= 2)
    ctx.emit(makeVecBinary(combine, ctx.at(lanes32, 0, row, kLanesWords), lanes, ctx.at(lanes32, static_cast<uint64_t>(h), row, 0),
                           u(R), 2, u(kLanesWords)),
             lanes32, lanes32, lanes32);
}

void rowSums(LowerContext& ctx, int32_t src, int32_t sums, int64_t R, int64_t C) {
  rowReduce(ctx, VecOp::ReduceSum, VecOp::Add, src, sums, R, C);
}

/// dst = a (op) per-row vector v (16 equal lanes, rows 32 words apart) over R rows of C words; with `vectorFirst`,
/// dst = v (op) a.
void withRowVector(LowerContext& ctx, VecOp op, int32_t dst, int32_t a, int32_t v, int64_t R, int64_t C,
                   bool vectorFirst = false) {
  auto u = [](int64_t x) { return static_cast<uint32_t>(x); };
  const int64_t blocks = C / kLanesWords, rest = C % kLanesWords, row = 2 * kLanesWords;
  const SramOperand vec = ctx.at(v, 0, row, 0);
  auto emit = [&](uint64_t at, uint32_t inner, uint32_t vecLen, uint64_t innerStride) {
    const SramOperand rows = ctx.at(a, at, C, innerStride);
    if (vectorFirst)
      ctx.emit(makeVecBinary(op, ctx.at(dst, at, C, innerStride), vec, rows, u(R), inner, vecLen), dst, v, a);
    else
      ctx.emit(makeVecBinary(op, ctx.at(dst, at, C, innerStride), rows, vec, u(R), inner, vecLen), dst, a, v);
  };
  if (blocks > 0) emit(0, u(blocks), u(kLanesWords), kLanesWords);
  if (rest > 0) emit(static_cast<uint64_t>(blocks * kLanesWords), 1, u(rest), 0);
}

/// Subtracts from each of R rows of C words in `xr` its first element, kept in 16 lanes of `shift` (R rows of 32
/// words) by a `vun copy` whose source repeats it (inner stride 0): sums of the rows then add values near zero, not
/// near the rows' mean (float32 accuracy far from zero).
void subtractFirst(LowerContext& ctx, int32_t xr, int32_t shift, int64_t R, int64_t C) {
  ctx.emit(makeVecUnary(VecOp::Copy, ctx.at(shift, 0, 2 * kLanesWords, 1), ctx.at(xr, 0, static_cast<uint64_t>(C), 0),
                        static_cast<uint32_t>(R), static_cast<uint32_t>(kLanesWords), 1),
           shift, xr);
  withRowVector(ctx, VecOp::Sub, xr, xr, shift, R, C);
}

/// Loads rows [p0, p0 + R) of `x` (R x C words, row stride C) into a new input-buffer region.
int32_t loadRows(LowerContext& ctx, const TensorLoc& x, int64_t p0, int64_t R, int64_t C) {
  const int32_t xr = ctx.region(Buffer::Input, static_cast<uint64_t>(R * C));
  ctx.emit(makeLoad(ctx.at(xr, 0, static_cast<uint64_t>(R * C), static_cast<uint64_t>(C)),
                    x.addr + static_cast<uint64_t>(p0 * x.pixelStride()), 0, static_cast<uint64_t>(x.pixelStride()), 1,
                    static_cast<uint32_t>(R), static_cast<uint32_t>(C)),
           xr);
  return xr;
}

/// Lowers `n`, a row operation whose result has the shape of its input `rows` (its first input unless given), in tiles
/// of up to R whole rows: per tile, `begin()` (staging what the first tile loads for all), a load of the rows into
/// `inp`, `compute(x, first row, rows)` on that region returning the region that holds the result, the node's unary
/// epilogue steps on it, and its store.
void rowTiles(LowerContext& ctx, const Node& n, int64_t R, const std::function<void()>& begin,
              const std::function<int32_t(int32_t x, int64_t p0, int64_t rows)>& compute, const Value* rows = nullptr) {
  if (!rows) rows = n.input(0);
  const NormShape s = storedRows(rows);
  const int64_t C = s.channels;
  const TensorLoc& x = ctx.loc(rows);
  const TensorLoc& y = ctx.loc(ctx.resultValue(n));
  const std::vector<EpilogueStep> epilogue = ctx.epilogue(n);
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  uint32_t tile = 0;
  for (int64_t p0 = 0; p0 < s.rows; p0 += R) {
    ctx.beginTile(n, tile++);
    if (begin) begin();
    const int64_t rr = std::min(R, s.rows - p0);
    const auto tileWords = static_cast<uint64_t>(rr * C);
    const int32_t result = compute(loadRows(ctx, x, p0, rr, C), p0, rr);
    applyUnarySteps(ctx, epilogue, result, ctx.at(result, 0, C, 0), u(rr), 1, u(C));
    ctx.emit(makeStore(ctx.at(result, 0, tileWords, C), y.addr + static_cast<uint64_t>(p0 * y.pixelStride()), 0,
                       y.pixelStride(), 1, u(rr), u(C)),
             -1, result);
  }
}

/// Vector work of a row operation: `passes` simple passes and `complexPasses` complex ones over the elements, and per
/// row `rowSimple` simple and `rowComplex` complex lane vectors.
void addRowWork(const Node& n, const hw::NpuConfig& cfg, SubgraphWork& w, uint64_t passes, uint64_t complexPasses,
                uint64_t rowSimple, uint64_t rowComplex) {
  const NormShape s = normShape(n);
  const auto out = static_cast<uint64_t>(s.rows * s.channels), rows = static_cast<uint64_t>(s.rows);
  w.vectorCycles += out * (passes * cfg.vectorCyclesPerVector + complexPasses * cfg.vectorCyclesPerVectorComplex) +
                    rows * cfg.vectorLanes * (rowSimple * cfg.vectorCyclesPerVector + rowComplex * cfg.vectorCyclesPerVectorComplex);
}

void lowerLayerNorm(const Node& n, LowerContext& ctx) {
  const NormShape s = normShape(n);
  const int64_t C = s.channels, R = rowsPerTile(ctx.cfg, s);
  TESSEL_ASSERT(R >= 1, fmt::format("npu lowering: {}: no row fits (the partition checks layerNormFits)", n.describe()));
  const float eps = n.hasAttr("epsilon") ? n.attrFloat("epsilon") : 1e-5f;
  const float invC = 1.0f / static_cast<float>(C);
  std::vector<float> gamma(static_cast<size_t>(C), 1.0f), beta(static_cast<size_t>(C), 0.0f);
  auto parameter = [&](size_t i, std::vector<float>& into) {
    if (!n.hasInput(i)) return;
    const std::vector<float> v = constantFloats(n.input(i)->constant());
    for (size_t c = 0; c < into.size(); ++c) into[c] = v.size() == 1 ? v[0] : v.at(c);  // broadcast from the right
  };
  parameter(1, gamma), parameter(2, beta);
  const bool affine = std::any_of(gamma.begin(), gamma.end(), [](float g) { return g != 1.0f; }) ||
                      std::any_of(beta.begin(), beta.end(), [](float b) { return b != 0.0f; });
  const uint64_t gammaAt = affine ? ctx.addConstant(gamma) : 0, betaAt = affine ? ctx.addConstant(beta) : 0;
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  int32_t g = -1, b = -1;  // gamma and beta, staged by the first tile and kept
  auto stage = [&] {
    if (!affine || g >= 0) return;
    g = ctx.region(Buffer::Weight, static_cast<uint64_t>(C));
    b = ctx.region(Buffer::Weight, static_cast<uint64_t>(C));
    loadContiguous(ctx, g, 0, gammaAt, static_cast<uint64_t>(C));
    loadContiguous(ctx, b, 0, betaAt, static_cast<uint64_t>(C));
  };
  rowTiles(ctx, n, R, stage, [&](int32_t xr, int64_t, int64_t rr) {
    const auto tileWords = static_cast<uint64_t>(rr * C);
    // The row shifted by its first element (LayerNorm does not change): float32 sums of values far from zero lose the
    // small spread the result depends on (a row near -38 with a spread of 0.1 lost 2e-4 of the result's scale).
    subtractFirst(ctx, xr, ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords)), rr, C);
    const int32_t mean = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords));
    rowSums(ctx, xr, mean, rr, C);
    const SramOperand meanLanes = ctx.at(mean, 0, 2 * kLanesWords, 0);
    ctx.emit(makeVecUnary(VecOp::Scale, meanLanes, meanLanes, u(rr), 1, u(kLanesWords), invC, 0.0f), mean, mean);
    withRowVector(ctx, VecOp::Sub, xr, xr, mean, rr, C);  // D = X - mean, in place
    const int32_t yr = ctx.region(Buffer::Output, tileWords);
    const SramOperand d = ctx.at(xr, 0, C, 0), out = ctx.at(yr, 0, C, 0);
    ctx.emit(makeVecBinary(VecOp::Mul, out, d, d, u(rr), 1, u(C)), yr, xr, xr);
    const int32_t rstd = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords));
    rowSums(ctx, yr, rstd, rr, C);
    const SramOperand rstdLanes = ctx.at(rstd, 0, 2 * kLanesWords, 0);
    ctx.emit(makeVecUnary(VecOp::Rsqrt, rstdLanes, rstdLanes, u(rr), 1, u(kLanesWords), invC, eps), rstd, rstd);
    withRowVector(ctx, VecOp::Mul, yr, xr, rstd, rr, C);  // Y = D * rstd
    if (affine) ctx.emit(makeVecAffine(out, out, ctx.at(g), ctx.at(b), u(rr), 1, u(C)), yr, yr, g, b);
    return yr;
  });
}

/// The shift, two reductions, the deviation, its square, the scaling by 1 / sd and the affine map: seven simple passes
/// over the elements; per row one rsqrt vector.
void layerNormWork(const Node& n, const hw::NpuConfig& cfg, SubgraphWork& w) { addRowWork(n, cfg, w, 7, 0, 0, 1); }

// ---- Softmax over the last axis: y = exp(x - max) / sum exp(x - max), per tile of whole rows in `inp` (in place): the
// row max (vred reduce_max, a butterfly of vbin max), x - max, vun exp, the row sum (butterfly of adds), its inverse as
// rsqrt(sum)^2 (two per-row vectors: a vbin div of every element would cost the complex rate), vbin mul.

hw::SupportResult checkSoftmax(const Node& n) {
  const Shape x = n.input(0)->type.staticShape();
  if (x.empty() || x.size() == 4)
    return refuse(fmt::format("Softmax of rank {} is not lowered (rank 4 is stored channels-last)", x.size()));
  const int64_t axis = n.hasAttr("axis") ? n.attrInt("axis") : -1;
  // The last axis means the same under every opset (before 13, the axes from `axis` on are flattened).
  if (axis != -1 && axis != static_cast<int64_t>(x.size()) - 1)
    return refuse(fmt::format("Softmax over axis {} is not lowered (the last axis only)", axis));
  if (x.back() > kMaxInstructionCount)
    return refuse(fmt::format("Softmax over {} elements (at most {})", x.back(), kMaxInstructionCount));
  return ok();
}

int64_t softmaxRows(const hw::NpuConfig& cfg, const NormShape& s) {
  return std::min({s.rows, bufferWords(cfg, Buffer::Input) / 2 / s.channels, bufferWords(cfg, Buffer::Accumulator) / 2 / (4 * kLanesWords),
                   kMaxInstructionCount});
}

hw::SupportResult softmaxFits(const Node& n, const hw::NpuConfig& cfg) {
  const NormShape s = normShape(n);
  if (softmaxRows(cfg, s) < 1)
    return refuse(fmt::format("Softmax over {} elements: a row does not fit half of the input buffer ({} words) on this "
                              "configuration",
                              s.channels, bufferWords(cfg, Buffer::Input)));
  return ok();
}

void lowerSoftmax(const Node& n, LowerContext& ctx) {
  const NormShape s = normShape(n);
  const int64_t C = s.channels, R = softmaxRows(ctx.cfg, s);
  TESSEL_ASSERT(R >= 1, fmt::format("npu lowering: {}: no row fits (the partition checks softmaxFits)", n.describe()));
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  rowTiles(ctx, n, R, nullptr, [&](int32_t xr, int64_t, int64_t rr) {
    const int32_t max = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords));
    rowReduce(ctx, VecOp::ReduceMax, VecOp::Max, xr, max, rr, C);
    withRowVector(ctx, VecOp::Sub, xr, xr, max, rr, C);
    const SramOperand all = ctx.at(xr, 0, C, 0);
    ctx.emit(makeVecUnary(VecOp::Exp, all, all, u(rr), 1, u(C)), xr, xr);
    const int32_t sum = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords));
    rowSums(ctx, xr, sum, rr, C);
    const SramOperand lanes = ctx.at(sum, 0, 2 * kLanesWords, 0);
    ctx.emit(makeVecUnary(VecOp::Rsqrt, lanes, lanes, u(rr), 1, u(kLanesWords), 1.0f, 0.0f), sum, sum);
    ctx.emit(makeVecBinary(VecOp::Mul, lanes, lanes, lanes, u(rr), 1, u(kLanesWords)), sum, sum, sum);  // 1 / sum
    withRowVector(ctx, VecOp::Mul, xr, xr, sum, rr, C);
    return xr;
  });
}

/// Max and sum reductions, the subtraction and the scaling (simple), exp (complex); per row an rsqrt vector (complex)
/// and its square (simple).
void softmaxWork(const Node& n, const hw::NpuConfig& cfg, SubgraphWork& w) { addRowWork(n, cfg, w, 4, 1, 1, 1); }

// ---- Reductions over the contiguous axis (the last axis; the channels of a rank-4 map, stored channels-last) and
// element-wise ops with one value per row broadcast over it ([..., C] op [..., 1]; a map op [N, 1, H, W]): what a
// LayerNorm or RMSNorm left decomposed (or a spatial-attention map) needs. Per tile of R whole rows in `inp`: the
// reduction is rowReduce's lane values, scaled by 1 / C for a mean, one word per row stored; the broadcast loads each
// row's value into 16 lanes (a load repeating it, DRAM inner stride 0) and applies the op by withRowVector.

/// Rows per tile of a row operation over rows of C words: the rows within half of `inp`, their lane values within half
/// of `acc`.
int64_t rowOpRows(const hw::NpuConfig& cfg, const NormShape& s) {
  return std::min({s.rows, bufferWords(cfg, Buffer::Input) / 2 / std::max<int64_t>(1, s.channels),
                   bufferWords(cfg, Buffer::Accumulator) / 2 / (4 * kLanesWords), kMaxInstructionCount});
}

/// The vred and butterfly ops of a reduction node, if it is one the vector unit does.
std::optional<std::pair<VecOp, VecOp>> reduceOps(const Node& n) {
  if (isOp(n, "ReduceSum") || isOp(n, "ReduceMean")) return std::pair{VecOp::ReduceSum, VecOp::Add};
  if (isOp(n, "ReduceMax")) return std::pair{VecOp::ReduceMax, VecOp::Max};
  return std::nullopt;
}

hw::SupportResult checkRowReduce(const Node& n) {
  const Shape x = n.input(0)->type.staticShape();
  if (x.empty()) return refuse(fmt::format("{} of a scalar", n.opType()));
  std::vector<int64_t> axes;
  if (n.hasInput(1)) {
    if (!n.input(1)->isConstant()) return refuse("the axes must be a constant");
    axes = n.input(1)->constant().toInt64Vector();
  } else if (n.hasAttr("axes")) {
    axes = n.attrInts("axes");
  }
  const auto rank = static_cast<int64_t>(x.size());
  if (axes.empty() && rank == 1) axes = {0};
  const int64_t want = channelAxis(x.size());
  if (axes.size() != 1 || (axes[0] < 0 ? axes[0] + rank : axes[0]) != want)
    return refuse(fmt::format("{} over axes other than the contiguous one is not lowered (axis {} of a rank-{} tensor only: "
                              "the last, or a map's channels)",
                              n.opType(), want, rank));
  if (x[static_cast<size_t>(want)] > kMaxInstructionCount)
    return refuse(fmt::format("{} over {} elements (at most {})", n.opType(), x[static_cast<size_t>(want)], kMaxInstructionCount));
  return ok();
}

/// Whether a row of `rows` fits this configuration's buffers (rowOpRows); the refusal reads "<op> <before> rows of C
/// elements<after>: ...".
hw::SupportResult rowsFit(const Node& n, const Value* rows, const char* before, const char* after, const hw::NpuConfig& cfg) {
  const NormShape s = storedRows(rows);
  if (rowOpRows(cfg, s) < 1)
    return refuse(fmt::format("{} {} rows of {} elements{}: a row does not fit half of the input buffer ({} of {} words) on "
                              "this configuration",
                              n.opType(), before, s.channels, after, bufferWords(cfg, Buffer::Input) / 2,
                              bufferWords(cfg, Buffer::Input)));
  return ok();
}

hw::SupportResult rowOpFits(const Node& n, const hw::NpuConfig& cfg) { return rowsFit(n, n.input(0), "over", "", cfg); }

void lowerRowReduce(const Node& n, LowerContext& ctx) {
  const auto [reduce, combine] = *reduceOps(n);
  const NormShape s = storedRows(n.input(0));
  const int64_t C = s.channels, R = rowOpRows(ctx.cfg, s);
  TESSEL_ASSERT(R >= 1, fmt::format("npu lowering: {}: no row fits (the partition checks rowOpFits)", n.describe()));
  const TensorLoc& x = ctx.loc(n.input(0));
  const TensorLoc& y = ctx.loc(ctx.resultValue(n));
  const std::vector<EpilogueStep> epilogue = ctx.epilogue(n);
  // Output value p (row p of the input) is at word (p / Cy) * stride + p % Cy of y: Cy values per stored row of y
  // (1 with keepdims).
  const int64_t Cy = std::max<int64_t>(1, y.channels()), sy = y.pixelStride();
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  uint32_t tile = 0;
  for (int64_t p0 = 0; p0 < s.rows; p0 += R) {
    ctx.beginTile(n, tile++);
    const int64_t rr = std::min(R, s.rows - p0);
    const int32_t xr = loadRows(ctx, x, p0, rr, C);
    // A sum adds the row minus its first element, then C times that element (as LayerNorm's, for accuracy far from 0).
    const bool sum = reduce == VecOp::ReduceSum && C > 1;
    const int32_t shift = sum ? ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords)) : -1;
    if (sum) subtractFirst(ctx, xr, shift, rr, C);
    const int32_t lanes = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords));
    rowReduce(ctx, reduce, combine, xr, lanes, rr, C);
    const SramOperand first = ctx.at(lanes, 0, 2 * kLanesWords, 0);  // one value per row
    const bool mean = isOp(n, "ReduceMean");
    if (sum) {  // + C x0 (a sum) or + x0 (a mean: the shifted sum scaled by 1 / C first)
      if (mean) ctx.emit(makeVecUnary(VecOp::Scale, first, first, u(rr), 1, 1, 1.0f / static_cast<float>(C), 0.0f), lanes, lanes);
      const SramOperand x0 = ctx.at(shift, 0, 2 * kLanesWords, 0);
      if (!mean) ctx.emit(makeVecUnary(VecOp::Scale, x0, x0, u(rr), 1, 1, static_cast<float>(C), 0.0f), shift, shift);
      ctx.emit(makeVecBinary(VecOp::Add, first, first, x0, u(rr), 1, 1), lanes, lanes, shift);
    } else if (mean) {
      ctx.emit(makeVecUnary(VecOp::Scale, first, first, u(rr), 1, 1, 1.0f / static_cast<float>(C), 0.0f), lanes, lanes);
    }
    applyUnarySteps(ctx, epilogue, lanes, first, u(rr), 1, 1);
    if (Cy == 1) {
      ctx.emit(makeStore(first, y.addr + static_cast<uint64_t>(p0 * sy), static_cast<uint64_t>(sy), 0, u(rr), 1, 1), -1, lanes);
      continue;
    }
    for (int64_t p = p0; p < p0 + rr;) {  // one store per stored row of y the tile's values fall in
      const int64_t len = std::min(Cy - p % Cy, p0 + rr - p);
      ctx.emit(makeStore(ctx.at(lanes, static_cast<uint64_t>((p - p0) * 2 * kLanesWords), 2 * kLanesWords, 0),
                         y.addr + static_cast<uint64_t>(p / Cy * sy + p % Cy), 1, 0, u(len), 1, 1),
               -1, lanes);
      p += len;
    }
  }
}

/// One pass over the input (the vred); per row a few lane vectors.
void rowReduceWork(const Node& n, const hw::NpuConfig& cfg, SubgraphWork& w) { addRowWork(n, cfg, w, 1, 0, 0, 0); }

const RegisterOpLowering kRowReduce({"ReduceSum", "ReduceMean", "ReduceMax"},
                                    {OpFamily::Elementwise, checkRowReduce, lowerRowReduce, rowOpFits, rowReduceWork});

const RegisterOpLowering kSoftmax({"Softmax"},
                                  {OpFamily::Elementwise, checkSoftmax, lowerSoftmax, softmaxFits, softmaxWork});
const RegisterOpLowering kLayerNorm({"LayerNormalization"},
                                    {OpFamily::Elementwise, checkLayerNorm, lowerLayerNorm, layerNormFits, layerNormWork});

}  // namespace

/// Which operand of a binary node holds one value per row of the other (the full one), when one does: 0 or 1.
std::optional<size_t> perRowOperand(const Node& n) {
  if (n.numInputs() != 2 || !n.input(0) || !n.input(1)) return std::nullopt;
  const Shape y = n.output(0)->type.staticShape();
  if (y.empty()) return std::nullopt;
  const auto axis = static_cast<size_t>(channelAxis(y.size()));
  if (y[axis] <= 1) return std::nullopt;
  for (size_t i = 0; i < 2; ++i) {
    const Shape full = n.input(1 - i)->type.staticShape(), v = n.input(i)->type.staticShape();
    if (full != y || v.size() > y.size()) continue;
    Shape aligned(y.size() - v.size(), 1);
    aligned.insert(aligned.end(), v.begin(), v.end());
    bool rows = aligned[axis] == 1;
    for (size_t a = 0; a < y.size() && rows; ++a) rows = a == axis || aligned[a] == y[a];
    if (rows) return i;
  }
  return std::nullopt;
}

hw::SupportResult rowBroadcastFits(const Node& n, const hw::NpuConfig& cfg) {
  return rowsFit(n, n.output(0), "of", " by one value per row", cfg);
}

void lowerRowBroadcast(const Node& n, LowerContext& ctx) {
  const size_t vi = *perRowOperand(n);
  const Value* full = n.input(1 - vi);
  const NormShape s = storedRows(full);
  const int64_t C = s.channels, R = rowOpRows(ctx.cfg, s);
  TESSEL_ASSERT(R >= 1, fmt::format("npu lowering: {}: no row fits (the partition checks rowBroadcastFits)", n.describe()));
  const TensorLoc& v = ctx.loc(n.input(vi));
  rowTiles(
      ctx, n, R, nullptr,
      [&](int32_t xr, int64_t p0, int64_t rr) {
        // Each row's value into 16 lanes: a load repeating one word (DRAM inner stride 0), rows 32 words apart.
        const int32_t lanes = ctx.region(Buffer::Accumulator, static_cast<uint64_t>(rr * 2 * kLanesWords));
        ctx.emit(makeLoad(ctx.at(lanes, 0, 2 * kLanesWords, 1), v.addr + static_cast<uint64_t>(p0 * v.pixelStride()),
                          static_cast<uint64_t>(v.pixelStride()), 0, static_cast<uint32_t>(rr),
                          static_cast<uint32_t>(kLanesWords), 1),
                 lanes);
        withRowVector(ctx, *vectorOpOf(n), xr, xr, lanes, rr, C, vi == 0);
        return xr;
      },
      full);
}

}  // namespace tessel::npu::lower
