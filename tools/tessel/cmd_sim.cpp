// `tessel sim`: runs a compiled NPU model (.tnpu) and reports cycles, unit busy/stall, matrix utilisation,
// DRAM traffic and peak SRAM per buffer against capacity (text or --json), with an optional Chrome trace.
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "command.h"
#include "npu_cli.h"
#include "tessel/frontend/tensor_io.h"

namespace tessel::cli {
namespace {

struct SimCmdOptions {
  std::string path, hw, trace, outputDir;
  InputOptions inputs;
  bool json = false;
};

/// One Chrome trace for the whole run: each subgraph's trace shifted to start after the previous one.
void writeTrace(const npu::CompiledNpuModel& model, const npu::NpuModelRun& run, const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  double offsetUs = 0;
  for (const auto& s : run.subgraphs) {
    const npu::LoweredSubgraph* lowered = nullptr;
    for (const auto& l : model.subgraphs)
      if (l.name == s.name) lowered = &l;
    std::ostringstream one;
    npu::writeChromeTrace(lowered->program, s.report, one);
    nlohmann::json doc = nlohmann::json::parse(one.str());
    for (auto& e : doc["traceEvents"]) {
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + offsetUs;
      if (e.contains("args") && e["args"].is_object() && e.value("ph", "") == "X") e["args"]["subgraph"] = s.name;
      events.push_back(e);
    }
    offsetUs += static_cast<double>(s.report.totalCycles) / s.report.clockMhz;
  }
  std::ofstream f(path);
  if (!f) throw UserError(fmt::format("cannot write trace '{}'", path));
  f << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ns"}}.dump() << "\n";
}

void printText(const nlohmann::json& j) {
  fmt::print("NPU cycles: {} (lower bound {}, ratio {:.2f}); {} NPU call(s); matrix-unit utilisation {:.1f}%\n",
             j["cycles"].get<uint64_t>(), j["lower_bound_cycles"].get<uint64_t>(),
             j["lower_bound_cycles"].get<uint64_t>() ? j["cycles"].get<double>() / j["lower_bound_cycles"].get<double>() : 0.0,
             j["npu_calls"].get<uint64_t>(), 100 * j["mm_utilization"].get<double>());
  fmt::print("DRAM: {} B read, {} B written (compulsory {} B); host<->NPU transfers {} B\n",
             j["dram_bytes"]["read"].get<uint64_t>(), j["dram_bytes"]["written"].get<uint64_t>(),
             j["dram_bytes"]["compulsory"].get<uint64_t>(), j["host_npu_transfer_bytes"].get<uint64_t>());
  for (const auto& [unit, u] : j["units"].items())
    fmt::print("  unit {:<3}  busy {:>12}  stall {:>12}\n", unit, u["busy"].get<uint64_t>(), u["stall"].get<uint64_t>());
  for (const auto& [buf, peak] : j["peak_sram_bytes"].items())
    fmt::print("  SRAM {:<3}  peak {:>9} B of {:>9} B\n", buf, peak.get<uint64_t>(), j["sram_capacity_bytes"][buf].get<uint64_t>());
  fmt::print("hazards: {}\n", j["hazards"].get<uint64_t>());
  for (const auto& s : j["subgraphs"])
    fmt::print("  {:<28} {:>12} cycles  mm {:5.1f}%  hazards {}\n", s["name"].get<std::string>(), s["cycles"].get<uint64_t>(),
               100 * s["mm_utilization"].get<double>(), s["hazard_count"].get<uint64_t>());
}

void simCommand(const SimCmdOptions& o) {
  if (!isNpuModelPath(o.path)) throw UserError(fmt::format("tessel sim: '{}' is not a compiled NPU model (.tnpu)", o.path));
  npu::CompiledNpuModel model = loadNpuModel(o.path, o.hw);
  auto tensors = npuModelInputs(model, o.inputs, true);
  npu::NpuModelRun run = npu::runNpuModel(model, tensors);
  nlohmann::json summary = npu::runSummaryJson(model, run);
  if (!o.outputDir.empty()) {
    std::filesystem::create_directories(o.outputDir);
    for (size_t i = 0; i < run.outputs.size(); ++i)
      writeNpy((std::filesystem::path(o.outputDir) / (fileNameFor(model.outputs[i].name) + ".npy")).string(), run.outputs[i]);
  }
  if (o.json)
    fmt::print("{}\n", summary.dump());
  else
    printText(summary);
  if (!o.trace.empty()) writeTrace(model, run, o.trace);
}

}  // namespace

TESSEL_REGISTER_COMMAND(sim, 45, [](CLI::App& app) {
  auto o = std::make_shared<SimCmdOptions>();
  CLI::App* cmd = app.add_subcommand("sim", "Simulate a compiled NPU model (.tnpu) and report cycles, traffic and SRAM use");
  cmd->footer(
      "Examples:\n"
      "  tessel sim resnet18.tnpu\n"
      "  tessel sim resnet18.tnpu --json --trace trace.json   (open the trace in ui.perfetto.dev)\n"
      "Exit status: 0 success, 2 bad input, 1 internal error.");
  cmd->add_option("model", o->path, "compiled NPU model (.tnpu)")->required();
  cmd->add_option("--hw", o->hw, "refuse the file unless it was compiled for this configuration");
  o->inputs.addTo(cmd);
  cmd->add_option("--output-dir,-o", o->outputDir, "also write each output as DIR/<output name>.npy");
  cmd->add_flag("--json", o->json, "print one JSON object instead of text");
  cmd->add_option("--trace", o->trace, "write a Chrome/Perfetto trace (one track per unit, SRAM counters)");
  cmd->callback([o]() { simCommand(*o); });
});

}  // namespace tessel::cli
