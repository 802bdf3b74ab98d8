// The Target interface: what a backend tells the compiler (its name, its pass pipeline with the options a
// compile implies, which nodes it can run on a device of a hardware configuration), how it lowers a prepared
// model to an artifact and how it opens one to run. Each target registers itself once
// (TESSEL_REGISTER_TARGET in its folder); the CLI, eval and the partitioner reach targets only through the
// registry (docs/adding-a-target.md).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"
#include "tessel/partition/partitioner.h"
#include "tessel/passes/pass.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/tune/search.h"

namespace tessel::eval {
class Runner;
struct RunnerOptions;
}  // namespace tessel::eval

namespace tessel::target {

/// What a compile asks of a target. Settings a target does not read are ignored by it; the CLI checks
/// that a flag applies (Target::settings).
struct TargetOptions {
  /// Hardware configuration: a file or a shipped name ("" : the target's default, if it has one).
  std::string hw;
  /// How host code is compiled: the cpu target's options, also used for the host parts of heterogeneous
  /// artifacts (a .tnpu's nodes that are not on an accelerator).
  cpu::CompileOptions host;
  /// The artifact's form when a target writes several ("" : its default; cpu: "so", "cpp", "app").
  std::string emit;
  /// Target-specific settings by name ("npu-strategy" = "greedy", "npu-window" = "2"); see Target::settings.
  std::map<std::string, std::string> settings;
  /// Heterogeneous artifacts: host parts as compiled code (true) or as text IR for the interpreter (false).
  bool compileHost = true;
};

/// What Target::lower produced.
struct Artifact {
  std::string path;       ///< the file written
  std::string what;       ///< what was written, for "compiled WHAT in N s" ("resnet18.so", "C++ source m.cpp")
  std::string timing;     ///< how the time divides, appended to that line (" (generate 0.10 s, ...)")
  std::string details;    ///< the lines `tessel compile` prints after it, each ending in a newline
  nlohmann::json report;  ///< the object `tessel compile --json` prints (keys in docs/cli.md) but "seconds"
};

/// One backend.
class Target {
 public:
  virtual ~Target() = default;
  /// "ref", "cpu", "npu": what --target names.
  virtual std::string name() const = 0;
  /// One line for `tessel compile --help` and error messages.
  virtual std::string description() const = 0;
  /// The extension of its artifacts (".so", ".tnpu"); "" when it writes none (ref runs model files).
  virtual std::string artifactExtension() const = 0;
  /// The target-specific settings it reads from TargetOptions::settings (the CLI refuses others).
  virtual std::vector<std::string> settings() const { return {}; }
  /// Whether it reads a hardware configuration (TargetOptions::hw).
  virtual bool usesHardwareConfig() const { return false; }
  /// How many progress messages (TargetOptions::host.progress, one per stage) a compile with `options`
  /// reports, counting loading the model and running the pipeline; 0 when unknown.
  virtual int progressStages(const TargetOptions&) const { return 0; }
  /// The pass pipeline a compile with `options` runs before lower(): what `tessel opt --pipeline NAME` prints.
  virtual Pipeline pipeline(const TargetOptions& options) const = 0;
  /// Whether it can run `node` on `device` once the configuration accepted the node: {true, ""} or
  /// {false, why} (the partitioner asks; the default accepts what the configuration accepts).
  virtual hw::SupportResult supports(const Node& node, const hw::Device& device) const;
  /// Lowers a model that ran pipeline(options) into an artifact at `output` ("" : the model's stem and
  /// artifactExtension()). UserError for a bad option or a node without a code path.
  virtual Artifact lower(Model& model, const std::string& modelPath, std::string output,
                         const TargetOptions& options) const = 0;
  /// The search space of `tessel tune` for a loaded model (S1); UserError when the target has none.
  virtual std::unique_ptr<tune::Tuning> tuning(const Model& model, const std::string& modelPath, const TargetOptions& options,
                                               int jobs) const;
  /// Opens an artifact of this target (ref: a model file) to run.
  virtual std::unique_ptr<eval::Runner> load(const std::string& path, const eval::RunnerOptions& options) const = 0;
  /// Builds a model file into an artifact in the temporary directory, opens it and removes the file (what
  /// `tessel compare --target` runs). ref overrides it (nothing to build).
  virtual std::unique_ptr<eval::Runner> build(const std::string& modelPath, const eval::RunnerOptions& options) const;
};

/// Every registered target, by name.
class TargetRegistry {
 public:
  static TargetRegistry& instance();
  void add(std::unique_ptr<Target> target);
  /// nullptr when no target has this name.
  const Target* find(const std::string& name) const;
  /// The target named `name`; UserError "WHAT: unknown target 'NAME' (known: ...)" otherwise.
  const Target& get(const std::string& name, const std::string& what = "--target") const;
  /// The target whose artifacts end in `extension` (".so"), or nullptr.
  const Target* forExtension(const std::string& extension) const;
  /// The target that runs nodes placed on a device of this kind (cpu -> "cpu", npu -> "npu").
  const Target& forDevice(const hw::Device& device) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, std::unique_ptr<Target>> targets_;
};

/// Runs target.pipeline(options) on a copy of `model` and lowers it (what `tessel compile` does).
Artifact compile(const Target& target, const Model& model, const std::string& modelPath, const std::string& output,
                 const TargetOptions& options);

/// The partitioner's lowering check: asks the target of each device (TargetRegistry::forDevice) whether
/// it supports the node.
partition::LoweringCheck loweringCheck();

/// The reference interpreter running a loaded model, as a runner of target `name` labelled `label` (the ref
/// target's runner; also for targets whose artifacts the interpreter runs, like examples/optir-target).
std::unique_ptr<eval::Runner> interpreterRunner(std::string name, std::string label, std::unique_ptr<Model> model,
                                                uint64_t seed = 0);

/// TargetOptions for building with eval::RunnerOptions (configuration, cpu flags).
TargetOptions optionsFor(const eval::RunnerOptions& options);

}  // namespace tessel::target

/// Registers a target class once: TESSEL_REGISTER_TARGET(CpuTarget);
#define TESSEL_REGISTER_TARGET(cls)                                 \
  [[maybe_unused]] static const bool tesselTargetRegistered_##cls = \
      (::tessel::target::TargetRegistry::instance().add(std::make_unique<cls>()), true)
