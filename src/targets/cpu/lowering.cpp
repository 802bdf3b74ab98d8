// Lowers a typed graph (the cpu pass pipeline's result) to runtime kernel calls: names every tensor,
// collects weights, sends each node to its family's lowering (lower_*.cpp), puts reorders on the edges of
// NCHWc8 regions and runs what no kernel covers through the host's reference interpreter.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <set>

#include "kernel_rules.h"
#include "lowerer.h"
#include "tessel/ir/text.h"
#include "tessel/rt/conv.h"
#include "tessel/support/error.h"

namespace tessel::cpu {

std::string floatLiteral(float v) {
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "-INFINITY";
  if (std::isnan(v)) return "NAN";
  std::string s = fmt::format("{:.9g}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s + "f";
}

/// The constant data behind v, looking through Identity chains (exporters share weights that way) and
/// Constant nodes, or null.
/// The value a nested graph's captured value stands for (itself otherwise).
const Value* definitionOf(const Value* v) {
  while (v && v->isCaptured() && v->graph() && v->graph()->parent()) {
    const Value* outer = v->graph()->parent()->lookup(v->name());
    if (!outer || outer == v) break;
    v = outer;
  }
  return v;
}

const Tensor* constTensor(const Value* v) {
  v = definitionOf(v);
  while (v && !v->isConstant() && v->producer() && isOp(*v->producer(), "Identity")) v = v->producer()->input(0);
  if (v == nullptr) return nullptr;
  if (v->isConstant()) return &v->constant();
  const Node* p = v->producer();
  if (p && isOp(*p, "Constant") && p->hasAttr("value")) return &p->attrTensor("value");
  return nullptr;
}
bool isConst(const Value* v) { return constTensor(v) != nullptr; }

/// A Dropout is an identity unless it is in training mode (a true training_mode input) with a non-zero
/// ratio (default 0.5); a training_mode or ratio computed at run time may be either.
static bool dropoutIsIdentity(const Node* n) {
  if (!n->hasInput(2)) return true;
  const Tensor* training = constTensor(n->input(2));
  if (training == nullptr) return false;
  if (training->numel() == 1 && training->elementAsDouble(0) == 0) return true;
  if (!n->hasInput(1)) return false;
  const Tensor* ratio = constTensor(n->input(1));
  return ratio != nullptr && ratio->numel() == 1 && ratio->elementAsDouble(0) == 0;
}

/// A Pad whose pads are all zero (PyTorch exports one before DenseNet's transition pooling): a copy.
static bool padIsIdentity(const Node* n) {
  if (!isOp(*n, "Pad")) return false;
  std::vector<int64_t> pads;
  if (n->hasAttr("pads")) {
    pads = n->attrInts("pads");
  } else {
    const Tensor* t = n->hasInput(1) ? constTensor(n->input(1)) : nullptr;
    if (t == nullptr) return false;
    for (int64_t i = 0; i < t->numel(); ++i) pads.push_back(static_cast<int64_t>(t->elementAsDouble(i)));
  }
  return std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
}

/// A View (Reshape, Squeeze, ... in the registry), an inference Dropout or a Pad of nothing: output 0 can
/// share the storage of input 0.
static bool aliasesInput(const Node* n) {
  return hasTrait(*n, OpTrait::View) || (isOp(*n, "Dropout") && n->numOutputs() == 1 && dropoutIsIdentity(n)) ||
         padIsIdentity(n);
}

int Lowerer::tensorOf(const Value* v) {
  v = definitionOf(v);
  if (auto o = operandOverride_.find(v); o != operandOverride_.end()) return o->second;
  auto it = ids_.find(v);
  if (it != ids_.end()) return it->second;
  TESSEL_ASSERT(v->type.isStatic(), "cpu lowering: value without a static shape");
  PlanTensor t;
  t.name = v->name();
  t.shape = v->type.staticShape();
  t.numel = shapeSize(t.shape);
  t.dtype = v->type.dtype;
  if (const Tensor* c = constTensor(v)) {
    t.kind = StorageKind::Weight;
    t.dtype = c->dtype();
    // Offsets count floats; other element types keep their bytes (64-byte aligned, so a multiple of 4).
    t.offset = t.dtype == DType::Float32
                   ? addWeightData(floatsOf(v))
                   : addWeightBytes(std::string(static_cast<const char*>(c->rawData()), c->nbytes())) / 4;
  }
  plan_.tensors.push_back(std::move(t));
  int id = static_cast<int>(plan_.tensors.size()) - 1;
  ids_[v] = id;
  return id;
}

int64_t Lowerer::addWeightData(const std::vector<float>& data) {
  while (plan_.weights.size() % 64 != 0) plan_.weights.push_back('\0');
  int64_t offset = static_cast<int64_t>(plan_.weights.size() / sizeof(float));
  plan_.weights.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return offset;
}

int Lowerer::weightTensor(const std::string& name, const std::vector<float>& data, const Shape& shape) {
  PlanTensor t;
  t.name = name;
  t.shape = shape;
  t.numel = static_cast<int64_t>(data.size());
  t.kind = StorageKind::Weight;
  t.offset = addWeightData(data);
  plan_.tensors.push_back(std::move(t));
  return static_cast<int>(plan_.tensors.size()) - 1;
}

std::vector<float> Lowerer::floatsOf(const Value* v) {
  const Tensor& t = *constTensor(v);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::Float32) {
    std::memcpy(out.data(), t.data<float>(), out.size() * sizeof(float));
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(t.elementAsDouble(static_cast<int64_t>(i)));
  }
  return out;
}

void Lowerer::addStep(StepMeta meta, std::string comment, std::string code, std::vector<int> reads,
                      std::vector<int> writes, int inplace) {
  PlanStep step{std::move(meta.node), std::move(meta.op),    std::move(meta.kernel), meta.flops,
                std::move(comment),   std::move(code),       std::move(reads),       std::move(writes),
                inplace};
  producedBySteps_.insert(step.writes.begin(), step.writes.end());
  if (emitAt_ != nullptr) {
    deferred_[emitAt_].push_back(std::move(step));
    emitAt_ = nullptr;
    return;
  }
  plan_.steps.push_back(std::move(step));
}

bool Lowerer::isGraphOutput(const Value* v) const {
  const auto& outs = v->graph() ? v->graph()->outputs() : graph_.outputs();
  return std::find(outs.begin(), outs.end(), v) != outs.end();
}

const Node* Lowerer::singleUser(const Value* v) const {
  if (v->uses().size() != 1 || isGraphOutput(v)) return nullptr;
  return v->uses()[0].node;
}

std::string Lowerer::int64Array(const char* prefix, const std::vector<int64_t>& values) {
  std::string name = fmt::format("k{}{}", prefix, shapeCounter_++);
  plan_.globals += fmt::format("static const int64_t {}[] = {{{}}};\n", name,
                               values.empty() ? std::string("0") : fmt::format("{}", fmt::join(values, ", ")));
  return name;
}

/// Whether the lowering itself handles a node (else the interpreter fallback does): every output and every
/// non-constant input is a static float32 tensor.
bool compiledDType(DType t) {
  switch (t) {
    case DType::Undefined: case DType::String: case DType::Complex64: case DType::Complex128: return false;
    default: return true;
  }
}

namespace {
void collectCaptured(const Graph& body, const Graph& outer, std::vector<const Value*>& out,
                     std::set<const Value*>& seen) {
  for (const Value* v : body.values()) {
    if (!v->isCaptured()) continue;
    const Value* def = outer.findValue(v->name());
    if (!def || def->isCaptured()) def = outer.lookup(v->name());  // from further out
    if (def && seen.insert(def).second) out.push_back(def);
  }
  for (const auto& node : body.nodes())
    for (const Graph* sub : node->subgraphs()) collectCaptured(*sub, outer, out, seen);
}
}  // namespace

std::vector<const Value*> capturedValues(const Node* n) {
  std::vector<const Value*> out;
  std::set<const Value*> seen;
  for (const Graph* sub : n->subgraphs()) collectCaptured(*sub, *n->graph(), out, seen);
  return out;
}

bool staticTensorsOnly(const Node* n) {
  auto storable = [](const Value* v) {
    v = definitionOf(v);
    return isConst(v) || (compiledDType(v->type.dtype) && v->type.isStatic());
  };
  for (const Value* o : n->outputs())
    if (o && (!compiledDType(o->type.dtype) || !o->type.isStatic())) return false;
  for (const Value* v : n->inputs())
    if (v && !storable(v)) return false;
  for (const Value* v : capturedValues(n))
    if (!storable(v)) return false;
  return true;
}

/// The first value of n that compiled code cannot hold, and why (the refusal's reason).
static std::string whyNotStorable(const Node* n) {
  std::vector<const Value*> values(n->outputs().begin(), n->outputs().end());
  for (const Value* v : n->inputs()) values.push_back(v);
  for (const Value* v : capturedValues(n)) values.push_back(v);
  for (const Value* v : values) {
    if (!v || isConst(v)) continue;
    if (!compiledDType(v->type.dtype))
      return fmt::format("'{}' is {}: compiled code holds numeric and bool tensors", v->name(), v->type.toString());
    if (!v->type.isStatic())
      return fmt::format("'{}' is {}: a dynamic shape, known only at run time", v->name(), v->type.toString());
  }
  return "no code path";
}

bool floatsOnly(const Node* n) {
  for (const Value* o : n->outputs())
    if (o && (o->type.dtype != DType::Float32 || !o->type.isStatic())) return false;
  for (size_t i = 0; i < n->numInputs(); ++i) {
    const Value* v = n->input(i) ? definitionOf(n->input(i)) : nullptr;
    // Constant operands of any type are fine: shapes/axes are read at compile time or embedded.
    if (v && !isConst(v) && (v->type.dtype != DType::Float32 || !v->type.isStatic())) return false;
  }
  return true;
}
/// Runs a node without a kernel through the host's reference interpreter: the node, as a one-node model
/// in text IR (constants included), goes into the weights blob; the step calls the host back.
std::string Lowerer::hostReason(const Node* n) {
  if (!n->subgraphs().empty()) return "control flow: no generated code for its nested graphs";
  if (!floatsOnly(n) && loweringByOp().count({n->domain(), n->opType()}) == 0)
    return fmt::format("no compiled kernel for {} on these element types", n->opType());
  return fmt::format("no compiled kernel for {} with these attributes, shapes or element types", n->opType());
}

bool Lowerer::lowerFallback(const Node* n) {
  Model one;
  one.graph = std::make_unique<Graph>("fallback");
  one.opsetImports = {{"", 17}};
  std::vector<Value*> ins;
  std::vector<int> reads, writes;
  std::string inList, outList;
  for (const Value* v : n->inputs()) {
    if (v == nullptr) {
      ins.push_back(nullptr);
      continue;
    }
    if (const Tensor* c = constTensor(v)) {
      ins.push_back(one.graph->findValue(v->name()) ? one.graph->findValue(v->name())
                                                    : one.graph->addConstant(v->name(), *c));
      continue;
    }
    Value* existing = one.graph->findValue(v->name());
    ins.push_back(existing ? existing : one.graph->addInput(v->name(), v->type));
    if (!existing) {
      int id = tensorOf(v);
      reads.push_back(id);
      inList += (inList.empty() ? "" : ", ") + ref(id);
    }
  }
  // Values the nested graphs read from this graph: inputs (or constants) of the one-node model too.
  for (const Value* v : capturedValues(n)) {
    if (one.graph->findValue(v->name())) continue;
    if (const Tensor* c = constTensor(v)) {
      one.graph->addConstant(v->name(), *c);
      continue;
    }
    one.graph->addInput(v->name(), v->type);
    int id = tensorOf(v);
    reads.push_back(id);
    inList += (inList.empty() ? "" : ", ") + ref(id);
  }
  std::vector<std::string> outNames;
  for (const Value* o : n->outputs()) outNames.push_back(o ? o->name() : "");
  Node* copy = one.graph->addNode(n->opType(), ins, outNames, n->name(), n->domain());
  for (const auto& [k, v] : n->attrs()) copy->setAttr(k, v);
  for (size_t i = 0; i < n->numOutputs(); ++i) {
    if (!n->output(i)) continue;
    copy->output(i)->type = n->output(i)->type;
    one.graph->addOutput(copy->output(i));
    int id = tensorOf(n->output(i));
    writes.push_back(id);
    outList += (outList.empty() ? "" : ", ") + ref(id);
  }
  std::string side;
  std::string text = printModelText(one, {}, &side, "fallback.bin");
  int64_t textOffset = addWeightBytes(text), sideOffset = addWeightBytes(side);
  int index = static_cast<int>(plan_.fallbacks.size());
  plan_.fallbacks.push_back({n->describe(), n->opType(), hostReason(n), textOffset, static_cast<int64_t>(text.size()), sideOffset,
                             static_cast<int64_t>(side.size())});
  addStep({n->name(), n->opType(), "host interpreter"},
          fmt::format("{} through the host's reference interpreter", n->describe()),
          fmt::format("if (fallback(m, {}, {{{}}}, {{{}}}) != 0) return 1;", index, inList, outList), reads, writes);
  return true;
}

int64_t Lowerer::addWeightBytes(const std::string& bytes) {
  while (plan_.weights.size() % 64 != 0) plan_.weights.push_back('\0');
  int64_t offset = static_cast<int64_t>(plan_.weights.size());
  plan_.weights += bytes;
  return offset;
}

const std::map<std::pair<std::string, std::string>, Lowerer::LowerFn>& Lowerer::loweringByOp() {
  static const std::map<std::pair<std::string, std::string>, LowerFn> table = {
      {{"tessel", "FusedConv"}, &Lowerer::lowerConv},
      {{"tessel", "FusedGemm"}, &Lowerer::lowerGemm},
      {{"tessel", "Attention"}, &Lowerer::lowerAttention},
      {{"tessel", "FusedElementwise"}, &Lowerer::lowerFusedElementwise},
      {{"", "Conv"}, &Lowerer::lowerConv},
      {{"", "Gemm"}, &Lowerer::lowerGemm},
      {{"", "MatMul"}, &Lowerer::lowerGemm},
      {{"", "MaxPool"}, &Lowerer::lowerPool},
      {{"", "AveragePool"}, &Lowerer::lowerPool},
      {{"", "GlobalAveragePool"}, &Lowerer::lowerPool},
      {{"", "Concat"}, &Lowerer::lowerConcat},
      {{"", "BatchNormalization"}, &Lowerer::lowerBatchNorm},
      {{"", "LayerNormalization"}, &Lowerer::lowerLayerNorm},
      {{"", "Softmax"}, &Lowerer::lowerSoftmax},
      {{"", "LogSoftmax"}, &Lowerer::lowerSoftmax},
      {{"", "Transpose"}, &Lowerer::lowerTranspose},
      {{"", "Split"}, &Lowerer::lowerSplit},
      {{"", "Gather"}, &Lowerer::lowerTypedNode},
      {{"", "Slice"}, &Lowerer::lowerTypedNode},
  };
  return table;
}

bool Lowerer::lowerNode(const Node* n) {
  const auto& table = loweringByOp();
  // Before the table, which lowers Pad as a copy.
  if (n->domain().empty() && aliasesInput(n)) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    plan_.tensors[y].aliasOf = x;
    return true;
  }
  if (auto it = table.find({n->domain(), n->opType()}); it != table.end()) return (this->*it->second)(n);
  if (!n->domain().empty()) return false;
  if (aliasesInput(n)) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    plan_.tensors[y].aliasOf = x;
    return true;
  }
  return lowerElementwise(n);
}


