// The compiled NPU model file (.tnpu, S1.5): header (magic, version, configuration hash), the configuration,
// the I/O description, the CPU part as text IR, per NPU subgraph its instruction stream, DRAM layout and
// weights, and (version 3) the CPU part compiled by the cpu target; compiling a model into it, loading
// (strictly validated) and running it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"
#include "tessel/partition/partitioner.h"
#include "tessel/targets/cpu/loader.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/simulator.h"

namespace tessel::npu {

inline constexpr char kModelFileMagic[8] = {'T', 'E', 'S', 'S', 'N', 'P', 'U', '\0'};
/// Version 3 added the HOST section; version 2 files (no compiled host part) are still read.
inline constexpr uint32_t kModelFileVersion = 3;
inline constexpr uint32_t kOldestModelFileVersion = 2;

/// A model input or output as the file describes it.
struct IoTensor {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
};

/// The CPU part as compiled code (the HOST section): a shared library of the cpu target in which each
/// tessel.NpuCall node is a call back into the host, which runs that subgraph on the simulator.
struct HostCode {
  std::vector<uint8_t> library;  ///< the .so's bytes; empty: the interpreter runs the CPU part (version 2 files)
  std::string hash;              ///< the library's model hash (tessel_model_hash)
  int threads = 0;               ///< threads of the loaded instance (0: all cores); set before the first run
  /// The library loaded on the first run and kept for the next ones (not part of the file).
  mutable std::shared_ptr<cpu::CompiledModel> loaded;
};

/// Everything a .tnpu file holds.
struct CompiledNpuModel {
  hw::HardwareConfig config;
  std::unique_ptr<Model> cpuPart;  ///< top-level graph; NPU subgraphs appear as tessel.NpuCall nodes
  HostCode host;                   ///< the CPU part compiled (when not empty, runs instead of cpuPart)
  std::vector<LoweredSubgraph> subgraphs;
  std::vector<IoTensor> inputs, outputs;
  /// Where the partitioner put each node and why (known after compiling, not stored in the file).
  std::vector<partition::Placement> placements;
};

/// How compileForNpu schedules each NPU subgraph (the default: compilerSchedule for its device).
using ScheduleChooser =
    std::function<NpuSchedule(const Graph& body, const hw::Device& device, const std::string& subgraph)>;

/// Prepares, partitions and lowers (a copy of) a model for `config` (which must have an npu device).
CompiledNpuModel compileForNpu(const Model& model, const hw::HardwareConfig& config, const ScheduleChooser& chooser = {});
/// Partitions and lowers a model that ran the "npu" pipeline (the model is consumed). A configuration
/// without an npu device leaves every node on the host.
CompiledNpuModel compilePreparedForNpu(Model& model, const hw::HardwareConfig& config,
                                       const ScheduleChooser& chooser = {});

/// The NPU nodes of a compiled model's subgraphs that the partitioner left on the host, with its reasons.
std::vector<partition::Placement> hostPlacements(const CompiledNpuModel& model);

/// Serialises to bytes / writes a file (UserError when not writable).
std::vector<uint8_t> serializeNpuModel(const CompiledNpuModel& model);
void writeNpuModel(const CompiledNpuModel& model, const std::string& path);

/// Parses and validates bytes; every malformed input is a UserError naming `origin` and what was wrong.
CompiledNpuModel parseNpuModel(const std::vector<uint8_t>& bytes, const std::string& origin);
/// Reads a file; when `expected` is given, refuses a file compiled for another configuration (hash).
CompiledNpuModel readNpuModel(const std::string& path, const hw::HardwareConfig* expected = nullptr);

/// One NPU subgraph execution of a run.
struct SubgraphRun {
  std::string name;
  SimReport report;
};

/// Result of running a whole compiled model.
struct NpuModelRun {
  std::vector<Tensor> outputs;        ///< in model-output order
  std::vector<SubgraphRun> subgraphs; ///< in execution order
  uint64_t transferBytes = 0;         ///< bytes moved between the host and the NPU's DRAM (inputs + outputs of calls)
};

/// Runs the CPU part (its compiled code when the model has it, else the reference kernels) and each NPU
/// subgraph on the simulator.
NpuModelRun runNpuModel(const CompiledNpuModel& model, const std::map<std::string, Tensor>& inputs,
                        const SimOptions& options = {});

/// The lowered subgraph a run's call `name` ran (InternalError when the model has none of that name).
const LoweredSubgraph& loweredSubgraph(const CompiledNpuModel& model, const std::string& name);

/// Totals over a run for reports: one JSON object with cycles, dram_bytes, peak_sram_bytes,
/// sram_capacity_bytes, mm_utilization, lower bounds, hazards and per-subgraph details.
nlohmann::json runSummaryJson(const CompiledNpuModel& model, const NpuModelRun& run);

}  // namespace tessel::npu
