// NPU operator interpreters of the data-movement family, done by addressing: Concat along channels (each
// input written in place into its slice of the output by its producer, or copied by DMA when it cannot be),
// Flatten / Reshape / Squeeze / Unsqueeze / Identity as views when the channels-last layout allows, and a Slice of
// a contiguous channel range, or each output of a Split along the channels, as a view into its input (ShuffleNet's
// channel split), and a Gather of channels with
// constant indices (a channel shuffle, which the pass channel-shuffle-to-gather makes of Reshape-Transpose-Reshape)
// by DMA: one strided load per run of consecutive input channels, one dense store per tile.
// What addressing cannot do is copied by DMA (copyBox, lower_copy.cpp): a Reshape that changes the layout (a
// channels-last map flattened or reshaped to another rank), Concat and Split along other axes, a Slice of other
// axes or steps, a Gather along another axis with constant indices.
#include <algorithm>
#include <fmt/format.h>

#include "geometry.h"
#include "lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {

namespace {

/// Whether the DRAM layout of a tensor of this shape is its row-major (ONNX) order: anything but rank 4,
/// or rank 4 with one pixel or one channel (then channels-last and channels-first coincide).
bool storedRowMajor(const Shape& s) { return s.size() != 4 || s[2] * s[3] == 1 || s[1] == 1; }

/// A node's `axis` attribute as written (0 when absent, ONNX's default for Split and Gather).
int64_t axisAttr(const Node& n) { return n.hasAttr("axis") ? n.attrInt("axis") : 0; }

/// A node's `axis` normalised to [0, rank).
int64_t normalisedAxis(const Node& n, size_t rank) {
  const int64_t a = axisAttr(n);
  return a < 0 ? a + static_cast<int64_t>(rank) : a;
}

/// Whether a node's `axis` (Concat, Split, Gather) is the channel axis of a rank-`rank` tensor as the NPU stores it.
bool alongChannels(const Node& n, size_t rank) { return normalisedAxis(n, rank) == channelAxis(rank); }

/// Whether Concat `n` joins channels (by addressing: its inputs are written into their slices of the output).
bool channelConcat(const Node& n) {
  const Shape y = n.output(0)->type.staticShape();
  return !y.empty() && alongChannels(n, y.size());
}

hw::SupportResult checkConcat(const Node& n) {
  const Shape y = n.output(0)->type.staticShape();
  if (y.empty()) return refuse("Concat of scalars");
  for (const Value* v : n.inputs())
    if (!v || v->type.staticShape().size() != y.size()) return refuse("inputs must all have the output's rank");
  return channelConcat(n) ? ok() : checkCopySize(y);  // along another axis: each input copied into its slice
}

hw::SupportResult checkView(const Node& n) {
  const Shape x = n.input(0)->type.staticShape(), y = n.output(0)->type.staticShape();
  if (storedRowMajor(x) && storedRowMajor(y)) return ok();
  // The layout changes (a channels-last map to another rank, or the reverse): a copy by DMA.
  if (!reshapeBox(x, denseStrides(x), y, denseStrides(y)))
    return refuse(fmt::format("{} from {} to {} changes the channels-last layout and its axes do not split evenly into "
                              "each other's",
                              n.opType(), shapeToString(x), shapeToString(y)));
  return checkCopySize(x);
}

/// Per axis of a Slice's input the first index it keeps and its step (constant starts, axes and steps, every step
/// positive), else nullopt. Opset >= 10 gives starts/axes/steps as constant inputs, older opsets as attributes.
std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> sliceStartsAndSteps(const Node& n) {
  const Shape x = n.input(0)->type.staticShape(), y = n.output(0)->type.staticShape();
  if (x.size() != y.size() || x.empty()) return std::nullopt;
  auto ints = [&](size_t input, const char* attr) -> std::optional<std::vector<int64_t>> {
    if (n.hasAttr(attr)) return n.attrInts(attr);
    if (!n.hasInput(input)) return std::vector<int64_t>{};
    if (!n.input(input)->isConstant()) return std::nullopt;
    return n.input(input)->constant().toInt64Vector();
  };
  const auto starts = ints(1, "starts"), axes = ints(3, "axes"), steps = ints(4, "steps");
  if (!starts || !axes || !steps) return std::nullopt;
  const auto rank = static_cast<int64_t>(x.size());
  std::vector<int64_t> first(x.size(), 0), step(x.size(), 1);
  for (size_t i = 0; i < starts->size(); ++i) {
    int64_t a = axes->empty() ? static_cast<int64_t>(i) : (*axes)[i];
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) return std::nullopt;
    const int64_t st = i < steps->size() ? (*steps)[i] : 1, dim = x[static_cast<size_t>(a)];
    if (st <= 0) return std::nullopt;
    const int64_t s0 = (*starts)[i] < 0 ? (*starts)[i] + dim : (*starts)[i];
    first[static_cast<size_t>(a)] = std::clamp<int64_t>(s0, 0, dim), step[static_cast<size_t>(a)] = st;
  }
  for (size_t a = 0; a < x.size(); ++a)  // what the output's static shape keeps lies inside the input
    if (y[a] > 0 && first[a] + (y[a] - 1) * step[a] >= x[a]) return std::nullopt;
  return std::pair{first, step};
}

