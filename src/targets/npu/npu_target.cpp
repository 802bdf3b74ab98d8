// The npu target's registration: the "npu" pipeline, what the lowering can express, and heterogeneous
// artifacts (.tnpu): the partitioner places each node, NPU subgraphs become instruction streams and the host's
// part is lowered by the cpu target to compiled code stored in the file's HOST section.
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <unistd.h>

#include "tessel/eval/runner.h"
#include "tessel/support/units.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/npu/tuning.h"
#include "tessel/targets/target.h"

namespace fs = std::filesystem;

namespace tessel::target {
namespace {

class NpuRunner : public eval::Runner {
 public:
  NpuRunner(npu::CompiledNpuModel model, std::string label)
      : label_(std::move(label)), model_(std::move(model)), signature_(eval::inputSignature(model_.inputs)) {}
  std::string target() const override { return "npu"; }
  std::string label() const override { return label_; }
  /// Names the model file it was built from instead of the temporary .tnpu.
  void builtFrom(const std::string& modelPath) { label_ = fmt::format("{} (npu, {})", modelPath, model_.config.name()); }
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
    return fmt::format("ran {} ({} NPU call(s) on the simulator: {} cycles, {} hazard(s); {} B host<->NPU transfers; "
                       "host part: {})",
                       label_, calls_, cycles_, hazards_, transferBytes_,
                       model_.host.library.empty() ? "reference interpreter" : "compiled code, hash " + model_.host.hash);
  }

