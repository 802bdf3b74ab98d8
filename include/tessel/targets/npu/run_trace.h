// The Chrome/Perfetto trace of a whole run of a compiled NPU model (`tessel sim --trace`, Compiled.trace in Python).
#pragma once

#include <string>

#include "tessel/targets/npu/model_file.h"

namespace tessel::npu {

/// Writes one Chrome trace for the whole run to `path`: each NPU call's trace (one track per unit, SRAM counters)
/// shifted to start after the previous call's. UserError when the file cannot be written.
void writeRunTrace(const CompiledNpuModel& model, const NpuModelRun& run, const std::string& path);

}  // namespace tessel::npu
