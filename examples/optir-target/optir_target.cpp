// An example target (docs/adding-a-target.md): "optir" writes a model after the target-independent clean-ups
// and folding as text IR (.optir) and runs it on the reference interpreter. Everything a target tells the
// compiler is in this one file, and one line registers it. The unit tests link it in (tests/CMakeLists.txt);
// moved to src/targets/optir/ it would be part of every Tessel build.
#include <filesystem>
#include <fmt/format.h>

#include "tessel/eval/runner.h"
#include "tessel/ir/text.h"
#include "tessel/targets/target.h"

namespace example {

using namespace tessel;

class OptIrTarget : public target::Target {
 public:
  std::string name() const override { return "optir"; }
  std::string description() const override { return "example: optimised text IR run on the interpreter"; }
  std::string artifactExtension() const override { return ".optir"; }
  // The npu pipeline's list is clean-ups and folding only: IR the interpreter runs as it is.
  Pipeline pipeline(const target::TargetOptions&) const override { return namedPipeline("npu", PassOptions{}); }
  // supports(): the default (whatever the hardware configuration accepts) is right for an interpreter.
  target::Artifact lower(Model& model, const std::string& modelPath, std::string output,
                         const target::TargetOptions&) const override {
    if (output.empty()) output = std::filesystem::path(modelPath).stem().string() + artifactExtension();
    writeModelTextFile(model, output);
    target::Artifact a;
    a.path = output;
    a.what = output;
    a.details = fmt::format("  {} node(s) of text IR\n", model.graph->numNodes());
    a.report = {{"target", name()}, {"model", modelPath}, {"output", output}, {"nodes", model.graph->numNodes()}};
    return a;
  }
  std::unique_ptr<eval::Runner> load(const std::string& path, const eval::RunnerOptions&) const override {
    return target::interpreterRunner(name(), path + " (optir)", readModelTextFile(path));
  }
};

}  // namespace example

using example::OptIrTarget;
TESSEL_REGISTER_TARGET(OptIrTarget);
