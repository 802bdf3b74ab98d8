// Post-run analysis of an NPU program: hazards the schedule let through (program order is the
// semantics), live SRAM bytes over time, footprints, and lower bounds (docs/npu.md, "Lower bounds").
#include "analysis.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tessel/targets/npu/access.h"
#include "tessel/targets/npu/dependencies.h"
#include "tessel/targets/npu/timing.h"

namespace tessel::npu::detail {

namespace {

struct HazardAccumulator {
  /// (kind, earlier, later, buffer, unsynchronised) -> (first word, count)
  std::map<std::tuple<HazardKind, size_t, size_t, Buffer, bool>, std::pair<uint64_t, uint64_t>> found;
  void add(HazardKind kind, size_t earlier, size_t later, Buffer b, uint64_t word, uint64_t words, bool unsynchronised = false) {
    auto [it, fresh] = found.try_emplace({kind, earlier, later, b, unsynchronised}, word, 0);
    it->second.first = std::min(it->second.first, word);
    it->second.second += words;
    (void)fresh;
  }
};

/// Per unit, the latest program index of that unit's instructions known to have finished.
using Clock = std::array<int64_t, kNumUnits>;

/// What each instruction knows has finished when it starts, from unit order and the tokens it waited for:
/// the n-th token unit v sends to unit u is the one u's n-th wait on v pops. A cross-unit dependency whose
/// producer is not known finished this way is ordered only by the timing of this run, not by the program.
std::vector<Clock> tokenClocks(const Program& program) {
  const size_t n = program.instructions.size();
  std::vector<Clock> atStart(n);
  std::array<Clock, kNumUnits> know;
  for (Clock& c : know) c.fill(-1);
  std::array<std::array<std::vector<Clock>, kNumUnits>, kNumUnits> sent;  ///< [from][to]: clocks carried
  std::array<std::array<size_t, kNumUnits>, kNumUnits> popped{};
  for (size_t j = 0; j < n; ++j) {
    const Instruction& inst = program.instructions[j];
    const auto u = static_cast<size_t>(inst.unit());
    for (size_t v = 0; v < kNumUnits; ++v) {
      if (!((inst.waitMask >> v) & 1)) continue;
      size_t& k = popped[v][u];
      if (k < sent[v][u].size())
        for (size_t f = 0; f < kNumUnits; ++f) know[u][f] = std::max(know[u][f], sent[v][u][k][f]);
      ++k;
    }
    atStart[j] = know[u];
    for (size_t v = 0; v < kNumUnits; ++v) {
      if (!((inst.signalMask >> v) & 1)) continue;
      Clock c = atStart[j];
      c[u] = static_cast<int64_t>(j);
      sent[u][v].push_back(c);
    }
  }
  return atStart;
}

/// Live-word changes attributed to one instruction of one buffer: values it wrote that are read later
/// become live at its finish; values whose last read it is die one cycle after that read (at its start
/// or finish). Counting per instruction keeps the liveness analysis O(instructions) in memory.
struct LiveDeltas {
  uint32_t up = 0, downAfterStart = 0, downAfterFinish = 0;
  uint32_t downAtFinish = 0;  ///< values this instruction read at its finish and replaced in place (accumulate)
};

/// Replays the program's SRAM accesses in program order through the shared dependency analysis
/// (dependencies.h) and checks every dependency against the simulated times: hazards, liveness, and the
/// critical-path bounds (each read's producing write is a true dependency).
class HazardChecker {
 public:
  HazardChecker(const Program& p, const hw::NpuConfig& cfg, SimReport& r) : program_(p), cfg_(cfg), report_(r) {
    const size_t n = p.instructions.size();
    for (size_t b = 0; b < kNumBuffers; ++b) live_[b].resize(n);
    finishRaw_.resize(n);
    finishOrdered_.resize(n);
    clocks_ = tokenClocks(p);
  }

