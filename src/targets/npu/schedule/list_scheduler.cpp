// Resource-constrained list scheduling of a virtual program (S2.5-S2.7) with the sliding window of tiles
// (S0.6) and buffer capacity as resources; the modelled times follow the simulator's rules exactly.
#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <queue>
#include <set>

#include "instruction_scheduler.h"
#include "tessel/support/error.h"

namespace tessel::npu::sched {
namespace {

constexpr uint64_t kNever = ~uint64_t{0};

/// Allocator of one buffer's words. Regions that outlive a tile (weights and vectors shared by several tiles)
/// form a stack at the top of the buffer; a tile's own regions are placed first-fit below the lowest of them.
/// A long-lived region never lands between short-lived ones, so the space the short-lived regions cycle through
/// is never split for good.
class RegionAllocator {
 public:
  explicit RegionAllocator(uint64_t capacity) : capacity_(capacity) { free_[0] = capacity; }

  std::optional<uint64_t> allocate(uint64_t words, bool longLived) {
    if (longLived) {
      // A hole among the long-lived regions, highest first; else the words right below the stack.
      for (auto it = free_.end(); it != free_.begin();) {
        --it;
        if (it->first < top()) break;
        if (it->second >= words) return take(it, it->first + it->second - words, words, true);
      }
      auto it = blockContaining(top() - 1);
      if (top() < words || it == free_.end() || it->first > top() - words) return std::nullopt;
      return take(it, top() - words, words, true);
    }
    for (auto it = free_.begin(); it != free_.end() && it->first < top(); ++it)
      if (std::min(it->first + it->second, top()) - it->first >= words) return take(it, it->first, words, false);
    return std::nullopt;
  }

  void release(uint64_t addr, uint64_t words) {
    inUse_ -= words;
    longLived_.erase(addr);
    auto next = free_.lower_bound(addr);
    if (next != free_.end() && next->first == addr + words) {
      words += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == addr) {
        prev->second += words;
        return;
      }
    }
    free_[addr] = words;
  }

  uint64_t peak() const { return peak_; }
  std::string describe() const {
    std::string s = fmt::format("in use {}, long-lived from {}, free:", inUse_, top());
    for (const auto& [a, w] : free_) s += fmt::format(" [{}, +{})", a, w);
    return s;
  }

 private:
  /// Lowest address of a live long-lived region (the capacity when there is none).
  uint64_t top() const { return longLived_.empty() ? capacity_ : *longLived_.begin(); }
  std::map<uint64_t, uint64_t>::iterator blockContaining(uint64_t word) {
    auto it = free_.upper_bound(word);
    if (it == free_.begin()) return free_.end();
    --it;
    return it->first + it->second > word ? it : free_.end();
  }
  uint64_t take(std::map<uint64_t, uint64_t>::iterator it, uint64_t addr, uint64_t words, bool longLived) {
    const uint64_t start = it->first, size = it->second;
    free_.erase(it);
    if (addr > start) free_[start] = addr - start;
    if (addr + words < start + size) free_[addr + words] = start + size - addr - words;
    if (longLived) longLived_.insert(addr);
    inUse_ += words;
    peak_ = std::max(peak_, inUse_);
    return addr;
  }

  uint64_t capacity_;
  std::map<uint64_t, uint64_t> free_;  ///< address -> words
  std::set<uint64_t> longLived_;       ///< addresses of the live long-lived regions
  uint64_t inUse_ = 0, peak_ = 0;
};


class ListScheduler {
 public:
  ListScheduler(const VirtualProgram& p, const InstructionGraph& g, const hw::NpuConfig& cfg, const ScheduleOptions& o)
      : p_(p), g_(g), cfg_(cfg), o_(o), n_(p.instructions.size()) {
    for (size_t b = 0; b < kNumBuffers; ++b)
      alloc_.emplace_back(o.boundedSram ? cfg.bufferWords(b) : (uint64_t{1} << kSramAddrBits));
    prepareRegions();
    result_.timing.resize(n_);
    result_.regionBase.assign(p.regions.size(), kNever);
    state_.assign(p.regions.size(), RegionState::Waiting);
  }

  ScheduleResult run() {
    runList();
    for (size_t b = 0; b < kNumBuffers; ++b) result_.peakWords[b] = alloc_[b].peak();
    result_.order.resize(n_);
    for (size_t i = 0; i < n_; ++i) result_.order[i] = static_cast<uint32_t>(i);
    std::stable_sort(result_.order.begin(), result_.order.end(), [&](uint32_t a, uint32_t b) {
      return result_.timing[a].start < result_.timing[b].start;
    });
    if (o_.mode == ScheduleOptions::Mode::Sequential) retimeSerially();
    return std::move(result_);
  }

