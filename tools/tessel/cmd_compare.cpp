// `tessel compare`: runs two forms of a model (or one model built for several targets) on the same inputs and
// compares their outputs element by element against --atol/--rtol (Polygraphy's `run` comparison).
#include <cmath>
#include <fmt/format.h>
#include <set>
#include <sstream>

#include "command.h"
#include "common.h"
#include "tessel/eval/compare_runs.h"
#include "tessel/eval/inputs.h"
#include "tessel/eval/runner.h"
#include "tessel/targets/target.h"
#include "tessel/frontend/tensor_io.h"

namespace tessel::cli {
namespace {

struct CompareOptions {
  ModelOptions model;  ///< the first artifact, and --input-shape
  std::string second;
  std::string targets;
  std::string hw;
  std::string march = "native";
  InputOptions inputs;
  eval::Tolerances tol;
  int threads = 0;
  bool json = false;
  std::string saveInputs, saveOutputs;
};

/// Mismatching outputs exit with this status (as Polygraphy does), distinct from bad input (2).
constexpr int kMismatchStatus = 1;

std::vector<std::string> splitTargets(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string t;
  while (std::getline(ss, t, ','))
    if (!t.empty()) out.push_back(t);
  if (out.size() < 2)
    throw UserError(fmt::format("--target {}: expected at least two targets to compare, e.g. --target ref,cpu", list));
  for (const std::string& x : out) target::TargetRegistry::instance().get(x, "--target " + list);
  return out;
}

/// The runners, reference first. Compiled artifacts open first: their fixed input shapes then fix the
/// undefined dimensions of the model files (as do the shapes of the --input tensors).
std::vector<std::unique_ptr<eval::Runner>> openRunners(const CompareOptions& o, const std::map<std::string, Tensor>& given) {
  eval::RunnerOptions ro;
  ro.threads = o.threads;
  ro.seed = o.inputs.seed;
  ro.hwConfig = o.hw;
  ro.cpu.march = o.march;
  std::map<std::string, Shape> shapes = eval::shapesOf(given);
  std::vector<std::unique_ptr<eval::Runner>> runners;
  if (!o.targets.empty()) {
    if (!o.second.empty())
      throw UserError(fmt::format("give either two artifacts or one model with --target, not '{}' and --target {}",
                                  o.second, o.targets));
    ro.import = o.model.importOptions(InferenceMode::Lenient, shapes);
    for (const std::string& t : splitTargets(o.targets)) runners.push_back(eval::buildForTarget(o.model.path, t, ro));
    return runners;
  }
  if (o.second.empty())
    throw UserError("tessel compare needs two artifacts (A B) or one model and --target LIST, e.g. --target ref,cpu");
  const std::vector<std::string> paths{o.model.path, o.second};
  std::vector<std::unique_ptr<eval::Runner>> opened(2);
  for (size_t i = 0; i < 2; ++i)
    if (eval::artifactKind(paths[i]) != "model") {
      opened[i] = eval::openArtifact(paths[i], ro);
      for (Value* in : opened[i]->signature().inputs())
        if (in->type.isStatic()) shapes.emplace(in->name(), in->type.staticShape());
    }
  ro.import = o.model.importOptions(InferenceMode::Lenient, shapes);
  for (size_t i = 0; i < 2; ++i)
    runners.push_back(opened[i] ? std::move(opened[i]) : eval::openArtifact(paths[i], ro));
  if (runners[0]->target() == "saved" && runners[1]->target() == "saved")
    throw UserError("tessel compare: both sides are saved outputs; one must be something that runs");
  return runners;
}

std::string number(double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : "inf"; }
std::string value(double v) { return fmt::format("{:.9g}", v); }

void printComparison(const eval::Runner& expected, const eval::Runner& actual,
                     const std::vector<eval::OutputComparison>& outputs, const eval::Tolerances& tol) {
  fmt::print("{} vs reference {} (atol {}, rtol {}):\n", actual.label(), expected.label(), tol.atol, tol.rtol);
  for (const auto& c : outputs) {
    if (!c.problem.empty()) {
      fmt::print("  output '{}': FAIL: {}\n", c.name, c.problem);
      continue;
    }
    fmt::print("  output '{}': {}  max abs {}  max rel {}  mean abs {};  worst [{}]: {} vs {} (reference);  {} of {} "
               "outside tolerance\n",
               c.name, c.pass ? "PASS" : "FAIL", number(c.maxAbsError), number(c.maxRelError), number(c.meanAbsError),
               fmt::join(c.worstIndex, ","), value(c.worstActual), value(c.worstExpected), c.mismatches, c.elements);
  }
}

int compareCommand(const CompareOptions& o) {
  if (o.tol.atol < 0 || o.tol.rtol < 0 || std::isnan(o.tol.atol) || std::isnan(o.tol.rtol))
    throw UserError(fmt::format("--atol {} --rtol {}: tolerances must be non-negative numbers", o.tol.atol, o.tol.rtol));
  std::map<std::string, Tensor> given = o.inputs.readGiven();
  std::vector<std::unique_ptr<eval::Runner>> runners = openRunners(o, given);
  std::vector<eval::Runner*> order;
  for (auto& r : runners) order.push_back(r.get());
  std::vector<std::string> notes;
  auto inputs = eval::comparisonInputs(order, given, o.inputs.seed, [&](const std::string& n) { notes.push_back(n); });
  if (!o.json)
    for (const auto& n : notes) printNote(n);
  if (!o.saveInputs.empty()) writeNpz(o.saveInputs, std::vector<NamedTensor>(inputs.begin(), inputs.end()));
  eval::ComparisonRun run = eval::compareRunners(order, inputs, o.tol);
  if (!o.saveOutputs.empty()) {
    std::vector<NamedTensor> saved;
    std::vector<std::string> names = runners[0]->outputNames();
    for (size_t i = 0; i < names.size(); ++i) saved.emplace_back(names[i], run.outputs[0][i]);
    writeNpz(o.saveOutputs, saved);
  }
  if (o.json) {
    std::set<std::string> givenNames;
    for (const auto& [name, t] : given) givenNames.insert(name);
    fmt::print("{}\n", eval::comparisonJson(run, inputs, givenNames, o.tol, o.inputs.seed).dump());
  } else {
    for (size_t k = 1; k < runners.size(); ++k)
      printComparison(*runners[0], *runners[k], run.comparisons[k - 1].outputs, o.tol);
    fmt::print("{}\n", run.pass ? "PASS: every output is within the tolerances"
                                : "FAIL: outputs differ beyond the tolerances (exit status 1)");
  }
  return run.pass ? 0 : kMismatchStatus;
}

}  // namespace

TESSEL_REGISTER_COMMAND(compare, 48, [](CLI::App& app) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand("compare", "Run two forms of a model on the same inputs and compare their outputs");
  cmd->footer(
      "Examples:\n"
      "  tessel compare resnet18.onnx resnet18.so               (reference interpreter vs compiled CPU library)\n"
      "  tessel compare resnet18.onnx --target ref,cpu,npu --hw default\n"
      "  tessel compare resnet18.so resnet18.tnpu --input input=x.npy --atol 1e-4 --json\n"
      "  tessel compare resnet18.onnx expected.npz              (outputs saved earlier, e.g. with --save-outputs)\n"
      "A is the reference. An element passes when |B - A| <= atol + rtol * |A| (numpy.allclose); NaN matches\n"
      "only NaN. Each output shows its max absolute and relative error and its worst element (the one furthest\n"
      "outside the tolerances). Inputs not given are random (--seed), the same for both sides.\n"
      "Exit status: 0 all outputs within the tolerances, 1 a mismatch (or internal error), 2 bad input.");
  o->model.addTo(cmd, "reference: .onnx/.tir (interpreter), .so (cpu), .tnpu (npu), .npz (saved outputs)");
  cmd->add_option("other", o->second, "the artifact compared with it (same kinds)");
  cmd->add_option("--target", o->targets, "instead of B: build the model for these targets, e.g. ref,cpu,npu (the first is "
                                          "the reference)");
  cmd->add_option("--hw", o->hw, "hardware configuration for npu (file or name; default: default)");
  cmd->add_option("--march", o->march, "-march when building for cpu (default native)");
  o->inputs.addTo(cmd);
  cmd->add_option("--atol", o->tol.atol, "absolute tolerance (default 1e-5)");
  cmd->add_option("--rtol", o->tol.rtol, "relative tolerance (default 1e-5)");
  addThreadsOption(cmd, o->threads, "threads for compiled CPU models (default: all cores)");
  cmd->add_flag("--json", o->json, "print one JSON object (keys: docs/cli.md) instead of text");
  cmd->add_option("--save-inputs", o->saveInputs, "write the inputs used as a .npz")->type_name("FILE.npz");
  cmd->add_option("--save-outputs", o->saveOutputs, "write the reference's outputs as a .npz")->type_name("FILE.npz");
  cmd->callback([o]() {
    int status = compareCommand(*o);
    if (status != 0) throw CLI::RuntimeError(status);
  });
});

}  // namespace tessel::cli
