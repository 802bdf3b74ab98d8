// Pass select-layout: chooses which 4-D nodes run in the blocked NCHWc8 layout (AVX2: 8 channels per
// vector). Connected regions of layout-capable nodes are blocked only when they contain a convolution,
// so a lone pool or add between NCHW nodes never costs two reorders. The IR stays NCHW semantically;
// the choice is node->meta["layout"] = "nchwc8", and the code generator puts reorders on the region edges.
// Option select-layout.mode = "nchw" keeps everything in NCHW.
#include <fmt/format.h>
#include <numeric>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

bool isRank4F32(const Value* v) { return passes::isStaticF32(v) && v->type.rank() == 4; }

bool isConvNode(const Node& n) {
  return (n.opType() == "FusedConv" && n.domain() == "tessel") || (n.opType() == "Conv" && n.domain().empty());
}

/// Dense (groups 1) or depthwise 2-D convolutions: the blocked kernels cover both.
bool blockableConv(const Node& n) {
  if (!isConvNode(n) || !isRank4F32(n.input(0)) || !isRank4F32(n.output(0)) || !n.input(1)) return false;
  const int64_t group = n.attrInt("group");
  const int64_t channels = n.input(0)->type.staticShape()[1];
  const int64_t outChannels = n.output(0)->type.staticShape()[1];
  return group == 1 || (group == channels && group == outChannels);
}

/// Ops that work per channel plane (pools) or per element with inputs of the output's shape or scalars.
bool blockableOther(const Node& n) {
  if (!isRank4F32(n.output(0)) || n.numOutputs() != 1) return false;
  const std::string& op = n.opType();
  if (n.domain().empty() && (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool"))
    return isRank4F32(n.input(0));
  if (n.domain().empty() && op == "Concat") {
    if (n.attrInt("axis") != 1 && n.attrInt("axis") != -3) return false;
    for (Value* in : n.inputs())
      if (!isRank4F32(in) || in->type.staticShape()[1] % 8 != 0) return false;
    return true;
  }
  const bool elementwise = (n.domain() == "tessel" && op == "FusedElementwise") ||
                           (n.domain().empty() && (op == "Add" || op == "Mul" || op == "Sub" || op == "Relu" ||
                                                   op == "Clip" || op == "Sigmoid" || op == "HardSwish"));
  if (!elementwise) return false;
  for (Value* in : n.inputs()) {
    if (!in) continue;
    const bool scalar = in->type.isStatic() && in->type.staticSize() == 1;
    if (!scalar && !(in->type == n.output(0)->type)) return false;
  }
  return true;
}

size_t findRoot(std::vector<size_t>& parent, size_t i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

class SelectLayoutPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    const std::string mode = options.get("select-layout.mode", "nchwc8");
    if (mode != "nchwc8" && mode != "nchw")
      throw UserError(fmt::format("pass option select-layout.mode={}: expected nchwc8 or nchw", mode));
    Graph& graph = *model.graph;
    bool changed = false;
    for (const auto& n : graph.nodes()) changed |= n->meta.erase("layout") > 0;
    if (mode == "nchw") return changed;
    const auto& nodes = graph.nodes();
    std::map<const Node*, size_t> index;
    std::vector<bool> capable(nodes.size()), hasConv(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      index[nodes[i].get()] = i;
      hasConv[i] = blockableConv(*nodes[i]);
      capable[i] = hasConv[i] || blockableOther(*nodes[i]);
    }
    std::vector<size_t> parent(nodes.size());
    std::iota(parent.begin(), parent.end(), 0);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!capable[i]) continue;
      for (Value* in : nodes[i]->inputs()) {
        if (!in || !in->producer() || in->graph() != &graph) continue;
        size_t p = index.at(in->producer());
        if (capable[p]) parent[findRoot(parent, p)] = findRoot(parent, i);
      }
    }
    std::vector<bool> regionHasConv(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i)
      if (capable[i] && hasConv[i]) regionHasConv[findRoot(parent, i)] = true;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (capable[i] && regionHasConv[findRoot(parent, i)]) {
        nodes[i]->meta["layout"] = std::string("nchwc8");
        changed = true;
      }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(select_layout, "select-layout",
                     "mark regions of convs/pools/element-wise ops that run in blocked NCHWc8 (meta layout)",
                     [] { return std::make_unique<SelectLayoutPass>(); });

}  // namespace tessel
