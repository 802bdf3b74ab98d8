// Structural verification of the graph IR against the operator registry.
#include "tessel/ir/verifier.h"

#include <fmt/format.h>
#include <map>
#include <set>

#include "tessel/ops/registry.h"

namespace tessel {
namespace {

void checkAttributes(const Node& node, const OpDef& def, std::vector<std::string>& problems) {
  for (const auto& [name, value] : node.attrs()) {
    const AttrSpec* spec = def.findAttr(name);
    if (!spec) {
      problems.push_back(fmt::format("{}: unknown attribute '{}'", node.describe(), name));
    } else if (attrKindOf(value) != spec->kind) {
      problems.push_back(fmt::format("{}: attribute '{}' should be of kind {}, found {}", node.describe(), name,
                                     attrKindName(spec->kind), attrKindName(attrKindOf(value))));
    }
  }
  for (const AttrSpec& spec : def.attrSpecs)
    if (spec.required && !node.attrs().count(spec.name))
      problems.push_back(fmt::format("{}: required attribute '{}' is missing", node.describe(), spec.name));
}

void checkArity(const Node& node, const OpDef& def, std::vector<std::string>& problems) {
  int nin = static_cast<int>(node.numInputs());
  int nout = static_cast<int>(node.numOutputs());
  auto range = [](int lo, int hi) {
    if (hi == kVariadic) return fmt::format("at least {}", lo);
    return lo == hi ? fmt::format("{}", lo) : fmt::format("{} to {}", lo, hi);
  };
  if (nin < def.minInputs || nin > def.maxInputs)
    problems.push_back(fmt::format("{}: has {} input(s), expected {}", node.describe(), nin, range(def.minInputs, def.maxInputs)));
  if (nout < def.minOutputs || nout > def.maxOutputs)
    problems.push_back(fmt::format("{}: has {} output(s), expected {}", node.describe(), nout, range(def.minOutputs, def.maxOutputs)));
  for (int i = 0; i < std::min(nin, def.minInputs); ++i)
    if (!node.hasInput(static_cast<size_t>(i)))
      problems.push_back(fmt::format("{}: required input {} is missing", node.describe(), i));
}

void verifyInto(const Graph& graph, std::vector<std::string>& problems) {
  std::set<const Value*> defined;
  for (Value* v : graph.values())
    if (v->isGraphInput() || v->isConstant()) defined.insert(v);
  for (Value* v : graph.values()) {
    if (!v->isCaptured()) continue;
    if (!v->hasUses() && !v->isGraphInput()) {
      bool isOutput = false;
      for (Value* o : graph.outputs()) isOutput |= o == v;
      if (!isOutput) continue;  // an unused placeholder
    }
    const Value* outer = graph.parent() ? graph.parent()->lookup(v->name()) : nullptr;
    if (!outer)
      problems.push_back(fmt::format("graph '{}': value '{}' is used but never defined (no producer, not an input, "
                                     "not an initializer{})",
                                     graph.name(), v->name(), graph.parent() ? ", not in an enclosing graph" : ""));
    else if (v->type.dtype != DType::Undefined && outer->type.dtype != DType::Undefined &&
             v->type.dtype != outer->type.dtype)
      problems.push_back(fmt::format("graph '{}': captured value '{}' is {} here but {} where it is defined",
                                     graph.name(), v->name(), v->type.toString(), outer->type.toString()));
    defined.insert(v);
  }
  for (const auto& nodePtr : graph.nodes()) {
    const Node& node = *nodePtr;
    for (size_t i = 0; i < node.numInputs(); ++i) {
      Value* in = node.input(i);
      if (in && !defined.count(in))
        problems.push_back(fmt::format("{}: input {} '{}' is used before it is defined", node.describe(), i, in->name()));
    }
    if (const OpDef* def = node.def()) {
      checkArity(node, *def, problems);
      checkAttributes(node, *def, problems);
    }
    for (Value* out : node.outputs())
      if (out) defined.insert(out);
    for (const Graph* sub : node.subgraphs()) verifyInto(*sub, problems);
  }
  for (Value* out : graph.outputs())
    if (!defined.count(out))
      problems.push_back(fmt::format("graph '{}': output '{}' is never defined", graph.name(), out->name()));
}

void collectUnsupported(const Graph& graph, std::map<std::string, std::vector<std::string>>& out) {
  for (const auto& n : graph.nodes()) {
    if (!n->def()) {
      std::string op = n->domain().empty() ? n->opType() : n->domain() + "." + n->opType();
      out[op].push_back(n->name());
    }
    for (const Graph* sub : n->subgraphs()) collectUnsupported(*sub, out);
  }
}

}  // namespace

std::vector<std::string> verifyGraph(const Graph& graph) {
  std::vector<std::string> problems;
  for (const std::string& u : unsupportedOperators(graph)) problems.push_back("unsupported operator " + u);
  verifyInto(graph, problems);
  return problems;
}

void verifyOrThrow(const Graph& graph) {
  std::vector<std::string> problems = verifyGraph(graph);
  if (problems.empty()) return;
  if (problems.size() == 1) throw UserError(problems[0]);
  throw UserError(fmt::format("the graph has {} problems:\n  {}", problems.size(), fmt::join(problems, "\n  ")));
}

std::vector<std::string> unsupportedOperators(const Graph& graph) {
  std::map<std::string, std::vector<std::string>> byOp;
  collectUnsupported(graph, byOp);
  std::vector<std::string> out;
  for (const auto& [op, nodes] : byOp) {
    std::vector<std::string> quoted;
    for (const auto& n : nodes) quoted.push_back("'" + n + "'");
    out.push_back(fmt::format("{} (node{} {})", op, nodes.size() > 1 ? "s" : "", fmt::join(quoted, ", ")));
  }
  return out;
}

}  // namespace tessel
