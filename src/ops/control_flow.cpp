// Control flow: If (two branches), Loop (trip count / condition, loop-carried values, scan outputs) and
// Scan (opset 9+ axes/directions form, and the opset 8 form with a batch axis and sequence_lens).
#include <algorithm>
#include <limits>

#include "tessel/ops/helpers.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

// ---------------------------------------------------------------- tensor slicing and stacking

/// Calls fn(T*) / copies elements generically; strings need element-wise copies, so everything goes
/// through a typed loop.
template <class Fn>
void forElementType(DType t, Fn&& fn) {
  dispatchAny(t, "control-flow tensor", std::forward<Fn>(fn));
}

/// Extents around `axis`: outer = product before it, inner = product after it.
std::pair<int64_t, int64_t> outerInner(const Shape& s, size_t axis) {
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < axis; ++i) outer *= s[i];
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  return {outer, inner};
}

/// x[..., index, ...] along `axis` (the axis is removed).
Tensor takeIndex(const Tensor& x, size_t axis, int64_t index) {
  Shape outShape = x.shape();
  int64_t extent = outShape[axis];
  outShape.erase(outShape.begin() + static_cast<std::ptrdiff_t>(axis));
  Tensor out(x.dtype(), outShape);
  // Plain variables, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const auto split = outerInner(x.shape(), axis);
  const int64_t outer = split.first, inner = split.second;
  forElementType(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(src + (o * extent + index) * inner, inner, dst + o * inner);
  });
  return out;
}

/// Stacks equally shaped tensors along a new axis `axis` (0 <= axis <= rank).
Tensor stackAlong(const std::vector<Tensor>& parts, size_t axis, DType dtype, const Shape& partShape) {
  Shape outShape = partShape;
  outShape.insert(outShape.begin() + static_cast<std::ptrdiff_t>(axis), static_cast<int64_t>(parts.size()));
  Tensor out(dtype, outShape);
  const auto split = outerInner(outShape, axis);
  const int64_t outer = split.first, inner = split.second;
  int64_t count = static_cast<int64_t>(parts.size());
  forElementType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = out.data<T>();
    for (int64_t p = 0; p < count; ++p) {
      const T* src = parts[static_cast<size_t>(p)].template data<T>();
      for (int64_t o = 0; o < outer; ++o) std::copy_n(src + o * inner, inner, dst + (o * count + p) * inner);
    }
  });
  return out;
}

/// Merges two types of the same value produced on different paths (If branches, loop iterations):
/// the element type must agree; dims that differ become unknown.
TensorType mergeTypes(const TensorType& a, const TensorType& b) {
  if (a.dtype == DType::Undefined) return b;
  if (b.dtype == DType::Undefined) return a;
  if (!a.hasRank() || !b.hasRank() || a.rank() != b.rank()) return TensorType(a.dtype, std::nullopt);
  std::vector<Dim> dims;
  for (size_t i = 0; i < a.rank(); ++i) dims.push_back((*a.dims)[i] == (*b.dims)[i] ? (*a.dims)[i] : Dim::unknown());
  return TensorType(a.dtype, dims);
}

/// `t` with a dimension `d` inserted at `axis` (unknown rank stays unknown).
TensorType insertDim(const TensorType& t, size_t axis, Dim d) {
  if (!t.hasRank()) return t;
  std::vector<Dim> dims = *t.dims;
  if (axis > dims.size()) axis = dims.size();
  dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(axis), d);
  return TensorType(t.dtype, dims);
}

// ---------------------------------------------------------------- body type refinement

/// `declared` completed with what `actual` knows: a missing element type, a missing rank, unknown dims.
TensorType completeType(const TensorType& declared, const TensorType& actual) {
  TensorType t = declared;
  if (t.dtype == DType::Undefined) t.dtype = actual.dtype;
  if (!t.hasRank()) return TensorType(t.dtype, actual.dims);
  if (actual.hasRank() && actual.rank() == t.rank())
    for (size_t i = 0; i < t.rank(); ++i)
      if (!(*t.dims)[i].isKnown() && (*t.dims)[i].symbol.empty()) (*t.dims)[i] = (*actual.dims)[i];
  return t;
}

