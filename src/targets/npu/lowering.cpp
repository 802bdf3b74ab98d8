// The NPU lowering driver: DRAM layout of a subgraph's tensors, dispatch of each node to its op family's
// operator interpreter (S2.1), activation fusion, and running a lowered subgraph on the simulator.
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/verify.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "lower_context.h"
#include "lower_conv.h"
#include "schedule/instruction_scheduler.h"
#include "schedule/tiling_cost.h"
#include "tessel/ops/registry.h"
#include "tessel/passes/pass.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/timing.h"

namespace tessel::npu {

void prepareModelForNpu(Model& model) { namedPipeline("npu").run(model); }

namespace lower {

std::map<std::string, OpLowering>& opLowerings() {
  static std::map<std::string, OpLowering> table;
  return table;
}

const OpLowering* findLowering(const Node& node) {
  if (!node.domain().empty()) return nullptr;
  const bool computedB = isOp(node, "MatMul") && node.hasInput(1) && !node.input(1)->isConstant();
  if (auto it = opLowerings().find(computedB ? kComputedMatMulLowering : node.opType()); it != opLowerings().end())
    return &it->second;
  const std::optional<VecOp> op = vectorOpOf(node);
  if (!op || !isUnaryVecOp(*op)) return nullptr;
  auto it = opLowerings().find(kVectorUnaryLowering);
  return it == opLowerings().end() ? nullptr : &it->second;
}

std::optional<OpFamily> opFamily(const Node& node) {
  const OpLowering* l = findLowering(node);
  if (!l) return std::nullopt;
  return l->family;
}

std::vector<float> constantFloats(const Tensor& t) {
  std::vector<double> d = t.toDoubleVector();
  return std::vector<float>(d.begin(), d.end());
}

hw::SupportResult checkStaticF32(const Node& node) {
  for (const Value* v : node.inputs())
    if (v && (!v->type.isStatic() || (v->type.dtype != DType::Float32 && !v->isConstant())))
      return refuse(fmt::format("input '{}' has type {}, expected a static float32 shape", v->name(), v->type.toString()));
  for (const Value* v : node.outputs())
    if (v && (!v->type.isStatic() || v->type.dtype != DType::Float32))
      return refuse(fmt::format("output '{}' has type {}, expected a static float32 shape", v->name(), v->type.toString()));
  return ok();
}

std::optional<VecOp> vectorOpOf(const Node& node) {
  if (!node.domain().empty() || !hasTrait(node, OpTrait::Elementwise)) return std::nullopt;
  // The ISA names its sub-ops after the ONNX operators they compute, in snake case (LeakyRelu: leaky_relu).
  std::string name;
  for (char c : node.opType()) {
    if (std::isupper(static_cast<unsigned char>(c)) && !name.empty()) name += '_';
    name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return vecOpByName(name);
}

std::optional<Activation> activationOf(const Node& node) {
  std::optional<VecOp> op = vectorOpOf(node);
  if (!op || !isUnaryVecOp(*op)) return std::nullopt;
  // HardSwish is x * HardSigmoid(x) with HardSigmoid's ONNX constants.
  if (*op == VecOp::HardSwish) return Activation{*op, 1.0f / 6.0f, 0.5f};
  // Gelu's tanh approximation is its own sub-op (the registry's epilogue form is the erf one only).
  if (*op == VecOp::Gelu && node.attrString("approximate") == "tanh") return Activation{VecOp::GeluTanh};
  std::vector<float> p;  // the immediates: the registry's epilogue parameters (Clip bounds, LeakyRelu alpha, ...)
  if (const OpDef* def = node.def(); def && def->epilogue && def->epilogue->params) {
    auto params = def->epilogue->params(node, [](const Value* v) -> const Tensor* {
      return v && v->isConstant() ? &v->constant() : nullptr;
    });
    if (!params) return std::nullopt;
    p = *params;
  }
  p.resize(2, 0.0f);
  return Activation{*op, p[0], p[1]};
}

int64_t TensorLoc::channels() const {
  if (shape.empty()) return 1;
  if (channelsLast) return shape[1];
  return std::max<int64_t>(shape.back(), 1);
}
int64_t TensorLoc::pixels() const {
  int64_t c = channels();
  return c == 0 ? 0 : shapeSize(shape) / c;
}

LowerContext::LowerContext(const Graph& body, const hw::NpuConfig& config, const NpuSchedule& sched)
    : cfg(config), schedule(sched), body_(body) {
  // Weights are packed into blocks of the same total size, so the constants' sizes bound their region, plus what
  // the packing adds: a Gemm's scalar C becomes one bias per output column, and depthwise tiles on the matrix unit
  // add per channel block the diagonal weight blocks, bias rows and a 1.0.
  uint64_t constantBound = 0;
  for (const auto& n : body.nodes()) {
    for (const Value* v : n->inputs())
      if (v && v->isConstant()) constantBound += static_cast<uint64_t>(v->constant().numel());
    if (isOp(*n, "Gemm") && n->hasInput(2) && n->input(2)->isConstant() && n->input(2)->constant().numel() == 1)
      constantBound += static_cast<uint64_t>(n->output(0)->type.staticShape().back());
    // Vectors a lowering makes of its own: a LayerNormalization's gamma and beta over its channels (either may be
    // absent or broadcast in the graph), a scalar divided by a tensor's vector of the scalar (c / x).
    if (const Value* y = n->numOutputs() ? n->output(0) : nullptr; y && y->type.isStatic() && !y->type.staticShape().empty()) {
      const Shape s = y->type.staticShape();
      const auto channels = static_cast<uint64_t>(s.size() == 4 ? s[1] : s.back());
      if (isOp(*n, "LayerNormalization")) constantBound += 2 * channels;
      if (isOp(*n, "Div")) constantBound += channels;
    }
    const NodeTiling* t = sched.tilingOf(n->name());
    if (t && t->groupPack > 1) {  // block-diagonal weights (and a bias) of the packed geometry
      const ConvGeometry q = packGroups(convGeometry(*n), t->groupPack);
      constantBound += static_cast<uint64_t>(q.M * (q.C / q.group + 1) * q.KH * q.KW);
    }
    if (t && t->matrixEvery > 0) {
      const ConvGeometry geo = convGeometry(*n);
      const int64_t taps = geo.KH * geo.KW;
      for (int64_t c0 = 0; c0 < geo.C; c0 += t->channels) {
        const int64_t ck = std::min(t->channels, geo.C - c0);
        constantBound += static_cast<uint64_t>(depthwiseMatrixWords(taps, ck, cfg.dim) + 1);
      }
    }
  }
  activationBase = (constantBound + 1023) / 1024 * 1024;
  dramWords = activationBase;
}

const NodeTiling& LowerContext::tiling(const Node& node) const {
  const NodeTiling* t = schedule.tilingOf(node.name());
  TESSEL_ASSERT(t, fmt::format("npu lowering: the schedule has no tiling for {}", node.describe()));
  return *t;
}

const Tensor* LowerContext::constant(const Value* v) const { return v && v->isConstant() ? &v->constant() : nullptr; }

uint64_t LowerContext::addConstant(const std::vector<float>& words) {
  uint64_t addr = constants.size();
  constants.insert(constants.end(), words.begin(), words.end());
  TESSEL_ASSERT(constants.size() <= activationBase, "npu lowering: packed constants exceed their bound");
  return addr;
}

const TensorLoc& LowerContext::loc(const Value* v) {
  auto it = locs_.find(v);
  if (it != locs_.end()) return it->second;
  TESSEL_ASSERT(v->isConstant(), fmt::format("npu lowering: value '{}' has no DRAM location", v->name()));
  // A constant operand of an element-wise op: stored in the layout of an activation of its shape.
  TensorLoc l;
  l.shape = v->constant().shape();
  l.channelsLast = l.shape.size() == 4;
  std::vector<float> data = constantFloats(v->constant());
  if (l.channelsLast) {
    std::vector<float> nhwc(data.size());
    int64_t N = l.shape[0], C = l.shape[1], HW = l.shape[2] * l.shape[3];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < HW; ++p) nhwc[(n * HW + p) * C + c] = data[(n * C + c) * HW + p];
    data.swap(nhwc);
  }
  l.addr = addConstant(data);
  return locs_[v] = l;
}

void LowerContext::allocate(const Value* v) {
  if (!v || locs_.count(v)) return;
  TensorLoc l;
  l.shape = v->type.staticShape();
  l.channelsLast = l.shape.size() == 4;
  l.addr = dramWords;
  dramWords += std::max<uint64_t>(static_cast<uint64_t>(shapeSize(l.shape)), 1);
  locs_[v] = l;
}

std::optional<EpilogueStep> epilogueStep(const Node& user, const Value* value) {
  if (!user.domain().empty() || !user.input(0)) return std::nullopt;
  if (auto act = activationOf(user)) {
    if (user.input(0) != value) return std::nullopt;
    return EpilogueStep{true, *act, nullptr};
  }
  static const std::map<std::string, VecOp> binary{{"Add", VecOp::Add}, {"Sub", VecOp::Sub}, {"Mul", VecOp::Mul},
                                                   {"Div", VecOp::Div}, {"Max", VecOp::Max}, {"Min", VecOp::Min}};
  auto op = binary.find(user.opType());
  if (op == binary.end() || user.numInputs() != 2) return std::nullopt;
  const bool first = user.input(0) == value;
  const Value* other = first ? user.input(1) : user.input(0);
  if (other == value || !value->type.isStatic() || !other->type.isStatic()) return std::nullopt;
  const std::string& name = user.opType();
  const bool commutative = name != "Sub" && name != "Div";
  if (other->isConstant() && other->constant().numel() == 1) {
    const float c = static_cast<float>(other->constant().elementAsDouble(0));
    const float inf = std::numeric_limits<float>::infinity();
    if (name == "Add") return EpilogueStep{true, {VecOp::Scale, 1.0f, c}, nullptr};
    if (name == "Sub") return EpilogueStep{true, first ? Activation{VecOp::Scale, 1.0f, -c} : Activation{VecOp::Scale, -1.0f, c}, nullptr};
    if (name == "Mul") return EpilogueStep{true, {VecOp::Scale, c, 0.0f}, nullptr};
    if (name == "Div" && first) return EpilogueStep{true, {VecOp::Scale, 1.0f / c, 0.0f}, nullptr};
    if (name == "Max") return EpilogueStep{true, {VecOp::Clip, c, inf}, nullptr};
    if (name == "Min") return EpilogueStep{true, {VecOp::Clip, -inf, c}, nullptr};
    return std::nullopt;
  }
  if (other->type.staticShape() != value->type.staticShape() || other->type.dtype != DType::Float32) return std::nullopt;
  if (!commutative && !first) return std::nullopt;
  return EpilogueStep{false, {op->second}, other};
}

bool LowerContext::isBodyOutput(const Value* v) const {
  const auto& outs = body_.outputs();
  return std::find(outs.begin(), outs.end(), v) != outs.end();
}

void LowerContext::allocateResults(const Node& node) {
  for (const Value* v : node.outputs()) allocate(v == node.output(0) ? resultValue(node) : v);
}

void LowerContext::view(const Value* v, const TensorLoc& base, int64_t channelOffset) {
  TensorLoc l;
  l.shape = v->type.staticShape();
  l.channelsLast = l.shape.size() == 4;
  l.addr = base.addr + static_cast<uint64_t>(channelOffset);
  l.stride = base.pixelStride();
  locs_[v] = l;
}

const Value* LowerContext::resultValue(const Node& node) const {
  const Node* last = &node;
  if (const Node* pool = maxPool(node)) last = pool;  // the epilogue follows the pool
  for (const std::string& e : tiling(node).epilogue)
    for (const auto& [user, producer] : fusedInto)
      if (producer == &node && user->name() == e) last = user;
  return last->output(0);
}

const Node* siluSigmoid(const Node& mul) {
  if (!isOp(mul, "Mul") || mul.numInputs() != 2) return nullptr;
  for (int i = 0; i < 2; ++i) {
    const Value* s = mul.input(i);
    const Node* sig = s ? s->producer() : nullptr;
    if (sig && isOp(*sig, "Sigmoid") && sig->input(0) == mul.input(1 - i) && s->uses().size() == 1) return sig;
  }
  return nullptr;
}

bool residualFirst(const std::vector<EpilogueStep>& steps) {
  return !steps.empty() && !steps.front().unary && steps.front().op.op == VecOp::Add && steps.front().saved < 0 &&
         steps.front().other && !steps.front().other->isConstant();
}

bool residualAddOfMatrix(const Node& add) {
  if (!isOp(add, "Add") || add.numInputs() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    const Value* v = add.input(i);
    const Node* p = v ? v->producer() : nullptr;
    if (!p || v->uses().size() != 1 || opFamily(*p) != OpFamily::Matrix) continue;
    if (isOp(*p, "Conv") && convGeometry(*p).depthwise()) continue;
    const std::optional<EpilogueStep> step = epilogueStep(add, v);
    if (step && residualFirst({*step})) return true;
  }
  return false;
}

std::optional<std::vector<EpilogueStep>> epilogueSteps(const Value* base, const std::vector<const Node*>& chain) {
  std::vector<EpilogueStep> steps;
  std::vector<const Value*> before;  // the value each step is applied to
  const Value* v = base;
  for (const Node* user : chain) {
    std::optional<EpilogueStep> step = epilogueStep(*user, v);
    if (!step) return std::nullopt;
    if (!step->unary) {
      auto it = std::find(before.begin(), before.end(), step->other);
      if (it != before.end()) step->saved = static_cast<int>(it - before.begin());
    }
    before.push_back(v);
    steps.push_back(*step);
    v = user->output(0);
  }
  // x * Sigmoid(x) (SiLU) is one `silu` sub-op: no copy of x kept for the Mul, one vector pass instead of three
  // (copy, sigmoid, mul). Only when no later step reads the sigmoid itself.
  for (size_t k = 0; k + 1 < steps.size(); ++k) {
    const EpilogueStep& s = steps[k];
    const EpilogueStep& m = steps[k + 1];
    if (!s.unary || s.op.op != VecOp::Sigmoid || m.unary || m.op.op != VecOp::Mul || m.saved != static_cast<int>(k)) continue;
    if (std::any_of(steps.begin() + static_cast<long>(k) + 2, steps.end(), [&](const EpilogueStep& e) { return e.saved == static_cast<int>(k) + 1; }))
      continue;
    steps[k] = EpilogueStep{true, {VecOp::Silu}, nullptr};
    steps.erase(steps.begin() + static_cast<long>(k) + 1);
    for (EpilogueStep& e : steps)
      if (e.saved > static_cast<int>(k)) --e.saved;  // the values after the pair are one step earlier
  }
  return steps;
}

std::vector<EpilogueStep> LowerContext::epilogue(const Node& node) const {
  std::vector<const Node*> chain;
  for (const std::string& e : tiling(node).epilogue)
    for (const auto& [user, producer] : fusedInto)
      if (producer == &node && user->name() == e) chain.push_back(user);
  const Node* pool = maxPool(node);
  std::optional<std::vector<EpilogueStep>> steps = epilogueSteps((pool ? pool : &node)->output(0), chain);
  TESSEL_ASSERT(steps.has_value(), fmt::format("npu lowering: the epilogue of {} cannot be fused into it", node.describe()));
  return *steps;
}

std::optional<InputScale> LowerContext::inputScale(const Node& node) const {
  const std::string& name = tiling(node).inputScale;
  if (name.empty()) return std::nullopt;
  for (const auto& n : body_.nodes())
    if (n->name() == name) {
      std::optional<InputScale> s = inputScaleOf(body_, *n, node);
      TESSEL_ASSERT(s.has_value(), fmt::format("npu lowering: {} cannot scale the input of {}", n->describe(), node.describe()));
      return s;
    }
  TESSEL_ASSERT(false, fmt::format("npu lowering: the input scale '{}' of {} is not a node", name, node.describe()));
  return std::nullopt;
}

std::optional<InputNorm> LowerContext::inputNorm(const Node& node) const {
  const std::vector<std::string>& names = tiling(node).inputNorm;
  if (names.empty()) return std::nullopt;
  std::vector<const Node*> chain;
  for (const std::string& name : names) {
    const Node* found = nullptr;
    for (const auto& n : body_.nodes())
      if (n->name() == name) found = n.get();
    TESSEL_ASSERT(found, fmt::format("npu lowering: the input normalisation '{}' of {} is not a node", name, node.describe()));
    chain.push_back(found);
  }
  std::optional<InputNorm> norm = inputNormOf(body_, chain, node);
  TESSEL_ASSERT(norm.has_value(), fmt::format("npu lowering: {} cannot normalise the input of {}", chain[0]->describe(), node.describe()));
  return norm;
}

namespace {

/// The node named `name` that the schedule has `node` do as its `what` (nullptr when the name is empty), checked with
/// `legal` (the verifier refused the schedule otherwise).
const Node* scheduledFor(const Graph& body, const std::string& name, const Node& node, const char* what,
                         const std::function<bool(const Node&)>& legal) {
  if (name.empty()) return nullptr;
  for (const auto& n : body.nodes())
    if (n->name() == name) {
      TESSEL_ASSERT(legal(*n), fmt::format("npu lowering: {} cannot be the {} of {}", n->describe(), what, node.describe()));
      return n.get();
    }
  TESSEL_ASSERT(false, fmt::format("npu lowering: the {} '{}' of {} is not a node", what, name, node.describe()));
  return nullptr;
}

}  // namespace

const Node* LowerContext::globalPool(const Node& node) const {
  return scheduledFor(body_, tiling(node).globalPool, node, "global pool from its tiles",
                      [&](const Node& n) { return globalPoolFromTiles(n, node, resultValue(node)); });
}

const Node* LowerContext::maxPool(const Node& node) const {
  return scheduledFor(body_, tiling(node).maxPool, node, "max pool from its accumulator tiles",
                      [&](const Node& n) { return maxPoolFromTiles(body_, n, node); });
}

const Node* LowerContext::residualConv(const Node& node) const {
  return scheduledFor(body_, tiling(node).residualConv, node, "residual convolution in its accumulator",
                      [&](const Node& n) { return residualConvInto(body_, n, node); });
}

bool residualConvInto(const Graph& body, const Node& residual, const Node& conv) {
  if (&residual == &conv || !isOp(residual, "Conv") || !isOp(conv, "Conv") || residual.numInputs() < 2) return false;
  if (!residual.input(1)->isConstant() || (residual.hasInput(2) && !residual.input(2)->isConstant())) return false;
  if (convGeometry(residual).group != 1) return false;
  const Value* v = residual.output(0);
  const auto& outs = body.outputs();
  if (v->uses().size() != 1 || std::find(outs.begin(), outs.end(), v) != outs.end() || !v->type.isStatic()) return false;
  const Node& add = *v->uses()[0].node;
  if (!isOp(add, "Add") || add.numInputs() != 2 || add.input(0) == add.input(1)) return false;
  const Value* other = add.input(0) == v ? add.input(1) : add.input(0);
  return other == conv.output(0) && conv.output(0)->type.isStatic() && v->type.staticShape() == other->type.staticShape();
}

namespace {

/// Epilogue nodes the schedule fuses into their producer are applied in place before storing.
void findFusions(const Graph& body, LowerContext& ctx) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  for (const GroupSchedule& g : ctx.schedule.groups)
    for (const NodeTiling& t : g.tiling)
      for (const std::string& e : t.epilogue) ctx.fusedInto[byName.at(e)] = byName.at(t.node);
}

std::vector<float> toDramLayout(const Tensor& t, bool channelsLast) {
  std::vector<float> data = constantFloats(t);
  if (!channelsLast) return data;
  std::vector<float> out(data.size());
  int64_t N = t.shape()[0], C = t.shape()[1], HW = t.shape()[2] * t.shape()[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) out[(n * HW + p) * C + c] = data[(n * C + c) * HW + p];
  return out;
}

Tensor fromDramLayout(const std::vector<float>& data, const Shape& shape, bool channelsLast) {
  Tensor t(DType::Float32, shape);
  float* out = t.data<float>();
  if (!channelsLast) {
    std::copy(data.begin(), data.end(), out);
    return t;
  }
  int64_t N = shape[0], C = shape[1], HW = shape[2] * shape[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) out[(n * C + c) * HW + p] = data[(n * HW + p) * C + c];
  return t;
}

DramTensor interfaceTensor(const Value* v, const TensorLoc& l) {
  return DramTensor{v->name(), l.shape, l.channelsLast, l.addr, static_cast<uint64_t>(l.words())};
}

}  // namespace
}  // namespace lower

