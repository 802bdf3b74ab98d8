// `tessel info`: inputs, outputs, operator histogram, parameter count and FLOPs of a model (text or --json).
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>

#include "command.h"
#include "common.h"
#include "tessel/frontend/model_info.h"

namespace tessel::cli {
namespace {

struct InfoOptions {
  ModelOptions model;
  bool json = false;
};

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
  // Loaded with the undefined dimensions kept, to show them as declared; fixed on a copy for the counts.
  auto model = o.model.load(InferenceMode::Lenient, {}, /*keepOpenDims=*/true);
  nlohmann::json facts = modelInfoJson(*model, o.model.path, o.model.importOptions(InferenceMode::Lenient));
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
