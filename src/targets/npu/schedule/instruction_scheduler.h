// Instruction-level scheduling of a lowered subgraph (S2.3-S2.7, S0.6): the instruction dependency graph
// of a virtual program, resource-constrained list scheduling onto LD/MM/VEC/ST under buffer capacity with a
// sliding window of tiles, and the final program: addresses for the regions, program order, tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/targets/npu/dependencies.h"
#include "tessel/targets/npu/simulator.h"
#include "tessel/targets/npu/timing.h"
#include "virtual_program.h"

namespace tessel::npu::sched {

/// An edge of the instruction dependency graph, seen from one end.
struct DepEdge {
  uint32_t other = 0;    ///< the instruction at the other end
  uint8_t kinds = 0;     ///< bit DepKind: which dependencies join the two (RAW, WAR, WAW)
  bool interlock = false;  ///< RAW read at start: the consumer waits for the producer's results
  bool has(DepKind k) const { return (kinds >> static_cast<unsigned>(k)) & 1; }
};

/// The instruction dependency graph (S2.3): edges from the shared dependency analysis over the virtual
/// regions and DRAM, each (producer, consumer) pair once; critical-path heights (latency-weighted longest
/// path to the end: the list scheduler's priority) and parallel levels (S2.4: level k may run once levels
/// < k are done).
struct InstructionGraph {
  std::vector<uint32_t> predOffset, succOffset;  ///< CSR offsets, size n + 1
  std::vector<DepEdge> preds, succs;
  std::vector<InstructionCost> cost;
  std::vector<Unit> unit;
  std::vector<uint64_t> height;
  std::vector<uint32_t> level;

  size_t size() const { return unit.size(); }
  size_t edges() const { return preds.size(); }
  const DepEdge* predBegin(size_t i) const { return preds.data() + predOffset[i]; }
  const DepEdge* predEnd(size_t i) const { return preds.data() + predOffset[i + 1]; }
  const DepEdge* succBegin(size_t i) const { return succs.data() + succOffset[i]; }
  const DepEdge* succEnd(size_t i) const { return succs.data() + succOffset[i + 1]; }
};

InstructionGraph buildInstructionGraph(const VirtualProgram& program, const hw::NpuConfig& cfg);

/// Graphviz text of the dependency graph of instructions [first, first + count): nodes labelled with their
/// disassembly and level, edges with their kinds (RAW solid, WAR dashed, WAW dotted).
std::string dependencyGraphDot(const VirtualProgram& program, const InstructionGraph& graph, size_t first, size_t count);

struct ScheduleOptions {
  /// Sequential: the window schedule's order and addresses, timed one instruction after another (the
  /// baseline without overlap; the lowering's order one at a time can leave a buffer too fragmented).
  enum class Mode { Window, Greedy, Sequential };
  Mode mode = Mode::Window;
  uint32_t window = 2;          ///< Window, Sequential: tiles admitted at once
  bool boundedSram = true;      ///< false: every buffer as large as the encoding allows (greedy's need)
  /// Regions get space in order of their first use, so a later tile never takes the space the oldest one
  /// needs (the window's admission in priority order); false (greedy): any ready instruction that finds space.
  bool oldestFirst = true;
};

/// Result of scheduling: the order instructions are dispatched in, an address for every region and the
/// modelled times (the simulator's own cost rules).
struct ScheduleResult {
  std::vector<uint32_t> order;
  std::vector<uint64_t> regionBase;
  std::vector<InstructionTiming> timing;  ///< per virtual instruction
  uint64_t cycles = 0;
  std::array<uint64_t, kNumBuffers> peakWords{};  ///< most words allocated at once per buffer
};

/// Resource-constrained list scheduling (S2.5-S2.7): each unit issues in order, one instruction at a time;
/// an instruction may issue once its dependencies allow (cross-unit: the producer finished; same unit: the
/// producer issued, and finished if it is a RAW read at start), its tile is inside the window (S0.6) and its
/// regions can be given space. Among candidates the highest critical-path height wins, then the lower tile,
/// then program order. Regions get space first-fit in the order of their first use in the lowering (so the
/// oldest tile is never starved) and are released when their last access finishes (S2.7). Throws
/// InternalError when the buffers cannot hold what the oldest tile needs.
ScheduleResult listSchedule(const VirtualProgram& program, const InstructionGraph& graph, const hw::NpuConfig& cfg,
                            const ScheduleOptions& options);

/// The final program: instructions in `result.order` with region addresses resolved, and the dependency
/// tokens derived from the shared analysis on the physical program: one token per cross-unit dependency not
/// already implied by earlier tokens and unit order (transitive reduction by vector clocks). With `serial`
/// every instruction also waits for the one before it (the sequential baseline).
Program materialize(const VirtualProgram& program, const ScheduleResult& result, bool serial = false);

}  // namespace tessel::npu::sched
