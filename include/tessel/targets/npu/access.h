// Which SRAM and DRAM words an NPU instruction reads and writes, and when (start or finish);
// shared by the simulator, the hazard checker and the static program validator.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/targets/npu/isa.h"

namespace tessel::npu {

/// When in an instruction's life an access happens. Reads happen when it starts, writes when its
/// results become visible (start + latency); the matrix unit's accumulate reads the accumulator at
/// the array's output, i.e. at finish too (so back-to-back accumulating Gemms need no interlock).
enum class AccessKind : uint8_t { ReadAtStart, ReadAtFinish, WriteAtFinish };

/// One strided SRAM box an instruction touches: words addr + o*so + i*si + c for o < outer, i < inner, c < vecLen.
struct OperandAccess {
  SramOperand operand;
  uint32_t outer = 1, inner = 1, vecLen = 1;
  AccessKind kind = AccessKind::ReadAtStart;
  uint8_t slot = 0;  ///< which operand of the instruction: 0 dst, 1 srcA, 2 srcB, 3 srcC

  /// Highest word index touched (the box's last element).
  uint64_t lastWord() const {
    return operand.addr + uint64_t{outer - 1} * operand.strideOuter + uint64_t{inner - 1} * operand.strideInner +
           vecLen - 1;
  }
  /// Calls fn(wordIndex) for every element (repeats included when strides alias).
  void forEachWord(const std::function<void(uint64_t)>& fn) const;
  /// Calls fn(firstWord, vecLen) for each of the outer x inner contiguous runs, in element order
  /// (inline, for the per-word loops of the hazard checker).
  template <class Fn>
  void forEachRun(Fn&& fn) const {
    for (uint32_t o = 0; o < outer; ++o) {
      for (uint32_t i = 0; i < inner; ++i) {
        fn(operand.addr + uint64_t{o} * operand.strideOuter + uint64_t{i} * operand.strideInner, uint64_t{vecLen});
      }
    }
  }
};

/// The SRAM boxes of an instruction, reads listed before writes.
std::vector<OperandAccess> sramAccesses(const Instruction& inst);

/// Highest DRAM word a Load/Store touches (undefined for other opcodes).
uint64_t lastDramWord(const Instruction& inst);

/// Checks a whole program before it runs: field ranges (counts >= 1, Gemm k,n <= DIM, operand buffers),
/// token masks (no bits for the instruction's own unit), every SRAM box inside its buffer's capacity and
/// every DRAM access inside `dramWords`. Throws UserError listing every violation (first 20).
void validateProgram(const Program& program, const hw::NpuConfig& cfg, uint64_t dramWords);

}  // namespace tessel::npu
