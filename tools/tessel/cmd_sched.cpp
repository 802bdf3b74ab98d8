// `tessel sched`: the NPU schedule of a model (groups, tiles, window) with per-group simulated figures; with
// --compare the compiler's schedule beside the sequential, greedy and layer-by-layer baselines and the
// schedule-independent bounds; --dump-deps writes an instruction dependency graph (S0, S2).
#include <chrono>
#include <unistd.h>
#include <fmt/format.h>
#include <fstream>

#include "command.h"
#include "common.h"
#include "tessel/eval/runner.h"
#include "tessel/hw/hardware_config.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/npu/schedule_report.h"

namespace tessel::cli {
namespace {

struct SchedCmdOptions {
  ModelOptions model;
  InputOptions inputs;
  std::string hw, depsFile, subgraph;
  size_t depsFirst = 0, depsCount = 400;
  bool json = false, compare = false;
};

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f || !(f << text)) throw UserError(fmt::format("cannot write '{}'", path));
}

void printGroups(const nlohmann::json& subgraphs) {
  for (const auto& s : subgraphs) {
    fmt::print("subgraph {}:\n", s["subgraph"].get<std::string>());
    fmt::print("  {:>5} {:>10} {:>12} {:>12} {:>7} {:>10} {:>10} {:>10} {:>10}  nodes\n", "group", "start", "span", "MAC-ideal",
               "mm %", "LD busy", "MM busy", "VEC busy", "ST busy");
    for (const auto& g : s["groups"]) {
      std::string nodes;
      for (const auto& n : g["nodes"]) {
        if (!nodes.empty()) nodes += ", ";
        nodes += n.get<std::string>();
      }
      if (nodes.size() > 60) nodes = nodes.substr(0, 57) + "...";
      fmt::print("  {:>5} {:>10} {:>12} {:>12} {:>7.1f} {:>10} {:>10} {:>10} {:>10}  {}\n", g["group"].get<size_t>(),
                 g["start"].get<uint64_t>(), g["span_cycles"].get<uint64_t>(), g["mac_ideal_cycles"].get<uint64_t>(),
                 100 * g["mm_utilization"].get<double>(), g["busy"]["LD"].get<uint64_t>(), g["busy"]["MM"].get<uint64_t>(),
                 g["busy"]["VEC"].get<uint64_t>(), g["busy"]["ST"].get<uint64_t>(), nodes);
    }
  }
}

