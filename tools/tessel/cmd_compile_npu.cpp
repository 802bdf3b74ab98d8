// The NPU branch of `tessel compile` (--target npu: writes a .tnpu).
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

#include "npu_cli.h"
#include "tessel/eval/runner.h"

namespace tessel::cli {

bool isNpuModelPath(const std::string& path) { return path.size() > 5 && path.substr(path.size() - 5) == ".tnpu"; }

nlohmann::json compileNpuModel(const ModelOptions& modelOptions, const std::string& hwPath, std::string output,
                               bool quiet, const NpuScheduleFlags& flags) {
  if (hwPath.empty())
    throw UserError("tessel compile --target npu needs --hw CONFIG (a file, or a configuration name such as 'default')");
  auto start = std::chrono::steady_clock::now();
  hw::HardwareConfig config = hw::HardwareConfig::load(eval::findHardwareConfig(hwPath));
  if (output.empty()) output = std::filesystem::path(modelOptions.path).stem().string() + ".tnpu";
  if (!isNpuModelPath(output)) throw UserError(fmt::format("-o {}: an NPU model file must end in .tnpu", output));
  auto model = modelOptions.load(InferenceMode::Strict);
  npu::ScheduleChooser chooser = [&](const Graph& body, const hw::Device& device, const std::string& name) {
    npu::NpuSchedule s = npu::compilerSchedule(body, device.npu, name);
    if (!flags.strategy.empty()) s.strategy = flags.strategy;
    if (flags.window >= 0) s.window = flags.window;
    return s;
  };
  npu::CompiledNpuModel compiled = npu::compileForNpu(*model, config, chooser);
  npu::writeNpuModel(compiled, output);
  size_t instructions = 0, weights = 0, npuNodes = 0;
  for (const auto& s : compiled.subgraphs) {
    instructions += s.program.instructions.size();
    weights += s.constants.size() * 4;
    npuNodes += s.ops.size();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t cpuNodes = compiled.cpuPart->graph->numNodes() - compiled.subgraphs.size();
  if (!quiet)
    fmt::print("compiled {} for '{}' (hash {}) in {:.1f} s: {} NPU subgraph(s), {} lowered node(s), {} instructions, "
               "{} of NPU constants; {} node(s) left on the CPU\n",
               output, config.name(), config.hashHex(), seconds, compiled.subgraphs.size(), npuNodes, instructions,
               humanBytes(static_cast<double>(weights)), cpuNodes);
  return {{"target", "npu"},          {"model", modelOptions.path},   {"output", output},
          {"hw_config", config.name()}, {"hw_hash", config.hashHex()}, {"seconds", seconds},
          {"npu_subgraphs", compiled.subgraphs.size()}, {"lowered_nodes", npuNodes},
          {"instructions", instructions}, {"npu_constant_bytes", weights}, {"cpu_nodes", cpuNodes}};
}

}  // namespace tessel::cli
