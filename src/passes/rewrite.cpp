// Graph-rewriting helpers shared by the passes (see rewrite.h).
#include "rewrite.h"

#include <algorithm>

namespace tessel::passes {

bool isGraphOutput(const Value* v) {
  const auto& outs = v->graph()->outputs();
  return std::find(outs.begin(), outs.end(), v) != outs.end();
}

Node* soleUser(const Value* v) {
  if (!v || v->uses().size() != 1 || isGraphOutput(v)) return nullptr;
  return v->uses()[0].node;
}

bool isStaticF32(const Value* v) { return v && v->type.dtype == DType::Float32 && v->type.isStatic(); }

const Tensor* constantData(const Value* v) { return v && v->isConstant() ? &v->constant() : nullptr; }

Node* replaceChain(Graph& graph, const std::vector<Node*>& chain, const std::string& opType,
                   const std::string& domain, const std::vector<Value*>& inputs, std::string nodeName) {
  TESSEL_ASSERT(!chain.empty(), "replaceChain: empty chain");
  Value* result = chain.back()->output(0);
  const TensorType type = result->type;
  const std::string outName = result->name();
  // Park the result's uses on a placeholder so the chain can go and its name becomes free again.
  Value* placeholder = graph.addValue(graph.uniqueName(outName + ".fusing"), type);
  graph.replaceAllUsesWith(result, placeholder);
  Node* next = nullptr;
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].get() == chain.back()) {
      for (size_t j = i + 1; j < nodes.size() && !next; ++j)
        if (std::find(chain.begin(), chain.end(), nodes[j].get()) == chain.end()) next = nodes[j].get();
      break;
    }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) graph.removeNode(*it);
  Node* fused = next ? graph.insertNodeBefore(next, opType, inputs, {outName}, nodeName, domain)
                     : graph.addNode(opType, inputs, {outName}, nodeName, domain);
  fused->output(0)->type = type;
  graph.replaceAllUsesWith(placeholder, fused->output(0));
  graph.removeUnusedValues();
  return fused;
}

std::vector<Node*> nodeSnapshot(const Graph& graph) {
  std::vector<Node*> order;
  for (const auto& n : graph.nodes()) order.push_back(n.get());
  return order;
}

std::vector<std::string> singleResultNames(const Graph& graph) {
  std::vector<std::string> names;
  for (const auto& n : graph.nodes())
    if (n->numOutputs() == 1 && n->output(0)) names.push_back(n->output(0)->name());
  return names;
}

Node* movePoolBefore(Graph& graph, Node* op, Node* pool, const TensorType& pooledType) {
  const std::string pooledName = graph.uniqueName(pool->output(0)->name() + "_pooled");
  Node* pooled = graph.insertNodeBefore(pool, pool->opType(), {op->input(0)}, {pooledName}, graph.uniqueName(pool->name()));
  for (const auto& [k, v] : pool->attrs()) pooled->setAttr(k, v);
  pooled->output(0)->type = pooledType;
  std::vector<Value*> inputs{pooled->output(0)};
  for (size_t i = 1; i < op->numInputs(); ++i) inputs.push_back(op->input(i));
  const std::map<std::string, AttrValue> attrs = op->attrs();
  const std::string opType = op->opType(), name = op->name();
  Node* moved = replaceChain(graph, {op, pool}, opType, "", inputs, name);
  for (const auto& [k, v] : attrs) moved->setAttr(k, v);
  return moved;
}

bool replaceValue(Graph& graph, Value* oldValue, Value* replacement) {
  if (isGraphOutput(oldValue)) return false;
  graph.replaceAllUsesWith(oldValue, replacement);
  Node* producer = oldValue->producer();
  if (!producer) return true;
  for (Value* out : producer->outputs())
    if (out && (out->hasUses() || isGraphOutput(out))) return true;
  graph.removeNode(producer);
  return true;
}

namespace {

/// A float activation a fused epilogue can apply (OpTrait::FusibleEpilogue), with its parameters.
std::optional<MatchedActivation> matchSingle(Node* n) {
  if (!n->output(0) || n->output(0)->type.dtype != DType::Float32) return std::nullopt;
  auto params = epilogueParams(*n, constantData);
  if (!params) return std::nullopt;
  return MatchedActivation{n->opType(), *params, {n}};
}

/// x * Sigmoid(x), the two nodes reading x.
std::optional<MatchedActivation> matchSilu(const Value* x) {
  Node* sigmoid = nullptr;
  Node* mul = nullptr;
  for (const Use& u : x->uses()) {
    if (isOp(*u.node, "Sigmoid")) sigmoid = u.node;
    else if (isOp(*u.node, "Mul")) mul = u.node;
  }
  if (!sigmoid || !mul || soleUser(sigmoid->output(0)) != mul) return std::nullopt;
  const bool shape = mul->output(0) && mul->output(0)->type == x->type;
  if (!shape) return std::nullopt;
  return MatchedActivation{"SiLU", {}, {sigmoid, mul}};
}

}  // namespace