 private:
  // ---- regions: users, first use, release ----
  void prepareRegions() {
    const size_t R = p_.regions.size();
    usersLeft_.assign(R, 0);
    firstUse_.assign(R, kNever);
    regionsOf_.resize(n_);
    for (size_t i = 0; i < n_; ++i) {
      auto& mine = regionsOf_[i];
      for (int32_t r : p_.instructions[i].region)
        if (r >= 0 && std::find(mine.begin(), mine.end(), r) == mine.end()) mine.push_back(r);
      for (int32_t r : mine) {
        usersLeft_[static_cast<size_t>(r)]++;
        firstUse_[static_cast<size_t>(r)] = std::min<uint64_t>(firstUse_[static_cast<size_t>(r)], i);
      }
    }
    // A region used by instructions of more than one tile outlives its tile (unless it is the working data of a run
    // of one node's tiles, Region::workspace).
    longLived_.assign(R, false);
    std::vector<uint32_t> firstTile(R, ~uint32_t{0});
    for (size_t i = 0; i < n_; ++i)
      for (int32_t r : regionsOf_[i]) {
        const uint32_t t = p_.instructions[i].tile;
        if (firstTile[static_cast<size_t>(r)] == ~uint32_t{0}) firstTile[static_cast<size_t>(r)] = t;
        if (firstTile[static_cast<size_t>(r)] != t && !p_.regions[static_cast<size_t>(r)].workspace)
          longLived_[static_cast<size_t>(r)] = true;
      }
    // Per buffer, the regions in order of first use.
    for (size_t r = 0; r < R; ++r) fifo_[static_cast<size_t>(p_.regions[r].buffer)].push_back(static_cast<uint32_t>(r));
    fifoRank_.resize(R);
    for (auto& f : fifo_) {
      std::stable_sort(f.begin(), f.end(), [&](uint32_t a, uint32_t b) { return firstUse_[a] < firstUse_[b]; });
      for (size_t k = 0; k < f.size(); ++k) fifoRank_[f[k]] = static_cast<uint32_t>(k);
    }
  }

  bool allocated(int32_t r) const { return state_[static_cast<size_t>(r)] != RegionState::Waiting; }

  enum class Alloc { Done, NotOldest, NoSpace };

  /// Gives space to the instruction's regions that have none. With `oldestFirst` only an instruction whose
  /// oldest waiting region of each buffer is that buffer's oldest waiting region (in order of first use) may do
  /// so, so that a later tile never takes the space the oldest one needs. Nothing changes unless the result is
  /// Done; NotOldest sets `waitFor` to the (buffer, rank) whose turn it waits for.
  Alloc allocateFor(size_t i, bool oldestFirst, std::pair<size_t, uint32_t>* waitFor = nullptr) {
    bool any = false;
    for (int32_t r : regionsOf_[i]) {
      if (allocated(r)) continue;
      any = true;
      const auto b = static_cast<size_t>(p_.regions[static_cast<size_t>(r)].buffer);
      if (oldestFirst && fifoRank_[static_cast<size_t>(r)] != fifoHead(b)) {
        // Unless a region of the same buffer and instruction is older and at the head.
        bool olderAtHead = false;
        for (int32_t q : regionsOf_[i])
          if (!allocated(q) && static_cast<size_t>(p_.regions[static_cast<size_t>(q)].buffer) == b &&
              fifoRank_[static_cast<size_t>(q)] == fifoHead(b))
            olderAtHead = true;
        if (!olderAtHead) {
          if (waitFor) *waitFor = {b, fifoRank_[static_cast<size_t>(r)]};
          return Alloc::NotOldest;
        }
      }
    }
    if (!any) return Alloc::Done;
    std::vector<int32_t> done;
    for (int32_t r : regionsOf_[i]) {
      if (allocated(r)) continue;
      const Region& reg = p_.regions[static_cast<size_t>(r)];
      auto addr = alloc_[static_cast<size_t>(reg.buffer)].allocate(reg.words, longLived_[static_cast<size_t>(r)]);
      if (!addr) {
        for (int32_t d : done) {
          alloc_[static_cast<size_t>(p_.regions[static_cast<size_t>(d)].buffer)].release(
              result_.regionBase[static_cast<size_t>(d)], p_.regions[static_cast<size_t>(d)].words);
          state_[static_cast<size_t>(d)] = RegionState::Waiting;
        }
        return Alloc::NoSpace;
      }
      result_.regionBase[static_cast<size_t>(r)] = *addr;
      state_[static_cast<size_t>(r)] = RegionState::Live;
      done.push_back(r);
    }
    return Alloc::Done;
  }

