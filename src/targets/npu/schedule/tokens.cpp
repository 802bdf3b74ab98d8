// The final instruction stream of a scheduled virtual program: region addresses resolved, instructions in
// dispatch order, and dependency tokens for the cross-unit dependencies of the physical program that earlier
// tokens and unit order do not already imply (a transitive reduction computed with vector clocks).
#include <algorithm>

#include "instruction_scheduler.h"
#include "tessel/support/error.h"

namespace tessel::npu::sched {
namespace {

/// Per unit, the latest program index of each unit's instructions known to have finished.
using Clock = std::array<int32_t, kNumUnits>;

Instruction resolve(const VirtualInstruction& vi, const std::vector<uint64_t>& base) {
  Instruction inst = vi.inst;
  SramOperand* operands[4] = {&inst.dst, &inst.srcA, &inst.srcB, &inst.srcC};
  for (size_t k = 0; k < 4; ++k) {
    const int32_t r = vi.region[k];
    if (r < 0) continue;
    const uint64_t addr = base[static_cast<size_t>(r)] + operands[k]->addr;
    TESSEL_ASSERT(addr < (uint64_t{1} << kSramAddrBits), "npu scheduling: region address beyond the encoding");
    operands[k]->addr = static_cast<uint32_t>(addr);
  }
  return inst;
}

}  // namespace

Program materialize(const VirtualProgram& program, const ScheduleResult& result, bool serial) {
  const size_t n = result.order.size();
  Program out;
  out.instructions.reserve(n);
  for (uint32_t i : result.order) out.instructions.push_back(resolve(program.instructions[i], result.regionBase));

  DependencyTracker tracker;
  std::vector<WordRun> runs;
  std::array<Clock, kNumUnits> know;  // know[u]: what unit u's next instruction knows at its start
  for (Clock& c : know) c.fill(-1);
  std::vector<Clock> atStart(n);      // know[unit] as instruction j started (after its waits)
  for (size_t j = 0; j < n; ++j) {
    Instruction& inst = out.instructions[j];
    const auto u = static_cast<size_t>(inst.unit());
    std::array<int32_t, kNumUnits> need{-1, -1, -1, -1};
    runs.clear();
    instructionRuns(inst, runs, true);
    tracker.visit(static_cast<uint32_t>(j), inst.unit(), runs, [&](const Dependency& d) {
      const auto pu = static_cast<size_t>(out.instructions[d.producer].unit());
      if (pu != u) need[pu] = std::max(need[pu], static_cast<int32_t>(d.producer));
    });
    if (serial && j > 0) {
      const auto pu = static_cast<size_t>(out.instructions[j - 1].unit());
      if (pu != u) need[pu] = std::max(need[pu], static_cast<int32_t>(j - 1));
    }
    // Take the tokens of uncovered producers, latest first: a later producer's clock often covers the others.
    for (;;) {
      int32_t pick = -1;
      for (size_t f = 0; f < kNumUnits; ++f)
        if (need[f] > know[u][f] && need[f] > pick) pick = need[f];
      if (pick < 0) break;
      const auto pu = static_cast<size_t>(out.instructions[static_cast<size_t>(pick)].unit());
      out.instructions[static_cast<size_t>(pick)].signalMask |= static_cast<uint8_t>(1u << u);
      inst.waitMask |= static_cast<uint8_t>(1u << pu);
      // What the producer knew when it started, plus itself (its unit completes in order).
      Clock c = atStart[static_cast<size_t>(pick)];
      c[pu] = pick;
      for (size_t f = 0; f < kNumUnits; ++f) know[u][f] = std::max(know[u][f], c[f]);
    }
    atStart[j] = know[u];
  }
  return out;
}

}  // namespace tessel::npu::sched
