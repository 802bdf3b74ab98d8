// The NPU branch of `tessel compile` (--target npu: writes a .tnpu) and of `tessel run` (runs a .tnpu).
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

#include "npu_cli.h"
#include "tessel/frontend/tensor_io.h"

namespace tessel::cli {

bool isNpuModelPath(const std::string& path) { return path.size() > 5 && path.substr(path.size() - 5) == ".tnpu"; }

void compileNpuModel(const ModelOptions& modelOptions, const std::string& hwPath, std::string output) {
  if (hwPath.empty()) throw UserError("tessel compile --target npu needs --hw CONFIG (e.g. configs/default.json)");
  auto start = std::chrono::steady_clock::now();
  hw::HardwareConfig config = hw::HardwareConfig::load(hwPath);
  auto model = modelOptions.load(InferenceMode::Strict);
  if (output.empty()) output = std::filesystem::path(modelOptions.path).stem().string() + ".tnpu";
  if (!isNpuModelPath(output)) throw UserError(fmt::format("-o {}: an NPU model file must end in .tnpu", output));
  npu::CompiledNpuModel compiled = npu::compileForNpu(*model, config);
  npu::writeNpuModel(compiled, output);
  size_t instructions = 0, weights = 0, npuNodes = 0;
  for (const auto& s : compiled.subgraphs) {
    instructions += s.program.instructions.size();
    weights += s.constants.size() * 4;
    npuNodes += s.ops.size();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("compiled {} for '{}' (hash {}) in {:.1f} s: {} NPU subgraph(s), {} lowered node(s), {} instructions, "
             "{} of NPU constants; {} node(s) left on the CPU\n",
             output, config.name(), config.hashHex(), seconds, compiled.subgraphs.size(), npuNodes, instructions,
             humanBytes(static_cast<double>(weights)), compiled.cpuPart->graph->numNodes() - compiled.subgraphs.size());
}

npu::CompiledNpuModel loadNpuModel(const std::string& path, const std::string& hwPath) {
  if (hwPath.empty()) return npu::readNpuModel(path);
  hw::HardwareConfig config = hw::HardwareConfig::load(hwPath);
  return npu::readNpuModel(path, &config);
}

std::map<std::string, Tensor> npuModelInputs(const npu::CompiledNpuModel& model, const InputOptions& inputs, bool quiet) {
  Graph g;  // just the declared inputs, so files and seeded random values resolve as for the .onnx
  for (const auto& in : model.inputs) g.addInput(in.name, TensorType::fromShape(in.dtype, in.shape));
  return inputs.resolve(g, quiet);
}

void runNpuModelCli(const std::string& path, const InputOptions& inputs, const std::string& outputDir, bool quiet,
                    const std::string& hwPath) {
  npu::CompiledNpuModel model = loadNpuModel(path, hwPath);
  auto tensors = npuModelInputs(model, inputs, quiet);
  auto start = std::chrono::steady_clock::now();
  npu::NpuModelRun run = npu::runNpuModel(model, tensors);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < run.outputs.size(); ++i) {
    const std::string& name = model.outputs[i].name;
    if (!outputDir.empty()) writeNpy((std::filesystem::path(outputDir) / (fileNameFor(name) + ".npy")).string(), run.outputs[i]);
    if (!quiet) fmt::print("output '{}': {}\n", name, run.outputs[i].summary());
  }
  if (quiet) return;
  uint64_t cycles = 0, hazards = 0;
  for (const auto& s : run.subgraphs) cycles += s.report.totalCycles, hazards += s.report.hazards.size();
  fmt::print("ran {} ({} NPU call(s) on the simulator: {} cycles, {} hazard(s); {} host<->NPU transfers) in {:.1f} ms{}\n",
             path, run.subgraphs.size(), cycles, hazards, humanBytes(static_cast<double>(run.transferBytes)), ms,
             outputDir.empty() ? "" : fmt::format("; outputs written to {}/", outputDir));
}

}  // namespace tessel::cli
