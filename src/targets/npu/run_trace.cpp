// The Chrome/Perfetto trace of a whole run of a compiled NPU model (each NPU call's trace, one after another), and its
// per-node profile.
#include "tessel/targets/npu/run_trace.h"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <sstream>

namespace tessel::npu {
namespace {

/// One Chrome trace for the whole run: each subgraph's trace shifted to start after the previous one.
nlohmann::json mergedTrace(const CompiledNpuModel& model, const NpuModelRun& run) {
  nlohmann::json events = nlohmann::json::array();
  double offsetUs = 0;
  for (const auto& s : run.subgraphs) {
    std::ostringstream one;
    writeChromeTrace(loweredSubgraph(model, s.name).program, s.report, one);
    nlohmann::json doc = nlohmann::json::parse(one.str());
    for (auto& e : doc["traceEvents"]) {
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + offsetUs;
      if (e.contains("args") && e["args"].is_object() && e.value("ph", "") == "X") e["args"]["subgraph"] = s.name;
      if (e.value("ph", "") == "M" && offsetUs > 0) continue;  // track names once
      events.push_back(e);
    }
    offsetUs += static_cast<double>(s.report.totalCycles) / s.report.clockMhz;
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
}

}  // namespace

nlohmann::json runProfileJson(const CompiledNpuModel& model, const NpuModelRun& run) {
  struct NodeStats {
    std::string node, op, subgraph;
    uint64_t instructions = 0, start = UINT64_MAX, finish = 0, gemms = 0, gemmRows = 0, gemmOverhead = 0, biasGemmCycles = 0;
    std::array<uint64_t, kNumUnits> busy{}, idle{};
  };
  std::vector<NodeStats> stats;
  std::map<std::pair<std::string, uint32_t>, size_t> index;  // (subgraph, op index) -> stats entry
  uint64_t offset = 0;
  for (const auto& s : run.subgraphs) {
    const LoweredSubgraph& lowered = loweredSubgraph(model, s.name);
    const auto& program = lowered.program.instructions;
    std::array<uint64_t, kNumUnits> unitFree{};  // when each unit finished its previous instruction (in-order queues)
    for (size_t i = 0; i < program.size() && i < s.report.timing.size(); ++i) {
      const uint32_t op = i < lowered.instructionOp.size() ? lowered.instructionOp[i] : UINT32_MAX;
      auto [it, fresh] = index.try_emplace({s.name, op}, stats.size());
      if (fresh) {
        NodeStats n;
        n.subgraph = s.name;
        if (op < lowered.ops.size()) n.node = lowered.ops[op].node, n.op = lowered.ops[op].opType;
        stats.push_back(n);
      }
      NodeStats& n = stats[it->second];
      const Instruction& in = program[i];
      const InstructionTiming& t = s.report.timing[i];
      const uint64_t occupancy = t.end - t.start;
      ++n.instructions;
      n.start = std::min(n.start, offset + t.start);
      n.finish = std::max(n.finish, offset + t.finish);
      const auto u = static_cast<size_t>(in.unit());
      n.busy[u] += occupancy;
      if (t.start > unitFree[u]) n.idle[u] += t.start - unitFree[u];  // the unit waited for this instruction
      unitFree[u] = std::max(unitFree[u], t.end);
      if (in.opcode == Opcode::Gemm) {
        const uint64_t rows = uint64_t{in.outer} * in.inner;
        ++n.gemms;
        n.gemmRows += rows;
        n.gemmOverhead += occupancy > rows ? occupancy - rows : 0;
        if (in.gemmK == 1) n.biasGemmCycles += occupancy;
      }
    }
    offset += s.report.totalCycles;
  }
  std::stable_sort(stats.begin(), stats.end(), [](const NodeStats& a, const NodeStats& b) { return a.start < b.start; });
  auto entry = [](const NodeStats& n) {
    nlohmann::json busy = nlohmann::json::object(), idle = nlohmann::json::object();
    for (size_t u = 0; u < kNumUnits; ++u) {
      busy[std::string(unitName(static_cast<Unit>(u)))] = n.busy[u];
      idle[std::string(unitName(static_cast<Unit>(u)))] = n.idle[u];
    }
    return nlohmann::json{{"busy", busy}, {"idle_before", idle}, {"gemms", n.gemms}, {"gemm_rows", n.gemmRows}, {"gemm_overhead", n.gemmOverhead},
                          {"bias_gemm_cycles", n.biasGemmCycles}, {"instructions", n.instructions}};
  };
  nlohmann::json nodes = nlohmann::json::array();
  NodeStats total;
  for (const NodeStats& n : stats) {
    nlohmann::json j = entry(n);
    j["node"] = n.node, j["op"] = n.op, j["subgraph"] = n.subgraph, j["start"] = n.start, j["finish"] = n.finish;
    nodes.push_back(std::move(j));
    total.instructions += n.instructions, total.gemms += n.gemms, total.gemmRows += n.gemmRows;
    total.gemmOverhead += n.gemmOverhead, total.biasGemmCycles += n.biasGemmCycles;
    for (size_t u = 0; u < kNumUnits; ++u) total.busy[u] += n.busy[u], total.idle[u] += n.idle[u];
  }
  return {{"nodes", nodes}, {"totals", entry(total)}};
}

void writeRunTrace(const CompiledNpuModel& model, const NpuModelRun& run, const std::string& path) {
  const nlohmann::json trace = mergedTrace(model, run);
  std::ofstream f(path);
  if (!f) throw UserError(fmt::format("cannot write trace '{}'", path));
  f << trace.dump() << "\n";
  if (!f) throw UserError(fmt::format("cannot write trace '{}'", path));
}

}  // namespace tessel::npu