/// The graph held by a node's graph attribute, for editing its value types.
Graph& bodyOf(Node& node, const std::string& attr) {
  const AttrValue* v = node.findAttr(attr);
  TESSEL_ASSERT(v && std::holds_alternative<std::shared_ptr<Graph>>(*v), "graph attribute expected");
  return *std::get<std::shared_ptr<Graph>>(*v);
}

/// Bodies often declare their inputs without shapes, and captured values carry no type at all. Completes
/// them from what the calling node knows (`inputTypes`, the enclosing scopes) and infers the body, so that
/// its values are typed before any pass runs and its output types are as precise as the outer graph allows.
void refineBody(Graph& body, const std::vector<TensorType>& inputTypes) {
  for (size_t i = 0; i < inputTypes.size() && i < body.inputs().size(); ++i) {
    Value* in = body.inputs()[i];
    TensorType t = completeType(in->type, inputTypes[i]);
    in->type = t;
  }
  for (Value* v : body.values()) {
    if (!v->isCaptured() || !body.parent()) continue;
    Value* outer = body.parent()->lookup(v->name());
    if (!outer || outer == v) continue;
    TensorType t = completeType(v->type, outer->type);
    v->type = t;
  }
  inferShapes(body);  // shape_inference.cpp leaves If, Loop and Scan bodies to this
}

/// `t` without axis `axis` (a slice taken by Scan); unknown rank stays unknown.
TensorType removeDim(const TensorType& t, size_t axis) {
  if (!t.hasRank() || axis >= t.rank()) return TensorType(t.dtype, std::nullopt);
  std::vector<Dim> dims = *t.dims;
  dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(axis));
  return TensorType(t.dtype, dims);
}

bool scalarTruth(const Tensor& t, const KernelContext& ctx, const char* what) {
  if (t.numel() != 1) ctx.fail("{} must hold exactly one element, it has shape [{}]", what, fmt::join(t.shape(), ","));
  if (t.dtype() != DType::Bool) ctx.fail("{} must be bool, found {}", what, dtypeName(t.dtype()));
  return t.data<bool>()[0];
}

// ---------------------------------------------------------------- If

void inferIf(InferContext& ctx) {
  refineBody(bodyOf(ctx.node(), "then_branch"), {});
  refineBody(bodyOf(ctx.node(), "else_branch"), {});
  const Graph& thenG = ctx.node().attrGraph("then_branch");
  const Graph& elseG = ctx.node().attrGraph("else_branch");
  if (thenG.outputs().size() != ctx.numOutputs() || elseG.outputs().size() != ctx.numOutputs())
    ctx.fail("then_branch has {} output(s) and else_branch {}, but the node has {}", thenG.outputs().size(),
             elseG.outputs().size(), ctx.numOutputs());
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    const TensorType& a = thenG.outputs()[i]->type;
    const TensorType& b = elseG.outputs()[i]->type;
    if (a.dtype != DType::Undefined && b.dtype != DType::Undefined && a.dtype != b.dtype)
      ctx.fail("output {}: then_branch gives {} but else_branch gives {}", i, dtypeName(a.dtype), dtypeName(b.dtype));
    if (ctx.hasOutput(i)) ctx.setOutputType(i, mergeTypes(a, b));
  }
}

void ifKernel(KernelContext& ctx) {
  bool cond = scalarTruth(ctx.input(0), ctx, "the condition");
  const Graph& branch = ctx.attrGraph(cond ? "then_branch" : "else_branch");
  std::vector<Tensor> outs = ctx.runSubgraph(branch, {});
  if (outs.size() != ctx.numOutputs())
    ctx.fail("{} produced {} output(s), the node has {}", cond ? "then_branch" : "else_branch", outs.size(), ctx.numOutputs());
  for (size_t i = 0; i < outs.size(); ++i) ctx.setOutput(i, outs[i]);
}

// ---------------------------------------------------------------- Loop

