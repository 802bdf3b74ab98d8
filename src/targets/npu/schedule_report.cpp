// `tessel sched` reports: per-group figures of a simulated subgraph and the compiler's schedule compared with
// the sequential, greedy and layer-by-layer baselines, each compiled and simulated on the same inputs.
#include "tessel/targets/npu/schedule_report.h"

#include <algorithm>
#include <fmt/format.h>

#include "tessel/support/error.h"
#include "tessel/targets/npu/timing.h"

namespace tessel::npu {

using json = nlohmann::json;

json groupTable(const LoweredSubgraph& lowered, const SimReport& report) {
  const NpuSchedule& s = lowered.schedule;
  std::map<std::string, size_t> groupOfNode;
  for (size_t g = 0; g < s.groups.size(); ++g)
    for (const std::string& n : s.groups[g].nodes) groupOfNode[n] = g;
  struct Row {
    uint64_t first = ~uint64_t{0}, last = 0, macs = 0, dram = 0, instructions = 0;
    std::array<uint64_t, kNumUnits> busy{};
  };
  std::vector<Row> rows(s.groups.size());
  const hw::NpuConfig* cfg = nullptr;
  (void)cfg;
  for (size_t i = 0; i < lowered.program.instructions.size() && i < report.timing.size(); ++i) {
    const Instruction& inst = lowered.program.instructions[i];
    const size_t g = groupOfNode.at(lowered.ops[lowered.instructionOp[i]].node);
    Row& r = rows[g];
    const InstructionTiming& t = report.timing[i];
    r.first = std::min(r.first, t.start);
    r.last = std::max(r.last, t.finish);
    r.busy[static_cast<size_t>(inst.unit())] += t.end - t.start;
    r.macs += instructionMacs(inst);
    r.dram += instructionDramBytes(inst);
    r.instructions++;
  }
  json table = json::array();
  for (size_t g = 0; g < rows.size(); ++g) {
    const Row& r = rows[g];
    const uint64_t span = r.instructions ? r.last - r.first : 0;
    json busy = json::object();
    for (size_t u = 0; u < kNumUnits; ++u) busy[std::string(unitName(static_cast<Unit>(u)))] = r.busy[u];
    const double dim2 = static_cast<double>(report.dim) * report.dim;
    table.push_back({{"group", g},
                     {"nodes", s.groups[g].nodes},
                     {"row_tiles", s.groups[g].rowTiles},
                     {"instructions", r.instructions},
                     {"start", r.instructions ? r.first : 0},
                     {"span_cycles", span},
                     {"busy", busy},
                     {"macs", r.macs},
                     {"mac_ideal_cycles", static_cast<uint64_t>(std::ceil(static_cast<double>(r.macs) / dim2))},
                     {"mm_utilization", span ? static_cast<double>(r.macs) / (static_cast<double>(span) * dim2) : 0.0},
                     {"dram_bytes", r.dram}});
  }
  return table;
}

json hostNodesJson(const CompiledNpuModel& compiled) {
  json hosts = json::array();
  for (const partition::Placement& p : hostPlacements(compiled))
    hosts.push_back({{"node", p.node}, {"op", p.opType}, {"reason", p.reason}});
  return hosts;
}

hw::HardwareConfig unboundedBuffers(const hw::HardwareConfig& config) {
  json doc = json::parse(config.canonicalJson());
  for (json& d : doc["devices"])
    if (d.value("kind", "") == "npu")
      for (const char* key : {"input_bytes", "weight_bytes", "accumulator_bytes", "output_bytes"})
        d["buffers"][key] = (uint64_t{1} << kSramAddrBits) * 4;
  doc["name"] = config.name() + "-unbounded";
  return hw::HardwareConfig::fromJson(doc, config.name() + " with unbounded buffers");
}

namespace {

struct Variant {
  std::string name;
  std::string strategy;
  bool unbounded = false;  ///< lower and simulate on buffers as large as the encoding allows
  bool fusion = true;
};

/// Compiles and simulates one variant; returns the run summary (runSummaryJson) and, for the compiler's
/// schedule, the per-group table of every subgraph.
json runVariant(const Model& model, const hw::HardwareConfig& config, const Variant& v, const CompareOptions& o,
                json* groups) {
  const hw::HardwareConfig target = v.unbounded ? unboundedBuffers(config) : config;
  ScheduleChooser chooser = [&](const Graph& body, const hw::Device& device, const std::string& name) {
    // Tiles are chosen for the real buffers in every variant, so only the scheduling differs.
    NpuSchedule s = compilerSchedule(body, config.device(device.name).npu, name, v.fusion);
    s.strategy = v.strategy;
    return s;
  };
  CompiledNpuModel compiled = compileForNpu(model, target, chooser);
  SimOptions sim;
  sim.checkHazards = true;  // hazards, and the live bytes over time (peak SRAM)
  NpuModelRun run = runNpuModel(compiled, o.inputs, sim);
  if (groups) {
    *groups = json::array();
    for (const SubgraphRun& r : run.subgraphs)
      for (const LoweredSubgraph& l : compiled.subgraphs)
        if (l.name == r.name) groups->push_back({{"subgraph", l.name}, {"groups", groupTable(l, r.report)}});
  }
  json summary = runSummaryJson(compiled, run);
  summary["host_nodes"] = hostNodesJson(compiled);
  json windows = json::array();  // per subgraph: the window used (greedy: 0 uncapped, else the cap that fit)
  for (const LoweredSubgraph& l : compiled.subgraphs) windows.push_back(l.schedule.window);
  summary["windows"] = windows;
  return summary;
}

json entryOf(const json& s) {
  return {{"cycles", s["cycles"]}, {"dram_bytes", s["dram_bytes"]["total"]}, {"peak_sram_bytes", s["peak_sram_bytes"]},
          {"hazards", s["hazards"]}, {"windows", s["windows"]}};
}

uint64_t totalBytes(const json& perBuffer) {
  uint64_t t = 0;
  for (const auto& [k, v] : perBuffer.items()) t += v.get<uint64_t>();
  return t;
}

}  // namespace

json compareSchedules(const Model& model, const hw::HardwareConfig& config, const CompareOptions& o) {
  const hw::Device* npu = config.firstNpu();
  if (!npu) throw UserError(fmt::format("configuration '{}' has no npu device", config.name()));
  auto step = [&](const std::string& what) {
    if (o.progress) o.progress(what);
  };
  json out;
  json groups;
  step("window (the compiler's schedule)");
  const json window = runVariant(model, config, {"window", "window"}, o, &groups);
  step("layer_by_layer");
  const json layers = runVariant(model, config, {"layer_by_layer", "window", false, false}, o, nullptr);
  step("sequential");
  const json sequential = runVariant(model, config, {"sequential", "sequential"}, o, nullptr);
  step("greedy on unbounded buffers");
  const json greedy = runVariant(model, config, {"greedy", "greedy", true}, o, nullptr);
  step("greedy forced to fit");
  const json forced = runVariant(model, config, {"greedy", "greedy"}, o, nullptr);
  uint64_t macs = 0;
  for (const json& s : window["subgraphs"]) macs += s["work"]["macs"].get<uint64_t>();
  const uint64_t dim2 = uint64_t{npu->npu.dim} * npu->npu.dim;
  out["configuration"] = config.name();
  out["mac_ideal_cycles"] = (macs + dim2 - 1) / dim2;
  out["lower_bound_cycles"] = window["lower_bound_cycles"];
  out["compulsory_dram_bytes"] = window["dram_bytes"]["compulsory"];
  out["host_nodes"] = window["host_nodes"];
  out["npu_calls"] = window["npu_calls"];
  json g = entryOf(greedy);
  // What greedy needs: the highest word its schedule addresses on buffers as large as the encoding allows.
  g["sram_needed_bytes"] = greedy["sram_footprint_bytes"];
  g["sram_needed_total_bytes"] = totalBytes(greedy["sram_footprint_bytes"]);
  json over = json::array();
  for (const auto& [buffer, bytes] : greedy["sram_footprint_bytes"].items())
    if (bytes.get<uint64_t>() > window["sram_capacity_bytes"][buffer].get<uint64_t>()) over.push_back(buffer);
  g["buffers_over_capacity"] = over;
  g["cycles_forced_to_fit"] = forced["cycles"];
  // Per subgraph, 0 when greedy fits the real buffers as it is; else the most tiles in flight (a power of two)
  // at which it does: with more, the oldest tile cannot get space.
  g["forced_to_fit_tile_caps"] = forced["windows"];
  g["forced_to_fit"] = entryOf(forced);
  out["schedules"] = {{"sequential", entryOf(sequential)},
                      {"greedy", g},
                      {"layer_by_layer", entryOf(layers)},
                      {"window", entryOf(window)}};
  out["sram_capacity_bytes"] = window["sram_capacity_bytes"];
  out["groups"] = groups;
  return out;
}

std::string compareText(const json& c) {
  const double lb = std::max(1.0, c["lower_bound_cycles"].get<double>()), ideal = std::max(1.0, c["mac_ideal_cycles"].get<double>());
  std::string s = fmt::format("configuration {}: MAC-ideal {} cycles, lower bound {} cycles, compulsory DRAM {} bytes, {} NPU call(s)\n",
                              c["configuration"].get<std::string>(), c["mac_ideal_cycles"].get<uint64_t>(),
                              c["lower_bound_cycles"].get<uint64_t>(), c["compulsory_dram_bytes"].get<uint64_t>(),
                              c["npu_calls"].get<uint64_t>());
  s += fmt::format("{:<16} {:>12} {:>8} {:>8} {:>14} {:>12}\n", "schedule", "cycles", "x ideal", "x bound", "DRAM bytes", "peak SRAM");
  for (const char* name : {"sequential", "greedy", "layer_by_layer", "window"}) {
    const json& e = c["schedules"][name];
    s += fmt::format("{:<16} {:>12} {:>8.2f} {:>8.2f} {:>14} {:>12}\n", name, e["cycles"].get<uint64_t>(),
                     e["cycles"].get<double>() / ideal, e["cycles"].get<double>() / lb, e["dram_bytes"].get<uint64_t>(),
                     totalBytes(e["peak_sram_bytes"]));
  }
  const json& g = c["schedules"]["greedy"];
  s += fmt::format("greedy needs {} bytes of SRAM (capacity {}); forced to fit it takes {} cycles\n",
                   g["sram_needed_total_bytes"].get<uint64_t>(), totalBytes(c["sram_capacity_bytes"]),
                   g["cycles_forced_to_fit"].get<uint64_t>());
  if (c["host_nodes"].empty())
    s += "host nodes: none\n";
  else
    for (const json& h : c["host_nodes"])
      s += fmt::format("host node {} ({}): {}\n", h["node"].get<std::string>(), h["op"].get<std::string>(),
                       h["reason"].get<std::string>());
  return s;
}

}  // namespace tessel::npu
