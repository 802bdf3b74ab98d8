// The static verifier of lowered NPU programs: bounds, reads of words written earlier, tokens balanced.
#pragma once

#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/targets/npu/lowering.h"

namespace tessel::npu {

/// Everything wrong with a lowered program, in program order (at most 20 word problems): validateProgram's field
/// and bounds checks; an SRAM word read that no earlier instruction writes; a DRAM word loaded that is no
/// constant, no input and not stored earlier; an output word never stored; tokens between two units whose
/// signals and waits do not balance. Each names the instruction and its node.
std::vector<std::string> programProblems(const LoweredSubgraph& lowered, const hw::NpuConfig& cfg);

/// programProblems as an InternalError (a compiler bug): run on every program the compiler lowers.
void verifyProgram(const LoweredSubgraph& lowered, const hw::NpuConfig& cfg);

}  // namespace tessel::npu
