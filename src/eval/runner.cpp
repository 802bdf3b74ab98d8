// Runners for every form of a model: the interpreter, compiled CPU libraries, compiled NPU models.
#include "tessel/eval/runner.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <unistd.h>

#include "tessel/frontend/model_loader.h"
#include "tessel/frontend/tensor_io.h"
#include "tessel/interp/interpreter.h"
#include "tessel/support/data_paths.h"
#include "tessel/targets/cpu/loader.h"
#include "tessel/targets/npu/model_file.h"

namespace fs = std::filesystem;

namespace tessel::eval {
namespace {

class InterpreterRunner : public Runner {
 public:
  InterpreterRunner(std::string path, std::unique_ptr<Model> model, uint64_t seed)
      : path_(std::move(path)), model_(std::move(model)), interp_(*model_->graph, InterpreterOptions{seed}) {}
  std::string target() const override { return "ref"; }
  std::string label() const override { return path_ + " (ref)"; }
  const Graph& signature() const override { return *model_->graph; }
  std::vector<std::string> outputNames() const override {
    std::vector<std::string> names;
    for (const Value* v : model_->graph->outputs()) names.push_back(v->name());
    return names;
  }
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) override { return interp_.run(inputs); }
  std::string lastRunSummary() const override {
    return fmt::format("ran {} node(s) with the reference interpreter", model_->graph->numNodes());
  }

 private:
  std::string path_;
  std::unique_ptr<Model> model_;
  Interpreter interp_;
};

class CpuRunner : public Runner {
 public:
  /// `shownPath` names the model in messages (the .so itself, or the model file it was built from).
  CpuRunner(const std::string& path, std::string shownPath, int threads)
      : shownPath_(std::move(shownPath)), model_(path, threads), signature_(inputSignature(model_.inputs())) {}
  std::string target() const override { return "cpu"; }
  std::string label() const override { return shownPath_ + " (cpu)"; }
  const Graph& signature() const override { return *signature_; }
  std::vector<std::string> outputNames() const override {
    std::vector<std::string> names;
    for (const auto& o : model_.outputs()) names.push_back(o.name);
    return names;
  }
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) override { return model_.run(inputs); }
  std::string lastRunSummary() const override {
    return fmt::format("ran compiled model {} (hash {})", shownPath_, model_.hash());
  }

 private:
  std::string shownPath_;
  cpu::CompiledModel model_;
  std::unique_ptr<Graph> signature_;
};

class NpuRunner : public Runner {
 public:
  NpuRunner(npu::CompiledNpuModel model, std::string label)
      : label_(std::move(label)), model_(std::move(model)), signature_(inputSignature(model_.inputs)) {}
  std::string target() const override { return "npu"; }
  std::string label() const override { return label_; }
  const Graph& signature() const override { return *signature_; }
  std::vector<std::string> outputNames() const override {
    std::vector<std::string> names;
    for (const auto& o : model_.outputs) names.push_back(o.name);
    return names;
  }
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) override {
    npu::NpuModelRun r = npu::runNpuModel(model_, inputs);
    cycles_ = hazards_ = 0;
    for (const auto& s : r.subgraphs) cycles_ += s.report.totalCycles, hazards_ += s.report.hazards.size();
    calls_ = r.subgraphs.size();
    transferBytes_ = r.transferBytes;
    return std::move(r.outputs);
  }
  std::string lastRunSummary() const override {
    return fmt::format("ran {} ({} NPU call(s) on the simulator: {} cycles, {} hazard(s); {} B host<->NPU transfers)",
                       label_, calls_, cycles_, hazards_, transferBytes_);
  }

 private:
  std::string label_;
  npu::CompiledNpuModel model_;
  std::unique_ptr<Graph> signature_;
  uint64_t cycles_ = 0, hazards_ = 0, transferBytes_ = 0;
  size_t calls_ = 0;
};

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

std::unique_ptr<Model> loadModelFile(const std::string& path, const RunnerOptions& options, InferenceMode mode) {
  ImportOptions io = options.import;
  io.inference = mode;
  return loadModel(path, io);
}

}  // namespace

npu::CompiledNpuModel readNpuArtifact(const std::string& path, const std::string& hwConfig) {
  if (hwConfig.empty()) return npu::readNpuModel(path);
  hw::HardwareConfig config = hw::HardwareConfig::load(findHardwareConfig(hwConfig));
  return npu::readNpuModel(path, &config);
}

std::string artifactKind(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  if (ext == ".onnx" || ext == ".tir") return "model";
  if (ext == ".so") return "cpu";
  if (ext == ".tnpu") return "npu";
  if (ext == ".npz") return "outputs";
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
  if (kind == "model") return std::make_unique<InterpreterRunner>(path, loadModelFile(path, options, options.import.inference), options.seed);
  if (kind == "cpu") return std::make_unique<CpuRunner>(path, path, options.threads);
  if (kind == "npu") return std::make_unique<NpuRunner>(readNpuArtifact(path, options.hwConfig), path + " (npu)");
  if (kind == "outputs") {
    std::vector<NamedTensor> arrays = readNpz(path);
    std::string summary = fmt::format("read {} saved output(s) from {}", arrays.size(), path);
    return savedOutputs(std::move(arrays), path + " (saved outputs)", std::move(summary));
  }
  throw UserError(fmt::format("'{}': unknown kind of model (expected .onnx or .tir to run on the reference "
                              "interpreter, .so compiled for the CPU, .tnpu compiled for the NPU, .npz of saved "
                              "outputs)", path));
}

std::unique_ptr<Runner> buildForTarget(const std::string& modelPath, const std::string& target,
                                       const RunnerOptions& options) {
  if (artifactKind(modelPath) != "model")
    throw UserError(fmt::format("--target {} builds a model file (.onnx or .tir), not '{}'", target, modelPath));
  if (target == "ref") return openArtifact(modelPath, options);
  if (target == "cpu") {
    auto model = loadModelFile(modelPath, options, InferenceMode::Strict);
    cpu::prepareModel(*model, options.cpu);
    fs::path so = fs::temp_directory_path() / fmt::format("tessel-{}-{}.so", getpid(), fs::path(modelPath).stem().string());
    cpu::compileSharedLibrary(*model, so.string(), options.cpu);
    struct RemoveFile {
      fs::path p;
      ~RemoveFile() {
        std::error_code ec;
        fs::remove(p, ec);
      }
    } removeSo{so};  // a loaded library stays mapped after its file is gone
    return std::make_unique<CpuRunner>(so.string(), modelPath, options.threads);
  }
  if (target == "npu") {
    std::string hwPath = findHardwareConfig(options.hwConfig.empty() ? "default" : options.hwConfig);
    hw::HardwareConfig config = hw::HardwareConfig::load(hwPath);
    auto model = loadModelFile(modelPath, options, InferenceMode::Strict);
    return std::make_unique<NpuRunner>(npu::compileForNpu(*model, config),
                                       fmt::format("{} (npu, {})", modelPath, config.name()));
  }
  throw UserError(fmt::format("unknown target '{}' (known: ref, cpu, npu)", target));
}

}  // namespace tessel::eval
