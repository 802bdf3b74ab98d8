// The cpu target's registration: the "cpu" pipeline with the options a compile's flags imply, lowering to a
// shared library, C++ source or a standalone app, and loading a .so to run.
#include <filesystem>
#include <fmt/format.h>

#include "tessel/eval/runner.h"
#include "tessel/support/units.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/cpu/loader.h"
#include "tessel/targets/target.h"
#include "tuning.h"

namespace tessel::target {
namespace {

class CpuRunner : public eval::Runner {
 public:
  /// `shownPath` names the model in messages (the .so itself, or the model file it was built from).
  CpuRunner(const std::string& path, std::string shownPath, int threads)
      : shownPath_(std::move(shownPath)), model_(path, threads), signature_(eval::inputSignature(model_.inputs())) {}
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
  void setShownPath(std::string path) { shownPath_ = std::move(path); }
  cpu::CompiledModel* cpuLibrary() override { return &model_; }

 private:
  std::string shownPath_;
  cpu::CompiledModel model_;
  std::unique_ptr<Graph> signature_;
};

std::string detailsText(const cpu::CompileReport& r) {
  std::string s = fmt::format("  kernel calls: {} ({} nodes fused into them), {} FLOP per inference\n", r.steps, r.fusedNodes,
                   humanCount(r.flops));
  if (r.inPlaceConcatInputs > 0)
    s += fmt::format("  concat: {} input(s) written in place into their slice of the output (no copy)\n",
                     r.inPlaceConcatInputs);
  if (r.scaledConvInputs > 0)
    s += fmt::format("  squeeze-and-excitation: {} channel-scale Mul(s) folded into the pointwise conv after them (its "
                     "weights scaled each run)\n",
                     r.scaledConvInputs);
  if (r.shuffledConcats > 0)
    s += fmt::format("  channel shuffle: {} Concat + Reshape + Transpose chain(s) copied once, straight into the shuffled "
                     "order; {} of their inputs written there by the conv that computes them (no copy)\n",
                     r.shuffledConcats, r.inPlaceShuffleInputs);
  if (r.chainedConvBlocks > 0)
    s += fmt::format("  inverted residual blocks: {} (1x1 -> depthwise -> 1x1) run as one step each, in bands of output "
                     "rows (each band on one thread; the expanded tensor is never stored whole)\n",
                     r.chainedConvBlocks);
  if (!r.hostSteps.empty()) {
    s += fmt::format("  host interpreter: {} node(s) without a compiled code path run through the reference interpreter "
                     "(tessel run/bench provide it; --emit-app and --no-host-fallback refuse them):\n",
                     r.hostSteps.size());
    for (const cpu::HostStep& h : r.hostSteps) s += fmt::format("    {}: {}\n", h.node, h.reason);
  }
  s += fmt::format("  vector ISA: {}\n", r.isa);
  s += fmt::format("  peak arena: {} (without reuse: {}); weights: {} (packed: {}); hash {}\n", humanBytes(r.arenaBytes),
                   humanBytes(r.naiveArenaBytes), humanBytes(r.weightBytes), humanBytes(r.packedWeightBytes), r.hash);
  return s;
}

nlohmann::json reportJson(const cpu::CompileReport& r, const std::string& modelPath, const std::string& output,
                          const std::string& emit, const cpu::CompileOptions& options) {
  nlohmann::json j = {{"target", "cpu"},
                      {"model", modelPath},
                      {"output", output},
                      {"emit", emit},
                      {"generate_seconds", r.generateSeconds},
                      {"cxx_seconds", r.cxxSeconds},
                      {"kernel_calls", r.steps},
                      {"fused_nodes", r.fusedNodes},
                      {"flops", r.flops},
                      {"in_place_concat_inputs", r.inPlaceConcatInputs},
                      {"shuffled_concats", r.shuffledConcats},
                      {"in_place_shuffle_inputs", r.inPlaceShuffleInputs},
                      {"scaled_conv_inputs", r.scaledConvInputs},
                      {"chained_conv_blocks", r.chainedConvBlocks},
                      {"fallback_nodes", r.fallbackNodes},
                      {"arena_bytes", r.arenaBytes},
                      {"naive_arena_bytes", r.naiveArenaBytes},
                      {"weight_bytes", r.weightBytes},
                      {"packed_weight_bytes", r.packedWeightBytes},
                      {"hash", r.hash},
                      {"isa", r.isa},
                      {"march", options.march}};
  nlohmann::json host = nlohmann::json::array();
  for (const cpu::HostStep& h : r.hostSteps) host.push_back({{"node", h.node}, {"op", h.op}, {"reason", h.reason}});
  j["host_steps"] = host;
  if (options.tune)
    j["tuning"] = {{"convs", r.tunedConvs}, {"changed", r.tunedChanged}, {"vector_lanes", r.tunerVectorLanes},
                   {"seconds", r.tuneSeconds}};
  return j;
}

class CpuTarget : public Target {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "native code for this CPU: generated C++ compiled to a shared library (.so), C++ source or an app";
  }
  std::string artifactExtension() const override { return ".so"; }
  int progressStages(const TargetOptions& options) const override {
    return (options.emit == "cpp" ? 3 : 4) + (options.host.tune ? 1 : 0);
  }
  Pipeline pipeline(const TargetOptions& options) const override { return cpu::passPipeline(options.host); }
  std::unique_ptr<tune::Tuning> tuning(const Model& model, const std::string& modelPath, const TargetOptions& options,
                                       int) const override {
    if (!options.hw.empty()) throw UserError("--hw does not apply to tessel tune --target cpu (it tunes for this machine)");
    if (options.settings.count("dram-budget"))
      throw UserError("--dram-budget does not apply to tessel tune --target cpu (it limits the NPU's DRAM traffic)");
    return std::make_unique<cpu::CpuTuning>(model, modelPath, options.host);
  }

  Artifact lower(Model& model, const std::string& modelPath, std::string output,
                 const TargetOptions& options) const override {
    const std::string emit = options.emit.empty() ? "so" : options.emit;
    const std::filesystem::path stem = std::filesystem::path(modelPath).stem();
    cpu::CompileReport report;
    std::string what;
    if (emit == "app") {
      report = cpu::emitApp(model, output, options.host);
      what = "a standalone app project in " + output;
    } else if (emit == "cpp") {
      if (output.empty()) output = stem.string() + ".cpp";
      report = cpu::emitSource(model, output, options.host);
      what = "C++ source " + output;
    } else if (emit == "so") {
      if (output.empty()) output = stem.string() + ".so";
      report = cpu::compileSharedLibrary(model, output, options.host);
      what = output;
    } else {
      throw UserError(fmt::format("--emit={}: expected 'so' or 'cpp'", emit));
    }
    return {output, what,
            fmt::format(" (generate {:.2f} s, C++ compiler {:.1f} s)", report.generateSeconds, report.cxxSeconds),
            detailsText(report), reportJson(report, modelPath, output, emit, options.host)};
  }

  std::unique_ptr<eval::Runner> load(const std::string& path, const eval::RunnerOptions& options) const override {
    return std::make_unique<CpuRunner>(path, path, options.threads);
  }
  std::unique_ptr<eval::Runner> build(const std::string& modelPath, const eval::RunnerOptions& options) const override {
    std::unique_ptr<eval::Runner> built = Target::build(modelPath, options);
    // Messages name the model file, not the temporary library.
    auto* runner = static_cast<CpuRunner*>(built.get());
    runner->setShownPath(modelPath);
    return built;
  }
};

}  // namespace

TESSEL_REGISTER_TARGET(CpuTarget);

}  // namespace tessel::target