/// The first channel a Slice keeps when it keeps a contiguous range of channels (step 1) and every other axis
/// whole, else nullopt.
std::optional<int64_t> channelSliceStart(const Node& n) {
  const auto kept = sliceStartsAndSteps(n);
  if (!kept) return std::nullopt;
  const Shape x = n.input(0)->type.staticShape(), y = n.output(0)->type.staticShape();
  const auto axis = static_cast<size_t>(channelAxis(x.size()));
  for (size_t a = 0; a < x.size(); ++a)
    if (a != axis && x[a] != y[a]) return std::nullopt;
  if (kept->second[axis] != 1) return std::nullopt;
  return kept->first[axis];
}

hw::SupportResult checkSlice(const Node& n) {
  if (channelSliceStart(n)) return ok();
  if (!sliceStartsAndSteps(n))
    return refuse(fmt::format("Slice from {} to {} needs constant starts, axes and steps, every step positive",
                              shapeToString(n.input(0)->type.staticShape()), shapeToString(n.output(0)->type.staticShape())));
  return checkCopySize(n.output(0)->type.staticShape());
}

void copyInto(LowerContext& ctx, const Node& node, const TensorLoc& from, const TensorLoc& to, int64_t channelOffset);

/// `y` = the channels of `x` from `first` on: a view with x's pixel stride, or, for a subgraph output (the host reads
/// its outputs dense), a dense copy.
void channelRange(LowerContext& ctx, const Node& n, const Value* y, const TensorLoc& x, int64_t first) {
  if (!ctx.isBodyOutput(y)) {
    ctx.view(y, x, first);
    return;
  }
  TensorLoc range = x;
  range.addr += static_cast<uint64_t>(first), range.shape = y->type.staticShape(), range.stride = x.pixelStride();
  ctx.allocate(y);
  copyInto(ctx, n, range, ctx.loc(y), 0);
}

hw::SupportResult checkSplit(const Node& n) {
  const Shape x = n.input(0)->type.staticShape();
  if (x.empty()) return refuse("Split of a scalar");
  for (const Value* y : n.outputs())
    if (!y || !y->type.isStatic() || y->type.staticShape().size() != x.size())
      return refuse("every output must be present with a static shape of the input's rank");
  return alongChannels(n, x.size()) ? ok() : checkCopySize(x);  // along another axis: each output copied
}

/// Along the channels each output is the next channel range of the input, read in place (channelRange); along
/// another axis each is copied out of its slice by DMA.
void lowerSplit(const Node& n, LowerContext& ctx) {
  const TensorLoc x = ctx.loc(n.input(0));
  const bool channels = alongChannels(n, x.shape.size());
  const auto axis = static_cast<size_t>(channels ? channelAxis(x.shape.size()) : normalisedAxis(n, x.shape.size()));
  const std::vector<int64_t> xs = storageStrides(x);
  int64_t offset = 0;
  uint32_t tile = 0;
  for (const Value* y : n.outputs()) {
    if (channels) {
      channelRange(ctx, n, y, x, offset);
    } else {
      ctx.allocate(y);
      const TensorLoc to = ctx.loc(y);
      CopyBox box;
      box.size = to.shape, box.src = xs, box.dst = storageStrides(to);
      box.srcAddr = x.addr + static_cast<uint64_t>(offset * xs[axis]), box.dstAddr = to.addr;
      tile = copyBox(ctx, n, box, tile);
    }
    offset += y->type.staticShape()[axis];
  }
}