/// Number of loop-carried values of a Loop node (inputs after M and cond).
size_t loopCarriedCount(size_t numInputs) { return numInputs < 2 ? 0 : numInputs - 2; }

/// Types the body's inputs from the node's: the iteration number, the condition and the loop-carried
/// values. A carried value whose type changes across iterations is widened and the body re-inferred.
void refineLoopBody(InferContext& ctx, size_t carried) {
  Graph& body = bodyOf(ctx.node(), "body");
  std::vector<TensorType> types{TensorType::fromShape(DType::Int64, {}), TensorType::fromShape(DType::Bool, {})};
  for (size_t i = 0; i < carried; ++i) types.push_back(ctx.inputType(2 + i));
  for (int round = 0; round < 3; ++round) {
    refineBody(body, types);
    bool widened = false;
    for (size_t i = 0; i < carried && 1 + i < body.outputs().size(); ++i) {
      TensorType merged = mergeTypes(body.inputs()[2 + i]->type, body.outputs()[1 + i]->type);
      if (!(merged == body.inputs()[2 + i]->type)) {
        body.inputs()[2 + i]->type = merged;
        types[2 + i] = merged;
        widened = true;
      }
    }
    if (!widened) return;
    inferShapes(body);
  }
}

void inferLoop(InferContext& ctx) {
  const Graph& body = ctx.node().attrGraph("body");
  size_t carried = loopCarriedCount(ctx.numInputs());
  if (body.inputs().size() != carried + 2)
    ctx.fail("the body has {} input(s); expected 2 + {} loop-carried value(s)", body.inputs().size(), carried);
  if (body.outputs().size() < carried + 1)
    ctx.fail("the body has {} output(s); expected at least 1 + {} loop-carried value(s)", body.outputs().size(), carried);
  refineLoopBody(ctx, carried);
  size_t scans = body.outputs().size() - 1 - carried;
  if (ctx.numOutputs() > carried + scans)
    ctx.fail("the node has {} outputs but the body yields only {} loop-carried and {} scan output(s)", ctx.numOutputs(), carried, scans);
  // The trip count is known only when M is a constant and no condition can stop the loop early.
  Dim trips = Dim::unknown();
  if (ctx.hasInput(0) && !ctx.hasInput(1))
    if (const Tensor* m = ctx.inputValue(0); m && m->numel() == 1) trips = Dim::known(std::max<int64_t>(0, m->toInt64Vector()[0]));
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    if (!ctx.hasOutput(i)) continue;
    const TensorType& bodyType = body.outputs()[1 + i]->type;
    if (i < carried) {
      // The initial value and every iteration's value flow into the same output.
      ctx.setOutputType(i, mergeTypes(ctx.inputType(2 + i), bodyType));
    } else {
      ctx.setOutputType(i, insertDim(bodyType, 0, trips));
    }
  }
}

