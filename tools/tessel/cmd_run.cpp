// `tessel run`: runs a model on given or random inputs and writes each output as <dir>/<name>.npy.
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

#include "command.h"
#include "common.h"
#include "compiled_model_cli.h"
#include "npu_cli.h"
#include "tessel/frontend/tensor_io.h"
#include "tessel/interp/interpreter.h"

namespace tessel::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  InputOptions inputs;
  std::string outputDir;
  bool quiet = false;
  int threads = 0;  ///< compiled models (.so) only
};

void runCommand(const RunOptions& o) {
  if (!o.outputDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.outputDir, ec);
    if (ec || !std::filesystem::is_directory(o.outputDir))
      throw UserError(fmt::format("cannot create output directory '{}': {}", o.outputDir, ec ? ec.message() : "not a directory"));
  }
  if (isNpuModelPath(o.model.path)) return runNpuModelCli(o.model.path, o.inputs, o.outputDir, o.quiet);  // cmd_compile_npu.cpp
  if (isCompiledModelPath(o.model.path)) return runCompiledModel(o.model.path, o.inputs, o.outputDir, o.quiet, o.threads);
  auto model = o.model.load(InferenceMode::Lenient);
  const Graph& g = *model->graph;
  auto inputs = o.inputs.resolve(g, o.quiet);
  InterpreterOptions iopts;
  iopts.seed = o.inputs.seed;
  Interpreter interp(g, iopts);
  auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs = interp.run(inputs);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = g.outputs()[i]->name();
    if (!o.outputDir.empty()) writeNpy((std::filesystem::path(o.outputDir) / (fileNameFor(name) + ".npy")).string(), outputs[i]);
    if (!o.quiet) fmt::print("output '{}': {}\n", name, outputs[i].summary());
  }
  if (!o.quiet)
    fmt::print("ran {} node(s) with the reference interpreter in {:.1f} ms{}\n", g.numNodes(), ms,
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
      "Exit status: 0 success, 2 bad input or unsupported model, 1 internal error.");
  opts->model.addTo(cmd);
  opts->inputs.addTo(cmd);
  cmd->add_option("--output-dir,-o", opts->outputDir, "write each output as DIR/<output name>.npy");
  cmd->add_flag("--quiet,-q", opts->quiet, "print nothing on success");
  cmd->add_option("--threads", opts->threads, "threads for a compiled model (.so; default: all cores)");
  cmd->callback([opts]() { runCommand(*opts); });
});

}  // namespace tessel::cli
