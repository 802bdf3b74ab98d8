// The NPU's analytical cycle model (docs/npu.md, "Timing model"); every constant comes from hw::NpuConfig.
#include "tessel/targets/npu/timing.h"

namespace tessel::npu {

namespace {
uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
}  // namespace

uint64_t instructionMacs(const Instruction& in) {
  if (in.opcode != Opcode::Gemm) return 0;
  return uint64_t{in.outer} * in.inner * in.gemmK * in.gemmN;
}

uint64_t instructionDramBytes(const Instruction& in) {
  if (in.opcode != Opcode::Load && in.opcode != Opcode::Store) return 0;
  return uint64_t{in.outer} * in.inner * in.vecLen * 4;
}

uint64_t instructionDramBursts(const Instruction& in) {
  if (in.opcode != Opcode::Load && in.opcode != Opcode::Store) return 0;
  bool denseRows = in.inner == 1 || in.dramStrideInner == in.vecLen;
  return denseRows ? in.outer : uint64_t{in.outer} * in.inner;
}

InstructionCost instructionCost(const Instruction& in, const hw::NpuConfig& cfg) {
  InstructionCost cost;
  switch (in.opcode) {
    case Opcode::Sync:
      cost.occupancy = 1;
      cost.latency = 1;
      return cost;
    case Opcode::Load:
    case Opcode::Store: {
      bool load = in.opcode == Opcode::Load;
      const hw::NpuUnitTiming& t = load ? cfg.load : cfg.store;
      uint64_t bandwidth = load ? cfg.loadBytesPerCycle : cfg.storeBytesPerCycle;
      cost.occupancy = t.setupCycles + ceilDiv(instructionDramBytes(in), bandwidth) +
                       instructionDramBursts(in) * cfg.dmaRowCycles;
      cost.latency = cost.occupancy + t.latencyCycles;
      return cost;
    }
    case Opcode::Gemm:
      // One input row enters the array per cycle; a new weight block takes DIM cycles to shift in;
      // the last row's results leave the systolic array 2*DIM-2 cycles after it entered.
      cost.occupancy = cfg.matrix.setupCycles + uint64_t{in.outer} * in.inner + (in.keepWeights ? 0 : cfg.dim);
      cost.latency = cost.occupancy + 2 * uint64_t{cfg.dim} - 2 + cfg.matrix.latencyCycles;
      return cost;
    default: {
      uint64_t perVector = isComplexVecOp(in.vecOp) ? cfg.vectorCyclesPerVectorComplex : cfg.vectorCyclesPerVector;
      uint64_t vectors = uint64_t{in.outer} * in.inner * ceilDiv(in.vecLen, cfg.vectorLanes);
      cost.occupancy = cfg.vector.setupCycles + vectors * perVector;
      cost.latency = cost.occupancy + cfg.vector.latencyCycles;
      return cost;
    }
  }
}

}  // namespace tessel::npu
