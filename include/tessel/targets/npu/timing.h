// The NPU's analytical cycle model: occupancy and latency of each instruction from the hardware config.
#pragma once

#include <cstdint>

#include "tessel/hw/hardware_config.h"
#include "tessel/targets/npu/isa.h"

namespace tessel::npu {

/// Cycles an instruction keeps its unit busy (occupancy) and cycles from its start until its results
/// (and the tokens it signals) are visible (latency >= occupancy). Formulas: docs/npu.md, "Timing model".
struct InstructionCost {
  uint64_t occupancy = 0;
  uint64_t latency = 0;
};

InstructionCost instructionCost(const Instruction& inst, const hw::NpuConfig& cfg);

/// Useful multiply-accumulates of a Gemm (outer * inner * k * n); 0 for other opcodes.
uint64_t instructionMacs(const Instruction& inst);

/// DRAM bytes a Load reads or a Store writes (padding is generated on chip, not read); 0 otherwise.
uint64_t instructionDramBytes(const Instruction& inst);

/// Contiguous DRAM bursts of a Load/Store: one per outer row when the inner steps are dense, else one per vector.
uint64_t instructionDramBursts(const Instruction& inst);

}  // namespace tessel::npu
