// Dependencies between NPU instructions through the words they access (S2.2, S2.3): read-after-write is a
// strong (data) dependency, write-after-read and write-after-write are weak (order-only) ones. This one
// analysis serves the instruction scheduler (on virtual buffer regions), the token assignment of the final
// program and the simulator's hazard checker (on physical addresses, with the simulated times).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <vector>

#include "tessel/targets/npu/access.h"
#include "tessel/targets/npu/isa.h"

namespace tessel::npu {

enum class DepKind : uint8_t { ReadAfterWrite = 0, WriteAfterRead = 1, WriteAfterWrite = 2 };
/// "RAW", "WAR", "WAW".
const char* depKindName(DepKind k);

/// Address spaces the analysis keys words by: the four SRAM buffers (npu::Buffer values), DRAM, and from
/// kFirstRegionSpace on one space per virtual buffer region of a program not yet given addresses.
inline constexpr uint32_t kDramSpace = 4;
inline constexpr uint32_t kFirstRegionSpace = 5;

/// A run of consecutive words one instruction reads or writes in one address space.
struct WordRun {
  uint32_t space = 0;
  uint64_t first = 0, count = 0;
  AccessKind kind = AccessKind::ReadAtStart;
};

/// Appends the runs of an instruction's SRAM accesses, merged where boxes are contiguous, and with `dram`
/// its DRAM access (space kDramSpace). An SRAM operand's space is its buffer, or kFirstRegionSpace + r when
/// `regions` gives it a virtual region r (per operand: dst, srcA, srcB, srcC; -1 = none).
void instructionRuns(const Instruction& inst, std::vector<WordRun>& out, bool dram = true,
                     const std::array<int32_t, 4>* regions = nullptr);

/// One dependency of a later instruction (the consumer) on an earlier one (the producer).
struct Dependency {
  uint32_t producer = 0;
  uint32_t consumer = 0;
  DepKind kind = DepKind::ReadAfterWrite;
  AccessKind producerAccess = AccessKind::WriteAtFinish;  ///< the earlier instruction's access
  AccessKind consumerAccess = AccessKind::ReadAtStart;    ///< the later instruction's access
  uint32_t space = 0;
  uint64_t firstWord = 0, words = 0;  ///< the overlap found (one segment of it)
};

/// Walks a program in program order and reports, for each instruction, its dependencies on earlier ones.
/// Per word range it remembers the last writer and, per unit, the latest reader since that write: on units
/// that issue and complete in order the latest reader is also the last read in time, so these few
/// instructions are every dependency that matters (earlier ones are implied by unit order).
class DependencyTracker {
 public:
  /// What a value (words with one writer) was when it is overwritten or the walk ends: its writer and the
  /// per-unit latest readers. Used for liveness.
  struct ClosedValue {
    int32_t writer = -1;
    std::array<int32_t, kNumUnits> readers{-1, -1, -1, -1};
    uint8_t readAtFinish = 0;  ///< bit u: unit u's latest read happened at that reader's finish
    uint32_t space = 0;
    uint64_t words = 0;
  };

  /// Records instruction `index` (on `unit`) accessing `runs`, calling onDep(const Dependency&) for each
  /// dependency on an earlier instruction and onClose(const ClosedValue&) for values it overwrites.
  template <class OnDep, class OnClose>
  void visit(uint32_t index, Unit unit, const std::vector<WordRun>& runs, OnDep&& onDep, OnClose&& onClose);
  template <class OnDep>
  void visit(uint32_t index, Unit unit, const std::vector<WordRun>& runs, OnDep&& onDep) {
    visit(index, unit, runs, onDep, [](const ClosedValue&) {});
  }
  /// Calls fn(const ClosedValue&) for every value still held (the walk is over).
  template <class Fn>
  void closeAll(Fn&& fn) const;

  /// Words read that no earlier instruction wrote.
  uint64_t uninitialisedReads() const { return uninitialised_; }

 private:
  struct Segment {
    uint64_t end = 0;  ///< one past the last key; the map key is the first
    int32_t writer = -1;
    std::array<int32_t, kNumUnits> readers{-1, -1, -1, -1};
    uint8_t readAtFinish = 0;
  };
  using Map = std::map<uint64_t, Segment>;  ///< one address space's segments by first word
  static uint64_t key(uint32_t space, uint64_t word) { return (uint64_t{space} << 40) | word; }
  /// Makes words [lo, hi) (lo < hi) of `m` exactly covered by segments (gaps get never-written segments) and returns
  /// the first.
  static Map::iterator cover(Map& m, uint64_t lo, uint64_t hi);
  Map& spaceMap(uint32_t space) {
    if (space >= spaces_.size()) spaces_.resize(space + 1);
    return spaces_[space];
  }

