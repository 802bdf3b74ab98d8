// Reference interpreter: scoped environments for nested graphs, last-use release, kernel dispatch.
#include "tessel/interp/interpreter.h"

#include <fmt/format.h>
#include <unordered_map>

#include "tessel/ops/registry.h"

namespace tessel {
namespace {

/// For one graph: after which node index each value can be released.
struct ReleasePlan {
  std::vector<std::vector<const Value*>> releaseAfter;  // per node index
};

void collectCapturedNames(const Graph& sub, std::vector<std::string>& names) {
  for (Value* v : sub.values())
    if (v->isCaptured()) names.push_back(v->name());
  for (const auto& n : sub.nodes())
    for (const Graph* g : n->subgraphs()) collectCapturedNames(*g, names);
}

ReleasePlan makeReleasePlan(const Graph& graph) {
  std::unordered_map<const Value*, size_t> last;
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (Value* v : nodes[i]->inputs())
      if (v) last[v] = i;
    for (const Graph* sub : nodes[i]->subgraphs()) {
      std::vector<std::string> names;
      collectCapturedNames(*sub, names);
      for (const auto& n : names)
        if (Value* v = graph.findValue(n)) last[v] = i;
    }
  }
  for (Value* out : graph.outputs()) last.erase(out);
  ReleasePlan plan;
  plan.releaseAfter.resize(nodes.size());
  for (const auto& [v, i] : last)
    if (!v->isConstant() && !v->isCaptured()) plan.releaseAfter[i].push_back(v);
  return plan;
}

/// The values computed so far in one activation of one graph.
struct Frame {
  const Graph* graph;
  const Frame* parent;
  std::unordered_map<const Value*, Tensor> values;

  const Tensor* lookup(const Value* v) const {
    if (auto it = values.find(v); it != values.end()) return &it->second;  // inputs override initializers
    if (v->isConstant()) return &v->constant();
    if (v->isCaptured() && parent) return parent->lookupByName(v->name());
    return nullptr;
  }
  const Tensor* lookupByName(const std::string& name) const {
    Value* v = graph->findValue(name);
    if (v && !v->isCaptured()) return lookup(v);
    return parent ? parent->lookupByName(name) : nullptr;
  }
};

}  // namespace

struct Interpreter::Impl : SubgraphRunner {
  const Graph& graph;
  std::mt19937_64 rng;
  std::unordered_map<const Graph*, ReleasePlan> plans;
  const Frame* currentFrame = nullptr;

  Impl(const Graph& g, uint64_t seed) : graph(g), rng(seed) {}

  const ReleasePlan& planFor(const Graph& g) {
    auto it = plans.find(&g);
    if (it == plans.end()) it = plans.emplace(&g, makeReleasePlan(g)).first;
    return it->second;
  }

  std::vector<Tensor> runSubgraph(const Graph& body, const std::vector<Tensor>& inputs) override {
    if (inputs.size() != body.inputs().size())
      throw UserError(fmt::format("graph '{}' expects {} input(s), got {}", body.name(), body.inputs().size(), inputs.size()));
    Frame frame{&body, currentFrame, {}};
    for (size_t i = 0; i < inputs.size(); ++i) frame.values[body.inputs()[i]] = inputs[i];
    return execute(frame);
  }

  std::vector<Tensor> execute(Frame& frame) {
    const Frame* saved = currentFrame;
    const Graph& g = *frame.graph;
    const ReleasePlan& plan = planFor(g);
    const auto& nodes = g.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      runNode(*nodes[i], frame);
      for (const Value* v : plan.releaseAfter[i]) frame.values.erase(v);
    }
    currentFrame = saved;
    std::vector<Tensor> outs;
    for (Value* o : g.outputs()) {
      const Tensor* t = frame.lookup(o);
      if (!t) throw UserError(fmt::format("graph '{}': output '{}' was not computed", g.name(), o->name()));
      outs.push_back(*t);
    }
    return outs;
  }

  void runNode(const Node& node, Frame& frame) {
    const OpDef* def = node.def();
    if (!def || !def->kernelFn)
      throw UserError(fmt::format("{}: operator '{}' has no reference kernel", node.describe(), node.opType()));
    std::vector<const Tensor*> inputs;
    for (size_t i = 0; i < node.numInputs(); ++i) {
      Value* v = node.input(i);
      if (!v) {
        inputs.push_back(nullptr);
        continue;
      }
      const Tensor* t = frame.lookup(v);
      if (!t) throw InternalError(fmt::format("{}: input '{}' has no value at run time", node.describe(), v->name()));
      inputs.push_back(t);
    }
    currentFrame = &frame;
    KernelContext ctx(node, std::move(inputs), this, &rng);
    try {
      def->kernelFn(ctx);
    } catch (const UserError& e) {
      std::string msg = e.what();
      if (msg.rfind("node '", 0) == 0) throw;
      throw UserError(fmt::format("{}: {}", node.describe(), msg));
    }
    currentFrame = frame.parent;
    for (size_t i = 0; i < node.numOutputs(); ++i) {
      Value* out = node.output(i);
      if (!out) continue;
      Tensor& t = ctx.outputs()[i];
      if (!t.defined())
        throw InternalError(fmt::format("{}: the reference kernel did not produce output {} '{}'", node.describe(), i, out->name()));
      frame.values[out] = std::move(t);
    }
  }
};

Interpreter::Interpreter(const Graph& graph, InterpreterOptions options)
    : impl_(std::make_unique<Impl>(graph, options.seed)) {}
Interpreter::~Interpreter() = default;

void Interpreter::checkInput(const Value& declared, const Tensor& actual) {
  const TensorType& t = declared.type;
  auto mismatch = [&](const std::string& what) {
    throw UserError(fmt::format("input '{}': expected {}, got {}[{}] ({})", declared.name(), t.toString(),
                                dtypeName(actual.dtype()), fmt::join(actual.shape(), ","), what));
  };
  if (t.dtype != DType::Undefined && t.dtype != actual.dtype()) mismatch("wrong element type");
  if (!t.hasRank()) return;
  if (t.rank() != actual.rank()) mismatch(fmt::format("wrong rank: {} instead of {}", actual.rank(), t.rank()));
  for (size_t i = 0; i < t.rank(); ++i) {
    const Dim& d = (*t.dims)[i];
    if (d.isKnown() && d.value != actual.shape()[i])
      mismatch(fmt::format("axis {} has size {} instead of {}", i, actual.shape()[i], d.value));
  }
}

std::vector<Tensor> Interpreter::run(const std::map<std::string, Tensor>& inputs) {
  const Graph& g = impl_->graph;
  Frame frame{&g, nullptr, {}};
  for (const auto& [name, t] : inputs) {
    Value* v = g.findValue(name);
    if (!v || !v->isGraphInput()) {
      std::vector<std::string> names;
      for (Value* in : g.inputs()) names.push_back("'" + in->name() + "'");
      throw UserError(fmt::format("the model has no input named '{}' (its inputs: {})", name, fmt::join(names, ", ")));
    }
  }
  for (Value* in : g.inputs()) {
    auto it = inputs.find(in->name());
    if (it == inputs.end()) {
      if (in->isConstant()) continue;  // an initializer that may be overridden
      throw UserError(fmt::format("input '{}' ({}) was not given", in->name(), in->type.toString()));
    }
    checkInput(*in, it->second);
    frame.values[in] = it->second;
  }
  return impl_->execute(frame);
}

}  // namespace tessel
