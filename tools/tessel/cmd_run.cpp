// `tessel run`: runs a model (on the interpreter), a compiled .so or a .tnpu on given or random inputs and
// writes each output as <dir>/<name>.npy.
#include <chrono>
#include <fmt/format.h>

#include "command.h"
#include "common.h"
#include "tessel/eval/inputs.h"
#include "tessel/eval/runner.h"

namespace tessel::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  InputOptions inputs;
  std::string outputDir;
  std::string hw;  ///< .tnpu: require this configuration
  bool quiet = false;
  int threads = 0;  ///< compiled models (.so) only
};

void runCommand(const RunOptions& o) {
  o.model.refuseShapesOfCompiled();
  const std::string kind = eval::artifactKind(o.model.path);
  if (!o.outputDir.empty()) makeOutputDirectory(o.outputDir);
  std::map<std::string, Tensor> given = o.inputs.readGiven();
  eval::RunnerOptions ro;
  if (kind == "model") ro.import = o.model.importOptions(InferenceMode::Lenient, eval::shapesOf(given));
  ro.threads = o.threads;
  ro.seed = o.inputs.seed;
  ro.hwConfig = o.hw;
  std::unique_ptr<eval::Runner> runner = eval::openArtifact(o.model.path, ro);
  auto inputs = o.inputs.resolve(runner->signature(), std::move(given), o.quiet);
  auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs = runner->run(inputs);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::vector<std::string> names = runner->outputNames();
  if (!o.outputDir.empty()) writeOutputFiles(o.outputDir, names, outputs);
  if (o.quiet) return;
  for (size_t i = 0; i < outputs.size(); ++i) fmt::print("output '{}': {}\n", names[i], outputs[i].summary());
  fmt::print("{} in {:.1f} ms{}\n", runner->lastRunSummary(), ms,
             o.outputDir.empty() ? "" : fmt::format("; outputs written to {}/", o.outputDir));
}

}  // namespace

TESSEL_REGISTER_COMMAND(run, 30, [](CLI::App& app) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model on given (or random) inputs and save its outputs as .npy");
  cmd->footer(
      "Examples:\n"
      "  tessel run model.onnx --input image=img.npy --output-dir out\n"
      "  tessel run model.onnx --input-shape input:1x3x224x224 --seed 1   (random input)\n"
      "  tessel run model.so --input inputs.npz     (compiled for the CPU; one array per input name)\n"
      "  tessel run model.tnpu -o out               (compiled for the NPU, run on its simulator)\n"
      "A model file runs on the reference interpreter; undefined input dimensions take the given input's size,\n"
      "else 1 (with a note). Exit status: 0 success, 2 bad input or unsupported model, 1 internal error.");
  opts->model.addTo(cmd, "model: .onnx or .tir (reference interpreter), .so (cpu), .tnpu (npu simulator)");
  opts->inputs.addTo(cmd);
  cmd->add_option("--output-dir,-o", opts->outputDir, "write each output as DIR/<output name>.npy");
  cmd->add_flag("--quiet,-q", opts->quiet, "print nothing on success");
  addThreadsOption(cmd, opts->threads, "threads for a compiled model (.so; default: all cores)");
  cmd->add_option("--hw", opts->hw, "refuse a .tnpu unless it was compiled for this configuration");
  cmd->callback([opts]() { runCommand(*opts); });
});

}  // namespace tessel::cli
