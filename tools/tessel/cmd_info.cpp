// `tessel info`: inputs, outputs, operator histogram, parameter count and FLOPs of a model.
#include <fmt/format.h>
#include <map>

#include "command.h"
#include "common.h"
#include "tessel/ops/registry.h"

namespace tessel::cli {
namespace {

void countNodes(const Graph& g, std::map<std::string, int>& hist, double& flops, int& nodes) {
  for (const auto& n : g.nodes()) {
    ++nodes;
    hist[n->domain().empty() ? n->opType() : n->domain() + "." + n->opType()]++;
    if (n->def() && n->def()->costFn) flops += n->def()->costFn(*n).flops;
    for (const Graph* sub : n->subgraphs()) countNodes(*sub, hist, flops, nodes);
  }
}

void infoCommand(const ModelOptions& o) {
  auto model = o.load(InferenceMode::Lenient);
  const Graph& g = *model->graph;
  fmt::print("model:    {}\n", o.path);
  if (!model->producerName.empty()) fmt::print("producer: {}\n", model->producerName);
  std::vector<std::string> opsets;
  for (const auto& [d, v] : model->opsetImports) opsets.push_back(fmt::format("{}={}", d.empty() ? "ai.onnx" : d, v));
  fmt::print("opsets:   {}\n", fmt::join(opsets, ", "));
  fmt::print("inputs:\n");
  for (Value* in : g.inputs())
    if (!in->isConstant()) fmt::print("  {:<24} {}\n", in->name(), in->type.toString());
  fmt::print("outputs:\n");
  for (Value* out : g.outputs()) fmt::print("  {:<24} {}\n", out->name(), out->type.toString());
  double params = 0, paramBytes = 0;
  for (Value* c : g.constants()) {
    params += static_cast<double>(c->constant().numel());
    paramBytes += static_cast<double>(c->constant().nbytes());
  }
  std::map<std::string, int> hist;
  double flops = 0;
  int nodes = 0;
  countNodes(g, hist, flops, nodes);
  fmt::print("parameters: {} ({})\n", humanCount(params), humanBytes(paramBytes));
  fmt::print("FLOPs:      {} (per inference, from the operators' cost rules; multiply-add = 2)\n", humanCount(flops));
  fmt::print("nodes:      {}\n", nodes);
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& [op, c] : hist) sorted.push_back({-c, op});
  std::sort(sorted.begin(), sorted.end());
  fmt::print("operators:\n");
  for (const auto& [c, op] : sorted) fmt::print("  {:<28} {:>5}\n", op, -c);
}

}  // namespace

TESSEL_REGISTER_COMMAND(info, 10, [](CLI::App& app) {
  auto opts = std::make_shared<ModelOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Show a model's inputs, outputs, operators, parameter count and FLOPs");
  opts->addTo(cmd);
  cmd->callback([opts]() { infoCommand(*opts); });
});

}  // namespace tessel::cli