hw::SupportResult loweringSupport(const Node& node, const hw::Device& device) {
  using namespace lower;
  if (device.kind != hw::DeviceKind::Npu) return ok();
  if (!node.domain().empty()) return refuse(fmt::format("no NPU lowering for domain '{}'", node.domain()));
  const OpLowering* l = findLowering(node);
  if (!l) return refuse(fmt::format("no NPU lowering for {}", node.opType()));
  hw::SupportResult r = checkStaticF32(node);
  if (!r.supported) return r;
  r = l->check(node);
  if (!r.supported || !l->fits) return r;
  return l->fits(node, device.npu);
}

namespace {

sched::ScheduleOptions scheduleOptions(const NpuSchedule& schedule) {
  sched::ScheduleOptions o;
  o.window = static_cast<uint32_t>(schedule.window);
  if (schedule.strategy == "greedy") o.mode = sched::ScheduleOptions::Mode::Greedy, o.oldestFirst = false;
  if (schedule.strategy == "sequential") o.mode = sched::ScheduleOptions::Mode::Sequential;
  return o;
}

/// Window sizes the compiler tries when the schedule leaves the choice to it (S0.6).

/// Schedules the program as `schedule` says; writes the window used into `window`.
///  - window strategy, window 0: each of kWindowChoices; the fastest, ties to the smallest (more tiles in flight
///    only hold more SRAM when they no longer keep the units busier);
///  - greedy: no window; when the buffers cannot hold what its eager start of every tile leaves them to (the
///    oldest tile cannot get space), the same capped at the most tiles in flight (a power of two <= 64) that fit:
///    "greedy forced to fit";
///  - sequential, window 0: the first of kWindowChoices that fits (its cycles do not depend on the window).
sched::ScheduleResult chooseSchedule(const sched::VirtualProgram& vp, const sched::InstructionGraph& graph,
                                     const hw::NpuConfig& cfg, const NpuSchedule& schedule, int64_t& window) {
  sched::ScheduleOptions options = scheduleOptions(schedule);
  std::vector<uint32_t> windows;
  bool firstThatFits = options.mode == sched::ScheduleOptions::Mode::Sequential;
  if (options.mode != sched::ScheduleOptions::Mode::Greedy && schedule.window == 0)
    windows.assign(std::begin(kWindowChoices), std::end(kWindowChoices));
  if (options.mode == sched::ScheduleOptions::Mode::Greedy) {
    try {
      window = 0;  // no cap
      return sched::listSchedule(vp, graph, cfg, options);
    } catch (const InternalError&) {
      options.mode = sched::ScheduleOptions::Mode::Window;
      firstThatFits = true;  // the largest cap that fits
      for (uint32_t cap = 64; cap >= 1; cap /= 2)
        if (cap < vp.tiles.size() || cap == 1) windows.push_back(cap);  // one tile: still oldest-first below
    }
  }
  if (windows.empty()) return sched::listSchedule(vp, graph, cfg, options);
  std::optional<sched::ScheduleResult> best;
  std::string why;
  auto tryWindows = [&] {
    for (uint32_t m : windows) {
      options.window = m;
      try {
        sched::ScheduleResult r = sched::listSchedule(vp, graph, cfg, options);
        if (!best || r.cycles < best->cycles) best = std::move(r), window = m;
        if (firstThatFits) break;
      } catch (const InternalError& e) {
        why = e.what();  // this window cannot be scheduled within the buffers
      }
    }
  };
  tryWindows();
  // Greedy's critical-path order can fill the buffers within a single fused tile (regions of its later stages
  // taken before the earlier ones free theirs); forced to fit, it then issues the oldest instruction first.
  if (!best && !options.oldestFirst) {
    options.oldestFirst = true;
    tryWindows();
  }
  TESSEL_ASSERT(best.has_value(), "npu scheduling: no window size can be scheduled: " + why);
  return std::move(*best);
}

/// Orders the lowered instructions, gives the regions their addresses and derives the tokens (S2.3-S2.7).
void scheduleProgram(sched::VirtualProgram vp, const hw::NpuConfig& cfg, const NpuSchedule& schedule, LoweredSubgraph& out) {
  const sched::InstructionGraph graph = sched::buildInstructionGraph(vp, cfg);
  const sched::ScheduleResult result = chooseSchedule(vp, graph, cfg, schedule, out.schedule.window);
  out.program = sched::materialize(vp, result, schedule.strategy == "sequential");
  std::map<std::string, uint32_t> opIndex;
  for (size_t i = 0; i < out.ops.size(); ++i) opIndex[out.ops[i].node] = static_cast<uint32_t>(i);
  out.instructionOp.resize(result.order.size());
  for (size_t k = 0; k < result.order.size(); ++k) {
    const sched::VirtualInstruction& vi = vp.instructions[result.order[k]];
    const uint32_t op = opIndex.at(vp.nodes[vi.node]);
    out.instructionOp[k] = op;
    out.ops[op].instructions++;
  }
  out.modelledCycles = result.cycles;
}

}  // namespace