void loopKernel(KernelContext& ctx) {
  const Graph& body = ctx.attrGraph("body");
  size_t carried = loopCarriedCount(ctx.numInputs());
  if (body.inputs().size() != carried + 2)
    ctx.fail("the body has {} input(s); expected 2 + {} loop-carried value(s)", body.inputs().size(), carried);
  int64_t maxTrips = std::numeric_limits<int64_t>::max();
  if (ctx.hasInput(0)) {
    const Tensor& m = ctx.input(0);
    if (m.numel() != 1 || !isInteger(m.dtype())) ctx.fail("M (trip count) must be a single int64, got {}", m.summary());
    maxTrips = m.toInt64Vector()[0];
  }
  bool cond = ctx.hasInput(1) ? scalarTruth(ctx.input(1), ctx, "the initial condition") : true;
  std::vector<Tensor> state;
  for (size_t i = 0; i < carried; ++i) state.push_back(ctx.input(2 + i));
  size_t scans = body.outputs().size() - 1 - carried;
  std::vector<std::vector<Tensor>> scanParts(scans);
  for (int64_t iter = 0; iter < maxTrips && cond; ++iter) {
    std::vector<Tensor> args{Tensor::scalar<int64_t>(iter), Tensor::scalar<bool>(cond)};
    args.insert(args.end(), state.begin(), state.end());
    std::vector<Tensor> outs = ctx.runSubgraph(body, args);
    if (outs.size() != 1 + carried + scans) ctx.fail("the body returned {} value(s), expected {}", outs.size(), 1 + carried + scans);
    // Without a cond input, the body's condition output is ignored (the loop runs M times).
    if (ctx.hasInput(1)) cond = scalarTruth(outs[0], ctx, "the body's condition output");
    for (size_t i = 0; i < carried; ++i) state[i] = outs[1 + i];
    for (size_t k = 0; k < scans; ++k) {
      const Tensor& part = outs[1 + carried + k];
      if (!scanParts[k].empty() && part.shape() != scanParts[k][0].shape())
        ctx.fail("scan output {} changes shape across iterations: [{}] then [{}]", k, fmt::join(scanParts[k][0].shape(), ","),
                 fmt::join(part.shape(), ","));
      scanParts[k].push_back(part);
    }
  }
  for (size_t i = 0; i < carried && i < ctx.numOutputs(); ++i) ctx.setOutput(i, state[i]);
  for (size_t k = 0; k < scans && carried + k < ctx.numOutputs(); ++k) {
    const TensorType& t = body.outputs()[1 + carried + k]->type;
    if (scanParts[k].empty()) {
      // Zero iterations: an empty stack; inner extents come from the body's static type when known.
      Shape inner = t.isStatic() ? t.staticShape() : Shape{};
      inner.insert(inner.begin(), 0);
      ctx.allocateOutput(carried + k, t.dtype == DType::Undefined ? DType::Float32 : t.dtype, inner);
      continue;
    }
    ctx.setOutput(carried + k, stackAlong(scanParts[k], 0, scanParts[k][0].dtype(), scanParts[k][0].shape()));
  }
}

// ---------------------------------------------------------------- Scan

/// Geometry of a Scan node: N state values, M scan inputs, per-input/output axes and directions.
struct ScanLayout {
  bool legacyBatched = false;  ///< opset 8: input 0 is sequence_lens, every value has a leading batch axis
  size_t numState = 0, numScanIn = 0, numScanOut = 0;
  std::vector<int64_t> inAxes, inDirs, outAxes, outDirs;
};

std::vector<int64_t> intsOr(const Node& node, const std::string& name, size_t n, int64_t fill) {
  if (!node.hasAttr(name)) return std::vector<int64_t>(n, fill);
  std::vector<int64_t> v = node.attrInts(name);
  if (v.size() != n)
    throw UserError(fmt::format("{}: attribute '{}' has {} value(s), expected {}", node.describe(), name, v.size(), n));
  return v;
}

ScanLayout scanLayout(const Node& node, const std::vector<size_t>& inputRanks) {
  const Graph& body = node.attrGraph("body");
  ScanLayout s;
  // The opset 8 form has one more node input (sequence_lens) than body inputs.
  s.legacyBatched = node.numInputs() == body.inputs().size() + 1;
  size_t valueInputs = node.numInputs() - (s.legacyBatched ? 1 : 0);
  s.numScanIn = static_cast<size_t>(node.attrInt("num_scan_inputs"));
  if (s.numScanIn > valueInputs || body.inputs().size() != valueInputs)
    throw UserError(fmt::format("{}: num_scan_inputs={} but the node has {} state+scan input(s) and the body {} input(s)",
                                node.describe(), s.numScanIn, valueInputs, body.inputs().size()));
  s.numState = valueInputs - s.numScanIn;
  if (body.outputs().size() < s.numState)
    throw UserError(fmt::format("{}: the body has {} output(s), fewer than the {} state value(s)", node.describe(),
                                body.outputs().size(), s.numState));
  s.numScanOut = body.outputs().size() - s.numState;
  if (s.legacyBatched) {
    s.inDirs = intsOr(node, "directions", s.numScanIn, 0);
    s.inAxes.assign(s.numScanIn, 0);
    s.outAxes.assign(s.numScanOut, 0);
    s.outDirs.assign(s.numScanOut, 0);
    return s;
  }
  s.inDirs = intsOr(node, "scan_input_directions", s.numScanIn, 0);
  s.inAxes = intsOr(node, "scan_input_axes", s.numScanIn, 0);
  s.outDirs = intsOr(node, "scan_output_directions", s.numScanOut, 0);
  s.outAxes = intsOr(node, "scan_output_axes", s.numScanOut, 0);
  for (size_t i = 0; i < s.numScanIn; ++i)
    if (i < inputRanks.size() && inputRanks[i] != SIZE_MAX)
      s.inAxes[i] = normalizeAxis(s.inAxes[i], static_cast<int64_t>(inputRanks[i]), node);
  for (size_t k = 0; k < s.numScanOut; ++k) {
    const TensorType& t = body.outputs()[s.numState + k]->type;
    if (t.hasRank()) s.outAxes[k] = normalizeAxis(s.outAxes[k], static_cast<int64_t>(t.rank()) + 1, node);
  }
  return s;
}