  /// Rank (in order of first use) of buffer b's oldest region still waiting for space.
  uint32_t fifoHead(size_t b) {
    auto& pos = fifoPos_[b];
    while (pos < fifo_[b].size() && allocated(static_cast<int32_t>(fifo_[b][pos]))) ++pos;
    return static_cast<uint32_t>(pos);
  }

  /// Called when instruction i finishes: regions whose last access it was are released (S2.7).
  void finished(size_t i) {
    for (int32_t r : regionsOf_[i])
      if (--usersLeft_[static_cast<size_t>(r)] == 0) {
        const Region& reg = p_.regions[static_cast<size_t>(r)];
        alloc_[static_cast<size_t>(reg.buffer)].release(result_.regionBase[static_cast<size_t>(r)], reg.words);
        state_[static_cast<size_t>(r)] = RegionState::Released;
        spaceFreed_ = true;
      }
  }

  // ---- sequential baseline: the window schedule's order and addresses, one instruction at a time ----
  void retimeSerially() {
    uint64_t t = 0;
    for (uint32_t i : result_.order) {
      InstructionTiming& tm = result_.timing[i];
      tm.start = t;
      tm.end = t + g_.cost[i].occupancy;
      tm.finish = t + g_.cost[i].latency;
      t = tm.finish;
    }
    result_.cycles = t;
  }

  // ---- list scheduling ----
  struct UnitState {
    uint64_t busyUntil = 0, lastFinish = 0;
    std::priority_queue<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>, std::greater<>> waiting;
    std::vector<uint32_t> ready;  ///< heap by priority
  };

  bool higher(uint32_t a, uint32_t b) const {  // a has higher priority than b
    const uint32_t ta = p_.instructions[a].tile, tb = p_.instructions[b].tile;
    if (ta != tb) return ta < tb;
    if (g_.height[a] != g_.height[b]) return g_.height[a] > g_.height[b];
    return a < b;
  }
  void pushReady(uint32_t i) {
    auto& h = units_[static_cast<size_t>(g_.unit[i])].ready;
    h.push_back(i);
    std::push_heap(h.begin(), h.end(), [&](uint32_t a, uint32_t b) { return higher(b, a); });
  }
  uint32_t popReady(UnitState& u) {
    std::pop_heap(u.ready.begin(), u.ready.end(), [&](uint32_t a, uint32_t b) { return higher(b, a); });
    uint32_t i = u.ready.back();
    u.ready.pop_back();
    return i;
  }

  void updateWindow() {
    if (o_.mode == ScheduleOptions::Mode::Greedy) {
      windowLimit_ = ~uint32_t{0};
      return;
    }
    auto it = unretired_.begin();
    for (uint32_t k = 1; k < o_.window && it != unretired_.end(); ++k) ++it;
    const uint32_t limit = it == unretired_.end() ? ~uint32_t{0} : *it;
    for (auto w = windowBlocked_.begin(); w != windowBlocked_.end() && w->first <= limit;) {
      for (uint32_t i : w->second) pushReady(i);
      w = windowBlocked_.erase(w);
    }
    windowLimit_ = limit;
  }

  void issue(uint32_t i, uint64_t t) {
    UnitState& u = units_[static_cast<size_t>(g_.unit[i])];
    InstructionTiming& tm = result_.timing[i];
    tm.start = t;
    tm.end = t + g_.cost[i].occupancy;
    tm.finish = std::max(t + g_.cost[i].latency, u.lastFinish);
    u.busyUntil = tm.end;
    u.lastFinish = tm.finish;
    finishes_.push({tm.finish, i});
    ++issued_;
    for (const DepEdge* e = g_.succBegin(i); e != g_.succEnd(i); ++e) {
      const bool waitFinish = g_.unit[e->other] != g_.unit[i] || e->interlock;
      earliest_[e->other] = std::max(earliest_[e->other], waitFinish ? tm.finish : tm.start);
      if (--pending_[e->other] == 0) makeCandidate(e->other, t);
    }
  }

