// The NPU lowering driver: DRAM layout of a subgraph's tensors, dispatch of each node to its op family's
// operator interpreter (S2.1), activation fusion, and running a lowered subgraph on the simulator.
#include "tessel/targets/npu/lowering.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "lower_context.h"
#include "tessel/passes/pass.h"
#include "tessel/support/error.h"

namespace tessel::npu {

void prepareModelForNpu(Model& model) { namedPipeline("npu").run(model); }

namespace lower {

std::map<std::string, OpLowering>& opLowerings() {
  static std::map<std::string, OpLowering> table;
  return table;
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

namespace {
/// A constant scalar input (Clip bounds), or the fallback when the input is absent.
std::optional<float> scalarInput(const Node& node, size_t i, float fallback) {
  if (!node.hasInput(i)) return fallback;
  const Value* v = node.input(i);
  if (!v->isConstant() || v->constant().numel() != 1) return std::nullopt;
  return static_cast<float>(v->constant().elementAsDouble(0));
}
}  // namespace

std::optional<Activation> activationOf(const Node& node) {
  if (!node.domain().empty()) return std::nullopt;
  const std::string& op = node.opType();
  if (op == "Relu") return Activation{VecOp::Relu};
  if (op == "Sigmoid") return Activation{VecOp::Sigmoid};
  if (op == "Tanh") return Activation{VecOp::Tanh};
  if (op == "Exp") return Activation{VecOp::Exp};
  if (op == "LeakyRelu") return Activation{VecOp::LeakyRelu, node.attrFloat("alpha")};
  if (op == "HardSigmoid") return Activation{VecOp::HardSigmoid, node.attrFloat("alpha"), node.attrFloat("beta")};
  if (op == "HardSwish") return Activation{VecOp::HardSwish, 1.0f / 6.0f, 0.5f};
  if (op == "Clip") {
    auto lo = scalarInput(node, 1, -std::numeric_limits<float>::infinity());
    auto hi = scalarInput(node, 2, std::numeric_limits<float>::infinity());
    if (!lo || !hi) return std::nullopt;
    return Activation{VecOp::Clip, *lo, *hi};
  }
  return std::nullopt;
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

LowerContext::LowerContext(const Graph& body, const hw::NpuConfig& config) : cfg(config), body_(body) {
  uint64_t constantBound = 0;
  for (size_t i = 0; i < body.nodes().size(); ++i) {
    const Node* n = body.nodes()[i].get();
    nodeIndex_[n] = i;
    for (const Value* v : n->inputs())
      if (v) {
        lastUse_[v] = i;
        if (v->isConstant()) constantBound += static_cast<uint64_t>(v->constant().numel());
      }
  }
  // Weights are packed into blocks of the same total size, so the constants' sizes bound their region.
  activationBase = (constantBound + 1023) / 1024 * 1024;
  dramWords = activationBase;
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
  uint64_t words = std::max<uint64_t>(static_cast<uint64_t>(shapeSize(l.shape)), 1);
  auto fit = std::find_if(free_.begin(), free_.end(), [&](const auto& b) { return b.second >= words; });
  if (fit != free_.end()) {
    l.addr = fit->first;
    fit->first += words, fit->second -= words;
    if (fit->second == 0) free_.erase(fit);
  } else {
    l.addr = dramWords;
    dramWords += words;
  }
  locs_[v] = l;
}

void LowerContext::releaseAfter(const Node& node) {
  size_t index = nodeIndex_.at(&node);
  const auto& outs = body_.outputs();
  for (const Value* v : node.inputs()) {
    if (!v || v->isConstant() || lastUse_[v] != index || !locs_.count(v)) continue;
    if (std::find(outs.begin(), outs.end(), v) != outs.end()) continue;
    const TensorLoc& l = locs_[v];
    free_.push_back({l.addr, std::max<uint64_t>(static_cast<uint64_t>(l.words()), 1)});
    locs_.erase(v);
  }
  std::sort(free_.begin(), free_.end());
  for (size_t i = 0; i + 1 < free_.size();) {  // merge neighbours
    if (free_[i].first + free_[i].second == free_[i + 1].first) {
      free_[i].second += free_[i + 1].second;
      free_.erase(free_.begin() + static_cast<long>(i) + 1);
    } else {
      ++i;
    }
  }
}

const Value* LowerContext::resultValue(const Node& node) const {
  for (const auto& [act, producer] : fusedInto)
    if (producer == &node) return act->output(0);
  return node.output(0);
}

std::optional<Activation> LowerContext::fusedActivation(const Node& node) const {
  for (const auto& [act, producer] : fusedInto)
    if (producer == &node) return activationOf(*act);
  return std::nullopt;
}

namespace {

/// Conv/Gemm/MatMul whose only consumer is an activation apply it in place before storing.
void findFusions(const Graph& body, LowerContext& ctx) {
  const auto& outs = body.outputs();
  for (const auto& n : body.nodes()) {
    const std::string& op = n->opType();
    if (!n->domain().empty() || (op != "Conv" && op != "Gemm" && op != "MatMul")) continue;
    const Value* y = n->output(0);
    if (y->uses().size() != 1 || std::find(outs.begin(), outs.end(), y) != outs.end()) continue;
    const Node* user = y->uses()[0].node;
    if (y->uses()[0].index == 0 && activationOf(*user)) ctx.fusedInto[user] = n.get();
  }
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
  auto it = opLowerings().find(node.opType());
  if (it == opLowerings().end()) return refuse(fmt::format("no NPU lowering for {}", node.opType()));
  hw::SupportResult r = checkStaticF32(node);
  if (!r.supported) return r;
  return it->second.check(node);
}

LoweredSubgraph lowerSubgraph(const Graph& body, const hw::Device& device, const std::string& name) {
  using namespace lower;
  TESSEL_ASSERT(device.kind == hw::DeviceKind::Npu, "lowerSubgraph needs an npu device");
  LowerContext ctx(body, device.npu);
  findFusions(body, ctx);
  LoweredSubgraph out;
  out.name = name;
  out.device = device.name;
  for (const Value* in : body.inputs()) {
    if (!in->type.isStatic() || in->type.dtype != DType::Float32)
      throw UserError(fmt::format("subgraph '{}': input '{}' has type {}, expected a static float32 shape", name,
                                  in->name(), in->type.toString()));
    ctx.allocate(in);
    out.inputs.push_back(interfaceTensor(in, ctx.loc(in)));  // before its region may be reused
  }
  for (const auto& n : body.nodes()) {
    if (ctx.fusedInto.count(n.get())) {
      ctx.releaseAfter(*n);
      continue;
    }
    hw::SupportResult r = loweringSupport(*n, device);
    if (!r.supported) throw UserError(fmt::format("{} cannot be lowered to '{}': {}", n->describe(), device.name, r.reason));
    for (const Value* v : n->outputs()) ctx.allocate(v == n->output(0) ? ctx.resultValue(*n) : v);
    LoweredOp op{n->name(), n->opType(), ctx.emitter.size(), 0, ""};
    opLowerings().at(n->opType()).lower(*n, ctx);
    op.instructions = ctx.emitter.size() - op.firstInstruction;
    if (auto act = ctx.fusedActivation(*n)) op.tiling = fmt::format("+ fused {}", vecOpName(act->op));
    out.ops.push_back(op);
    ctx.releaseAfter(*n);
  }
  for (const Value* o : body.outputs()) out.outputs.push_back(interfaceTensor(o, ctx.loc(o)));
  out.program = ctx.emitter.take();
  out.constants = std::move(ctx.constants);
  out.dramWords = ctx.dramWords;
  uint64_t words = out.constants.size();
  for (const auto& t : out.inputs) words += t.words;
  for (const auto& t : out.outputs) words += t.words;
  out.compulsoryDramBytes = words * 4;
  return out;
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
