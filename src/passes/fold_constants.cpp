// Pass fold-constants: evaluates nodes whose inputs are all constants with the reference kernels (the
// interpreter's), replacing their outputs by constants that keep the outputs' names.
#include <random>

#include "rewrite.h"
#include "tessel/ops/registry.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

bool foldable(const Node& node) {
  const OpDef* def = node.def();
  if (!def || !def->kernelFn || !def->deterministic || !node.subgraphs().empty()) return false;
  for (Value* in : node.inputs())
    if (in && !in->isConstant()) return false;
  for (Value* out : node.outputs())
    if (out && passes::isGraphOutput(out)) return false;  // a graph output must stay a computed value
  return true;
}

/// Evaluates `node` and turns its outputs into constants; the node is removed.
void foldNode(Graph& graph, Node* node) {
  std::vector<const Tensor*> inputs;
  for (Value* in : node->inputs()) inputs.push_back(in ? &in->constant() : nullptr);
  std::mt19937_64 rng(0);
  KernelContext ctx(*node, inputs, nullptr, &rng);
  node->def()->kernelFn(ctx);
  struct Folded {
    std::string name;
    Value* temporary;
    Tensor data;
  };
  std::vector<Folded> folded;
  for (size_t i = 0; i < node->numOutputs(); ++i) {
    Value* out = node->output(i);
    if (!out) continue;
    Tensor data = ctx.outputs()[i];
    Value* tmp = graph.addConstant(graph.uniqueName(out->name() + ".folded"), data);
    graph.replaceAllUsesWith(out, tmp);
    folded.push_back({out->name(), tmp, data});
  }
  graph.removeNode(node);
  // The outputs' names are free again: the constants take them so the IR reads the same.
  for (auto& f : folded) graph.replaceAllUsesWith(f.temporary, graph.addConstant(f.name, f.data));
}

class FoldConstantsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    bool changed = false;
    const std::vector<Node*> order = passes::nodeSnapshot(graph);
    // Topological order: a node's inputs are folded before the node is looked at.
    for (Node* node : order) {
      if (!foldable(*node)) continue;
      foldNode(graph, node);
      changed = true;
    }
    if (changed) graph.removeUnusedValues();
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fold_constants, "fold-constants",
                     "evaluate nodes whose inputs are all constants with the reference kernels",
                     [] { return std::make_unique<FoldConstantsPass>(); });

}  // namespace tessel
