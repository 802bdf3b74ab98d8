// Post-run analysis of an NPU program: hazards the schedule let through (program order is the
// semantics), live SRAM bytes over time, footprints, and lower bounds (docs/npu.md, "Lower bounds").
#include "analysis.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tessel/targets/npu/access.h"
#include "tessel/targets/npu/timing.h"

namespace tessel::npu::detail {

namespace {

/// What the checker remembers about one SRAM word.
struct WordState {
  int64_t writer = -1;      ///< last writer in program order
  uint64_t writeTime = 0;   ///< when its value became visible
  int64_t reader = -1;      ///< reader with the latest read of that value
  int64_t maxReadTime = -1;
};

struct HazardAccumulator {
  std::map<std::tuple<HazardKind, size_t, size_t, Buffer>, std::pair<uint64_t, uint64_t>> found;  ///< -> (first word, count)
  void add(HazardKind kind, size_t earlier, size_t later, Buffer b, uint64_t word) {
    auto [it, fresh] = found.try_emplace({kind, earlier, later, b}, word, 0);
    it->second.first = std::min(it->second.first, word);
    it->second.second++;
    (void)fresh;
  }
};

class WordChecker {
 public:
  WordChecker(const Program& p, const hw::NpuConfig& cfg, SimReport& r) : program_(p), report_(r) {
    for (size_t b = 0; b < kNumBuffers; ++b) words_[b].resize(cfg.bufferWords(b));
    preds_.resize(p.instructions.size());
  }

  void run() {
    for (size_t j = 0; j < program_.instructions.size(); ++j) visit(j);
    for (size_t b = 0; b < kNumBuffers; ++b) {
      for (WordState& s : words_[b]) closeValue(b, s);
    }
    for (auto& [key, where] : hazards_.found) {
      auto [kind, earlier, later, buffer] = key;
      report_.hazards.push_back(Hazard{kind, earlier, later, buffer, where.first, where.second});
    }
    buildUsage();
  }

  /// RAW predecessors of each instruction (deduplicated).
  std::vector<std::vector<size_t>>& preds() { return preds_; }

 private:
  uint64_t timeOf(size_t j, AccessKind k) const {
    return k == AccessKind::ReadAtStart ? report_.timing[j].start : report_.timing[j].finish;
  }

  void closeValue(size_t b, WordState& s) {
    if (s.writer >= 0 && s.maxReadTime >= static_cast<int64_t>(s.writeTime)) {
      liveEvents_[b].push_back({s.writeTime, +4});
      liveEvents_[b].push_back({static_cast<uint64_t>(s.maxReadTime) + 1, -4});
    }
  }

  void visit(size_t j) {
    const std::vector<OperandAccess> accesses = sramAccesses(program_.instructions[j]);
    // Phase 1: reads against the value's writer (RAW); phase 2: writes against earlier readers and
    // the writer (WAR, WAW); phase 3: update the state, reads first so in-place updates stay correct.
    for (const OperandAccess& a : accesses) {
      if (a.kind == AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      uint64_t t = timeOf(j, a.kind);
      a.forEachWord([&](uint64_t w) {
        const WordState& s = words_[b][w];
        if (s.writer < 0) {
          report_.uninitialisedReads++;
          return;
        }
        addPred(j, static_cast<size_t>(s.writer));
        if (t < s.writeTime) hazards_.add(HazardKind::ReadAfterWrite, s.writer, j, a.operand.buffer, w);
      });
    }
    for (const OperandAccess& a : accesses) {
      if (a.kind != AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      int64_t t = static_cast<int64_t>(timeOf(j, a.kind));
      a.forEachWord([&](uint64_t w) {
        const WordState& s = words_[b][w];
        if (s.reader >= 0 && t <= s.maxReadTime) hazards_.add(HazardKind::WriteAfterRead, s.reader, j, a.operand.buffer, w);
        if (s.writer >= 0 && t <= static_cast<int64_t>(s.writeTime)) {
          hazards_.add(HazardKind::WriteAfterWrite, s.writer, j, a.operand.buffer, w);
        }
      });
    }
    for (const OperandAccess& a : accesses) {
      if (a.kind == AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      auto t = static_cast<int64_t>(timeOf(j, a.kind));
      a.forEachWord([&](uint64_t w) {
        WordState& s = words_[b][w];
        if (t > s.maxReadTime) {
          s.maxReadTime = t;
          s.reader = static_cast<int64_t>(j);
        }
      });
    }
    for (const OperandAccess& a : accesses) {
      if (a.kind != AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      uint64_t t = timeOf(j, a.kind);
      a.forEachWord([&](uint64_t w) {
        WordState& s = words_[b][w];
        closeValue(b, s);
        s = WordState{static_cast<int64_t>(j), t, -1, -1};
      });
    }
  }

  void addPred(size_t j, size_t i) {
    if (i == j) return;
    auto& p = preds_[j];
    if (p.empty() || p.back() != i) {
      if (std::find(p.begin(), p.end(), i) == p.end()) p.push_back(i);
    }
  }

  void buildUsage() {
    for (size_t b = 0; b < kNumBuffers; ++b) {
      auto& ev = liveEvents_[b];
      std::sort(ev.begin(), ev.end());
      int64_t live = 0;
      uint64_t peak = 0;
      auto& usage = report_.sramUsage[b];
      for (size_t k = 0; k < ev.size(); ++k) {
        live += ev[k].second;
        if (k + 1 < ev.size() && ev[k + 1].first == ev[k].first) continue;
        usage.emplace_back(ev[k].first, static_cast<uint64_t>(live));
        peak = std::max(peak, static_cast<uint64_t>(live));
      }
      report_.peakSramBytes[b] = peak;
    }
  }

  const Program& program_;
  SimReport& report_;
  std::array<std::vector<WordState>, kNumBuffers> words_;
  std::array<std::vector<std::pair<uint64_t, int64_t>>, kNumBuffers> liveEvents_;
  std::vector<std::vector<size_t>> preds_;
  HazardAccumulator hazards_;
};

uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

void criticalPaths(const Program& p, const hw::NpuConfig& cfg, const std::vector<std::vector<size_t>>& preds,
                   LowerBounds& lb) {
  const size_t n = p.instructions.size();
  std::vector<uint64_t> startRaw(n, 0), startOrdered(n, 0);
  std::vector<InstructionCost> cost(n);
  std::array<int64_t, kNumUnits> prevOnUnit;
  prevOnUnit.fill(-1);
  for (size_t j = 0; j < n; ++j) {
    cost[j] = instructionCost(p.instructions[j], cfg);
    for (size_t i : preds[j]) {
      startRaw[j] = std::max(startRaw[j], startRaw[i] + cost[i].latency);
      startOrdered[j] = std::max(startOrdered[j], startOrdered[i] + cost[i].latency);
    }
    auto u = static_cast<size_t>(p.instructions[j].unit());
    if (prevOnUnit[u] >= 0) {
      auto prev = static_cast<size_t>(prevOnUnit[u]);
      startOrdered[j] = std::max(startOrdered[j], startOrdered[prev] + cost[prev].occupancy);
    }
    prevOnUnit[u] = static_cast<int64_t>(j);
    lb.criticalPathRaw = std::max(lb.criticalPathRaw, startRaw[j] + cost[j].latency);
    lb.criticalPathUnitOrder = std::max(lb.criticalPathUnitOrder, startOrdered[j] + cost[j].latency);
  }
}

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
  WordChecker checker(program, cfg, report);
  checker.run();
  criticalPaths(program, cfg, checker.preds(), lb);
}

}  // namespace tessel::npu::detail
