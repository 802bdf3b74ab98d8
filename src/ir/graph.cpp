// Graph IR construction and editing: values, nodes, use lists, topological order, deep copies.
#include "tessel/ir/graph.h"

#include <algorithm>
#include <fmt/format.h>
#include <functional>
#include <queue>
#include <set>
#include <unordered_map>

#include "tessel/ir/captures.h"
#include "tessel/ops/registry.h"

namespace tessel {

// ---------------------------------------------------------------- Value

const Tensor& Value::constant() const {
  TESSEL_ASSERT(constant_, "value '" + name_ + "' is not a constant");
  return *constant_;
}

void Value::setConstant(Tensor t) {
  type = TensorType::fromShape(t.dtype(), t.shape());
  constant_ = std::make_shared<const Tensor>(std::move(t));
}

// ---------------------------------------------------------------- Node

void Node::setInput(size_t i, Value* v) {
  TESSEL_ASSERT(i < inputs_.size(), "setInput index out of range");
  Value* old = inputs_[i];
  if (old) {
    auto& u = old->uses_;
    auto it = std::find_if(u.begin(), u.end(), [&](const Use& x) { return x.node == this && x.index == i; });
    if (it != u.end()) u.erase(it);
  }
  inputs_[i] = v;
  if (v) v->uses_.push_back({this, i});
}

void Node::addInput(Value* v) {
  inputs_.push_back(nullptr);
  setInput(inputs_.size() - 1, v);
}

void Node::trimInputs() {
  while (!inputs_.empty() && inputs_.back() == nullptr) inputs_.pop_back();
}

const AttrValue* Node::findAttr(const std::string& n) const {
  auto it = attrs_.find(n);
  if (it != attrs_.end()) return &it->second;
  if (def_) {
    if (const AttrSpec* spec = def_->findAttr(n); spec && spec->defaultValue) return &*spec->defaultValue;
  }
  return nullptr;
}

std::string Node::describe() const { return fmt::format("node '{}' ({})", name_, opType_); }

namespace {
template <class T>
const T& getAttr(const Node& node, const std::string& n, AttrKind kind) {
  const AttrValue* v = node.findAttr(n);
  if (!v) throw UserError(fmt::format("{}: attribute '{}' is required but missing", node.describe(), n));
  if (const T* p = std::get_if<T>(v)) return *p;
  // Accept an int where a float is expected and vice versa? No: ONNX attributes are typed; report it.
  throw UserError(fmt::format("{}: attribute '{}' should be of kind {}, found {}", node.describe(), n,
                              attrKindName(kind), attrKindName(attrKindOf(*v))));
}
}  // namespace

int64_t Node::attrInt(const std::string& n) const { return getAttr<int64_t>(*this, n, AttrKind::Int); }
float Node::attrFloat(const std::string& n) const { return getAttr<float>(*this, n, AttrKind::Float); }
std::string Node::attrString(const std::string& n) const { return getAttr<std::string>(*this, n, AttrKind::String); }
std::vector<int64_t> Node::attrInts(const std::string& n) const {
  return getAttr<std::vector<int64_t>>(*this, n, AttrKind::Ints);
}
std::vector<float> Node::attrFloats(const std::string& n) const {
  return getAttr<std::vector<float>>(*this, n, AttrKind::Floats);
}
std::vector<std::string> Node::attrStrings(const std::string& n) const {
  return getAttr<std::vector<std::string>>(*this, n, AttrKind::Strings);
}
const Tensor& Node::attrTensor(const std::string& n) const { return getAttr<Tensor>(*this, n, AttrKind::Tensor); }
const Graph& Node::attrGraph(const std::string& n) const {
  const auto& g = getAttr<std::shared_ptr<Graph>>(*this, n, AttrKind::Graph);
  TESSEL_ASSERT(g, "null graph attribute");
  return *g;
}

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> out;
  for (const auto& [name, v] : attrs_) {
    if (auto* g = std::get_if<std::shared_ptr<Graph>>(&v)) out.push_back(g->get());
    if (auto* gs = std::get_if<std::vector<std::shared_ptr<Graph>>>(&v))
      for (const auto& g : *gs) out.push_back(g.get());
  }
  return out;
}

