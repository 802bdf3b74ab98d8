// One interface to run any form of a model on named inputs: a model file on the reference interpreter, a
// compiled CPU library (.so), a compiled NPU model (.tnpu) on the simulator, or a model built for a target.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessel/frontend/onnx_importer.h"
#include "tessel/frontend/tensor_io.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/npu/model_file.h"

namespace tessel::cpu {
class CompiledModel;
}

namespace tessel::eval {

/// How artifacts are opened or built.
struct RunnerOptions {
  ImportOptions import;     ///< model files: shape overrides, undefined dimensions, inference mode
  int threads = 0;          ///< compiled CPU models: threads (0: all cores)
  std::string hwConfig;     ///< npu: the hardware configuration to build for / to require of a .tnpu ("": any)
  cpu::CompileOptions cpu;  ///< the cpu target's compile options (buildForTarget "cpu")
  uint64_t seed = 0;        ///< the interpreter's random operators
};

/// Runs one form of a model.
class Runner {
 public:
  virtual ~Runner() = default;
  /// "ref", "cpu", "npu" or "saved" (outputs read from a .npz).
  virtual std::string target() const = 0;
  /// What runs, e.g. "resnet18.so (cpu)".
  virtual std::string label() const = 0;
  /// A graph whose inputs are the declared inputs (for eval::completeInputs).
  virtual const Graph& signature() const = 0;
  virtual std::vector<std::string> outputNames() const = 0;
  /// Outputs in outputNames() order. UserError for missing inputs or inputs of the wrong type or shape.
  virtual std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) = 0;
  /// One line about the last run (node count, library hash, simulated cycles).
  virtual std::string lastRunSummary() const = 0;
  /// The loaded CPU library this runner runs, when it runs one directly (`tessel bench` times its kernel
  /// calls); nullptr otherwise.
  virtual cpu::CompiledModel* cpuLibrary() { return nullptr; }
};

/// A graph with just these inputs, for compiled artifacts that declare theirs as (name, dtype, shape)
/// (cpu::CompiledTensorInfo, npu::IoTensor): the signature eval::completeInputs checks against.
template <class Info>
std::unique_ptr<Graph> inputSignature(const std::vector<Info>& inputs) {
  auto g = std::make_unique<Graph>();
  for (const Info& in : inputs) g->addInput(in.name, TensorType::fromShape(in.dtype, in.shape));
  return g;
}

/// The forms of a model path: "model" (.onnx, .tir), "cpu" (.so), "npu" (.tnpu), "outputs" (.npz of saved
/// outputs, a reference for comparisons); "" for anything else.
std::string artifactKind(const std::string& path);

/// Opens a model file on the reference interpreter, a compiled CPU model, a compiled NPU model or saved
/// outputs, by the path's extension (UserError naming the accepted forms otherwise).
std::unique_ptr<Runner> openArtifact(const std::string& path, const RunnerOptions& options);

/// Outputs computed earlier (read from a .npz, or given by a caller) as a runner of target "saved": a reference for
/// comparisons that takes no inputs; run() returns `outputs` in order, lastRunSummary() `summary`.
std::unique_ptr<Runner> savedOutputs(std::vector<NamedTensor> outputs, std::string label, std::string summary);

/// Builds a model file for `target`: "ref" (the interpreter), "cpu" (compiled into a temporary library),
/// "npu" (compiled for options.hwConfig, run on the simulator).
std::unique_ptr<Runner> buildForTarget(const std::string& modelPath, const std::string& target,
                                       const RunnerOptions& options);

}  // namespace tessel::eval

namespace tessel::eval {

/// Reads a .tnpu; with a non-empty `hwConfig` (see findHardwareConfig) refuses a file compiled for another
/// configuration.
npu::CompiledNpuModel readNpuArtifact(const std::string& path, const std::string& hwConfig);

/// A hardware configuration argument as a file path: an existing file, else a configuration of this Tessel
/// by name ("default", "tiny.json"; see DataPaths::configsDir). UserError listing the names otherwise.
std::string findHardwareConfig(const std::string& nameOrPath);

}  // namespace tessel::eval