std::optional<MatchedActivation> matchActivation(const Value* x) {
  if (!x || isGraphOutput(x)) return std::nullopt;
  if (x->uses().size() == 1) return matchSingle(x->uses()[0].node);
  if (x->uses().size() == 2) return matchSilu(x);
  return std::nullopt;
}

void setActivation(Node& node, const MatchedActivation& act) {
  node.setAttr("activation", act.name);
  node.setAttr("activation_params", act.params);
}

}  // namespace tessel::passes

namespace tessel::passes {
namespace {

/// The bias vector of `addend` when it is a constant broadcasting only along `channelAxis` of `out`
/// (e.g. [C,1,1] or [1,C,1,1] for NCHW, [N] or [1,N] for a GEMM), else nothing.
std::optional<std::vector<float>> perChannelConstant(const Value* addend, const TensorType& out, size_t channelAxis) {
  const Tensor* t = constantData(addend);
  if (!t || t->dtype() != DType::Float32 || !out.isStatic()) return std::nullopt;
  Shape y = out.staticShape();
  const Shape& s = t->shape();
  if (s.size() > y.size()) return std::nullopt;
  const size_t offset = y.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t axis = i + offset;
    if (axis == channelAxis ? (s[i] != y[axis]) : (s[i] != 1)) return std::nullopt;
  }
  if (channelAxis < offset) return std::nullopt;
  std::vector<float> v(t->data<float>(), t->data<float>() + t->numel());
  return v;
}

}  // namespace

EpilogueMatch matchEpilogue(Graph& graph, Node* base, Value* bias, size_t channelAxis, bool allowBiasAdd) {
  EpilogueMatch m;
  m.chain = {base};
  m.bias = bias;
  Value* cur = base->output(0);
  Node* user = soleUser(cur);
  auto otherOperand = [&](Node* add) { return add->input(0) == cur ? add->input(1) : add->input(0); };
  auto isAdd = [](Node* n) { return n && isOp(*n, "Add") && n->input(0) != n->input(1); };
  // A constant per-channel Add becomes (part of) the bias, when the existing bias is absent or constant.
  if (allowBiasAdd && isAdd(user) && user->output(0)->type == cur->type && (!bias || constantData(bias))) {
    if (auto add = perChannelConstant(otherOperand(user), cur->type, channelAxis)) {
      if (bias) {
        const Tensor& b = bias->constant();
        if (b.numel() != static_cast<int64_t>(add->size()) || b.dtype() != DType::Float32) return m;
        for (size_t i = 0; i < add->size(); ++i) (*add)[i] += b.data<float>()[i];
      }
      const int64_t n = static_cast<int64_t>(add->size());
      m.bias = graph.addConstant(graph.uniqueName(base->name() + ".bias"), Tensor::fromVector<float>({n}, *add));
      m.chain.push_back(user);
      cur = user->output(0);
      user = soleUser(cur);
    }
  }
  if (isAdd(user) && user->output(0)->type == cur->type) {
    Value* other = otherOperand(user);
    if (other->type == cur->type) {
      m.residual = other;
      m.chain.push_back(user);
      cur = user->output(0);
    }
  }
  m.activation = matchActivation(cur);
  if (m.activation) m.chain.insert(m.chain.end(), m.activation->nodes.begin(), m.activation->nodes.end());
  return m;
}

Node* emitFused(Graph& graph, const EpilogueMatch& m, const std::string& opType) {
  Node* base = m.chain.front();
  const std::string name = base->name();
  const auto attrs = base->attrs();
  std::vector<Value*> inputs = {base->input(0), base->input(1), m.bias, m.residual};
  Node* fused = replaceChain(graph, m.chain, opType, "tessel", inputs, name);
  fused->trimInputs();
  for (const auto& [k, v] : attrs) fused->setAttr(k, v);
  if (m.activation) setActivation(*fused, *m.activation);
  return fused;
}

Node* producerReadOnlyBy(const Value* v, const char* op, const Node* reader) {
  Node* p = v ? v->producer() : nullptr;
  return isStd(p, op) && soleUser(v) == reader ? p : nullptr;
}

std::optional<float> scalarConstant(const Value* v) {
  const Tensor* t = constantData(v);
  if (!t || t->numel() != 1 || t->dtype() != DType::Float32) return std::nullopt;
  return t->data<float>()[0];
}

Value* otherOperand(const Node* n, const Value* x) {
  if (n->numInputs() != 2) return nullptr;
  if (n->input(0) == x) return n->input(1);
  return n->input(1) == x ? n->input(0) : nullptr;
}

std::vector<int64_t> intsOr(const Node& n, const char* name, std::vector<int64_t> fallback) {
  return n.hasAttr(name) ? n.attrInts(name) : fallback;
}

bool rewriteEach(Graph& graph, const char* op, bool (*fuse)(Graph&, Node*)) {
  std::vector<std::string> names;
  for (const auto& n : graph.nodes())
    if (isStd(n.get(), op)) names.push_back(n->output(0)->name());
  bool changed = false;
  for (const std::string& valueName : names) {
    Value* v = graph.findValue(valueName);
    Node* n = v ? v->producer() : nullptr;
    if (isStd(n, op)) changed |= fuse(graph, n);
  }
  return changed;
}

}  // namespace tessel::passes