// ---------------------------------------------------------------- Graph

Graph::Graph(std::string name) : name_(std::move(name)) {}
Graph::~Graph() = default;

std::string Graph::uniqueName(const std::string& base) const {
  std::string b = base.empty() ? "v" : base;
  if (!valueByName_.count(b)) return b;
  for (int i = 1;; ++i) {
    std::string c = fmt::format("{}_{}", b, i);
    if (!valueByName_.count(c)) return c;
  }
}

Value* Graph::addValue(const std::string& name, TensorType type) {
  auto v = std::make_unique<Value>();
  v->name_ = uniqueName(name);
  v->graph_ = this;
  v->type = std::move(type);
  Value* raw = v.get();
  valueByName_[raw->name_] = raw;
  values_.push_back(std::move(v));
  return raw;
}

Value* Graph::addInput(const std::string& name, TensorType type) {
  Value* v = addValue(name, std::move(type));
  v->isInput_ = true;
  inputs_.push_back(v);
  return v;
}

Value* Graph::addConstant(const std::string& name, Tensor data) {
  Value* v = addValue(name);
  v->setConstant(std::move(data));
  return v;
}

void Graph::removeInput(Value* v) {
  inputs_.erase(std::remove(inputs_.begin(), inputs_.end(), v), inputs_.end());
  v->isInput_ = false;
}

std::vector<Value*> Graph::values() const {
  std::vector<Value*> out;
  out.reserve(values_.size());
  for (const auto& v : values_) out.push_back(v.get());
  return out;
}

std::vector<Value*> Graph::constants() const {
  std::vector<Value*> out;
  for (const auto& v : values_)
    if (v->isConstant()) out.push_back(v.get());
  return out;
}

Value* Graph::findValue(const std::string& name) const {
  auto it = valueByName_.find(name);
  return it == valueByName_.end() ? nullptr : it->second;
}

Value* Graph::lookup(const std::string& name) const {
  for (const Graph* g = this; g; g = g->parent_) {
    Value* v = g->findValue(name);
    if (v && !v->isCaptured()) return v;
  }
  return nullptr;
}

namespace {
void addCapturedNames(const Graph& g, std::set<std::string>& out) {
  for (const auto& node : g.nodes())
    for (const Graph* sub : node->subgraphs()) {
      for (const Value* v : sub->values())
        if (v->isCaptured()) out.insert(v->name());
      addCapturedNames(*sub, out);
    }
}
}  // namespace

std::set<std::string> capturedNames(const Graph& g) {
  std::set<std::string> names;
  addCapturedNames(g, names);
  return names;
}

void Graph::removeUnusedValues() {
  std::set<Value*> keep(outputs_.begin(), outputs_.end());
  keep.insert(inputs_.begin(), inputs_.end());
  const std::set<std::string> captured = capturedNames(*this);  // read by name from nested graphs
  std::vector<std::unique_ptr<Value>> kept;
  for (auto& v : values_) {
    if (v->producer_ || v->hasUses() || keep.count(v.get()) || captured.count(v->name_)) {
      kept.push_back(std::move(v));
    } else {
      valueByName_.erase(v->name_);
    }
  }
  values_ = std::move(kept);
}