/// Types the body's inputs: state values as given (opset 8: without the batch axis), scan inputs without
/// their scan axis.
void refineScanBody(InferContext& ctx, const ScanLayout& s, size_t first) {
  std::vector<TensorType> types;
  for (size_t i = 0; i < s.numState; ++i) {
    const TensorType& t = ctx.inputType(first + i);
    types.push_back(s.legacyBatched ? removeDim(t, 0) : t);
  }
  for (size_t j = 0; j < s.numScanIn; ++j) {
    const TensorType& t = ctx.inputType(first + s.numState + j);
    types.push_back(s.legacyBatched ? removeDim(removeDim(t, 0), 0) : removeDim(t, static_cast<size_t>(s.inAxes[j])));
  }
  refineBody(bodyOf(ctx.node(), "body"), types);
}

void inferScan(InferContext& ctx) {
  const Node& node = ctx.node();
  const Graph& body = node.attrGraph("body");
  size_t first = node.numInputs() == body.inputs().size() + 1 ? 1 : 0;
  std::vector<size_t> scanRanks;
  size_t numScanIn = static_cast<size_t>(node.attrInt("num_scan_inputs"));
  for (size_t i = ctx.numInputs() - std::min(numScanIn, ctx.numInputs()); i < ctx.numInputs(); ++i)
    scanRanks.push_back(ctx.inputType(i).hasRank() ? ctx.inputType(i).rank() : SIZE_MAX);
  ScanLayout s = scanLayout(node, scanRanks);
  refineScanBody(ctx, s, first);
  Dim seqLen = Dim::unknown();
  if (s.numScanIn > 0) {
    const TensorType& t = ctx.inputType(first + s.numState);
    size_t axis = s.legacyBatched ? 1 : static_cast<size_t>(s.inAxes[0]);
    if (t.hasRank() && axis < t.rank()) seqLen = (*t.dims)[axis];
  }
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    if (!ctx.hasOutput(i) || i >= body.outputs().size()) continue;
    TensorType bodyType = body.outputs()[i]->type;
    if (i >= s.numState) bodyType = insertDim(bodyType, static_cast<size_t>(s.outAxes[i - s.numState]), seqLen);
    if (s.legacyBatched) {
      const TensorType& stateOrScan = ctx.inputType(first + (i < s.numState ? i : s.numState));
      Dim batch = stateOrScan.hasRank() && stateOrScan.rank() > 0 ? (*stateOrScan.dims)[0] : Dim::unknown();
      bodyType = insertDim(bodyType, 0, batch);
    }
    ctx.setOutputType(i, bodyType);
  }
}