/// The constant indices of a Gather (normalised) when they are a scalar or 1-D and in range, else nullopt.
std::optional<std::vector<int64_t>> gatheredIndices(const Node& n) {
  const Shape x = n.input(0)->type.staticShape();
  if (x.empty() || !n.input(1)->isConstant() || n.input(1)->type.rank() > 1) return std::nullopt;
  const int64_t axis = normalisedAxis(n, x.size());
  if (axis < 0 || axis >= static_cast<int64_t>(x.size())) return std::nullopt;
  std::vector<int64_t> idx = n.input(1)->constant().toInt64Vector();
  const int64_t dim = x[static_cast<size_t>(axis)];
  for (int64_t& i : idx) {
    if (i < 0) i += dim;
    if (i < 0 || i >= dim) return std::nullopt;
  }
  return idx;
}

/// The constant channel indices of a Gather along the NPU's channel axis (1-D, normalised), or nullopt.
std::optional<std::vector<int64_t>> gatheredChannels(const Node& n) {
  const size_t rank = n.input(0)->type.staticShape().size();
  if (rank == 0 || n.input(1)->type.rank() != 1 || !alongChannels(n, rank)) return std::nullopt;
  return gatheredIndices(n);
}

hw::SupportResult checkGather(const Node& n) {
  if (gatheredChannels(n)) return ok();
  if (!gatheredIndices(n)) return refuse("only a Gather with constant, in-range scalar or 1-D indices is lowered");
  return checkCopySize(n.input(0)->type.staticShape());
}

/// A Gather along an axis other than the channels: one copy per index, of the input's slice at that index into the
/// output's slice at its position.
void lowerGatherCopies(const Node& n, LowerContext& ctx) {
  const std::vector<int64_t> idx = *gatheredIndices(n);
  ctx.allocate(n.output(0));
  const TensorLoc x = ctx.loc(n.input(0)), y = ctx.loc(n.output(0));
  const auto axis = static_cast<size_t>(normalisedAxis(n, x.shape.size()));
  const bool scalar = n.input(1)->type.rank() == 0;  // the output has no axis for it
  const std::vector<int64_t> xs = storageStrides(x), ys = storageStrides(y);
  CopyBox box;
  box.size = x.shape, box.size[axis] = 1, box.src = xs;
  for (size_t a = 0; a < x.shape.size(); ++a)
    box.dst.push_back(a == axis ? 0 : ys[scalar && a > axis ? a - 1 : a]);
  uint32_t tile = 0;
  for (size_t p = 0; p < idx.size(); ++p) {
    box.srcAddr = x.addr + static_cast<uint64_t>(idx[p] * xs[axis]);
    box.dstAddr = y.addr + (scalar ? 0 : static_cast<uint64_t>(static_cast<int64_t>(p) * ys[axis]));
    tile = copyBox(ctx, n, box, tile);
  }
}

/// One strided load of a channel gather: `count` consecutive input channels from `in` to output channels
/// `out`, `out + step`, ... (step >= 1).
struct GatherRun {
  int64_t in = 0, out = 0, step = 1, count = 0;
};

/// The output channels [k0, k0 + kb) of a gather as runs of consecutive input channels whose output channels
/// step evenly: output positions sorted by input channel, each run extended while both keep stepping.
std::vector<GatherRun> gatherRuns(const std::vector<int64_t>& idx, int64_t k0, int64_t kb) {
  std::vector<std::pair<int64_t, int64_t>> pairs;  // (input channel, output channel - k0)
  for (int64_t k = k0; k < k0 + kb; ++k) pairs.push_back({idx[static_cast<size_t>(k)], k - k0});
  std::sort(pairs.begin(), pairs.end());
  std::vector<GatherRun> runs;
  for (const auto& [in, out] : pairs) {
    if (!runs.empty()) {
      GatherRun& r = runs.back();
      const bool next = in == r.in + r.count;
      if (next && r.count == 1 && out > r.out) {
        r.step = out - r.out, ++r.count;
        continue;
      }
      if (next && r.count > 1 && out == r.out + r.count * r.step) {
        ++r.count;
        continue;
      }
    }
    runs.push_back({in, out, 1, 1});
  }
  return runs;
}

