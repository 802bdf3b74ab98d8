// The target registry, and what every target shares: compile = pipeline + lower, building a model file into a
// temporary artifact to run it, the partitioner's question to the target of a device.
#include "tessel/targets/target.h"

#include <filesystem>
#include <fmt/format.h>
#include <unistd.h>

#include "tessel/eval/runner.h"
#include "tessel/frontend/model_loader.h"
#include "tessel/support/error.h"

namespace fs = std::filesystem;

namespace tessel::target {

hw::SupportResult Target::supports(const Node&, const hw::Device&) const { return {true, ""}; }

std::unique_ptr<eval::Runner> Target::build(const std::string& modelPath, const eval::RunnerOptions& options) const {
  ImportOptions io = options.import;
  io.inference = InferenceMode::Strict;
  std::unique_ptr<Model> model = loadModel(modelPath, io);
  static int counter = 0;
  fs::path file = fs::temp_directory_path() /
                  fmt::format("tessel-{}-{}-{}{}", getpid(), counter++, fs::path(modelPath).stem().string(),
                              artifactExtension());
  struct RemoveFile {
    fs::path p;
    ~RemoveFile() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove{file};  // what load() needs stays in memory (a loaded library stays mapped after its file is gone)
  TargetOptions to = optionsFor(options);
  compile(*this, *model, modelPath, file.string(), to);
  return load(file.string(), options);
}

TargetRegistry& TargetRegistry::instance() {
  static TargetRegistry registry;
  return registry;
}

void TargetRegistry::add(std::unique_ptr<Target> target) {
  const std::string name = target->name();
  TESSEL_ASSERT(!targets_.count(name), "target '" + name + "' registered twice");
  targets_[name] = std::move(target);
}

const Target* TargetRegistry::find(const std::string& name) const {
  auto it = targets_.find(name);
  return it == targets_.end() ? nullptr : it->second.get();
}

const Target& TargetRegistry::get(const std::string& name, const std::string& what) const {
  if (const Target* t = find(name)) return *t;
  throw UserError(fmt::format("{}: unknown target '{}' (known: {})", what, name, fmt::join(names(), ", ")));
}

const Target* TargetRegistry::forExtension(const std::string& extension) const {
  for (const auto& [name, t] : targets_)
    if (!extension.empty() && t->artifactExtension() == extension) return t.get();
  return nullptr;
}

const Target& TargetRegistry::forDevice(const hw::Device& device) const {
  const std::string name = device.kind == hw::DeviceKind::Npu ? "npu" : "cpu";
  const Target* t = find(name);
  TESSEL_ASSERT(t != nullptr, "no target registered for device kind '" + name + "'");
  return *t;
}

std::vector<std::string> TargetRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : targets_) out.push_back(name);
  return out;
}

Artifact compile(const Target& target, const Model& model, const std::string& modelPath, const std::string& output,
                 const TargetOptions& options) {
  std::unique_ptr<Model> copy = model.clone();
  if (options.host.progress)
    options.host.progress(fmt::format("running the {} pass pipeline (see tessel opt --pipeline {})", target.name(),
                                      target.name()));
  target.pipeline(options).run(*copy);
  return target.lower(*copy, modelPath, output, options);
}

std::unique_ptr<tune::Tuning> Target::tuning(const Model&, const std::string&, const TargetOptions&, int) const {
  throw UserError(fmt::format("tessel tune: target '{}' has no whole-graph tuner yet (targets with one: cpu, npu)", name()));
}

partition::LoweringCheck loweringCheck() {
  return [](const Node& node, const hw::Device& device) {
    return TargetRegistry::instance().forDevice(device).supports(node, device);
  };
}

TargetOptions optionsFor(const eval::RunnerOptions& options) {
  TargetOptions to;
  to.hw = options.hwConfig;
  to.host = options.cpu;
  return to;
}

}  // namespace tessel::target