Node* Graph::createNode(const std::string& opType, const std::vector<Value*>& inputs,
                        const std::vector<std::string>& outputNames, const std::string& name,
                        const std::string& domain) {
  auto node = std::make_unique<Node>();
  Node* n = node.get();
  n->opType_ = opType;
  n->domain_ = domain;
  n->graph_ = this;
  n->def_ = OpRegistry::instance().find(domain, opType);
  n->name_ = name;
  for (Value* v : inputs) n->addInput(v);
  for (size_t i = 0; i < outputNames.size(); ++i) {
    if (outputNames[i].empty()) {
      n->outputs_.push_back(nullptr);
      continue;
    }
    Value* out = addValue(outputNames[i]);
    out->producer_ = n;
    out->producerOutput_ = i;
    n->outputs_.push_back(out);
  }
  if (n->name_.empty()) n->name_ = n->outputs_.empty() || !n->outputs_[0] ? opType : n->outputs_[0]->name();
  return node.release();  // the caller places it in nodes_
}

Node* Graph::addNode(const std::string& opType, const std::vector<Value*>& inputs,
                     const std::vector<std::string>& outputNames, const std::string& name, const std::string& domain) {
  Node* n = createNode(opType, inputs, outputNames, name, domain);
  nodes_.push_back(std::unique_ptr<Node>(n));
  return n;
}

Node* Graph::insertNodeBefore(Node* before, const std::string& opType, const std::vector<Value*>& inputs,
                              const std::vector<std::string>& outputNames, const std::string& name,
                              const std::string& domain) {
  Node* n = createNode(opType, inputs, outputNames, name, domain);
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == before; });
  TESSEL_ASSERT(it != nodes_.end(), "insertNodeBefore: anchor node not in graph");
  nodes_.insert(it, std::unique_ptr<Node>(n));
  return n;
}

void Graph::removeNode(Node* node) {
  for (Value* out : node->outputs_) {
    if (!out) continue;
    TESSEL_ASSERT(!out->hasUses(), "removeNode: output '" + out->name() + "' still has uses");
    TESSEL_ASSERT(std::find(outputs_.begin(), outputs_.end(), out) == outputs_.end(),
                  "removeNode: output '" + out->name() + "' is a graph output");
  }
  for (size_t i = 0; i < node->inputs_.size(); ++i) node->setInput(i, nullptr);
  std::set<Value*> dead;
  for (Value* out : node->outputs_)
    if (out) dead.insert(out);
  // Names first: remove_if leaves moved-from (null) pointers in the tail, not the removed values.
  for (Value* v : dead) valueByName_.erase(v->name_);
  auto vit = std::remove_if(values_.begin(), values_.end(), [&](const auto& v) { return dead.count(v.get()) != 0; });
  values_.erase(vit, values_.end());
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == node; });
  TESSEL_ASSERT(it != nodes_.end(), "removeNode: node not in graph");
  nodes_.erase(it);
}

void Graph::replaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  std::vector<Use> uses = from->uses_;
  for (const Use& u : uses) u.node->setInput(u.index, to);
  for (Value*& out : outputs_)
    if (out == from) out = to;
  // Nested graphs read `from` by name: their captured value now stands for `to` (renamed, or replaced by
  // the value of that name they already see).
  const std::string oldName = from->name_, newName = to->name_;
  std::function<void(Graph&)> redirect = [&](Graph& g) {
    auto it = g.valueByName_.find(oldName);
    if (it != g.valueByName_.end() && it->second->isCaptured()) {
      Value* captured = it->second;
      if (auto seen = g.valueByName_.find(newName); seen != g.valueByName_.end()) {
        g.replaceAllUsesWith(captured, seen->second);
      } else {
        g.valueByName_.erase(it);
        captured->name_ = newName;
        g.valueByName_[newName] = captured;
      }
    }
    for (const auto& n : g.nodes_)
      for (Graph* sub : n->subgraphs()) redirect(*sub);
  };
  for (const auto& n : nodes_)
    for (Graph* sub : n->subgraphs()) redirect(*sub);
}

Node* Graph::findNode(const std::string& name) const {
  for (const auto& n : nodes_)
    if (n->name() == name) return n.get();
  return nullptr;
}

