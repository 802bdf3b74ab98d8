// The operator registry and the contexts handed to inference and reference kernels.
#include "tessel/ops/registry.h"

#include <algorithm>

namespace tessel {

const AttrSpec* OpDef::findAttr(std::string_view n) const {
  for (const auto& a : attrSpecs)
    if (a.name == n) return &a;
  return nullptr;
}

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add(OpDef def) {
  auto key = std::make_pair(def.domain, def.name);
  TESSEL_ASSERT(!defs_.count(key), fmt::format("operator '{}' registered twice", def.name));
  defs_[key] = std::make_unique<OpDef>(std::move(def));
}

const OpDef* OpRegistry::find(std::string_view domain, std::string_view name) const {
  // "ai.onnx" is the standard domain spelled out.
  if (domain == "ai.onnx") domain = "";
  auto it = defs_.find(std::make_pair(std::string(domain), std::string(name)));
  return it == defs_.end() ? nullptr : it->second.get();
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& [k, v] : defs_) out.push_back(v.get());
  return out;
}

// ---------------------------------------------------------------- traits

bool isOp(const Node& node, std::string_view opType, std::string_view domain) {
  return node.opType() == opType && node.domain() == domain;
}

bool hasTrait(const Node& node, OpTrait trait) { return node.def() && node.def()->has(trait); }

std::optional<std::vector<float>> epilogueParams(const Node& node, const ConstantReader& constant) {
  if (!hasTrait(node, OpTrait::FusibleEpilogue)) return std::nullopt;
  const EpilogueActivation& e = *node.def()->epilogue;
  if (!e.params) return std::vector<float>{};
  return e.params(node, constant);
}

std::vector<const OpDef*> opsWithTrait(OpTrait trait) {
  std::vector<const OpDef*> out;
  for (const OpDef* d : OpRegistry::instance().all())
    if (d->has(trait)) out.push_back(d);
  return out;
}

// ---------------------------------------------------------------- InferContext

const TensorType& InferContext::inputType(size_t i) const {
  Value* v = node_.input(i);
  if (!v) failMessage(fmt::format("input {} is required but missing", i));
  return v->type;
}

const Tensor* InferContext::inputValue(size_t i) const {
  Value* v = node_.input(i);
  if (!v) return nullptr;
  if (v->isConstant()) return &v->constant();
  return knownValue_ ? knownValue_(v) : nullptr;
}

void InferContext::setOutputType(size_t i, TensorType t) {
  Value* v = node_.output(i);
  if (!v) return;
  // A graph output keeps the dimensions its model declares where inference cannot tell them (they depend
  // on values known only at run time): the declaration is the model's promise, checked when it runs.
  const auto& outs = node_.graph() ? node_.graph()->outputs() : std::vector<Value*>{};
  const bool declared = std::find(outs.begin(), outs.end(), v) != outs.end();
  if (declared && t.dtype == v->type.dtype && !t.hasRank() && v->type.hasRank()) t.dims = v->type.dims;
  if (declared && t.dtype == v->type.dtype && t.hasRank() && v->type.hasRank() && t.rank() == v->type.rank()) {
    for (size_t d = 0; d < t.rank(); ++d)
      if (!(*t.dims)[d].isKnown() && (*v->type.dims)[d].isKnown()) (*t.dims)[d] = (*v->type.dims)[d];
  }
  v->type = std::move(t);
}

void InferContext::setOutputValue(size_t i, Tensor t) {
  if (node_.output(i)) outputValues_[i] = std::move(t);
}

void InferContext::failMessage(const std::string& message) const {
  throw UserError(fmt::format("{}: {}", node_.describe(), message));
}

// ---------------------------------------------------------------- KernelContext

const Tensor& KernelContext::input(size_t i) const {
  if (!hasInput(i)) failMessage(fmt::format("input {} is required but missing", i));
  return *inputs_[i];
}

Tensor& KernelContext::allocateOutput(size_t i, DType dtype, Shape shape) {
  TESSEL_ASSERT(i < outputs_.size(), fmt::format("{}: output {} out of range", node_.describe(), i));
  outputs_[i] = Tensor(dtype, std::move(shape));
  return outputs_[i];
}

void KernelContext::setOutput(size_t i, Tensor t) {
  TESSEL_ASSERT(i < outputs_.size(), fmt::format("{}: output {} out of range", node_.describe(), i));
  outputs_[i] = std::move(t);
}

std::vector<Tensor> KernelContext::runSubgraph(const Graph& body, const std::vector<Tensor>& inputs) {
  TESSEL_ASSERT(runner_, "no subgraph runner available");
  return runner_->runSubgraph(body, inputs);
}

std::mt19937_64& KernelContext::rng() {
  TESSEL_ASSERT(rng_, "no random generator available");
  return *rng_;
}

void KernelContext::failMessage(const std::string& message) const {
  throw UserError(fmt::format("{}: {}", node_.describe(), message));
}

Value* UpgradeContext::addConstant(const std::string& nameHint, Tensor t) {
  return graph.addConstant(graph.uniqueName(nameHint), std::move(t));
}

}  // namespace tessel
