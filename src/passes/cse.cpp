// Pass cse: common subexpression elimination. Nodes with the same operator, inputs and attributes compute
// the same values, and small constants with the same data are the same constant; later copies go.
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "rewrite.h"
#include "tessel/ops/registry.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// Constants up to this many bytes are compared by content (weights never repeat; keys stay small).
constexpr size_t kMaxConstantKeyBytes = 4096;

std::string tensorKey(const Tensor& t) {
  std::string key = fmt::format("{}{}:", dtypeName(t.dtype()), shapeToString(t.shape()));
  if (t.dtype() == DType::String) {
    for (int64_t i = 0; i < t.numel(); ++i) key += t.data<std::string>()[i] + '\0';
    return key;
  }
  key.append(static_cast<const char*>(t.rawData()), t.nbytes());
  return key;
}

std::string attrKey(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) return fmt::format("i{}", x);
        else if constexpr (std::is_same_v<T, float>) {
          uint32_t bits;
          std::memcpy(&bits, &x, 4);
          return fmt::format("f{}", bits);
        } else if constexpr (std::is_same_v<T, std::string>) return "s" + x;
        else if constexpr (std::is_same_v<T, Tensor>) return fmt::format("t{}", tensorKey(x));  // not "t" + ...: GCC 12 -Wrestrict false positive
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return fmt::format("I{}", fmt::join(x, ","));
        else if constexpr (std::is_same_v<T, std::vector<float>>) {
          std::string s = "F";
          for (float f : x) s += attrKey(AttrValue(f)) + ",";
          return s;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) return fmt::format("S{}", fmt::join(x, "\x01"));
        else return fmt::format("p{}", static_cast<const void*>(&x));  // graphs, tensor lists: never equal
      },
      v);
}

/// A key equal for nodes that compute the same thing; empty for nodes that must not be merged.
std::string nodeKey(const Node& n) {
  if (!n.def() || !n.def()->deterministic || !n.subgraphs().empty()) return "";
  std::string key = n.domain() + "." + n.opType() + "(";
  for (Value* in : n.inputs()) key += fmt::format("{},", static_cast<const void*>(in));
  key += fmt::format(")->{}", n.numOutputs());
  for (Value* out : n.outputs()) key += out ? "o" : "_";
  for (const auto& [name, v] : n.attrs()) key += "|" + name + "=" + attrKey(v);
  return key;
}

bool mergeConstants(Graph& graph) {
  bool changed = false;
  std::map<std::string, Value*> seen;
  for (Value* c : graph.constants()) {
    if (c->isGraphInput() || c->constant().nbytes() > kMaxConstantKeyBytes) continue;
    auto [it, inserted] = seen.emplace(tensorKey(c->constant()), c);
    if (!inserted && !passes::isGraphOutput(c) && c->hasUses()) {
      graph.replaceAllUsesWith(c, it->second);
      changed = true;
    }
  }
  return changed;
}

bool mergeNodes(Graph& graph) {
  bool changed = false;
  std::map<std::string, Node*> seen;
  const std::vector<Node*> order = passes::nodeSnapshot(graph);
  for (Node* n : order) {
    std::string key = nodeKey(*n);
    if (key.empty()) continue;
    auto [it, inserted] = seen.emplace(key, n);
    if (inserted) continue;
    bool outputIsGraphOutput = false;
    for (Value* out : n->outputs()) outputIsGraphOutput |= out && passes::isGraphOutput(out);
    if (outputIsGraphOutput) continue;
    for (size_t i = 0; i < n->numOutputs(); ++i)
      if (n->output(i)) graph.replaceAllUsesWith(n->output(i), it->second->output(i));
    graph.removeNode(n);
    changed = true;
  }
  return changed;
}

class CsePass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    // Constants first: merged constants make more node keys equal.
    bool changed = mergeConstants(graph);
    changed |= mergeNodes(graph);
    if (changed) graph.removeUnusedValues();
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(cse, "cse", "merge nodes with equal operator, inputs and attributes, and equal small constants",
                     [] { return std::make_unique<CsePass>(); });

}  // namespace tessel