  void run() {
    std::vector<WordRun> runs;
    for (size_t j = 0; j < program_.instructions.size(); ++j) visit(j, runs);
    tracker_.closeAll([&](const DependencyTracker::ClosedValue& v) { close(v); });
    report_.uninitialisedReads = tracker_.uninitialisedReads();
    for (auto& [key, where] : hazards_.found) {
      auto [kind, earlier, later, buffer, unsynchronised] = key;
      report_.hazards.push_back(Hazard{kind, earlier, later, buffer, where.first, where.second, unsynchronised});
    }
    buildUsage();
    LowerBounds& lb = report_.bounds;
    for (uint64_t f : finishRaw_) lb.criticalPathRaw = std::max(lb.criticalPathRaw, f);
    for (uint64_t f : finishOrdered_) lb.criticalPathUnitOrder = std::max(lb.criticalPathUnitOrder, f);
  }

 private:
  uint64_t timeOf(size_t j, AccessKind k) const {
    return k == AccessKind::ReadAtStart ? report_.timing[j].start : report_.timing[j].finish;
  }

  /// A value overwritten (by instruction `by`, or -1 at the end): live from its write to its last read (if read
  /// at all). A value read at the finish of the instruction that overwrites it (an accumulating gemm) is
  /// replaced in place: it dies the cycle its successor appears.
  void close(const DependencyTracker::ClosedValue& v, int64_t by = -1) {
    const uint64_t written = report_.timing[static_cast<size_t>(v.writer)].finish;
    int64_t reader = -1, lastRead = -1;
    bool atFinish = false;
    for (size_t u = 0; u < kNumUnits; ++u) {
      if (v.readers[u] < 0) continue;
      const bool f = (v.readAtFinish >> u) & 1;
      const auto t = static_cast<int64_t>(timeOf(static_cast<size_t>(v.readers[u]), f ? AccessKind::ReadAtFinish : AccessKind::ReadAtStart));
      if (t > lastRead) lastRead = t, reader = v.readers[u], atFinish = f;
    }
    if (reader < 0 || lastRead < static_cast<int64_t>(written)) return;
    const auto words = static_cast<uint32_t>(v.words);
    live_[v.space][static_cast<size_t>(v.writer)].up += words;
    LiveDeltas& d = live_[v.space][static_cast<size_t>(reader)];
    if (atFinish && reader == by)
      d.downAtFinish += words;
    else
      (atFinish ? d.downAfterFinish : d.downAfterStart) += words;
  }

  void visit(size_t j, std::vector<WordRun>& runs) {
    const Instruction& inst = program_.instructions[j];
    runs.clear();
    instructionRuns(inst, runs, false);
    // Critical paths: a read at start needs the producer's finish before the start; a read at finish
    // (accumulating gemm: the adder at the array's output) only needs it before this finish.
    uint64_t depStartRaw = 0, depFinishRaw = 0, depStartOrd = 0, depFinishOrd = 0;
    const auto& timing = report_.timing;
    auto onDep = [&](const Dependency& d) {
      const auto b = static_cast<Buffer>(d.space);
      const size_t p = d.producer;
      // Independently of this run's timing: a cross-unit dependency must be ordered by the tokens.
      const auto pu = static_cast<size_t>(program_.instructions[p].unit());
      if (pu != static_cast<size_t>(inst.unit()) && clocks_[j][pu] < static_cast<int64_t>(p))
        hazards_.add(static_cast<HazardKind>(d.kind), p, j, b, d.firstWord, d.words, true);
      switch (d.kind) {
        case DepKind::ReadAfterWrite: {
          const bool atStart = d.consumerAccess == AccessKind::ReadAtStart;
          (atStart ? depStartRaw : depFinishRaw) = std::max(atStart ? depStartRaw : depFinishRaw, finishRaw_[p]);
          (atStart ? depStartOrd : depFinishOrd) = std::max(atStart ? depStartOrd : depFinishOrd, finishOrdered_[p]);
          if (timeOf(j, d.consumerAccess) < timing[p].finish)
            hazards_.add(HazardKind::ReadAfterWrite, p, j, b, d.firstWord, d.words);
          break;
        }
        case DepKind::WriteAfterRead:
          if (timing[j].finish <= timeOf(p, d.producerAccess)) hazards_.add(HazardKind::WriteAfterRead, p, j, b, d.firstWord, d.words);
          break;
        case DepKind::WriteAfterWrite:
          if (timing[j].finish <= timing[p].finish) hazards_.add(HazardKind::WriteAfterWrite, p, j, b, d.firstWord, d.words);
          break;
      }
    };
    tracker_.visit(static_cast<uint32_t>(j), inst.unit(), runs, onDep,
                   [&](const DependencyTracker::ClosedValue& v) { close(v, static_cast<int64_t>(j)); });
    // The simulator's own rules, minus tokens: in-order issue (occupancy) and in-order completion per unit.
    const InstructionCost cost = instructionCost(inst, cfg_);
    finishRaw_[j] = std::max(depStartRaw + cost.latency, depFinishRaw);
    auto u = static_cast<size_t>(inst.unit());
    const uint64_t startOrd = std::max(depStartOrd, unitFreeOrdered_[u]);
    finishOrdered_[j] = std::max({startOrd + cost.latency, depFinishOrd, unitFinishOrdered_[u]});
    unitFreeOrdered_[u] = startOrd + cost.occupancy;
    unitFinishOrdered_[u] = finishOrdered_[j];
  }