/// Whether a Concat's result is never materialised: a channel Concat whose only reader is a channel Gather
/// (ShuffleNet's concat before each shuffle) is read by the gather from its inputs, each run from the input that
/// holds it, so the concat copies nothing (its inputs that are views of other tensors would otherwise be copied).
bool gatheredFromInputs(const Node& concat, const LowerContext& ctx) {
  const Value* y = concat.output(0);
  if (!isOp(concat, "Concat") || ctx.isBodyOutput(y) || y->uses().size() != 1) return false;
  const Node& user = *y->uses()[0].node;
  return channelConcat(concat) && isOp(user, "Gather") && user.input(0) == y && gatheredChannels(user) &&
         ctx.schedule.tilingOf(user.name());
}

void lowerGather(const Node& n, LowerContext& ctx) {
  if (!gatheredChannels(n)) {
    lowerGatherCopies(n, ctx);
    return;
  }
  const std::vector<int64_t> idx = *gatheredChannels(n);
  const NodeTiling& t = ctx.tiling(n);
  ctx.allocate(n.output(0));
  // The tensors holding the gathered channels, by first channel: the input, or a concat's inputs.
  std::vector<std::pair<int64_t, TensorLoc>> pieces;
  const Node* concat = n.input(0)->producer();
  if (concat && gatheredFromInputs(*concat, ctx)) {
    int64_t first = 0;
    for (const Value* v : concat->inputs()) {
      pieces.push_back({first, ctx.loc(v)});
      first += ctx.loc(v).channels();
    }
  } else {
    pieces.push_back({0, ctx.loc(n.input(0))});
  }
  const TensorLoc y = ctx.loc(n.output(0));
  const int64_t P = y.pixels(), K = y.channels();
  const int64_t kb = std::min(t.channels, K), np = std::max<int64_t>(1, std::min(t.cols, P));
  uint32_t tile = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kk = std::min(kb, K - k0);
    const std::vector<GatherRun> runs = gatherRuns(idx, k0, kk);
    for (int64_t p0 = 0; p0 < P; p0 += np, ++tile) {
      ctx.beginTile(n, tile);
      const auto pk = static_cast<uint32_t>(std::min(np, P - p0));
      const int32_t r = ctx.region(Buffer::Input, uint64_t{pk} * static_cast<uint64_t>(kk));
      for (GatherRun run : runs)
        while (run.count > 0) {  // one load per piece the run's input channels fall in
          size_t i = pieces.size() - 1;
          while (pieces[i].first > run.in) --i;
          const TensorLoc& x = pieces[i].second;
          const int64_t in = run.in - pieces[i].first, take = std::min(run.count, x.channels() - in);
          ctx.emit(makeLoad(ctx.at(r, static_cast<uint64_t>(run.out), kk, run.step),
                            x.addr + static_cast<uint64_t>(p0 * x.pixelStride() + in), x.pixelStride(), 1, pk,
                            static_cast<uint32_t>(take), 1),
                   r);
          run.in += take, run.out += take * run.step, run.count -= take;
        }
      ctx.emit(makeStore(ctx.at(r, 0, pk * kk, kk), y.addr + static_cast<uint64_t>(p0 * y.pixelStride() + k0), 0,
                         y.pixelStride(), 1, pk, static_cast<uint32_t>(kk)),
               -1, r);
    }
  }
}

/// Copies a tensor into a channel slice of another by DMA, in tiles of pixels x channels through `inp`.
void copyInto(LowerContext& ctx, const Node& node, const TensorLoc& from, const TensorLoc& to, int64_t channelOffset) {
  const NodeTiling& t = ctx.tiling(node);
  const int64_t P = from.pixels(), C = from.channels();
  const int64_t nc = std::min(t.channels, C), np = std::max<int64_t>(1, std::min(t.cols, P));
  for (int64_t c0 = 0; c0 < C; c0 += nc)
    for (int64_t p0 = 0; p0 < P; p0 += np) {
      ctx.beginTile(node, static_cast<uint32_t>(c0 / nc * ceilDiv(P, np) + p0 / np));
      const auto pk = static_cast<uint32_t>(std::min(np, P - p0)), ck = static_cast<uint32_t>(std::min(nc, C - c0));
      const int32_t r = ctx.region(Buffer::Input, uint64_t{pk} * ck);
      ctx.emit(makeLoad(ctx.at(r, 0, pk * ck, ck), from.addr + static_cast<uint64_t>(p0 * from.pixelStride() + c0), 0,
                        from.pixelStride(), 1, pk, ck),
               r);
      ctx.emit(makeStore(ctx.at(r, 0, pk * ck, ck),
                         to.addr + static_cast<uint64_t>(p0 * to.pixelStride() + channelOffset + c0), 0, to.pixelStride(),
                         1, pk, ck),
               -1, r);
    }
}