  /// Instruction i has every dependency issued: it becomes a candidate at its earliest start.
  void makeCandidate(uint32_t i, uint64_t t) {
    UnitState& u = units_[static_cast<size_t>(g_.unit[i])];
    if (earliest_[i] <= t)
      pushReady(i);
    else
      u.waiting.push({earliest_[i], i});
  }

  void completeUpTo(uint64_t t) {
    bool retired = false;
    while (!finishes_.empty() && finishes_.top().first <= t) {
      const uint32_t i = finishes_.top().second;
      finishes_.pop();
      finished(i);
      const uint32_t tile = p_.instructions[i].tile;
      if (--tileLeft_[tile] == 0) {
        unretired_.erase(tile);
        retired = true;
      }
    }
    if (retired) updateWindow();
  }

  /// Candidates that waited for space or for their region's turn may try again.
  void wakeAllocationWaiters() {
    for (size_t b = 0; b < kNumBuffers; ++b) {
      const uint32_t head = fifoHead(b);
      auto& waiting = notOldest_[b];
      for (auto w = waiting.begin(); w != waiting.end() && w->first <= head;) {
        for (uint32_t i : w->second) pushReady(i);
        w = waiting.erase(w);
      }
    }
    // Those that found no space retry once some was released (allocations only take space).
    if (!spaceFreed_) return;
    spaceFreed_ = false;
    for (uint32_t i : noSpace_) pushReady(i);
    noSpace_.clear();
  }

  /// Picks and issues the best candidate of a free unit at time t.
  bool tryIssue(UnitState& u, uint64_t t) {
    while (!u.waiting.empty() && u.waiting.top().first <= t) {
      pushReady(u.waiting.top().second);
      u.waiting.pop();
    }
    while (!u.ready.empty()) {
      const uint32_t i = popReady(u);
      const uint32_t tile = p_.instructions[i].tile;
      if (tile > windowLimit_) {
        windowBlocked_[tile].push_back(i);
        continue;
      }
      std::pair<size_t, uint32_t> waitFor{0, 0};
      switch (allocateFor(i, o_.oldestFirst, &waitFor)) {
        case Alloc::NotOldest: notOldest_[waitFor.first][waitFor.second].push_back(i); continue;
        case Alloc::NoSpace: noSpace_.push_back(i); continue;
        case Alloc::Done: break;
      }
      issue(i, t);
      wakeAllocationWaiters();
      return true;
    }
    return false;
  }

  void runList() {
    units_.resize(kNumUnits);
    pending_.resize(n_);
    earliest_.assign(n_, 0);
    tileLeft_.assign(p_.tiles.size(), 0);
    for (size_t i = 0; i < n_; ++i) {
      pending_[i] = g_.predOffset[i + 1] - g_.predOffset[i];
      tileLeft_[p_.instructions[i].tile]++;
    }
    for (uint32_t t = 0; t < p_.tiles.size(); ++t)
      if (tileLeft_[t]) unretired_.insert(t);
    updateWindow();
    for (uint32_t i = 0; i < n_; ++i)
      if (pending_[i] == 0) makeCandidate(i, 0);
    uint64_t t = 0;
    while (issued_ < n_) {
      completeUpTo(t);
      wakeAllocationWaiters();
      for (bool progress = true; progress;) {
        progress = false;
        for (UnitState& u : units_)
          if (u.busyUntil <= t) progress |= tryIssue(u, t);
      }
      if (issued_ == n_) break;
      uint64_t next = finishes_.empty() ? kNever : finishes_.top().first;
      for (const UnitState& u : units_) {
        if (u.busyUntil > t) next = std::min(next, u.busyUntil);
        if (!u.waiting.empty() && u.waiting.top().first > t) next = std::min(next, u.waiting.top().first);
      }
      if (next == kNever) throw InternalError(stuckMessage(t, n_));
      t = next;
    }
    while (!finishes_.empty()) completeUpTo(finishes_.top().first);
    for (const InstructionTiming& tm : result_.timing) result_.cycles = std::max(result_.cycles, tm.finish);
  }

