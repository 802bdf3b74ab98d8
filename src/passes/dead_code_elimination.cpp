// Pass dce: removes nodes whose outputs nothing reads, and constants nothing uses.
#include <set>

#include "tessel/ir/captures.h"
#include "tessel/ops/registry.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

bool eliminateDeadCode(Graph& graph) {
  bool changed = false;
  std::set<const Value*> outputs(graph.outputs().begin(), graph.outputs().end());
  bool progress = true;
  while (progress) {
    progress = false;
    const std::set<std::string> captured = capturedNames(graph);  // read by nested graphs
    // Walk backwards so a chain of dead nodes goes in one sweep.
    for (size_t i = graph.nodes().size(); i-- > 0;) {
      Node* node = graph.nodes()[i].get();
      if (node->def() && !node->def()->deterministic) continue;  // keep random ops: they advance the generator
      bool live = false;
      for (Value* out : node->outputs())
        if (out && (out->hasUses() || outputs.count(out) || captured.count(out->name()))) live = true;
      if (live) continue;
      graph.removeNode(node);
      changed = progress = true;
    }
  }
  for (const auto& node : graph.nodes())
    for (Graph* sub : node->subgraphs()) changed |= eliminateDeadCode(*sub);
  size_t before = graph.values().size();
  graph.removeUnusedValues();
  return changed || graph.values().size() != before;
}

class DeadCodeEliminationPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override { return eliminateDeadCode(*model.graph); }
};

}  // namespace

TESSEL_REGISTER_PASS(dce, "dce", "remove nodes and constants whose results are never used",
                     [] { return std::make_unique<DeadCodeEliminationPass>(); });

}  // namespace tessel