void lowerConcat(const Node& n, LowerContext& ctx) {
  ctx.allocate(n.output(0));
  if (gatheredFromInputs(n, ctx)) return;  // the gather reading it loads from its inputs
  const TensorLoc y = ctx.loc(n.output(0));
  if (!channelConcat(n)) {  // along another axis: each input copied into its slice
    const auto axis = static_cast<size_t>(normalisedAxis(n, y.shape.size()));
    const std::vector<int64_t> ys = storageStrides(y);
    int64_t offset = 0;
    uint32_t tile = 0;
    for (const Value* v : n.inputs()) {
      const TensorLoc& x = ctx.loc(v);
      CopyBox box;
      box.size = x.shape, box.src = storageStrides(x), box.dst = ys;
      box.srcAddr = x.addr, box.dstAddr = y.addr + static_cast<uint64_t>(offset * ys[axis]);
      tile = copyBox(ctx, n, box, tile);
      offset += x.shape[axis];
    }
    return;
  }
  int64_t offset = 0;
  for (const Value* v : n.inputs()) {
    const TensorLoc& x = ctx.loc(v);
    const bool inPlace = x.addr == y.addr + static_cast<uint64_t>(offset) && x.pixelStride() == y.pixelStride();
    if (!inPlace) copyInto(ctx, n, x, y, offset);
    offset += x.channels();
  }
}

void lowerView(const Node& n, LowerContext& ctx) {
  const TensorLoc& x = ctx.loc(n.input(0));
  if (!storedRowMajor(x.shape) || !storedRowMajor(n.output(0)->type.staticShape())) {
    // The layout changes: element by element in row-major order, by DMA.
    ctx.allocate(n.output(0));
    const TensorLoc y = ctx.loc(n.output(0));
    std::optional<CopyBox> box = reshapeBox(x.shape, storageStrides(x), y.shape, storageStrides(y));
    if (!box) throw InternalError(fmt::format("{}: no copy from {} to {}", n.describe(), shapeToString(x.shape),
                                              shapeToString(y.shape)));
    box->srcAddr = x.addr, box->dstAddr = y.addr;
    copyBox(ctx, n, *box, 0);
    return;
  }
  if (x.pixelStride() == x.channels()) {
    // The same words, dense in the output's shape: its pixel stride is its own channel count, not the input's
    // (Flatten of [2, 1, 5, 14] to [2, 70] steps 70 words per row, not 1).
    TensorLoc same = x;
    same.shape = n.output(0)->type.staticShape();
    same.channelsLast = same.shape.size() == 4;
    same.stride = 0;
    ctx.view(n.output(0), same, 0);
    return;
  }
  // The input is a slice of a wider tensor: copy it out densely.
  ctx.allocate(n.output(0));
  TensorLoc dense = ctx.loc(n.output(0));
  dense.shape = x.shape, dense.channelsLast = x.channelsLast, dense.stride = 0;
  copyInto(ctx, n, x, dense, 0);
}

/// A channel range of the input, read in place (channelRange).
void lowerSlice(const Node& n, LowerContext& ctx) {
  if (const std::optional<int64_t> first = channelSliceStart(n)) {
    channelRange(ctx, n, n.output(0), ctx.loc(n.input(0)), *first);
    return;
  }
  // Other axes or steps: copied by DMA, the input's strides times the steps.
  const auto [first, step] = *sliceStartsAndSteps(n);
  ctx.allocate(n.output(0));
  const TensorLoc x = ctx.loc(n.input(0)), y = ctx.loc(n.output(0));
  const std::vector<int64_t> xs = storageStrides(x);
  CopyBox box;
  box.size = y.shape, box.dst = storageStrides(y), box.srcAddr = x.addr, box.dstAddr = y.addr;
  for (size_t a = 0; a < xs.size(); ++a) {
    box.src.push_back(xs[a] * step[a]);
    box.srcAddr += static_cast<uint64_t>(first[a] * xs[a]);
  }
  copyBox(ctx, n, box, 0);
}

