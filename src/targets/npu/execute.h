// The NPU's arithmetic: what an instruction computes from the machine state when it starts, and the
// writes it commits when it finishes (float32 throughout).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tessel/targets/npu/isa.h"
#include "tessel/targets/npu/simulator.h"

namespace tessel::npu::detail {

/// Memory and the matrix unit's resident weight block.
struct MachineState {
  std::array<std::vector<float>, kNumBuffers> sram;
  Dram* dram = nullptr;
  std::vector<float> weights;  ///< k x n block held by the array
  uint32_t weightK = 0, weightN = 0;
};

/// Writes an instruction commits at its finish. With addToExisting the value is added to the word's
/// value at commit time (the accumulator adder at the array's output).
struct PendingWrites {
  bool toDram = false;
  Buffer buffer = Buffer::Input;
  bool addToExisting = false;
  std::vector<uint64_t> words;
  std::vector<float> values;
};

/// Reads the operands of `inst` now and computes its results. Throws SimulationError for keep_weights
/// without a resident block of the right shape.
PendingWrites executeAtStart(const Instruction& inst, MachineState& state);

/// Applies the writes.
void commit(const PendingWrites& writes, MachineState& state);

}  // namespace tessel::npu::detail
