// The ref target: the reference interpreter runs a model file as it is (the oracle of every other target);
// it writes no artifact.
#include <fmt/format.h>

#include "tessel/eval/runner.h"
#include "tessel/frontend/model_loader.h"
#include "tessel/interp/interpreter.h"
#include "tessel/targets/target.h"

namespace tessel::target {
namespace {

class InterpreterRunner : public eval::Runner {
 public:
  InterpreterRunner(std::string name, std::string label, std::unique_ptr<Model> model, uint64_t seed)
      : name_(std::move(name)), label_(std::move(label)), model_(std::move(model)),
        interp_(*model_->graph, InterpreterOptions{seed}) {}
  std::string target() const override { return name_; }
  std::string label() const override { return label_; }
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
  std::string name_, label_;
  std::unique_ptr<Model> model_;
  Interpreter interp_;
};

class RefTarget : public Target {
 public:
  std::string name() const override { return "ref"; }
  std::string description() const override { return "the reference interpreter (runs model files; no artifact)"; }
  std::string artifactExtension() const override { return ""; }
  Pipeline pipeline(const TargetOptions&) const override { return namedPipeline("cleanup"); }
  Artifact lower(Model&, const std::string&, std::string, const TargetOptions&) const override {
    throw UserError("--target ref runs model files on the reference interpreter (tessel run MODEL); it writes no "
                    "artifact");
  }
  std::unique_ptr<eval::Runner> load(const std::string& path, const eval::RunnerOptions& options) const override {
    return interpreterRunner(name(), path + " (ref)", loadModel(path, options.import), options.seed);
  }
  std::unique_ptr<eval::Runner> build(const std::string& modelPath, const eval::RunnerOptions& options) const override {
    return load(modelPath, options);
  }
};

}  // namespace

std::unique_ptr<eval::Runner> interpreterRunner(std::string name, std::string label, std::unique_ptr<Model> model,
                                                uint64_t seed) {
  return std::make_unique<InterpreterRunner>(std::move(name), std::move(label), std::move(model), seed);
}

TESSEL_REGISTER_TARGET(RefTarget);

}  // namespace tessel::target
