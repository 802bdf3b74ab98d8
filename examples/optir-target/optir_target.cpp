// An example target (docs/adding-a-target.md): "optir" writes a model after the target-independent clean-ups
// and folding as text IR (.optir) and runs it on the reference interpreter. Everything a target tells the
// compiler is in this one file, and one line registers it. The unit tests link it in (tests/CMakeLists.txt);
// moved to src/targets/optir/ it would be part of every Tessel build.
#include <filesystem>
#include <fmt/format.h>

#include "tessel/eval/runner.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"
#include "tessel/targets/target.h"

namespace example {

using namespace tessel;

/// Runs a loaded .optir file on the interpreter.
class OptIrRunner : public eval::Runner {
 public:
  OptIrRunner(std::string path, std::unique_ptr<Model> model)
      : path_(std::move(path)), model_(std::move(model)), interp_(*model_->graph) {}
  std::string target() const override { return "optir"; }
  std::string label() const override { return path_ + " (optir)"; }
  const Graph& signature() const override { return *model_->graph; }
  std::vector<std::string> outputNames() const override {
    std::vector<std::string> names;
    for (const Value* v : model_->graph->outputs()) names.push_back(v->name());
    return names;
  }
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) override { return interp_.run(inputs); }
  std::string lastRunSummary() const override {
    return fmt::format("ran {} node(s) of optimised IR", model_->graph->numNodes());
  }

 private:
  std::string path_;
  std::unique_ptr<Model> model_;
  Interpreter interp_;
};

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
    return std::make_unique<OptIrRunner>(path, readModelTextFile(path));
  }
};

}  // namespace example

using example::OptIrTarget;
TESSEL_REGISTER_TARGET(OptIrTarget);
