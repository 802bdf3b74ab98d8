// `tessel sim`: runs a compiled NPU model (.tnpu) and reports cycles, unit busy/stall, matrix utilisation,
// DRAM traffic and peak SRAM per buffer against capacity (text or --json), with an optional Chrome trace, a chart
// of unit activity and SRAM use over time, and a per-node profile (--profile).
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "command.h"
#include "common.h"
#include "npu_cli.h"
#include "plot.h"
#include "tessel/eval/runner.h"
#include "tessel/targets/npu/run_trace.h"

namespace tessel::cli {
namespace {

struct SimCmdOptions {
  std::string path, hw, trace, outputDir, plot;
  InputOptions inputs;
  bool json = false, profile = false;
};

/// Intervals of the --plot chart.
constexpr size_t kPlotBins = 400;

/// Where one subgraph call of a run starts on the run's time line (calls run one after another).
struct CallSpan {
  const npu::LoweredSubgraph* lowered;
  const npu::SimReport* report;
  uint64_t offset;  ///< cycles before the call
};

std::vector<CallSpan> callSpans(const npu::CompiledNpuModel& model, const npu::NpuModelRun& run) {
  std::vector<CallSpan> spans;
  uint64_t offset = 0;
  for (const auto& s : run.subgraphs) {
    spans.push_back({&npu::loweredSubgraph(model, s.name), &s.report, offset});
    offset += s.report.totalCycles;
  }
  return spans;
}

/// Per unit, the busy fraction of each of `bins` intervals of `width` cycles (from the per-instruction timing).
nlohmann::json unitBusy(const std::vector<CallSpan>& spans, double width, size_t bins) {
  std::vector<std::vector<double>> busy(npu::kNumUnits, std::vector<double>(bins, 0.0));
  for (const CallSpan& c : spans)
    for (size_t i = 0; i < c.lowered->program.instructions.size() && i < c.report->timing.size(); ++i) {
      std::vector<double>& b = busy[static_cast<size_t>(c.lowered->program.instructions[i].unit())];
      double a = static_cast<double>(c.offset + c.report->timing[i].start);
      double z = static_cast<double>(c.offset + c.report->timing[i].end);
      for (size_t k = static_cast<size_t>(a / width); k < bins && static_cast<double>(k) * width < z; ++k)
        b[k] += std::min(z, static_cast<double>(k + 1) * width) - std::max(a, static_cast<double>(k) * width);
    }
  nlohmann::json units = nlohmann::json::array();
  for (size_t u = 0; u < npu::kNumUnits; ++u) {
    for (double& v : busy[u]) v = std::clamp(v / width, 0.0, 1.0);
    units.push_back({{"name", std::string(npu::unitName(static_cast<npu::Unit>(u)))}, {"busy", busy[u]}});
  }
  return units;
}

/// Per SRAM buffer, the peak live bytes within each interval (from the reports' SRAM usage steps).
nlohmann::json sramUse(const std::vector<CallSpan>& spans, double width, size_t bins) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t buf = 0; buf < npu::kNumBuffers; ++buf) {
    std::vector<double> peak(bins, 0.0);
    uint64_t capacity = 0;
    for (const CallSpan& c : spans) {
      capacity = std::max(capacity, c.report->capacityBytes[buf]);
      const auto& steps = c.report->sramUsage[buf];  // (cycle, live bytes from then on), in cycle order
      for (size_t i = 0; i < steps.size(); ++i) {
        double a = static_cast<double>(c.offset + steps[i].first);
        double z = static_cast<double>(c.offset + (i + 1 < steps.size() ? steps[i + 1].first : c.report->totalCycles));
        for (size_t k = static_cast<size_t>(a / width); k < bins && static_cast<double>(k) * width <= z; ++k)
          peak[k] = std::max(peak[k], static_cast<double>(steps[i].second));
      }
    }
    out.push_back({{"name", std::string(npu::bufferName(static_cast<npu::Buffer>(buf)))}, {"capacity", capacity},
                   {"bytes", peak}});
  }
  return out;
}

