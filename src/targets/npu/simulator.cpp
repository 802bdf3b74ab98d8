// The NPU's event loop: in-order unit queues fed by a dispatcher, dependency tokens between units,
// an intra-unit interlock, reads at start / writes at finish, deadlock detection.
#include "tessel/targets/npu/simulator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <queue>

#include <fmt/format.h>

#include "analysis.h"
#include "execute.h"
#include "tessel/targets/npu/access.h"
#include "tessel/targets/npu/timing.h"

namespace tessel::npu {

float Dram::read(uint64_t word) const {
  TESSEL_ASSERT(word < words(), "DRAM read out of range");
  float v;
  std::memcpy(&v, bytes_.data() + word * 4, 4);
  return v;
}

void Dram::write(uint64_t word, float value) {
  TESSEL_ASSERT(word < words(), "DRAM write out of range");
  std::memcpy(bytes_.data() + word * 4, &value, 4);
}

void Dram::writeFloats(uint64_t word, const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i) write(word + i, values[i]);
}

std::vector<float> Dram::readFloats(uint64_t word, uint64_t count) const {
  std::vector<float> out(count);
  for (uint64_t i = 0; i < count; ++i) out[i] = read(word + i);
  return out;
}

namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

/// Word range [lo, hi] of one buffer an in-flight instruction will write at `finish`.
struct InFlightWrite {
  Buffer buffer;
  uint64_t lo, hi, finish;
};

struct UnitState {
  std::deque<size_t> queue;  ///< dispatched, not started
  uint64_t busyUntil = 0;
  uint64_t lastFinish = 0;   ///< completion is in order per unit
  std::vector<InFlightWrite> inFlight;
};

class EventLoop {
 public:
  EventLoop(const Program& p, const hw::NpuConfig& cfg, Dram& dram) : program_(p), cfg_(cfg) {
    for (size_t b = 0; b < kNumBuffers; ++b) state_.sram[b].assign(cfg.bufferWords(b), 0.0f);
    state_.dram = &dram;
    timing_.resize(p.instructions.size());
    pending_.resize(p.instructions.size());
  }

  void run(SimReport& report);

 private:
  void completeAt(uint64_t t);
  void dispatch();
  bool tryStart(size_t unit, uint64_t t);
  /// Earliest cycle >= t at which no in-flight write of the unit overlaps what `inst` reads at start.
  uint64_t interlockUntil(const UnitState& u, const Instruction& inst, uint64_t t) const;
  [[noreturn]] void reportDeadlock(uint64_t t) const;

  const Program& program_;
  const hw::NpuConfig& cfg_;
  detail::MachineState state_;
  std::array<UnitState, kNumUnits> units_;
  std::array<std::array<uint64_t, kNumUnits>, kNumUnits> tokens_{};  ///< tokens_[from][to]
  size_t nextToDispatch_ = 0;
  size_t completed_ = 0;
  std::vector<InstructionTiming> timing_;
  std::vector<detail::PendingWrites> pending_;
  using Event = std::pair<uint64_t, size_t>;  ///< (finish cycle, instruction)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> finishes_;
  std::array<uint64_t, kNumUnits> wakeAt_{};  ///< interlock release time of a blocked head, or kNever
  std::array<UnitStats, kNumUnits> stats_{};
};

void EventLoop::completeAt(uint64_t t) {
  while (!finishes_.empty() && finishes_.top().first == t) {
    size_t idx = finishes_.top().second;
    finishes_.pop();
    const Instruction& in = program_.instructions[idx];
    detail::commit(pending_[idx], state_);
    pending_[idx] = {};
    auto from = static_cast<size_t>(in.unit());
    for (size_t to = 0; to < kNumUnits; ++to) {
      if (in.signalMask & (1u << to)) ++tokens_[from][to];
    }
    auto& inflight = units_[from].inFlight;
    std::erase_if(inflight, [&](const InFlightWrite& w) { return w.finish <= t; });
    ++completed_;
  }
}

void EventLoop::dispatch() {
  while (nextToDispatch_ < program_.instructions.size()) {
    const Instruction& in = program_.instructions[nextToDispatch_];
    auto u = static_cast<size_t>(in.unit());
    const hw::NpuUnitTiming* t[] = {&cfg_.load, &cfg_.matrix, &cfg_.vector, &cfg_.store};
    if (units_[u].queue.size() >= t[u]->queueDepth) return;  // in-order dispatch stalls on a full queue
    units_[u].queue.push_back(nextToDispatch_++);
  }
}

uint64_t EventLoop::interlockUntil(const UnitState& u, const Instruction& inst, uint64_t t) const {
  uint64_t until = t;
  for (const OperandAccess& a : sramAccesses(inst)) {
    if (a.kind != AccessKind::ReadAtStart) continue;
    uint64_t lo = a.operand.addr, hi = a.lastWord();
    for (const InFlightWrite& w : u.inFlight) {
      if (w.buffer == a.operand.buffer && w.lo <= hi && lo <= w.hi) until = std::max(until, w.finish);
    }
  }
  return until;
}