void schedCommand(const SchedCmdOptions& o) {
  const hw::HardwareConfig config = hw::HardwareConfig::load(eval::findHardwareConfig(o.hw));
  if (!config.firstNpu()) throw UserError(fmt::format("configuration '{}' has no npu device", config.name()));
  auto model = o.model.load(InferenceMode::Strict);
  const auto inputs = o.inputs.resolve(*model->graph, true);
  if (o.compare) {
    npu::CompareOptions co;
    co.inputs = inputs;
    const auto start = std::chrono::steady_clock::now();
    // With --json the progress lines go to stderr only on a terminal (scripts read stdout and keep stderr clean);
    // ViT-B/16's four schedules take minutes.
    if (!o.json || isatty(STDERR_FILENO))
      co.progress = [&](const std::string& what) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        fmt::print(stderr, "[{:6.1f} s] compiling and simulating: {}\n", s, what);
      };
    const nlohmann::json c = npu::compareSchedules(*model, config, co);
    if (o.json) {
      fmt::print("{}\n", c.dump());
    } else {
      fmt::print("{}", npu::compareText(c));
      printGroups(c["groups"]);
    }
    return;
  }
  std::map<std::string, std::unique_ptr<Graph>> bodies;
  npu::ScheduleChooser chooser = [&](const Graph& body, const hw::Device& device, const std::string& name) {
    if (!o.depsFile.empty()) bodies[name] = body.clone();
    return npu::compilerSchedule(body, device.npu, name);
  };
  const npu::CompiledNpuModel compiled = npu::compileForNpu(*model, config, chooser);
  if (!o.depsFile.empty()) {
    std::string name = o.subgraph.empty() && !compiled.subgraphs.empty() ? compiled.subgraphs.front().name : o.subgraph;
    auto it = bodies.find(name);
    if (it == bodies.end()) throw UserError(fmt::format("--subgraph {}: the compiled model has no such NPU subgraph", name));
    for (const auto& s : compiled.subgraphs)
      if (s.name == name)
        writeFile(o.depsFile, npu::dependencyGraphDot(*it->second, config.device(s.device), s.schedule, o.depsFirst, o.depsCount));
  }
  const npu::NpuModelRun run = npu::runNpuModel(compiled, inputs);
  const nlohmann::json summary = npu::runSummaryJson(compiled, run);
  nlohmann::json subgraphs = nlohmann::json::array();
  for (const auto& r : run.subgraphs)
    for (const auto& l : compiled.subgraphs)
      if (l.name == r.name)
        subgraphs.push_back({{"subgraph", l.name}, {"schedule", l.schedule.toJson()}, {"groups", npu::groupTable(l, r.report)}});
  const nlohmann::json hosts = npu::hostNodesJson(compiled);  // every node left on the host, with its reason
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"cycles", summary["cycles"]},
                                      {"lower_bound_cycles", summary["lower_bound_cycles"]},
                                      {"dram_bytes", summary["dram_bytes"]},
                                      {"peak_sram_bytes", summary["peak_sram_bytes"]},
                                      {"hazards", summary["hazards"]},
                                      {"host_nodes", hosts},
                                      {"subgraphs", subgraphs}}
                           .dump());
    return;
  }
  for (const auto& l : compiled.subgraphs) fmt::print("{}", l.schedule.toText());
  printGroups(subgraphs);
  fmt::print("total: {} cycles (lower bound {}), DRAM {} bytes, hazards {}\n", summary["cycles"].get<uint64_t>(),
             summary["lower_bound_cycles"].get<uint64_t>(), summary["dram_bytes"]["total"].get<uint64_t>(),
             summary["hazards"].get<uint64_t>());
  fmt::print("host nodes: {}\n", hosts.empty() ? "none" : std::to_string(hosts.size()) + " (not counted in the cycles)");
  for (const auto& h : hosts)
    fmt::print("  {} ({}): {}\n", h["node"].get<std::string>(), h["op"].get<std::string>(), h["reason"].get<std::string>());
}

}  // namespace

TESSEL_REGISTER_COMMAND(sched, 44, [](CLI::App& app) {
  auto o = std::make_shared<SchedCmdOptions>();
  CLI::App* cmd = app.add_subcommand("sched", "Show and compare the NPU schedule of a model (groups, tiles, window, baselines)");
  cmd->footer(
      "Examples:\n"
      "  tessel sched resnet18.onnx --hw configs/default.json            (schedule + per-group cycles)\n"
      "  tessel sched resnet18.onnx --hw configs/tiny.json --compare     (vs sequential, greedy, layer by layer)\n"
      "  tessel sched resnet18.onnx --hw configs/default.json --dump-deps deps.dot --deps-count 200\n"
      "Exit status: 0 success, 2 bad input, 1 internal error.");
  o->model.addTo(cmd);
  cmd->add_option("--hw", o->hw, "hardware configuration with an npu device: a file or a name (default, tiny, ...)")->required();
  o->inputs.addTo(cmd);
  cmd->add_flag("--compare", o->compare, "compile and simulate the baselines too and report them side by side");
  cmd->add_flag("--json", o->json, "print one JSON object instead of text");
  cmd->add_option("--dump-deps", o->depsFile, "write the instruction dependency graph (Graphviz) of one subgraph");
  cmd->add_option("--subgraph", o->subgraph, "the subgraph --dump-deps shows (default: the first)");
  cmd->add_option("--deps-first", o->depsFirst, "first instruction --dump-deps shows (lowering order)");
  cmd->add_option("--deps-count", o->depsCount, "how many instructions --dump-deps shows")->check(CLI::Range(1, 100000));
  cmd->callback([o]() { schedCommand(*o); });
});

}  // namespace tessel::cli