/// The --plot chart's data (tessel_plot.py npu-timeline), in cycles.
nlohmann::json timelineChart(const npu::CompiledNpuModel& model, const npu::NpuModelRun& run,
                             const nlohmann::json& summary, const std::string& path) {
  std::vector<CallSpan> spans = callSpans(model, run);
  const double total = std::max<double>(1.0, static_cast<double>(summary["cycles"].get<uint64_t>()));
  const double width = total / static_cast<double>(kPlotBins);
  std::vector<double> edges;
  for (size_t k = 0; k <= kPlotBins; ++k) edges.push_back(static_cast<double>(k) * width);
  nlohmann::json calls = nlohmann::json::array();
  for (const CallSpan& c : spans) calls.push_back({{"name", c.lowered->name}, {"start", c.offset}});
  return {{"title", fmt::format("{}: {} cycles in {} NPU call(s); matrix-unit utilisation {:.1f}%", path,
                                summary["cycles"].get<uint64_t>(), run.subgraphs.size(),
                                100 * summary["mm_utilization"].get<double>())},
          {"bin_edges", edges},
          {"units", unitBusy(spans, width, kPlotBins)},
          {"sram", sramUse(spans, width, kPlotBins)},
          {"calls", calls}};
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

/// The --profile table: one row per node in the order the nodes started.
void printProfile(const nlohmann::json& p) {
  auto name = [](const std::string& n) { return n.size() <= 44 ? n : "..." + n.substr(n.size() - 41); };
  fmt::print("\nper-node profile (cycles; busy = occupancy of each unit; mm idle = cycles the matrix unit waited for the "
             "node's gemms; mm overhead = setup and weight-shift cycles of the gemms; bias = gemms of K = 1):\n");
  fmt::print("  {:<44} {:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}\n", "node", "op", "start", "span", "LD",
             "MM", "VEC", "ST", "mm idle", "mm ovh", "bias");
  auto row = [](const nlohmann::json& n) {
    const auto& b = n["busy"];
    return fmt::format("{:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}", b["LD"].get<uint64_t>(), b["MM"].get<uint64_t>(),
                       b["VEC"].get<uint64_t>(), b["ST"].get<uint64_t>(), n["idle_before"]["MM"].get<uint64_t>(),
                       n["gemm_overhead"].get<uint64_t>(), n["bias_gemm_cycles"].get<uint64_t>());
  };
  for (const auto& n : p["nodes"])
    fmt::print("  {:<44} {:<18} {:>9} {:>9} {}\n", name(n["node"].get<std::string>()), n["op"].get<std::string>().substr(0, 18),
               n["start"].get<uint64_t>(), n["finish"].get<uint64_t>() - n["start"].get<uint64_t>(), row(n));
  const auto& t = p["totals"];
  fmt::print("  {:<44} {:<18} {:>9} {:>9} {}\n", "total", "", "", "", row(t));
  const uint64_t mm = t["busy"]["MM"].get<uint64_t>();
  if (mm > 0)
    fmt::print("matrix unit: {} gemms; of its {} busy cycles {:.1f}% input rows and {:.1f}% setup and weight shifts; "
               "gemms of K = 1 (biases) take {:.1f}%; it waited {} cycles\n",
               t["gemms"].get<uint64_t>(), mm, 100.0 * t["gemm_rows"].get<double>() / static_cast<double>(mm),
               100.0 * t["gemm_overhead"].get<double>() / static_cast<double>(mm),
               100.0 * t["bias_gemm_cycles"].get<double>() / static_cast<double>(mm), t["idle_before"]["MM"].get<uint64_t>());
}

void simCommand(const SimCmdOptions& o) {
  if (!isNpuModelPath(o.path)) throw UserError(fmt::format("tessel sim: '{}' is not a compiled NPU model (.tnpu)", o.path));
  if (!o.plot.empty()) checkPictureOutput("--plot", o.plot);
  if (!o.outputDir.empty()) makeOutputDirectory(o.outputDir);
  npu::CompiledNpuModel model = eval::readNpuArtifact(o.path, o.hw);
  auto tensors = o.inputs.resolve(*eval::inputSignature(model.inputs), true);
  npu::NpuModelRun run = npu::runNpuModel(model, tensors);
  nlohmann::json summary = npu::runSummaryJson(model, run);
  if (o.profile) summary["profile"] = npu::runProfileJson(model, run);
  if (!o.outputDir.empty()) {
    std::vector<std::string> names;
    for (const auto& out : model.outputs) names.push_back(out.name);
    writeOutputFiles(o.outputDir, names, run.outputs);
  }
  if (!o.trace.empty()) npu::writeRunTrace(model, run, o.trace);
  if (!o.plot.empty()) {
    if (run.subgraphs.empty())
      throw UserError(fmt::format("--plot: nothing of '{}' runs on the NPU (all nodes are on the CPU)", o.path));
    drawChart("npu-timeline", timelineChart(model, run, summary, o.path), o.plot);
  }
  if (o.json)
    fmt::print("{}\n", summary.dump());
  else
    printText(summary);
  if (o.profile && !o.json) printProfile(summary["profile"]);
}

}  // namespace

TESSEL_REGISTER_COMMAND(sim, 45, [](CLI::App& app) {
  auto o = std::make_shared<SimCmdOptions>();
  CLI::App* cmd = app.add_subcommand("sim", "Simulate a compiled NPU model (.tnpu) and report cycles, traffic and SRAM use");
  cmd->footer(
      "Examples:\n"
      "  tessel sim resnet18.tnpu\n"
      "  tessel sim resnet18.tnpu --json --trace trace.json   (open the trace in ui.perfetto.dev)\n"
      "  tessel sim resnet18.tnpu --plot timeline.svg         (unit activity and SRAM use over time)\n"
      "  tessel sim resnet18.tnpu --profile                   (where the cycles went, node by node)\n"
      "Exit status: 0 success, 2 bad input, 1 internal error.");
  cmd->add_option("model", o->path, "compiled NPU model (.tnpu)")->required();
  cmd->add_option("--hw", o->hw, "refuse the file unless it was compiled for this configuration (file or name)");
  o->inputs.addTo(cmd);
  cmd->add_option("--output-dir,-o", o->outputDir, "also write each output as DIR/<output name>.npy");
  cmd->add_flag("--json", o->json, "print one JSON object instead of text");
  cmd->add_flag("--profile", o->profile,
                "per node (its fused epilogue included): when it ran, each unit's busy cycles, the matrix unit's setup "
                "and weight-shift cycles and its bias gemms (with --json: a \"profile\" object)");
  cmd->add_option("--trace", o->trace, "write a Chrome/Perfetto trace (one track per unit, SRAM counters)");
  cmd->add_option("--plot", o->plot,
                  "draw each unit's busy fraction and each SRAM buffer's live bytes over time (.svg, .png or .pdf; "
                  "needs matplotlib)")
      ->type_name("FILE");
  cmd->callback([o]() { simCommand(*o); });
});

}  // namespace tessel::cli