LoweredSubgraph lowerSubgraph(const Graph& body, const hw::Device& device, const std::string& name) {
  return lowerSubgraph(body, device, compilerSchedule(body, device.npu, name));
}

namespace {

/// Lowers every node of the body onto virtual regions (the instructions are not scheduled yet).
/// With `only`, just those groups are lowered (every other node's result gets a DRAM location but no code):
/// to price a part of a schedule.
sched::VirtualProgram lowerToVirtual(const Graph& body, const hw::Device& device, const NpuSchedule& schedule,
                                     LoweredSubgraph& out, const std::set<size_t>* only = nullptr) {
  using namespace lower;
  TESSEL_ASSERT(device.kind == hw::DeviceKind::Npu, "lowerSubgraph needs an npu device");
  const std::string& name = schedule.subgraph;
  verifySchedule(schedule, body, device.npu);
  LowerContext ctx(body, device.npu, schedule);
  findFusions(body, ctx);
  out.name = name;
  out.device = device.name;
  out.schedule = schedule;
  out.work = subgraphWork(body, device.npu);
  for (const Value* in : body.inputs()) {
    if (!in->type.isStatic() || in->type.dtype != DType::Float32)
      throw UserError(fmt::format("subgraph '{}': input '{}' has type {}, expected a static float32 shape", name,
                                  in->name(), in->type.toString()));
    ctx.allocate(in);
    out.inputs.push_back(interfaceTensor(in, ctx.loc(in)));
  }
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  placeConcatInputs(body, ctx);
  if (only)
    for (const auto& n : body.nodes())
      if (const NodeTiling* t = ctx.schedule.tilingOf(n->name()); t && !ctx.fusedInto.count(n.get())) {
        ctx.allocateResults(*n);
        if (const Node* pool = ctx.globalPool(*n)) ctx.allocate(pool->output(0));
      }
  // Groups are lowered in schedule order (a fused epilogue's other operands come from earlier groups).
  for (size_t gi = 0; gi < schedule.groups.size(); ++gi) {
    if (only && !only->count(gi)) continue;
    const GroupSchedule& group = schedule.groups[gi];
    if (group.tiling.size() > 1) {  // a fused group (S0): its row tiles compute the whole chain
      ctx.group = static_cast<uint32_t>(gi);
      for (const NodeTiling& t : group.tiling) {
        const Node& n = *byName.at(t.node);
        hw::SupportResult r = loweringSupport(n, device);
        if (!r.supported) throw UserError(fmt::format("{} cannot be lowered to '{}': {}", n.describe(), device.name, r.reason));
        ctx.allocate(ctx.resultValue(n));
        LoweredOp op{n.name(), n.opType(), 0, fmt::format("{} {}", group.channelChain ? "channel chain" : "fused group", gi)};
        for (const std::string& e : t.epilogue) op.tiling += ", + " + e;
        if (!t.globalPool.empty()) op.tiling += ", then " + t.globalPool + " from its tiles";
        out.ops.push_back(op);
      }
      if (group.channelChain)
        lowerChannelChain(ctx, group);
      else
        lowerFusedGroup(ctx, group, static_cast<uint32_t>(gi));
      continue;
    }
    for (const NodeTiling& t : group.tiling) {
      const Node& n = *byName.at(t.node);
      hw::SupportResult r = loweringSupport(n, device);
      if (!r.supported) throw UserError(fmt::format("{} cannot be lowered to '{}': {}", n.describe(), device.name, r.reason));
      if (opFamily(n) != OpFamily::Alias)  // views and concats place their outputs themselves
        ctx.allocateResults(n);
      ctx.group = static_cast<uint32_t>(gi);
      LoweredOp op{n.name(), n.opType(), 0, ""};
      findLowering(n)->lower(n, ctx);
      if (!t.maxPool.empty()) op.tiling = "then " + t.maxPool + " from its accumulator tiles";
      if (!t.residualConv.empty()) op.tiling = t.residualConv + " into its accumulator first";
      for (const std::string& e : t.epilogue) op.tiling += (op.tiling.empty() ? "+ " : ", ") + e;
      out.ops.push_back(op);
    }
  }
  for (const Value* o : body.outputs()) out.outputs.push_back(interfaceTensor(o, ctx.loc(o)));
  out.constants = std::move(ctx.constants);
  out.dramWords = ctx.dramWords;
  uint64_t words = out.constants.size();
  for (const auto& t : out.inputs) words += t.words;
  for (const auto& t : out.outputs) words += t.words;
  out.compulsoryDramBytes = words * 4;
  return ctx.builder.take();
}

}  // namespace

