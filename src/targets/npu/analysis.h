// After a run: per-word hazard check in program order, SRAM liveness (peak bytes in use), footprints
// and the lower bounds on cycles.
#pragma once

#include "tessel/hw/hardware_config.h"
#include "tessel/targets/npu/simulator.h"

namespace tessel::npu::detail {

/// Fills report.hazards, uninitialisedReads, peakSramBytes, sramUsage, footprintBytes and bounds from
/// the program and report.timing. With `perWord` false only footprints and the resource bounds are computed.
void analyseAccesses(const Program& program, const hw::NpuConfig& cfg, bool perWord, SimReport& report);

}  // namespace tessel::npu::detail