bool Lowerer::blockedOperand(const Node* n, size_t i) {
  const Value* v = n->input(i);
  if (isConvNode(*n)) {
    // The input and the residual; weights and bias stay as they are. A stem kernel reads its input in NCHW.
    if (i == 0) {
      auto it = n->meta.find("kernel");
      const std::string* name = it == n->meta.end() ? nullptr : std::get_if<std::string>(&it->second);
      const rt::Conv2dKernel* k = name ? rt::find_conv2d_kernel(name->c_str()) : nullptr;
      return !(k && k->nchw_input);
    }
    return i == 3;
  }
  return v->type.isStatic() && v->type.rank() == 4 && v->type.staticSize() > 1;  // not a scalar
}

int Lowerer::reordered(const Value* v, bool toBlocked) {
  auto& cache = toBlocked ? blockedCopies_ : nchwCopies_;
  if (auto it = cache.find(v); it != cache.end()) return it->second;
  const int src = tensorOf(v);
  const Shape shape = plan_.tensors[src].shape;  // a copy: push_back below
  TESSEL_ASSERT(shape.size() == 4, "cpu lowering: a reorder needs a 4-D tensor");
  const int64_t hw = shape[2] * shape[3];
  if (hw == 1 && shape[1] % 8 == 0) return cache[v] = src;  // [N, C, 1, 1]: both layouts are the same floats
  PlanTensor t;
  t.name = v->name() + (toBlocked ? ".nchwc8" : ".nchw");
  t.shape = shape;
  t.numel = toBlocked ? static_cast<int64_t>(rt::nchwc8_size(shape[0], shape[1], hw)) : shapeSize(shape);
  plan_.tensors.push_back(std::move(t));
  const int id = static_cast<int>(plan_.tensors.size()) - 1;
  addStep({v->name(), toBlocked ? "reorder to NCHWc8" : "reorder to NCHW",
           toBlocked ? "reorder_nchw_to_nchwc8" : "reorder_nchwc8_to_nchw"},
          fmt::format("'{}' {} -> {}", v->name(), toBlocked ? "NCHW" : "NCHWc8", toBlocked ? "NCHWc8" : "NCHW"),
          fmt::format("rt::{}({}, {}, {}, {}, {}, pool);",
                      toBlocked ? "reorder_nchw_to_nchwc8" : "reorder_nchwc8_to_nchw", shape[0], shape[1], hw,
                      ref(src), ref(id)),
          {src}, {id});
  cache[v] = id;
  return id;
}