namespace {
/// Values a node reads, including those captured by its nested graphs (they must be computed first).
void collectReads(const Node& node, const Graph& owner, std::vector<Value*>& out) {
  for (Value* v : node.inputs())
    if (v) out.push_back(v);
  for (Graph* sub : node.subgraphs()) {
    for (Value* v : sub->values()) {
      if (!v->isCaptured()) continue;
      if (Value* outer = owner.findValue(v->name())) out.push_back(outer);
    }
    for (const auto& inner : sub->nodes()) collectReads(*inner, owner, out);
  }
}
}  // namespace

void Graph::topoSort() {
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].get()] = i;
  std::vector<std::vector<size_t>> succ(nodes_.size());
  std::vector<size_t> indeg(nodes_.size(), 0);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    std::vector<Value*> reads;
    collectReads(*nodes_[i], *this, reads);
    std::set<size_t> preds;
    for (Value* v : reads)
      if (v->producer() && v->graph() == this) preds.insert(index.at(v->producer()));
    for (size_t p : preds) {
      succ[p].push_back(i);
      ++indeg[i];
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (indeg[i] == 0) ready.push(i);
  std::vector<size_t> order;
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t s : succ[i])
      if (--indeg[s] == 0) ready.push(s);
  }
  if (order.size() != nodes_.size()) {
    std::vector<std::string> stuck;
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (indeg[i] > 0) stuck.push_back("'" + nodes_[i]->name() + "'");
    throw UserError(fmt::format("graph '{}' has a cycle through {} node(s): {}", name_, stuck.size(),
                                fmt::join(stuck, ", ")));
  }
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes_.size());
  for (size_t i : order) sorted.push_back(std::move(nodes_[i]));
  nodes_ = std::move(sorted);
}

namespace {
AttrValue cloneAttr(const AttrValue& v, Graph* newOwner) {
  if (auto* g = std::get_if<std::shared_ptr<Graph>>(&v)) {
    std::shared_ptr<Graph> c = (*g)->clone();
    c->setParent(newOwner);
    return c;
  }
  if (auto* gs = std::get_if<std::vector<std::shared_ptr<Graph>>>(&v)) {
    std::vector<std::shared_ptr<Graph>> out;
    for (const auto& g : *gs) {
      std::shared_ptr<Graph> c = g->clone();
      c->setParent(newOwner);
      out.push_back(std::move(c));
    }
    return out;
  }
  return v;
}
}  // namespace

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>(name_);
  std::unordered_map<const Value*, Value*> map;
  // Values in creation order keep names identical (no uniquing collisions).
  for (const auto& v : values_) {
    Value* c = g->addValue(v->name_, v->type);
    c->constant_ = v->constant_;
    c->isInput_ = v->isInput_;
    map[v.get()] = c;
  }
  for (Value* in : inputs_) g->inputs_.push_back(map.at(in));
  for (const auto& n : nodes_) {
    auto node = std::make_unique<Node>();
    Node* c = node.get();
    c->name_ = n->name_;
    c->opType_ = n->opType_;
    c->domain_ = n->domain_;
    c->def_ = n->def_;
    c->graph_ = g.get();
    c->device = n->device;
    c->meta = n->meta;
    for (Value* in : n->inputs_) c->addInput(in ? map.at(in) : nullptr);
    for (size_t i = 0; i < n->outputs_.size(); ++i) {
      Value* out = n->outputs_[i] ? map.at(n->outputs_[i]) : nullptr;
      if (out) {
        out->producer_ = c;
        out->producerOutput_ = i;
      }
      c->outputs_.push_back(out);
    }
    for (const auto& [k, v] : n->attrs_) c->attrs_[k] = cloneAttr(v, g.get());
    g->nodes_.push_back(std::move(node));
  }
  for (Value* out : outputs_) g->outputs_.push_back(map.at(out));
  return g;
}

std::unique_ptr<Model> Model::clone() const {
  auto m = std::make_unique<Model>();
  m->graph = graph ? graph->clone() : nullptr;
  m->opsetImports = opsetImports;
  m->producerName = producerName;
  m->irVersion = irVersion;
  return m;
}

}  // namespace tessel
