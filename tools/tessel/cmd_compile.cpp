// `tessel compile`: compiles a model for the cpu target into a shared library, C++ source or a standalone app.
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

#include "command.h"
#include "common.h"
#include "compiled_model_cli.h"
#include "npu_cli.h"
#include "tessel/frontend/tensor_io.h"
#include "tessel/targets/cpu/compiler.h"

namespace tessel::cli {

bool isCompiledModelPath(const std::string& path) { return path.size() > 3 && path.substr(path.size() - 3) == ".so"; }

std::map<std::string, Tensor> compiledModelInputs(const cpu::CompiledModel& model, const InputOptions& inputs,
                                                  bool quiet) {
  // A graph with just the declared inputs lets the interpreter path's input resolution (files, seeded
  // random values) serve compiled models too, so both paths see the same tensors for the same seed.
  Graph g;
  for (const auto& in : model.inputs()) g.addInput(in.name, TensorType::fromShape(in.dtype, in.shape));
  return inputs.resolve(g, quiet);
}

void runCompiledModel(const std::string& path, const InputOptions& inputs, const std::string& outputDir, bool quiet,
                      int threads) {
  cpu::CompiledModel model(path, threads);
  auto tensors = compiledModelInputs(model, inputs, quiet);
  auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> outputs = model.run(tensors);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = model.outputs()[i].name;
    if (!outputDir.empty()) writeNpy((std::filesystem::path(outputDir) / (fileNameFor(name) + ".npy")).string(), outputs[i]);
    if (!quiet) fmt::print("output '{}': {}\n", name, outputs[i].summary());
  }
  if (!quiet)
    fmt::print("ran compiled model {} (hash {}) in {:.1f} ms{}\n", path, model.hash(), ms,
               outputDir.empty() ? "" : fmt::format("; outputs written to {}/", outputDir));
}

namespace {

struct CompileCmdOptions {
  ModelOptions model;
  std::string output;
  std::string target = "cpu";
  std::string hw;  ///< --target npu: hardware configuration
  std::string emit = "so";
  std::string emitApp;
  int threads = 0;
  cpu::CompileOptions compile;
};

void printReport(const cpu::CompileReport& r, double seconds, const std::string& what) {
  fmt::print("compiled {} in {:.1f} s (generate {:.2f} s, C++ compiler {:.1f} s)\n", what, seconds, r.generateSeconds,
             r.cxxSeconds);
  fmt::print("  kernel calls: {} ({} nodes fused into them), {} FLOP per inference\n", r.steps, r.fusedNodes,
             humanCount(r.flops));
  if (r.inPlaceConcatInputs > 0)
    fmt::print("  concat: {} input(s) written in place into their slice of the output (no copy)\n",
               r.inPlaceConcatInputs);
  if (!r.fallbackNodes.empty())
    fmt::print("  host interpreter: {} node(s) without a compiled kernel run through the reference interpreter "
               "(tessel run/bench provide it; --emit-app refuses them): {}\n",
               r.fallbackNodes.size(), fmt::join(r.fallbackNodes, "; "));
  fmt::print("  peak arena: {} (without reuse: {}); weights: {} (packed: {}); hash {}\n", humanBytes(r.arenaBytes),
             humanBytes(r.naiveArenaBytes), humanBytes(r.weightBytes), humanBytes(r.packedWeightBytes), r.hash);
}

void compileCommand(CompileCmdOptions& o) {
  if (o.target == "npu") return compileNpuModel(o.model, o.hw, o.output);  // cmd_compile_npu.cpp
  if (o.target != "cpu") throw UserError(fmt::format("tessel compile: unknown --target '{}' (known: cpu, npu)", o.target));
  if (o.emit != "so" && o.emit != "cpp") throw UserError(fmt::format("--emit={}: expected 'so' or 'cpp'", o.emit));
  auto start = std::chrono::steady_clock::now();
  int stage = 0;
  const int stages = (o.emit == "cpp" ? 3 : 4) + (o.compile.tune ? 1 : 0);
  o.compile.progress = [&](const std::string& msg) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (msg.rfind("  ", 0) == 0) return fmt::print(stderr, "      {:5.1f} s{}\n", s, msg);  // detail of a stage
    fmt::print(stderr, "[{}/{}] {:5.1f} s  {}\n", std::min(++stage, stages), stages, s, msg);
  };
  o.compile.defaultThreads = o.threads;
  o.compile.progress(fmt::format("loading {}", o.model.path));
  auto model = o.model.load(InferenceMode::Strict);
  o.compile.progress("running the cpu pass pipeline (folding, fusion, kernel selection; see tessel opt --pipeline cpu)");
  cpu::prepareModel(*model, o.compile);
  std::filesystem::path stem = std::filesystem::path(o.model.path).stem();
  cpu::CompileReport report;
  std::string what;
  if (!o.emitApp.empty()) {
    report = cpu::emitApp(*model, o.emitApp, o.compile);
    what = "a standalone app project in " + o.emitApp;
  } else if (o.emit == "cpp") {
    if (o.output.empty()) o.output = stem.string() + ".cpp";
    report = cpu::emitSource(*model, o.output, o.compile);
    what = "C++ source " + o.output;
  } else {
    if (o.output.empty()) o.output = stem.string() + ".so";
    report = cpu::compileSharedLibrary(*model, o.output, o.compile);
    what = o.output;
  }
  printReport(report, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), what);
}

}  // namespace

