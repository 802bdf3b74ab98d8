// Facts about a loaded model (what `tessel info` reports), from the registry's cost rules.
#include "tessel/frontend/model_info.h"

#include <algorithm>
#include <map>

#include "tessel/ops/registry.h"

namespace tessel {
namespace {

void countNodes(const Graph& g, std::map<std::string, int>& hist, double& flops, int& nodes) {
  for (const auto& n : g.nodes()) {
    ++nodes;
    hist[n->domain().empty() ? n->opType() : n->domain() + "." + n->opType()]++;
    if (n->def() && n->def()->costFn) flops += n->def()->costFn(*n).flops;
    for (const Graph* sub : n->subgraphs()) countNodes(*sub, hist, flops, nodes);
  }
}

/// The facts of a model whose input dimensions are fixed; `declared`: the input types as the file declares them.
nlohmann::json modelFacts(const Model& model, const std::string& path, const std::map<std::string, std::string>& declared) {
  const Graph& g = *model.graph;
  nlohmann::json opsets = nlohmann::json::object(), inputs = nlohmann::json::array(), outputs = nlohmann::json::array();
  for (const auto& [d, v] : model.opsetImports) opsets[d.empty() ? "ai.onnx" : d] = v;
  auto valueJson = [&](const Value* v) {
    nlohmann::json dims = nlohmann::json::array();
    if (v->type.hasRank())
      for (const Dim& d : *v->type.dims) dims.push_back(d.isKnown() ? nlohmann::json(d.value) : nlohmann::json(d.toString()));
    nlohmann::json j = {{"name", v->name()},
                        {"dtype", dtypeName(v->type.dtype)},
                        {"shape", v->type.hasRank() ? dims : nlohmann::json(nullptr)},
                        {"type", v->type.toString()}};
    if (auto it = declared.find(v->name()); it != declared.end()) j["declared_type"] = it->second;
    return j;
  };
  for (Value* in : g.inputs())
    if (!in->isConstant()) inputs.push_back(valueJson(in));
  for (Value* out : g.outputs()) outputs.push_back(valueJson(out));
  double params = 0, paramBytes = 0, flops = 0;
  for (Value* c : g.constants()) {
    params += static_cast<double>(c->constant().numel());
    paramBytes += static_cast<double>(c->constant().nbytes());
  }
  std::map<std::string, int> hist;
  int nodes = 0;
  countNodes(g, hist, flops, nodes);
  nlohmann::json ops = nlohmann::json::array();
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& [op, c] : hist) sorted.push_back({-c, op});
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [c, op] : sorted) ops.push_back({{"op", op}, {"count", -c}});
  return {{"model", path},     {"producer", model.producerName}, {"opsets", opsets},   {"inputs", inputs},
          {"outputs", outputs}, {"parameters", params},          {"parameter_bytes", paramBytes},
          {"flops", flops},    {"nodes", nodes},                  {"operators", ops}};
}

}  // namespace

nlohmann::json modelInfoJson(const Model& model, const std::string& name, const ImportOptions& fix) {
  std::map<std::string, std::string> declared;
  for (Value* in : model.graph->inputs())
    if (!in->isConstant()) declared[in->name()] = in->type.toString();
  std::unique_ptr<Model> fixed = model.clone();
  fixOpenInputDims(*fixed->graph, fix);
  inferShapesWithMode(*fixed->graph, fix.inference);
  return modelFacts(*fixed, name, declared);
}

}  // namespace tessel
