// Pass fuse-elementwise: chains of float element-wise ops with the same output shape become one
// tessel.FusedElementwise node whose `body` holds the chain, so the CPU target runs them as one loop.
// A group has one result: every member but the last is read only inside the group, which also keeps
// the group convex (no path leaves and re-enters it).
#include <algorithm>
#include <map>
#include <set>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// A standard op the registry marks Elementwise (each output element from the same-index elements of its
/// broadcast inputs) computing floats from floats: every input is float32 or a one-element constant (Clip's
/// bounds, Pow's exponent). Masks (Where's bool condition) and conversions stay out of the loop.
bool isFloatElementwiseOp(const Node& n) {
  if (!n.domain().empty() || !hasTrait(n, OpTrait::Elementwise) || n.numOutputs() != 1) return false;
  for (Value* in : n.inputs())
    if (in && in->type.dtype != DType::Float32 && !(in->isConstant() && in->constant().numel() == 1)) return false;
  return true;
}

/// Inputs other than the chained one may be any value of the output's shape or one that broadcasts
/// into it (scalars, per-channel constants); Clip's bounds must be constants.
bool fusable(const Node& n) {
  if (!isFloatElementwiseOp(n) || !n.subgraphs().empty() || !passes::isStaticF32(n.output(0))) return false;
  if (isOp(n, "Clip"))
    for (size_t i = 1; i < n.numInputs(); ++i)
      if (n.input(i) && !n.input(i)->isConstant()) return false;
  for (Value* in : n.inputs())
    if (in && !in->type.isStatic()) return false;
  return true;
}

/// Small constants are copied into the body (the kernel sees them as literals), larger values are inputs.
constexpr int64_t kInlineConstantLimit = 16;

void emitGroup(Graph& graph, const std::vector<Node*>& members, int index) {
  std::set<const Node*> inGroup(members.begin(), members.end());
  auto body = std::make_shared<Graph>("fused_elementwise_" + std::to_string(index));
  body->setParent(&graph);
  std::map<const Value*, Value*> mapped;
  std::vector<Value*> outerInputs;
  auto bodyValue = [&](Value* v) -> Value* {
    if (!v) return nullptr;
    if (auto it = mapped.find(v); it != mapped.end()) return it->second;
    Value* inner;
    if (v->isConstant() && v->constant().numel() <= kInlineConstantLimit) {
      inner = body->addConstant(v->name(), v->constant());
    } else {
      inner = body->addInput(v->name(), v->type);
      outerInputs.push_back(v);
    }
    return mapped[v] = inner;
  };
  for (Node* n : members) {
    std::vector<Value*> ins;
    for (Value* in : n->inputs()) ins.push_back(bodyValue(in));
    Node* copy = body->addNode(n->opType(), ins, {n->output(0)->name()}, n->name(), n->domain());
    for (const auto& [k, v] : n->attrs()) copy->setAttr(k, v);
    copy->output(0)->type = n->output(0)->type;
    mapped[n->output(0)] = copy->output(0);
  }
  body->addOutput(mapped.at(members.back()->output(0)));
  Node* fused = passes::replaceChain(graph, members, "FusedElementwise", "tessel", outerInputs,
                                     "fused_elementwise_" + std::to_string(index));
  fused->setAttr("body", body);
}

class FuseElementwisePass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    // groupOf[node] = index into groups; members are appended in topological order.
    std::map<const Node*, size_t> groupOf;
    std::vector<std::vector<Node*>> groups;
    std::map<const Node*, size_t> position;
    for (size_t i = 0; i < graph.nodes().size(); ++i) position[graph.nodes()[i].get()] = i;
    for (const auto& owned : graph.nodes()) {
      Node* n = owned.get();
      if (!fusable(*n)) continue;
      std::set<size_t> joined;
      for (Value* in : n->inputs()) {
        Node* p = in ? in->producer() : nullptr;
        if (p && groupOf.count(p) && passes::soleUser(in) == n && in->type == n->output(0)->type) joined.insert(groupOf[p]);
      }
      std::vector<Node*> merged;
      for (size_t g : joined) {
        merged.insert(merged.end(), groups[g].begin(), groups[g].end());
        groups[g].clear();
      }
      merged.push_back(n);
      // Restore the graph order of members (the groups joined may interleave).
      std::sort(merged.begin(), merged.end(), [&](Node* a, Node* b) { return position[a] < position[b]; });
      groups.push_back(merged);
      for (Node* m : merged) groupOf[m] = groups.size() - 1;
    }
    int index = 0;
    for (const auto& g : groups)
      if (g.size() >= 2) emitGroup(graph, g, index++);
    return index > 0;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_elementwise, "fuse-elementwise",
                     "fuse chains of same-shape float element-wise ops into tessel.FusedElementwise",
                     [] { return std::make_unique<FuseElementwisePass>(); });

}  // namespace tessel