bool EventLoop::tryStart(size_t unitIndex, uint64_t t) {
  UnitState& u = units_[unitIndex];
  wakeAt_[unitIndex] = kNever;
  if (u.busyUntil > t || u.queue.empty()) return false;
  size_t idx = u.queue.front();
  const Instruction& in = program_.instructions[idx];
  for (size_t from = 0; from < kNumUnits; ++from) {
    if ((in.waitMask & (1u << from)) && tokens_[from][unitIndex] == 0) return false;
  }
  if (uint64_t until = interlockUntil(u, in, t); until > t) {
    wakeAt_[unitIndex] = until;
    return false;
  }
  for (size_t from = 0; from < kNumUnits; ++from) {
    if (in.waitMask & (1u << from)) --tokens_[from][unitIndex];
  }
  u.queue.pop_front();
  pending_[idx] = detail::executeAtStart(in, state_);
  InstructionCost cost = instructionCost(in, cfg_);
  InstructionTiming& tm = timing_[idx];
  tm.start = t;
  tm.end = t + cost.occupancy;
  tm.finish = std::max(t + cost.latency, u.lastFinish);
  u.busyUntil = tm.end;
  u.lastFinish = tm.finish;
  for (const OperandAccess& a : sramAccesses(in)) {
    if (a.kind == AccessKind::WriteAtFinish) u.inFlight.push_back({a.operand.buffer, a.operand.addr, a.lastWord(), tm.finish});
  }
  finishes_.push({tm.finish, idx});
  stats_[unitIndex].instructions++;
  stats_[unitIndex].busyCycles += cost.occupancy;
  return true;
}

void EventLoop::reportDeadlock(uint64_t t) const {
  std::string msg = fmt::format("NPU deadlock at cycle {}: {} of {} instructions completed and no unit can make progress",
                                t, completed_, program_.instructions.size());
  for (size_t u = 0; u < kNumUnits; ++u) {
    msg += fmt::format("\n  {}: ", unitName(static_cast<Unit>(u)));
    if (units_[u].queue.empty()) {
      msg += "queue empty";
      continue;
    }
    size_t idx = units_[u].queue.front();
    const Instruction& in = program_.instructions[idx];
    msg += fmt::format("head #{} ({}) waits for a token from", idx, opcodeName(in.opcode));
    for (size_t from = 0; from < kNumUnits; ++from) {
      if ((in.waitMask & (1u << from)) && tokens_[from][u] == 0) msg += fmt::format(" {}", unitName(static_cast<Unit>(from)));
    }
  }
  if (nextToDispatch_ < program_.instructions.size()) {
    const Instruction& in = program_.instructions[nextToDispatch_];
    msg += fmt::format("\n  dispatcher: instruction #{} ({}) waits for room in the full {} queue", nextToDispatch_,
                       opcodeName(in.opcode), unitName(in.unit()));
  }
  throw SimulationError(msg);
}

void EventLoop::run(SimReport& report) {
  uint64_t t = 0;
  const size_t total = program_.instructions.size();
  wakeAt_.fill(kNever);
  while (completed_ < total) {
    completeAt(t);
    for (bool progressed = true; progressed;) {
      progressed = false;
      dispatch();
      for (size_t u = 0; u < kNumUnits; ++u) progressed |= tryStart(u, t);
    }
    if (completed_ == total) break;
    uint64_t next = finishes_.empty() ? kNever : finishes_.top().first;
    for (size_t u = 0; u < kNumUnits; ++u) {
      if (units_[u].busyUntil > t) next = std::min(next, units_[u].busyUntil);
      next = std::min(next, wakeAt_[u]);
    }
    if (next == kNever) reportDeadlock(t);
    for (size_t u = 0; u < kNumUnits; ++u) {
      if (units_[u].busyUntil <= t && !units_[u].queue.empty()) stats_[u].stallCycles += next - t;
    }
    t = next;
  }
  for (const InstructionTiming& tm : timing_) report.totalCycles = std::max(report.totalCycles, tm.finish);
  report.units = stats_;
  report.timing = std::move(timing_);
}

}  // namespace

SimReport simulate(const Program& program, const hw::NpuConfig& cfg, Dram& dram, const SimOptions& options) {
  validateProgram(program, cfg, dram.words());
  SimReport report;
  report.clockMhz = cfg.clockMhz;
  report.dim = cfg.dim;
  EventLoop loop(program, cfg, dram);
  loop.run(report);
  for (const Instruction& in : program.instructions) {
    report.macs += instructionMacs(in);
    (in.opcode == Opcode::Load ? report.dramBytesRead : report.dramBytesWritten) += instructionDramBytes(in);
  }
  if (report.totalCycles > 0) {
    report.mmUtilization = double(report.macs) / (double(report.totalCycles) * cfg.dim * cfg.dim);
  }
  for (size_t b = 0; b < kNumBuffers; ++b) report.capacityBytes[b] = cfg.bufferBytes[b];
  detail::analyseAccesses(program, cfg, options.checkHazards, report);
  return report;
}

}  // namespace tessel::npu
