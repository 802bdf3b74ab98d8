// `tessel info`: inputs, outputs, operator histogram, parameter count and FLOPs of a model (text or --json).
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "tessel/ops/registry.h"

namespace tessel::cli {
namespace {

struct InfoOptions {
  ModelOptions model;
  bool json = false;
};

void countNodes(const Graph& g, std::map<std::string, int>& hist, double& flops, int& nodes) {
  for (const auto& n : g.nodes()) {
    ++nodes;
    hist[n->domain().empty() ? n->opType() : n->domain() + "." + n->opType()]++;
    if (n->def() && n->def()->costFn) flops += n->def()->costFn(*n).flops;
    for (const Graph* sub : n->subgraphs()) countNodes(*sub, hist, flops, nodes);
  }
}

/// Everything `info` reports, as the --json object (keys in docs/cli.md). `declared`: the input types as the
/// file declares them (before undefined dimensions were fixed).
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

void printFacts(const nlohmann::json& j) {
  fmt::print("model:    {}\n", j["model"].get<std::string>());
  if (!j["producer"].get<std::string>().empty()) fmt::print("producer: {}\n", j["producer"].get<std::string>());
  std::vector<std::string> opsets;
  for (const auto& [d, v] : j["opsets"].items()) opsets.push_back(fmt::format("{}={}", d, v.get<int64_t>()));
  fmt::print("opsets:   {}\n", fmt::join(opsets, ", "));
  fmt::print("inputs:\n");
  for (const auto& in : j["inputs"]) {
    std::string type = in["type"], declared = in["declared_type"];
    fmt::print("  {:<24} {}{}\n", in["name"].get<std::string>(), declared,
               declared == type ? "" : fmt::format(" (counted as {})", type));
  }
  fmt::print("outputs:\n");
  for (const auto& out : j["outputs"]) fmt::print("  {:<24} {}\n", out["name"].get<std::string>(), out["type"].get<std::string>());
  fmt::print("parameters: {} ({})\n", humanCount(j["parameters"].get<double>()), humanBytes(j["parameter_bytes"].get<double>()));
  fmt::print("FLOPs:      {} (per inference, from the operators' cost rules; multiply-add = 2)\n",
             humanCount(j["flops"].get<double>()));
  fmt::print("nodes:      {}\n", j["nodes"].get<int>());
  fmt::print("operators:\n");
  for (const auto& op : j["operators"]) fmt::print("  {:<28} {:>5}\n", op["op"].get<std::string>(), op["count"].get<int>());
}

void infoCommand(const InfoOptions& o) {
  // Loaded with the undefined dimensions kept, to show them as declared; then fixed for the counts.
  auto model = o.model.load(InferenceMode::Lenient, {}, /*keepOpenDims=*/true);
  std::map<std::string, std::string> declared;
  for (Value* in : model->graph->inputs())
    if (!in->isConstant()) declared[in->name()] = in->type.toString();
  ImportOptions fix = o.model.importOptions(InferenceMode::Lenient);
  fixOpenInputDims(*model->graph, fix);
  inferShapesWithMode(*model->graph, InferenceMode::Lenient);
  nlohmann::json facts = modelFacts(*model, o.model.path, declared);
  if (o.json) fmt::print("{}\n", facts.dump());
  else printFacts(facts);
}

}  // namespace

TESSEL_REGISTER_COMMAND(info, 10, [](CLI::App& app) {
  auto opts = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Show a model's inputs, outputs, operators, parameter count and FLOPs");
  cmd->footer(
      "Undefined input dimensions count as 1 (with a note) unless --input-shape fixes them.\n"
      "Exit status: 0 success, 2 bad model or flag, 1 internal error.");
  opts->model.addTo(cmd);
  cmd->add_flag("--json", opts->json, "print one JSON object (keys: docs/cli.md) instead of text");
  cmd->callback([opts]() { infoCommand(*opts); });
});

}  // namespace tessel::cli