bool Lowerer::lowerTypedNode(const Node* n) {
  if (!n->domain().empty() || !checkRunTimeShape(n)) return false;
  if (aliasesInput(n) && n->numOutputs() == 1 && n->input(0)->type.dtype == n->output(0)->type.dtype) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    plan_.tensors[y].aliasOf = x;
    return true;
  }
  if (isOp(*n, "Gather")) return lowerGather(n);
  if (isOp(*n, "Slice")) {
    bool runTime = false;
    for (size_t i = 1; i < n->numInputs(); ++i) runTime = runTime || (n->input(i) && !isConst(n->input(i)));
    return runTime ? lowerSliceAtRunTime(n) : lowerSlice(n);
  }
  if (isOp(*n, "Range")) return lowerRange(n);
  if (isOp(*n, "ConstantOfShape")) return lowerConstantOfShape(n);
  if (isOp(*n, "Tile")) return lowerTile(n);
  if (isOp(*n, "Cast") || isOp(*n, "CastLike")) return lowerCast(n);
  if (lowerPoolNd(n)) return true;
  if (isOp(*n, "Dropout")) return lowerDropout(n);
  if (isOp(*n, "Resize") || isOp(*n, "Upsample")) return lowerResize(n);
  if (isOp(*n, "ConvTranspose")) return lowerConvTranspose(n);
  if (isOp(*n, "GridSample")) return lowerGridSample(n);
  if (isOp(*n, "NonMaxSuppression")) return lowerNonMaxSuppression(n);
  if (lowerIndexOp(n)) return true;
  if (isOp(*n, "QuantizeLinear") || isOp(*n, "DequantizeLinear") || isOp(*n, "DynamicQuantizeLinear"))
    return lowerQuantize(n);
  if (isOp(*n, "ReverseSequence")) return lowerReverseSequence(n);
  if (isOp(*n, "TfIdfVectorizer")) return lowerTfIdf(n);
  if (lowerNormOp(n)) return true;
  if (isOp(*n, "LSTM") || isOp(*n, "GRU") || isOp(*n, "RNN")) return lowerRecurrent(n);
  if (n->opType().rfind("Reduce", 0) == 0) return lowerReduce(n);
  if (lowerAxisOp(n)) return true;
  return lowerBroadcastOp(n);
}