const RegisterOpLowering kConcat({"Concat"}, {OpFamily::Alias, checkConcat, lowerConcat});
const RegisterOpLowering kViews({"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity"},
                                {OpFamily::Alias, checkView, lowerView});
const RegisterOpLowering kSplit({"Split"}, {OpFamily::Alias, checkSplit, lowerSplit});
const RegisterOpLowering kGather({"Gather"}, {OpFamily::Alias, checkGather, lowerGather});
const RegisterOpLowering kSlice({"Slice"}, {OpFamily::Alias, checkSlice, lowerSlice});

}  // namespace

namespace {

int64_t channelsOf(const Value* v) {
  return v->type.staticShape()[static_cast<size_t>(channelAxis(v->type.staticShape().size()))];
}

/// When every input of Concat `n` already lives at consecutive channels of one tensor, in order (a later
/// concat's inputs: DenseNet's Concat(x0, y1, ..., yk) before Concat(x0, y1, ..., yk+1)), that tensor's location
/// from the first input's channel on, which the concat's result can be a view of.
std::optional<TensorLoc> consecutiveSlices(const Node& n, LowerContext& ctx) {
  if (n.output(0)->type.staticShape().size() != 4) return std::nullopt;
  const Value* first = n.input(0);
  if (!first || !ctx.hasLoc(first)) return std::nullopt;
  TensorLoc base = ctx.loc(first);
  int64_t offset = 0;
  for (const Value* v : n.inputs()) {
    if (!v || !ctx.hasLoc(v) || v->type.staticShape().size() != 4) return std::nullopt;
    const TensorLoc& l = ctx.loc(v);
    if (l.addr != base.addr + static_cast<uint64_t>(offset) || l.pixelStride() != base.pixelStride()) return std::nullopt;
    offset += channelsOf(v);
  }
  base.stride = base.pixelStride();
  return base;
}

}  // namespace

void placeConcatInputs(const Graph& body, LowerContext& ctx) {
  const auto& outs = body.outputs();
  auto isOutput = [&](const Value* v) { return std::find(outs.begin(), outs.end(), v) != outs.end(); };
  // The widest concats first (then in reverse order): a value read by several concats gets its slice in the widest,
  // which in a dense block is the last one, whose slices the others' inputs then already are.
  std::vector<const Node*> concats;
  for (auto it = body.nodes().rbegin(); it != body.nodes().rend(); ++it)
    if (isOp(**it, "Concat") && checkConcat(**it).supported && channelConcat(**it)) concats.push_back(it->get());
  std::stable_sort(concats.begin(), concats.end(),
                   [](const Node* a, const Node* b) { return channelsOf(a->output(0)) > channelsOf(b->output(0)); });
  for (const Node* np : concats) {
    const Node& n = *np;
    // A wider concat has given its inputs their slices already: when they are this concat's inputs too, in the
    // same order, its result is a view of them and nothing is copied (a dense block's concats all share its last
    // one's tensor).
    if (!ctx.hasLoc(n.output(0)) && !isOutput(n.output(0)))
      if (const std::optional<TensorLoc> base = consecutiveSlices(n, ctx)) ctx.view(n.output(0), *base, 0);
    ctx.allocate(n.output(0));
    const TensorLoc y = ctx.loc(n.output(0));
    int64_t offset = 0;
    for (const Value* v : n.inputs()) {
      const Node* producer = v->producer();
      // Written straight into this concat's slice (its other readers read it there, with the concat's pixel stride).
      const bool ownValue = producer && !v->isConstant() && !isOutput(v) && !ctx.hasLoc(v) &&
                            opFamily(*producer) && opFamily(*producer) != OpFamily::Alias;
      const int64_t channels = channelsOf(v);
      if (ownValue) ctx.view(v, y, offset);
      offset += channels;
    }
  }
}

}  // namespace tessel::npu::lower