  void buildUsage() {
    const size_t n = program_.instructions.size();
    for (size_t b = 0; b < kNumBuffers; ++b) {
      std::vector<std::pair<uint64_t, int64_t>> ev;  ///< (cycle, live words added)
      for (size_t j = 0; j < n; ++j) {
        const LiveDeltas& d = live_[b][j];
        const InstructionTiming& tm = report_.timing[j];
        if (d.up) ev.emplace_back(tm.finish, d.up);
        if (d.downAfterStart) ev.emplace_back(tm.start + 1, -int64_t{d.downAfterStart});
        if (d.downAfterFinish) ev.emplace_back(tm.finish + 1, -int64_t{d.downAfterFinish});
        if (d.downAtFinish) ev.emplace_back(tm.finish, -int64_t{d.downAtFinish});
      }
      std::vector<LiveDeltas>().swap(live_[b]);
      std::sort(ev.begin(), ev.end());
      int64_t live = 0;
      uint64_t peak = 0;
      auto& usage = report_.sramUsage[b];
      for (size_t k = 0; k < ev.size(); ++k) {
        live += ev[k].second;
        if (k + 1 < ev.size() && ev[k + 1].first == ev[k].first) continue;
        const auto bytes = static_cast<uint64_t>(live) * 4;
        if (usage.empty() || usage.back().second != bytes) usage.emplace_back(ev[k].first, bytes);
        peak = std::max(peak, bytes);
      }
      report_.peakSramBytes[b] = peak;
    }
  }

  const Program& program_;
  const hw::NpuConfig& cfg_;
  SimReport& report_;
  DependencyTracker tracker_;
  std::array<std::vector<LiveDeltas>, kNumBuffers> live_;  ///< per buffer, per instruction
  std::vector<uint64_t> finishRaw_, finishOrdered_;          ///< earliest finish under the two bounds
  std::array<uint64_t, kNumUnits> unitFreeOrdered_{}, unitFinishOrdered_{};
  HazardAccumulator hazards_;
  std::vector<Clock> clocks_;  ///< per instruction: what the tokens and unit order tell it has finished
};

uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace

void analyseAccesses(const Program& program, const hw::NpuConfig& cfg, bool perWord, SimReport& report) {
  LowerBounds& lb = report.bounds;
  for (const Instruction& in : program.instructions) {
    lb.unitOccupancy[static_cast<size_t>(in.unit())] += instructionCost(in, cfg).occupancy;
    for (const OperandAccess& a : sramAccesses(in)) {
      auto b = static_cast<size_t>(a.operand.buffer);
      report.footprintBytes[b] = std::max(report.footprintBytes[b], (a.lastWord() + 1) * 4);
    }
  }
  lb.dramCycles = std::max(ceilDiv(report.dramBytesRead, cfg.loadBytesPerCycle),
                           ceilDiv(report.dramBytesWritten, cfg.storeBytesPerCycle));
  lb.computeCycles = ceilDiv(report.macs, uint64_t{cfg.dim} * cfg.dim);
  if (!perWord) return;
  HazardChecker checker(program, cfg, report);
  checker.run();
}

}  // namespace tessel::npu::detail