void Lowerer::lowerNodes(const Graph& g) {
  for (const auto& node : g.nodes()) {
    const Node* n = node.get();
    if (isOp(*n, "Constant") && n->hasAttr("value")) continue;  // a weight on use
    if (absorbed_.count(n)) {
      for (PlanStep& s : deferred_[n]) plan_.steps.push_back(std::move(s));
      continue;
    }
    // Operands in the layout the node runs in (select-layout's NCHWc8 regions): a reorder on each region edge.
    const bool blocked = runsBlocked(*n);
    for (size_t i = 0; i < n->numInputs(); ++i) {
      const Value* v = n->input(i);
      if (!v || isConst(v)) {
        if (v && blocked && blockedOperand(n, i) && !blocked_.count(v)) operandOverride_[v] = reordered(v, true);
        continue;
      }
      const bool wanted = blocked && blockedOperand(n, i);  // the layout this operand is read in
      if (wanted != (blocked_.count(v) > 0)) operandOverride_[v] = reordered(v, wanted);
    }
    const bool typed = staticTensorsOnly(n);
    bool done = !n->subgraphs().empty() && typed && !blocked && lowerControlFlow(n);
    done = done || (floatsOnly(n) && lowerNode(n));
    done = done || (typed && !blocked && (lowerTypedNode(n) || lowerFallback(n)));
    operandOverride_.clear();
    if (!done) {
      if (blocked) throw InternalError(fmt::format("cpu lowering: no NCHWc8 code for {}", n->describe()));
      unsupported_.push_back(n->describe() + " (" + whyNotStorable(n) + ")");
      continue;
    }
    if (blocked)
      for (const Value* o : n->outputs())
        if (o) blocked_.insert(o);
  }
}

