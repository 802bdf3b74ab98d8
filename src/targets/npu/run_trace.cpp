// The Chrome/Perfetto trace of a whole run of a compiled NPU model: each NPU call's trace, one after another.
#include "tessel/targets/npu/run_trace.h"

#include <fmt/format.h>
#include <fstream>
#include <sstream>

namespace tessel::npu {
namespace {

/// One Chrome trace for the whole run: each subgraph's trace shifted to start after the previous one.
nlohmann::json mergedTrace(const CompiledNpuModel& model, const NpuModelRun& run) {
  nlohmann::json events = nlohmann::json::array();
  double offsetUs = 0;
  for (const auto& s : run.subgraphs) {
    const LoweredSubgraph* lowered = nullptr;
    for (const auto& l : model.subgraphs)
      if (l.name == s.name) lowered = &l;
    std::ostringstream one;
    writeChromeTrace(lowered->program, s.report, one);
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

void writeRunTrace(const CompiledNpuModel& model, const NpuModelRun& run, const std::string& path) {
  const nlohmann::json trace = mergedTrace(model, run);
  std::ofstream f(path);
  if (!f) throw UserError(fmt::format("cannot write trace '{}'", path));
  f << trace.dump() << "\n";
  if (!f) throw UserError(fmt::format("cannot write trace '{}'", path));
}

}  // namespace tessel::npu