 private:
  std::string label_;
  npu::CompiledNpuModel model_;
  std::unique_ptr<Graph> signature_;
  uint64_t cycles_ = 0, hazards_ = 0, transferBytes_ = 0;
  size_t calls_ = 0;
};

/// The schedule of each subgraph: the compiler's, or a tuning record's (--tuning-file, made by tessel tune for this
/// model file and configuration), with the --npu-strategy / --npu-window overrides.
npu::ScheduleChooser scheduleChooser(const TargetOptions& options, const std::string& modelPath, const hw::HardwareConfig& config) {
  std::string strategy;
  int64_t window = -1;
  if (auto it = options.settings.find("npu-strategy"); it != options.settings.end()) strategy = it->second;
  if (auto it = options.settings.find("npu-window"); it != options.settings.end()) window = std::stoll(it->second);
  std::map<std::string, npu::NpuSchedule> tuned;
  const std::string record = options.host.tuningFile;
  if (!record.empty()) tuned = npu::tunedSchedules(record, modelPath, config);
  return [strategy, window, tuned, record](const Graph& body, const hw::Device& device, const std::string& name) {
    npu::NpuSchedule s;
    if (record.empty()) {
      s = npu::compilerSchedule(body, device.npu, name);
    } else {
      auto it = tuned.find(name);
      if (it == tuned.end())
        throw UserError(fmt::format("tuning record '{}' has no schedule for NPU subgraph '{}' (made by another tessel?)", record, name));
      s = it->second;
    }
    if (!strategy.empty()) s.strategy = strategy;
    if (window >= 0) s.window = window;
    return s;
  };
}

/// Lowers the CPU part with the cpu target into the HOST section. A CPU part the cpu target cannot compile
/// stays with the interpreter; the returned line says which.
std::string compileHostPart(npu::CompiledNpuModel& compiled, const std::string& modelPath,
                            const TargetOptions& options) {
  const Target& cpu = TargetRegistry::instance().get("cpu");
  static int counter = 0;
  const fs::path so = fs::temp_directory_path() / fmt::format("tessel-host-{}-{}.so", getpid(), counter++);
  struct RemoveFile {
    fs::path p;
    ~RemoveFile() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove{so};
  TargetOptions host = options;
  host.emit = "so";
  host.settings.clear();
  host.host.tuningFile.clear();  // a tuning record is the NPU schedules' (the host part is compiled untuned)
  Artifact a;
  try {
    a = compile(cpu, *compiled.cpuPart, modelPath, so.string(), host);
  } catch (const UserError& e) {
    return fmt::format("host part: reference interpreter (the cpu target cannot compile it: {})", e.what());
  }
  std::ifstream f(so, std::ios::binary);
  compiled.host.library.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (compiled.host.library.empty()) throw UserError(fmt::format("cannot read the host code '{}'", so.string()));
  compiled.host.hash = a.report["hash"].get<std::string>();
  return fmt::format("host part: compiled code, {} kernel call(s) ({} of them NPU calls), {}",
                     a.report["kernel_calls"].get<int>(), compiled.subgraphs.size(),
                     humanBytes(static_cast<double>(compiled.host.library.size())));
}

class NpuTarget : public Target {
 public:
  std::string name() const override { return "npu"; }
  std::string description() const override {
    return "the virtual NPU of a hardware configuration (--hw): a .tnpu with its instruction streams and the host's "
           "part as compiled CPU code";
  }
  std::string artifactExtension() const override { return ".tnpu"; }
  std::vector<std::string> settings() const override { return {"npu-strategy", "npu-window", "dram-budget"}; }
  std::unique_ptr<tune::Tuning> tuning(const Model& model, const std::string& modelPath, const TargetOptions& options,
                                       int jobs) const override {
    if (options.hw.empty()) throw UserError("tessel tune --target npu needs --hw CONFIG (a file, or a name such as 'default')");
    if (options.host.isa != "auto")
      throw UserError("--isa does not apply to tessel tune --target npu (it tunes the NPU's schedule; the ISA is the "
                      "cpu target's)");
    double dramBudget = npu::NpuTuning::kDefaultDramBudget;
    if (auto it = options.settings.find("dram-budget"); it != options.settings.end()) {
      try {
        size_t used = 0;
        dramBudget = std::stod(it->second, &used);
        if (used != it->second.size()) throw std::invalid_argument(it->second);
      } catch (const std::exception&) {
        throw UserError(fmt::format("--dram-budget {}: expected a number (a multiple of the compulsory DRAM bytes; 0: no "
                                    "limit)", it->second));
      }
    }
    return std::make_unique<npu::NpuTuning>(model, modelPath, hw::HardwareConfig::load(eval::findHardwareConfig(options.hw)),
                                            jobs, dramBudget);
  }
  bool usesHardwareConfig() const override { return true; }
  Pipeline pipeline(const TargetOptions&) const override { return namedPipeline("npu"); }
  hw::SupportResult supports(const Node& node, const hw::Device& device) const override {
    return npu::loweringSupport(node, device);
  }

  Artifact lower(Model& model, const std::string& modelPath, std::string output,
                 const TargetOptions& options) const override {
    if (options.hw.empty())
      throw UserError("--target npu needs --hw CONFIG (a file, or a configuration name such as 'default')");
    if (!options.emit.empty() && options.emit != "so")
      throw UserError(fmt::format("--emit {} applies to --target cpu; --target npu writes a .tnpu", options.emit));
    hw::HardwareConfig config = hw::HardwareConfig::load(eval::findHardwareConfig(options.hw));
    if (output.empty()) output = fs::path(modelPath).stem().string() + ".tnpu";
    if (fs::path(output).extension() != ".tnpu")
      throw UserError(fmt::format("-o {}: an NPU model file must end in .tnpu", output));
    npu::CompiledNpuModel compiled = npu::compilePreparedForNpu(model, config, scheduleChooser(options, modelPath, config));
    std::string host = options.compileHost ? compileHostPart(compiled, modelPath, options)
                                           : "host part: reference interpreter";
    npu::writeNpuModel(compiled, output);
    size_t instructions = 0, weights = 0, npuNodes = 0;
    for (const auto& s : compiled.subgraphs) {
      instructions += s.program.instructions.size();
      weights += s.constants.size() * 4;
      npuNodes += s.ops.size();
    }
    size_t cpuNodes = compiled.cpuPart->graph->numNodes() - compiled.subgraphs.size();
    Artifact a;
    a.path = output;
    a.what = fmt::format("{} for '{}' (hash {})", output, config.name(), config.hashHex());
    a.details = fmt::format("  {} NPU subgraph(s), {} lowered node(s), {} instructions, {} of NPU constants; {} node(s) "
                            "left on the CPU\n  {}\n",
                            compiled.subgraphs.size(), npuNodes, instructions, humanBytes(static_cast<double>(weights)),
                            cpuNodes, host);
    a.report = {{"target", "npu"},
                {"model", modelPath},
                {"output", output},
                {"hw_config", config.name()},
                {"hw_hash", config.hashHex()},
                {"npu_subgraphs", compiled.subgraphs.size()},
                {"lowered_nodes", npuNodes},
                {"instructions", instructions},
                {"npu_constant_bytes", weights},
                {"cpu_nodes", cpuNodes},
                {"host_code", compiled.host.library.empty() ? "interpreter" : "compiled"},
                {"host_code_bytes", compiled.host.library.size()}};
    return a;
  }

  std::unique_ptr<eval::Runner> load(const std::string& path, const eval::RunnerOptions& options) const override {
    npu::CompiledNpuModel model = eval::readNpuArtifact(path, options.hwConfig);
    model.host.threads = options.threads;
    return std::make_unique<NpuRunner>(std::move(model), path + " (npu)");
  }
  std::unique_ptr<eval::Runner> build(const std::string& modelPath, const eval::RunnerOptions& options) const override {
    eval::RunnerOptions o = options;
    if (o.hwConfig.empty()) o.hwConfig = "default";
    std::unique_ptr<eval::Runner> built = Target::build(modelPath, o);
    static_cast<NpuRunner*>(built.get())->builtFrom(modelPath);
    return built;
  }
};

}  // namespace

TESSEL_REGISTER_TARGET(NpuTarget);

}  // namespace tessel::target