  /// Per address space (an SRAM buffer, DRAM, or a virtual region: small maps, one per region, rather than one map of
  /// every region's words), its segments.
  std::vector<Map> spaces_;
  uint64_t uninitialised_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> writes_;  ///< visit's scratch: the instruction's written key intervals
};

// ---- implementation of the templates ----

template <class OnDep, class OnClose>
void DependencyTracker::visit(uint32_t index, Unit unit, const std::vector<WordRun>& runs, OnDep&& onDep,
                              OnClose&& onClose) {
  const auto u = static_cast<size_t>(unit);
  // The instruction's writes as disjoint key intervals in order, for the in-place check of the reads below (a
  // binary search per segment: a vector pass over a tile of many rows reads and writes as many runs).
  writes_.clear();
  for (const WordRun& w : runs)
    if (w.kind == AccessKind::WriteAtFinish && w.count != 0) writes_.push_back({key(w.space, w.first), key(w.space, w.first) + w.count});
  std::sort(writes_.begin(), writes_.end());
  size_t merged = 0;
  for (size_t k = 0; k < writes_.size(); ++k) {
    if (merged > 0 && writes_[k].first <= writes_[merged - 1].second)
      writes_[merged - 1].second = std::max(writes_[merged - 1].second, writes_[k].second);
    else
      writes_[merged++] = writes_[k];
  }
  writes_.resize(merged);
  auto overwritten = [&](uint64_t lo, uint64_t hi) {  // whether the instruction writes any word of [lo, hi)
    auto it = std::lower_bound(writes_.begin(), writes_.end(), hi,
                               [](const std::pair<uint64_t, uint64_t>& w, uint64_t v) { return w.first < v; });
    return it != writes_.begin() && std::prev(it)->second > lo;
  };
  // Reads first: against the value's writer (RAW); then register as a reader.
  for (const WordRun& r : runs) {
    if (r.kind == AccessKind::WriteAtFinish || r.count == 0) continue;
    Map& m = spaceMap(r.space);
    const uint64_t lo = r.first, hi = lo + r.count;
    for (auto it = cover(m, lo, hi); it != m.end() && it->first < hi; ++it) {
      Segment& s = it->second;
      const uint64_t words = s.end - it->first;
      if (s.writer < 0) {
        uninitialised_ += words;
      } else if (s.writer != static_cast<int32_t>(index)) {
        onDep(Dependency{static_cast<uint32_t>(s.writer), index, DepKind::ReadAfterWrite, AccessKind::WriteAtFinish, r.kind,
                         r.space, it->first, words});
      }
      // This read replaces the unit's previous reader; when the instruction also overwrites these words (in place),
      // that reader must still come first (a scheduler may reorder one unit's instructions): WAR now.
      const int32_t previous = s.readers[u];
      if (previous >= 0 && previous != static_cast<int32_t>(index) && overwritten(key(r.space, it->first), key(r.space, s.end))) {
        const AccessKind rk = (s.readAtFinish >> u) & 1 ? AccessKind::ReadAtFinish : AccessKind::ReadAtStart;
        onDep(Dependency{static_cast<uint32_t>(previous), index, DepKind::WriteAfterRead, rk, AccessKind::WriteAtFinish,
                         r.space, it->first, words});
      }
      s.readers[u] = static_cast<int32_t>(index);
      const uint8_t bit = static_cast<uint8_t>(1u << u);
      s.readAtFinish = r.kind == AccessKind::ReadAtFinish ? (s.readAtFinish | bit) : (s.readAtFinish & ~bit);
    }
  }
  // Then writes: against the latest readers (WAR) and the writer (WAW); the range gets one new value.
  for (const WordRun& r : runs) {
    if (r.kind != AccessKind::WriteAtFinish || r.count == 0) continue;
    Map& m = spaceMap(r.space);
    const uint64_t lo = r.first, hi = lo + r.count;
    auto first = cover(m, lo, hi);
    auto it = first;
    for (; it != m.end() && it->first < hi; ++it) {
      const Segment& s = it->second;
      const uint64_t word = it->first, words = s.end - it->first;
      for (size_t ru = 0; ru < kNumUnits; ++ru) {
        const int32_t reader = s.readers[ru];
        if (reader < 0 || reader == static_cast<int32_t>(index)) continue;
        const AccessKind rk = (s.readAtFinish >> ru) & 1 ? AccessKind::ReadAtFinish : AccessKind::ReadAtStart;
        onDep(Dependency{static_cast<uint32_t>(reader), index, DepKind::WriteAfterRead, rk, AccessKind::WriteAtFinish,
                         r.space, word, words});
      }
      if (s.writer >= 0 && s.writer != static_cast<int32_t>(index))
        onDep(Dependency{static_cast<uint32_t>(s.writer), index, DepKind::WriteAfterWrite, AccessKind::WriteAtFinish,
                         AccessKind::WriteAtFinish, r.space, word, words});
      if (s.writer >= 0) onClose(ClosedValue{s.writer, s.readers, s.readAtFinish, r.space, words});
    }
    m.erase(first, it);
    Segment merged;
    merged.end = hi;
    merged.writer = static_cast<int32_t>(index);
    m.emplace_hint(it, lo, merged);
  }
}

template <class Fn>
void DependencyTracker::closeAll(Fn&& fn) const {
  for (size_t space = 0; space < spaces_.size(); ++space)
    for (const auto& [lo, s] : spaces_[space])
      if (s.writer >= 0) fn(ClosedValue{s.writer, s.readers, s.readAtFinish, static_cast<uint32_t>(space), s.end - lo});
}

}  // namespace tessel::npu
