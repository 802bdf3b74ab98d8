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

/// What the checker remembers about one SRAM word: its current value's writer and latest reader. The
/// state is per word of the buffers' capacity (a few MB at most), independent of the program's length.
struct WordState {
  int64_t writer = -1;      ///< last writer in program order
  uint64_t writeTime = 0;   ///< when its value became visible
  int64_t reader = -1;      ///< reader with the latest read of that value
  int64_t maxReadTime = -1;
  bool readAtFinish = false;  ///< that read happened at the reader's finish (else at its start)
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

/// Live-word changes attributed to one instruction of one buffer: values it wrote that are read later
/// become live at its finish; values whose last read it is die one cycle after that read (at its start
/// or finish). Counting per instruction instead of keeping one event per word value keeps the liveness
/// analysis O(instructions) in memory (one event per word written was ~10 GB on ResNet-18).
struct LiveDeltas {
  uint32_t up = 0, downAfterStart = 0, downAfterFinish = 0;
};

/// Replays every SRAM access in program order with its simulated time: hazards, liveness, and the
/// critical-path bounds (each read's producing write is a true dependency).
class WordChecker {
 public:
  WordChecker(const Program& p, const hw::NpuConfig& cfg, SimReport& r) : program_(p), cfg_(cfg), report_(r) {
    const size_t n = p.instructions.size();
    for (size_t b = 0; b < kNumBuffers; ++b) {
      words_[b].resize(cfg.bufferWords(b));
      live_[b].resize(n);
    }
    finishRaw_.resize(n);
    finishOrdered_.resize(n);
  }

  void run() {
    for (size_t j = 0; j < program_.instructions.size(); ++j) visit(j);
    for (size_t b = 0; b < kNumBuffers; ++b) {
      PendingClose pending;
      for (const WordState& s : words_[b]) closeValue(b, s, pending);
      flush(b, pending);
      std::vector<WordState>().swap(words_[b]);
    }
    for (auto& [key, where] : hazards_.found) {
      auto [kind, earlier, later, buffer] = key;
      report_.hazards.push_back(Hazard{kind, earlier, later, buffer, where.first, where.second});
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

  /// Values closed with the same (writer, reader, read kind), counted before touching the per-instruction
  /// deltas: neighbouring words usually share them, and the deltas of old instructions are cache misses.
  struct PendingClose {
    int64_t writer = -1, reader = -1;
    bool atFinish = false;
    uint32_t count = 0;
  };

  void flush(size_t b, PendingClose& p) {
    if (p.count == 0) return;
    live_[b][static_cast<size_t>(p.writer)].up += p.count;
    LiveDeltas& d = live_[b][static_cast<size_t>(p.reader)];
    (p.atFinish ? d.downAfterFinish : d.downAfterStart) += p.count;
    p.count = 0;
  }

  /// The value held in `s` is overwritten or the program ended: it was live from its write to its last read.
  void closeValue(size_t b, const WordState& s, PendingClose& p) {
    if (s.writer < 0 || s.maxReadTime < static_cast<int64_t>(s.writeTime)) return;
    if (p.count && (p.writer != s.writer || p.reader != s.reader || p.atFinish != s.readAtFinish)) flush(b, p);
    if (p.count == 0) p = PendingClose{s.writer, s.reader, s.readAtFinish, 0};
    p.count++;
  }

  void visit(size_t j) {
    const Instruction& inst = program_.instructions[j];
    const std::vector<OperandAccess> accesses = sramAccesses(inst);
    // Critical paths: a read at start needs the producer's finish before the start; a read at finish
    // (accumulating gemm: the adder at the array's output) only needs it before this finish.
    uint64_t depStartRaw = 0, depFinishRaw = 0, depStartOrd = 0, depFinishOrd = 0;
    // Phase 1: reads against the value's writer (RAW); phase 2: writes against earlier readers and
    // the writer (WAR, WAW); phase 3: update the state, reads first so in-place updates stay correct.
    for (const OperandAccess& a : accesses) {
      if (a.kind == AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      const uint64_t t = timeOf(j, a.kind);
      const bool atStart = a.kind == AccessKind::ReadAtStart;
      uint64_t& depRaw = atStart ? depStartRaw : depFinishRaw;
      uint64_t& depOrd = atStart ? depStartOrd : depFinishOrd;
      const WordState* words = words_[b].data();
      int64_t lastWriter = -1;
      a.forEachRun([&](uint64_t first, uint64_t count) {
        for (uint64_t w = first; w < first + count; ++w) {
          const WordState& s = words[w];
          if (s.writer < 0) {
            report_.uninitialisedReads++;
            continue;
          }
          if (s.writer != lastWriter && s.writer != static_cast<int64_t>(j)) {
            lastWriter = s.writer;
            depRaw = std::max(depRaw, finishRaw_[static_cast<size_t>(s.writer)]);
            depOrd = std::max(depOrd, finishOrdered_[static_cast<size_t>(s.writer)]);
          }
          if (t < s.writeTime) hazards_.add(HazardKind::ReadAfterWrite, s.writer, j, a.operand.buffer, w);
        }
      });
    }
    for (const OperandAccess& a : accesses) {
      if (a.kind != AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      const auto t = static_cast<int64_t>(timeOf(j, a.kind));
      const WordState* words = words_[b].data();
      a.forEachRun([&](uint64_t first, uint64_t count) {
        for (uint64_t w = first; w < first + count; ++w) {
          const WordState& s = words[w];
          if (s.reader >= 0 && t <= s.maxReadTime) hazards_.add(HazardKind::WriteAfterRead, s.reader, j, a.operand.buffer, w);
          if (s.writer >= 0 && t <= static_cast<int64_t>(s.writeTime)) {
            hazards_.add(HazardKind::WriteAfterWrite, s.writer, j, a.operand.buffer, w);
          }
        }
      });
    }
    for (const OperandAccess& a : accesses) {
      if (a.kind == AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      const auto t = static_cast<int64_t>(timeOf(j, a.kind));
      const bool atFinish = a.kind == AccessKind::ReadAtFinish;
      WordState* words = words_[b].data();
      a.forEachRun([&](uint64_t first, uint64_t count) {
        for (uint64_t w = first; w < first + count; ++w) {
          WordState& s = words[w];
          if (t > s.maxReadTime) {
            s.maxReadTime = t;
            s.reader = static_cast<int64_t>(j);
            s.readAtFinish = atFinish;
          }
        }
      });
    }
    for (const OperandAccess& a : accesses) {
      if (a.kind != AccessKind::WriteAtFinish) continue;
      auto b = static_cast<size_t>(a.operand.buffer);
      const uint64_t t = timeOf(j, a.kind);
      WordState* words = words_[b].data();
      PendingClose pending;
      a.forEachRun([&](uint64_t first, uint64_t count) {
        for (uint64_t w = first; w < first + count; ++w) {
          closeValue(b, words[w], pending);
          words[w] = WordState{static_cast<int64_t>(j), t, -1, -1, false};
        }
      });
      flush(b, pending);
    }
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
  std::array<std::vector<WordState>, kNumBuffers> words_;
  std::array<std::vector<LiveDeltas>, kNumBuffers> live_;  ///< per buffer, per instruction
  std::vector<uint64_t> finishRaw_, finishOrdered_;          ///< earliest finish under the two bounds
  std::array<uint64_t, kNumUnits> unitFreeOrdered_{}, unitFinishOrdered_{};
  HazardAccumulator hazards_;
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
  WordChecker checker(program, cfg, report);
  checker.run();
}

}  // namespace tessel::npu::detail