TESSEL_REGISTER_COMMAND(compile, 40, [](CLI::App& app) {
  auto o = std::make_shared<CompileCmdOptions>();
  CLI::App* cmd = app.add_subcommand("compile", "Compile a model to native code for the CPU (shared library, C++ or app)");
  cmd->footer(
      "Examples:\n"
      "  tessel compile resnet18.onnx -o resnet18.so && tessel run resnet18.so --input input=x.npy\n"
      "  tessel compile model.onnx --emit=cpp -o model.cpp       (source + model.weights.bin)\n"
      "  tessel compile model.onnx --emit-app app/ && cmake -S app -B app/build && cmake --build app/build\n"
      "Exit status: 0 success, 2 bad input or unsupported model, 1 internal error.");
  o->model.addTo(cmd);
  cmd->add_option("-o,--output", o->output, "output file (default: MODEL's name with .so / .cpp)");
  cmd->add_option("--target", o->target, "target: cpu, or npu (writes a .tnpu; needs --hw)");
  cmd->add_option("--hw", o->hw, "hardware configuration for --target npu (e.g. configs/default.json)");
  cmd->add_option("--threads", o->threads, "default thread count of the compiled model (0: all cores)");
  cmd->add_option("--emit", o->emit, "so (shared library, default) or cpp (generated source only)");
  cmd->add_option("--emit-app", o->emitApp, "write a standalone CMake project into DIR");
  cmd->add_option("--march", o->compile.march, "-march for the C++ compiler (default native)");
  cmd->add_option("--cxx", o->compile.cxx, "C++ compiler (default $CXX, else g++)");
  cmd->add_option("--layout", o->compile.layout,
                  "activation layout: nchw, nchwc8 (blocked regions around direct convolutions, reorders on their "
                  "edges) or auto (default: without AVX-512 the blocked regions that have a depthwise conv, with "
                  "AVX-512 nchw)")
      ->check(CLI::IsMember({"auto", "nchw", "nchwc8"}));
  cmd->add_flag("--tune", o->compile.tune, "choose each convolution's kernel by timing the candidates here");
  cmd->add_option("--tuning-file", o->compile.tuningFile,
                  "with --tune: save the kernel choices here; without: reuse the choices saved here");
  cmd->callback([o]() { compileCommand(*o); });
});

}  // namespace tessel::cli