LoweredSubgraph lowerSubgraph(const Graph& body, const hw::Device& device, const NpuSchedule& schedule) {
  LoweredSubgraph out;
  sched::VirtualProgram vp = lowerToVirtual(body, device, schedule, out);
  scheduleProgram(std::move(vp), device.npu, schedule, out);
  verifyProgram(out, device.npu);
  return out;
}

lower::ModelledCost lower::modelledCost(const Graph& body, const hw::NpuConfig& cfg, const NpuSchedule& schedule,
                                        const std::vector<size_t>& groups) {
  hw::Device device;
  device.name = "npu";
  device.kind = hw::DeviceKind::Npu;
  device.npu = cfg;
  LoweredSubgraph out;
  const std::set<size_t> only(groups.begin(), groups.end());
  const sched::VirtualProgram vp = lowerToVirtual(body, device, schedule, out, &only);
  const sched::InstructionGraph graph = sched::buildInstructionGraph(vp, cfg);
  sched::ScheduleOptions o;
  o.window = static_cast<uint32_t>(schedule.window);
  ModelledCost cost;
  cost.cycles = sched::listSchedule(vp, graph, cfg, o).cycles;
  for (const sched::VirtualInstruction& vi : vp.instructions) cost.dramBytes += instructionDramBytes(vi.inst);
  return cost;
}