/// One scan over the sequence: returns final states followed by stacked scan outputs.
std::vector<Tensor> runScan(KernelContext& ctx, const ScanLayout& s, std::vector<Tensor> state,
                            const std::vector<Tensor>& scanIn, int64_t seqLen) {
  const Graph& body = ctx.attrGraph("body");
  std::vector<std::vector<Tensor>> parts(s.numScanOut);
  for (int64_t t = 0; t < seqLen; ++t) {
    std::vector<Tensor> args = state;
    for (size_t j = 0; j < s.numScanIn; ++j) {
      int64_t pos = s.inDirs[j] ? seqLen - 1 - t : t;
      args.push_back(takeIndex(scanIn[j], static_cast<size_t>(s.inAxes[j]), pos));
    }
    std::vector<Tensor> outs = ctx.runSubgraph(body, args);
    for (size_t i = 0; i < s.numState; ++i) state[i] = outs[i];
    for (size_t k = 0; k < s.numScanOut; ++k) parts[k].push_back(outs[s.numState + k]);
  }
  std::vector<Tensor> result = state;
  for (size_t k = 0; k < s.numScanOut; ++k) {
    const TensorType& bt = body.outputs()[s.numState + k]->type;
    if (parts[k].empty()) {
      Shape shape = bt.isStatic() ? bt.staticShape() : Shape{};
      shape.insert(shape.begin() + std::min<int64_t>(s.outAxes[k], static_cast<int64_t>(shape.size())), 0);
      result.push_back(Tensor(bt.dtype == DType::Undefined ? DType::Float32 : bt.dtype, shape));
      continue;
    }
    if (s.outDirs[k]) std::reverse(parts[k].begin(), parts[k].end());
    const Shape& partShape = parts[k][0].shape();
    if (s.outAxes[k] > static_cast<int64_t>(partShape.size()))
      ctx.fail("scan_output_axes[{}]={} is out of range for a rank-{} scan output", k, s.outAxes[k], partShape.size() + 1);
    result.push_back(stackAlong(parts[k], static_cast<size_t>(s.outAxes[k]), parts[k][0].dtype(), partShape));
  }
  return result;
}

int64_t scanLength(KernelContext& ctx, const ScanLayout& s, const std::vector<Tensor>& scanIn) {
  int64_t len = -1;
  for (size_t j = 0; j < s.numScanIn; ++j) {
    int64_t l = scanIn[j].dim(s.inAxes[j]);
    if (len >= 0 && l != len) ctx.fail("scan input {} has {} steps along its scan axis, scan input 0 has {}", j, l, len);
    len = l;
  }
  return std::max<int64_t>(len, 0);
}

/// Zero-pads scan outputs of different lengths (axis 0) to the longest, when their other extents agree.
void padSequences(std::vector<Tensor>& parts) {
  const Tensor* longest = &parts[0];
  for (const Tensor& t : parts)
    if (t.rank() > 0 && t.dim(0) > longest->dim(0)) longest = &t;
  for (Tensor& t : parts) {
    if (t.rank() == 0 || t.dim(0) == longest->dim(0) || t.rank() != longest->rank()) continue;
    if (!std::equal(t.shape().begin() + 1, t.shape().end(), longest->shape().begin() + 1)) continue;
    Tensor padded(t.dtype(), longest->shape());
    forElementType(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::copy_n(t.data<T>(), t.numel(), padded.data<T>());
    });
    t = padded;
  }
}

