// Reports on NPU schedules (`tessel sched`): per-group figures of a simulated subgraph, and the compiler's
// schedule beside its baselines (sequential, greedy, layer by layer) and the schedule-independent bounds.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"
#include "tessel/targets/npu/model_file.h"

namespace tessel::npu {

/// One row per schedule group of a simulated subgraph: its nodes, the cycles from its first instruction's
/// start to its last's finish, busy cycles per unit, MACs and the matrix unit's utilisation in that span, and
/// DRAM bytes moved.
nlohmann::json groupTable(const LoweredSubgraph& lowered, const SimReport& report);

/// Every node of a compiled model the partitioner left on the host: [{node, op, reason}].
nlohmann::json hostNodesJson(const CompiledNpuModel& compiled);

struct CompareOptions {
  std::map<std::string, Tensor> inputs;                  ///< model inputs (all of them)
  std::function<void(const std::string&)> progress;      ///< called before each variant is compiled
};

/// Compiles and simulates the model under the compiler's schedule ("window") and its baselines:
/// "sequential" (no two instructions overlap), "greedy" (list scheduling without a window: cycles and the
/// SRAM it would need on buffers as large as the encoding allows, and its cycles forced into the real
/// buffers), "layer_by_layer" (no tile fusion). Returns one object: mac_ideal_cycles, lower_bound_cycles,
/// compulsory_dram_bytes, host_nodes, schedules{...} and the window schedule's per-group table.
nlohmann::json compareSchedules(const Model& model, const hw::HardwareConfig& config, const CompareOptions& options);

/// Readable form of compareSchedules' result.
std::string compareText(const nlohmann::json& comparison);

/// A copy of `config` whose NPU buffers are as large as the instruction encoding can address (4 MiB each).
hw::HardwareConfig unboundedBuffers(const hw::HardwareConfig& config);

}  // namespace tessel::npu