std::optional<lower::ModelledCost> lower::modelledCostIfItFits(const Graph& body, const hw::NpuConfig& cfg,
                                                              const NpuSchedule& schedule, const std::vector<size_t>& groups) {
  try {
    return modelledCost(body, cfg, schedule, groups);
  } catch (const UserError&) {
    return std::nullopt;
  } catch (const InternalError&) {
    return std::nullopt;
  }
}

std::string dependencyGraphDot(const Graph& body, const hw::Device& device, const NpuSchedule& schedule, size_t first,
                               size_t count) {
  LoweredSubgraph out;
  const sched::VirtualProgram vp = lowerToVirtual(body, device, schedule, out);
  const sched::InstructionGraph graph = sched::buildInstructionGraph(vp, device.npu);
  return sched::dependencyGraphDot(vp, graph, first, count);
}

NpuRun runLowered(const LoweredSubgraph& lowered, const hw::NpuConfig& config, const std::vector<Tensor>& inputs,
                  const SimOptions& options) {
  using namespace lower;
  if (inputs.size() != lowered.inputs.size())
    throw UserError(fmt::format("subgraph '{}' takes {} input(s), got {}", lowered.name, lowered.inputs.size(), inputs.size()));
  Dram dram(lowered.dramWords);
  dram.writeFloats(0, lowered.constants);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DramTensor& d = lowered.inputs[i];
    if (inputs[i].shape() != d.shape)
      throw UserError(fmt::format("subgraph '{}': input '{}' has shape {}, expected {}", lowered.name, d.name,
                                  shapeToString(inputs[i].shape()), shapeToString(d.shape)));
    dram.writeFloats(d.addr, toDramLayout(inputs[i], d.channelsLast));
  }
  NpuRun run;
  run.report = simulate(lowered.program, config, dram, options);
  for (const DramTensor& d : lowered.outputs)
    run.outputs.push_back(fromDramLayout(dram.readFloats(d.addr, d.words), d.shape, d.channelsLast));
  return run;
}

}  // namespace tessel::npu
