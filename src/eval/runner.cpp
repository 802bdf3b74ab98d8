// Opening any form of a model through the target that made it (the target registry: ref for model files,
// cpu for .so, npu for .tnpu), and saved outputs.
#include "tessel/eval/runner.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>

#include "tessel/frontend/tensor_io.h"
#include "tessel/support/data_paths.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/target.h"

namespace fs = std::filesystem;

namespace tessel::eval {
namespace {

/// Outputs computed earlier (a .npz of output name -> array, or given by a caller): a reference that needs no inputs.
class SavedOutputsRunner : public Runner {
 public:
  SavedOutputsRunner(std::vector<NamedTensor> arrays, std::string label, std::string summary)
      : label_(std::move(label)), summary_(std::move(summary)), arrays_(std::move(arrays)) {}
  std::string target() const override { return "saved"; }
  std::string label() const override { return label_; }
  const Graph& signature() const override { return signature_; }
  std::vector<std::string> outputNames() const override {
    std::vector<std::string> names;
    for (const auto& [name, t] : arrays_) names.push_back(name);
    return names;
  }
  std::vector<Tensor> run(const std::map<std::string, Tensor>&) override {
    std::vector<Tensor> out;
    for (const auto& [name, t] : arrays_) out.push_back(t);
    return out;
  }
  std::string lastRunSummary() const override { return summary_; }

 private:
  std::string label_, summary_;
  std::vector<NamedTensor> arrays_;
  Graph signature_;
};

}  // namespace

npu::CompiledNpuModel readNpuArtifact(const std::string& path, const std::string& hwConfig) {
  if (hwConfig.empty()) return npu::readNpuModel(path);
  hw::HardwareConfig config = hw::HardwareConfig::load(findHardwareConfig(hwConfig));
  return npu::readNpuModel(path, &config);
}

std::string artifactKind(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  if (ext == ".onnx" || ext == ".tir") return "model";
  if (ext == ".npz") return "outputs";
  if (const target::Target* t = target::TargetRegistry::instance().forExtension(ext)) return t->name();
  return "";
}

std::string findHardwareConfig(const std::string& nameOrPath) {
  std::error_code ec;
  if (fs::is_regular_file(nameOrPath, ec)) return nameOrPath;
  const fs::path dir = dataPaths().configsDir;
  if (nameOrPath.find('/') == std::string::npos) {
    for (const std::string& candidate : {nameOrPath, nameOrPath + ".json"})
      if (fs::is_regular_file(dir / candidate, ec)) return (dir / candidate).string();
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  throw UserError(fmt::format("hardware configuration '{}': no such file, and not one of this Tessel's configurations "
                              "({}: {})", nameOrPath, dir.string(), fmt::join(names, ", ")));
}

std::unique_ptr<Runner> savedOutputs(std::vector<NamedTensor> outputs, std::string label, std::string summary) {
  return std::make_unique<SavedOutputsRunner>(std::move(outputs), std::move(label), std::move(summary));
}

std::unique_ptr<Runner> openArtifact(const std::string& path, const RunnerOptions& options) {
  std::string kind = artifactKind(path);
  if (kind == "outputs") {
    std::vector<NamedTensor> arrays = readNpz(path);
    std::string summary = fmt::format("read {} saved output(s) from {}", arrays.size(), path);
    return savedOutputs(std::move(arrays), path + " (saved outputs)", std::move(summary));
  }
  const target::TargetRegistry& targets = target::TargetRegistry::instance();
  if (kind == "model") return targets.get("ref").load(path, options);
  if (!kind.empty()) return targets.get(kind).load(path, options);
  std::string forms;
  for (const std::string& name : targets.names())
    if (const target::Target& t = targets.get(name); !t.artifactExtension().empty())
      forms += fmt::format(", {} compiled for the {} target", t.artifactExtension(), name);
  throw UserError(fmt::format("'{}': unknown kind of model (expected .onnx or .tir to run on the reference "
                              "interpreter{}, .npz of saved outputs)", path, forms));
}

std::unique_ptr<Runner> buildForTarget(const std::string& modelPath, const std::string& target,
                                       const RunnerOptions& options) {
  const target::Target& t = target::TargetRegistry::instance().get(target);
  if (artifactKind(modelPath) != "model")
    throw UserError(fmt::format("--target {} builds a model file (.onnx or .tir), not '{}'", target, modelPath));
  return t.build(modelPath, options);
}

}  // namespace tessel::eval