  std::string stuckMessage(uint64_t t, size_t at) {
    std::string msg = fmt::format("npu scheduling: no instruction can make progress at cycle {} ({} of {} issued)", t, issued_, n_);
    for (size_t b = 0; b < kNumBuffers; ++b)
      if (fifoHead(b) < fifo_[b].size()) {
        const Region& r = p_.regions[fifo_[b][fifoPos_[b]]];
        msg += fmt::format("; the oldest region of {} waiting for space needs {} words (capacity {} words)", bufferName(r.buffer),
                           r.words, cfg_.bufferWords(static_cast<size_t>(r.buffer)));
      }
    if (at < n_) msg += fmt::format("; instruction {}: {}", at, disassemble(p_.instructions[at].inst));
    for (size_t i = 0; i < n_; ++i) {
      if (result_.timing[i].end != 0 || (i == 0 && issued_ > 0)) continue;
      if (pending_.size() == n_ && pending_[i] == 0) {
        msg += fmt::format("\n  oldest unissued #{} (tile {}, window limit {}): {}", i, p_.instructions[i].tile, windowLimit_,
                           disassemble(p_.instructions[i].inst));
        const auto inList = [&](const std::vector<uint32_t>& l) { return std::find(l.begin(), l.end(), i) != l.end(); };
        bool notOld = false, blocked = false, ready = false;
        for (const auto& m : notOldest_)
          for (const auto& [rank, l] : m) notOld |= inList(l);
        for (const auto& [tile, l] : windowBlocked_) blocked |= inList(l);
        for (const UnitState& u : units_) ready |= inList(u.ready);
        msg += fmt::format("\n    in noSpace {}, notOldest {}, windowBlocked {}, ready {}, earliest {}", inList(noSpace_), notOld,
                           blocked, ready, earliest_[i]);
        for (int32_t r : regionsOf_[i])
          msg += fmt::format("\n    region {} {}w of {}: state {}, rank {} (head {})", r, p_.regions[static_cast<size_t>(r)].words,
                             bufferName(p_.regions[static_cast<size_t>(r)].buffer), static_cast<int>(state_[static_cast<size_t>(r)]),
                             fifoRank_[static_cast<size_t>(r)], fifoHead(static_cast<size_t>(p_.regions[static_cast<size_t>(r)].buffer)));
        break;
      }
    }
    for (size_t b = 0; b < kNumBuffers; ++b) {
      std::string live;
      for (size_t r = 0; r < p_.regions.size(); ++r)
        if (state_[r] == RegionState::Live && static_cast<size_t>(p_.regions[r].buffer) == b)
          live += fmt::format(" {}w(tile {}, {} users left)", p_.regions[r].words, p_.regions[r].tile, usersLeft_[r]);
      if (!live.empty()) msg += fmt::format("\n  live in {}:{}; allocator {}", bufferName(static_cast<Buffer>(b)), live, alloc_[b].describe());
    }
    return msg;
  }

  const VirtualProgram& p_;
  const InstructionGraph& g_;
  const hw::NpuConfig& cfg_;
  const ScheduleOptions& o_;
  const size_t n_;
  ScheduleResult result_;
  std::vector<RegionAllocator> alloc_;
  std::vector<uint32_t> usersLeft_;
  std::vector<uint64_t> firstUse_;
  std::vector<std::vector<int32_t>> regionsOf_;
  std::array<std::vector<uint32_t>, kNumBuffers> fifo_;  ///< per buffer, regions in order of first use
  std::vector<uint32_t> fifoRank_;                       ///< a region's place in its buffer's order
  std::vector<bool> longLived_;
  std::array<size_t, kNumBuffers> fifoPos_{};
  enum class RegionState : uint8_t { Waiting, Live, Released };
  std::vector<RegionState> state_;
  bool spaceFreed_ = false;
  std::array<std::map<uint32_t, std::vector<uint32_t>>, kNumBuffers> notOldest_;  ///< per buffer, by the rank they wait for
  std::vector<uint32_t> noSpace_;
  std::vector<UnitState> units_;
  std::vector<uint32_t> pending_;
  std::vector<uint64_t> earliest_;
  std::vector<uint32_t> tileLeft_;
  std::set<uint32_t> unretired_;
  std::map<uint32_t, std::vector<uint32_t>> windowBlocked_;
  uint32_t windowLimit_ = ~uint32_t{0};
  std::priority_queue<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>, std::greater<>> finishes_;
  size_t issued_ = 0;
};

}  // namespace

ScheduleResult listSchedule(const VirtualProgram& program, const InstructionGraph& graph, const hw::NpuConfig& cfg,
                            const ScheduleOptions& options) {
  return ListScheduler(program, graph, cfg, options).run();
}

}  // namespace tessel::npu::sched
