// Presenting a simulation: text summary, JSON object, Chrome/Perfetto trace.
#include <algorithm>
#include <ostream>

#include <fmt/format.h>

#include "tessel/targets/npu/simulator.h"

namespace tessel::npu {

namespace {

std::string_view hazardName(HazardKind k) {
  switch (k) {
    case HazardKind::ReadAfterWrite: return "RAW";
    case HazardKind::WriteAfterRead: return "WAR";
    case HazardKind::WriteAfterWrite: return "WAW";
  }
  return "?";
}

}  // namespace

std::string Hazard::describe() const {
  const char* what = kind == HazardKind::ReadAfterWrite   ? "read before the earlier write landed"
                     : kind == HazardKind::WriteAfterRead ? "overwrote before the earlier read"
                                                          : "write landed before the earlier write";
  if (unsynchronised)
    return fmt::format("{} hazard on {} words [{}..] ({} words): no token makes instruction #{} wait for #{}",
                       hazardName(kind), bufferName(buffer), firstWord, words, later, earlier);
  return fmt::format("{} hazard on {} words [{}..] ({} words): instruction #{} {} of #{}", hazardName(kind),
                     bufferName(buffer), firstWord, words, later, what, earlier);
}

uint64_t LowerBounds::bound() const {
  uint64_t b = std::max({criticalPathRaw, criticalPathUnitOrder, dramCycles, computeCycles});
  for (uint64_t occ : unitOccupancy) b = std::max(b, occ);
  return b;
}

std::string SimReport::summary() const {
  std::string s = fmt::format("cycles: {} ({:.3f} us at {} MHz)\n", totalCycles, totalCycles / clockMhz, clockMhz);
  uint64_t lb = bounds.bound();
  if (lb > 0) s += fmt::format("lower bound: {} cycles (achieved / bound = {:.2f})\n", lb, double(totalCycles) / lb);
  s += fmt::format("matrix unit: {} MACs, utilisation {:.1f}% of {}x{}\n", macs, 100 * mmUtilization, dim, dim);
  s += fmt::format("DRAM: {} bytes read, {} bytes written\n", dramBytesRead, dramBytesWritten);
  for (size_t u = 0; u < kNumUnits; ++u) {
    s += fmt::format("unit {:<3}: {:>6} instructions, busy {:>10} cycles, stalled {:>10} cycles\n",
                     unitName(static_cast<Unit>(u)), units[u].instructions, units[u].busyCycles, units[u].stallCycles);
  }
  for (size_t b = 0; b < kNumBuffers; ++b) {
    s += fmt::format("sram {}: peak live {} bytes, footprint {} bytes, capacity {} bytes\n", bufferName(static_cast<Buffer>(b)),
                     peakSramBytes[b], footprintBytes[b], capacityBytes[b]);
  }
  if (uninitialisedReads) s += fmt::format("warning: {} reads of never-written SRAM words\n", uninitialisedReads);
  s += fmt::format("hazards: {}\n", hazards.size());
  for (const Hazard& h : hazards) s += "  " + h.describe() + "\n";
  return s;
}

nlohmann::json SimReport::toJson() const {
  nlohmann::json j;
  j["cycles"] = totalCycles;
  j["clock_mhz"] = clockMhz;
  j["macs"] = macs;
  j["mm_utilization"] = mmUtilization;
  j["dram_bytes"] = {{"read", dramBytesRead}, {"written", dramBytesWritten}, {"total", dramBytesRead + dramBytesWritten}};
  for (size_t b = 0; b < kNumBuffers; ++b) {
    std::string name(bufferName(static_cast<Buffer>(b)));
    j["peak_sram_bytes"][name] = peakSramBytes[b];
    j["sram_footprint_bytes"][name] = footprintBytes[b];
    j["sram_capacity_bytes"][name] = capacityBytes[b];
  }
  for (size_t u = 0; u < kNumUnits; ++u) {
    j["units"][std::string(unitName(static_cast<Unit>(u)))] = {
        {"instructions", units[u].instructions}, {"busy_cycles", units[u].busyCycles}, {"stall_cycles", units[u].stallCycles}};
  }
  j["lower_bounds"] = {{"critical_path_raw", bounds.criticalPathRaw},
                       {"critical_path_unit_order", bounds.criticalPathUnitOrder},
                       {"dram", bounds.dramCycles},
                       {"compute", bounds.computeCycles},
                       {"unit_occupancy", bounds.unitOccupancy},
                       {"bound", bounds.bound()}};
  j["uninitialised_reads"] = uninitialisedReads;
  j["hazards"] = nlohmann::json::array();
  for (const Hazard& h : hazards) j["hazards"].push_back(h.describe());
  return j;
}

void writeChromeTrace(const Program& program, const SimReport& report, std::ostream& out) {
  const double usPerCycle = 1.0 / (report.clockMhz > 0 ? report.clockMhz : 1.0);
  nlohmann::json events = nlohmann::json::array();
  for (size_t u = 0; u < kNumUnits; ++u) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", u},
                      {"args", {{"name", std::string(unitName(static_cast<Unit>(u)))}}}});
  }
  for (size_t i = 0; i < program.instructions.size() && i < report.timing.size(); ++i) {
    const Instruction& in = program.instructions[i];
    const InstructionTiming& t = report.timing[i];
    events.push_back({{"ph", "X"}, {"pid", 1}, {"tid", static_cast<int>(in.unit())},
                      {"name", fmt::format("#{} {}", i, opcodeName(in.opcode))},
                      {"ts", t.start * usPerCycle}, {"dur", (t.end - t.start) * usPerCycle},
                      {"args", {{"start_cycle", t.start}, {"finish_cycle", t.finish}, {"asm", disassemble(in)}}}});
  }
  for (size_t b = 0; b < kNumBuffers; ++b) {
    std::string name = fmt::format("sram {} bytes", bufferName(static_cast<Buffer>(b)));
    for (const auto& [cycle, bytes] : report.sramUsage[b]) {
      events.push_back({{"ph", "C"}, {"pid", 1}, {"name", name}, {"ts", cycle * usPerCycle}, {"args", {{"live", bytes}}}});
    }
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ns"},
                        {"otherData", {{"cycles", report.totalCycles}, {"clock_mhz", report.clockMhz}}}};
  out << doc.dump() << "\n";
}

}  // namespace tessel::npu