Plan Lowerer::run() {
  for (const Value* in : graph_.inputs()) {
    if (!compiledDType(in->type.dtype) || !in->type.isStatic())
      throw UserError(fmt::format("cpu target: input '{}' is {}; compiled models take tensors of static shape "
                                  "(use --input-shape) with numeric or bool elements",
                                  in->name(), in->type.toString()));
    int id = tensorOf(in);
    plan_.tensors[id].kind = StorageKind::Input;
    plan_.tensors[id].index = static_cast<int>(plan_.inputs.size());
    plan_.inputs.push_back(id);
  }
  lowerNodes(graph_);
  if (!unsupported_.empty())
    throw UserError(fmt::format("cpu target: no code path for {} node(s): {}", unsupported_.size(),
                                fmt::join(unsupported_, "; ")));
  if (!options_.hostFallback && !plan_.fallbacks.empty()) {
    std::vector<std::string> listed;
    for (const PlanFallback& f : plan_.fallbacks) listed.push_back(f.description + ": " + f.reason);
    throw UserError(fmt::format("cpu target (--no-host-fallback): {} node(s) would run through the host's reference "
                                "interpreter: {}", listed.size(), fmt::join(listed, "; ")));
  }
  for (const Value* out : graph_.outputs()) {
    int id = tensorOf(out);
    if (blocked_.count(out)) {
      // A blocked output leaves through its reorder to NCHW, which carries the output's name (the callers
      // look outputs up by name); the blocked tensor is the one renamed.
      const int blocked = id;
      id = reordered(out, false);
      if (id != blocked) {
        plan_.tensors[blocked].name = out->name() + ".nchwc8";
        plan_.tensors[id].name = out->name();
      }
    }
    int outIndex = static_cast<int>(plan_.outputs.size());
    PlanTensor& t = plan_.tensors[id];
    bool producedHere = t.kind == StorageKind::Arena && t.aliasOf < 0;
    if (producedHere) {
      t.kind = StorageKind::Output;
      t.index = outIndex;
      plan_.outputs.push_back(id);
      continue;
    }
    // An input, a weight, an alias or an output listed twice: copy into the caller's buffer.
    PlanTensor copy = t;
    copy.kind = StorageKind::Output;
    copy.index = outIndex;
    copy.aliasOf = -1;
    copy.aliasOffset = 0;
    const int64_t bytes = t.numel * static_cast<int64_t>(dtypeSize(t.dtype));
    plan_.tensors.push_back(copy);  // invalidates t
    int cid = static_cast<int>(plan_.tensors.size()) - 1;
    addStep({out->name(), "copy to output", "memcpy"}, fmt::format("output '{}'", out->name()),
            fmt::format("std::memcpy({}, {}, {});", ref(cid), ref(id), bytes), {id}, {cid});
    plan_.outputs.push_back(cid);
  }
  plan_.report.steps = static_cast<int>(plan_.steps.size());
  plan_.report.weightBytes = plan_.weights.size();
  plan_.report.packedWeightBytes = static_cast<size_t>(plan_.packedFloats) * sizeof(float);
  return std::move(plan_);
}


Plan lowerGraph(const Graph& graph, const CompileOptions& options) { return Lowerer(graph, options).run(); }

}  // namespace tessel::cpu