void scanKernel(KernelContext& ctx) {
  std::vector<size_t> ranks;
  size_t numScanIn = static_cast<size_t>(ctx.attrInt("num_scan_inputs"));
  for (size_t i = ctx.numInputs() - std::min(numScanIn, ctx.numInputs()); i < ctx.numInputs(); ++i)
    ranks.push_back(ctx.input(i).rank());
  ScanLayout s = scanLayout(ctx.node(), ranks);
  size_t first = s.legacyBatched ? 1 : 0;
  std::vector<Tensor> state, scanIn;
  for (size_t i = 0; i < s.numState; ++i) state.push_back(ctx.input(first + i));
  for (size_t j = 0; j < s.numScanIn; ++j) scanIn.push_back(ctx.input(first + s.numState + j));
  if (!s.legacyBatched) {
    std::vector<Tensor> outs = runScan(ctx, s, state, scanIn, scanLength(ctx, s, scanIn));
    for (size_t i = 0; i < ctx.numOutputs() && i < outs.size(); ++i) ctx.setOutput(i, outs[i]);
    return;
  }
  // Opset 8: run each batch entry separately (sequence lengths may differ), then restack along axis 0.
  int64_t batch = s.numState ? state[0].dim(0) : (s.numScanIn ? scanIn[0].dim(0) : 0);
  std::vector<std::vector<Tensor>> perBatch(s.numState + s.numScanOut);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> st, sc;
    for (const Tensor& t : state) st.push_back(takeIndex(t, 0, b));
    for (const Tensor& t : scanIn) sc.push_back(takeIndex(t, 0, b));
    int64_t len = scanLength(ctx, s, sc);
    if (ctx.hasInput(0)) {
      std::vector<int64_t> lens = ctx.input(0).toInt64Vector();
      if (static_cast<int64_t>(lens.size()) != batch) ctx.fail("sequence_lens has {} entries for a batch of {}", lens.size(), batch);
      if (lens[b] < 0 || lens[b] > len) ctx.fail("sequence_lens[{}]={} is outside [0, {}]", b, lens[b], len);
      len = lens[b];
    }
    std::vector<Tensor> outs = runScan(ctx, s, st, sc, len);
    for (size_t i = 0; i < outs.size(); ++i) perBatch[i].push_back(outs[i]);
  }
  for (size_t i = 0; i < perBatch.size() && i < ctx.numOutputs(); ++i) {
    if (perBatch[i].empty()) continue;
    if (i >= s.numState) padSequences(perBatch[i]);  // shorter sequence_lens leave zero-filled tails
    for (const Tensor& t : perBatch[i])
      if (t.shape() != perBatch[i][0].shape()) ctx.fail("output {} differs in shape between batch entries", i);
    ctx.setOutput(i, stackAlong(perBatch[i], 0, perBatch[i][0].dtype(), perBatch[i][0].shape()));
  }
}

/// Control flow does no arithmetic of its own; the nodes of its bodies carry their costs (trip counts are
/// generally unknown at compile time, so no total is claimed here).
Cost noCost(const Node&) { return Cost{}; }

}  // namespace

TESSEL_REGISTER_OP(If) {
  return OpDef("If")
      .inputs(1)
      .outputs(1, kVariadic)
      .since(1)
      .requiredAttr("then_branch", AttrKind::Graph)
      .requiredAttr("else_branch", AttrKind::Graph)
      .describe("runs then_branch if cond else else_branch; outputs are the branch's outputs")
      .infer(inferIf)
      .kernel(ifKernel)
      .cost(noCost);
}

TESSEL_REGISTER_OP(Loop) {
  return OpDef("Loop")
      .inputs(0, kVariadic)  // M and cond are both optional; the body's arity is checked against the inputs
      .outputs(0, kVariadic)
      .since(1)
      .requiredAttr("body", AttrKind::Graph)
      // Opsets 11/13/16 differ only in the value types allowed (sequences, optionals), not for tensors.
      .describe("while i < M and cond: (cond, carried..., scans...) = body(i, cond, carried...)")
      .infer(inferLoop)
      .kernel(loopKernel)
      .cost(noCost);
}

TESSEL_REGISTER_OP(Scan) {
  return OpDef("Scan")
      .inputs(0, kVariadic)  // opset 8's leading sequence_lens is optional; the body's arity is checked
      .outputs(1, kVariadic)
      .since(8)
      .requiredAttr("body", AttrKind::Graph)
      .requiredAttr("num_scan_inputs", AttrKind::Int)
      .optionalAttr("directions", AttrKind::Ints)  // opset 8 only
      .optionalAttr("scan_input_directions", AttrKind::Ints)
      .optionalAttr("scan_input_axes", AttrKind::Ints)
      .optionalAttr("scan_output_directions", AttrKind::Ints)
      .optionalAttr("scan_output_axes", AttrKind::Ints)
      .describe("iterates body over slices of the scan inputs, threading state values; stacks scan outputs")
      .infer(inferScan)
      .kernel(scanKernel)
      .cost(noCost);
}

}  // namespace tessel
