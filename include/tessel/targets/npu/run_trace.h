// The Chrome/Perfetto trace of a whole run of a compiled NPU model (`tessel sim --trace`, Compiled.trace in Python),
// and where its cycles went per node (`tessel sim --profile`).
#pragma once

#include <string>

#include "tessel/targets/npu/model_file.h"

namespace tessel::npu {

/// Writes one Chrome trace for the whole run to `path`: each NPU call's trace (one track per unit, SRAM counters)
/// shifted to start after the previous call's. UserError when the file cannot be written.
void writeRunTrace(const CompiledNpuModel& model, const NpuModelRun& run, const std::string& path);

/// Where a run's cycles went, per lowered node (its fused epilogue included), in the order the nodes started:
/// {"nodes": [{"node", "op", "subgraph", "instructions", "start", "finish" (cycles on the run's time line),
/// "busy": {"LD", "MM", "VEC", "ST"} (occupancy cycles), "idle_before": the same units' idle cycles that ended with
/// one of the node's instructions (what the unit waited for this node: its inputs, tokens or buffers), "gemms", "gemm_rows" (cycles an input row entered the
/// array), "gemm_overhead" (setup and weight-shift cycles of its gemms), "bias_gemm_cycles" (gemms of K = 1: a bias
/// or a broadcast added on the matrix unit)}, ...], "totals": the same sums over every node}.
nlohmann::json runProfileJson(const CompiledNpuModel& model, const NpuModelRun& run);

}  // namespace tessel::npu
