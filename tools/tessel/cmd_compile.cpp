// `tessel compile`: compiles a model for a target of the registry (cpu: shared library, C++ source or a
// standalone app; npu: a .tnpu for a hardware configuration).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

#include "command.h"
#include "common.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/target.h"

namespace tessel::cli {

namespace {

struct CompileCmdOptions {
  ModelOptions model;
  std::string output;
  std::string target;  ///< "": the target whose artifacts end like -o, else cpu
  std::string hw;      ///< targets with a hardware configuration (npu)
  std::string npuStrategy;  ///< --target npu: schedule overrides (settings of the npu target)
  int64_t npuWindow = -1;
  std::string emit = "so";
  std::string emitApp;
  int threads = 0;
  bool json = false;
  cpu::CompileOptions compile;
};

/// The largest --threads a compiled model may default to (it may run on a larger machine than this one).
constexpr int kMaxCompiledThreads = 256;

const target::Target& chosenTarget(const CompileCmdOptions& o) {
  const target::TargetRegistry& targets = target::TargetRegistry::instance();
  if (!o.target.empty()) return targets.get(o.target);
  if (const target::Target* t = targets.forExtension(std::filesystem::path(o.output).extension().string())) return *t;
  return targets.get("cpu");
}

/// The target's options from the flags; UserError for a flag the target does not read.
target::TargetOptions targetOptions(const CompileCmdOptions& o, const target::Target& t) {
  target::TargetOptions to;
  to.hw = o.hw;
  to.host = o.compile;
  to.emit = o.emitApp.empty() ? o.emit : "app";
  if (!o.npuStrategy.empty()) to.settings["npu-strategy"] = o.npuStrategy;
  if (o.npuWindow >= 0) to.settings["npu-window"] = std::to_string(o.npuWindow);
  const std::vector<std::string> known = t.settings();
  for (const auto& [key, value] : to.settings)
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw UserError(fmt::format("--{} does not apply to --target {}", key, t.name()));
  if (!o.hw.empty() && !t.usesHardwareConfig())
    throw UserError(fmt::format("--hw does not apply to --target {} (it uses no hardware configuration)", t.name()));
  return to;
}

void compileCommand(CompileCmdOptions& o) {
  const target::Target& t = chosenTarget(o);
  auto start = std::chrono::steady_clock::now();
  int stage = 0;
  o.compile.defaultThreads = o.threads;
  target::TargetOptions to = targetOptions(o, t);
  const int stages = t.progressStages(to);
  to.host.progress = [&](const std::string& msg) {
    if (o.json) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (msg.rfind("  ", 0) == 0) return fmt::print(stderr, "      {:5.1f} s{}\n", s, msg);  // detail of a stage
    ++stage;
    if (stages > 0) fmt::print(stderr, "[{}/{}] {:5.1f} s  {}\n", std::min(stage, stages), stages, s, msg);
    else fmt::print(stderr, "[{}] {:5.1f} s  {}\n", stage, s, msg);
  };
  to.host.progress(fmt::format("loading {}", o.model.path));
  auto model = o.model.load(InferenceMode::Strict);
  target::Artifact a = target::compile(t, *model, o.model.path, o.emitApp.empty() ? o.output : o.emitApp, to);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o.json) {
    a.report["seconds"] = seconds;
    fmt::print("{}\n", a.report.dump());
  } else {
    fmt::print("compiled {} in {:.1f} s{}\n{}", a.what, seconds, a.timing, a.details);
  }
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
      "  tessel compile model.onnx --target npu --hw default -o model.tnpu\n"
      "  tessel compile model.onnx --target npu --hw default --tuning-file model.tune.json   (tessel tune's winner)\n"
      "  tessel compile model.onnx --hw cpu-only -o model.tnpu     (partitioned; host parts as compiled code)\n"
      "Exit status: 0 success, 2 bad input or unsupported model, 1 internal error.");
  o->model.addTo(cmd);
  cmd->add_option("-o,--output", o->output, "output file (default: MODEL's name with .so / .cpp)");
  cmd->add_option("--target", o->target,
                  "target: " + fmt::format("{}", fmt::join(target::TargetRegistry::instance().names(), ", ")) +
                      " (default: the one whose files end like -o, else cpu; npu writes a .tnpu and needs --hw)");
  cmd->add_option("--hw", o->hw, "hardware configuration for --target npu: a file, or a name (default, tiny, cpu-only, "
                  "...)");
  cmd->add_option("--npu-strategy", o->npuStrategy,
                  "--target npu: how instructions are scheduled: window (default: list scheduling admitting a few "
                  "tiles at a time), greedy (no window) or sequential (no overlap); docs/scheduling.md")
      ->check(CLI::IsMember({"window", "greedy", "sequential"}));
  cmd->add_option("--npu-window", o->npuWindow,
                  "--target npu: tiles the window admits at once (0: the compiler chooses, the default)")
      ->check(CLI::Range(0, 1 << 20));
  addThreadsOption(cmd, o->threads, "default thread count of the compiled model (default: all cores of the machine it "
                   "runs on)", kMaxCompiledThreads);
  cmd->add_option("--emit", o->emit, "so (shared library, default) or cpp (generated source only)");
  cmd->add_option("--emit-app", o->emitApp, "write a standalone CMake project into DIR");
  cmd->add_option("--march", o->compile.march, "-march for the C++ compiler (default native)");
  cmd->add_option("--isa", o->compile.isa,
                  "--target cpu: vector ISA of the generated code and runtime kernels: avx2 (8-lane kernels, AVX-512 "
                  "off whatever --march has), avx512 (16-lane; --march must have AVX-512F) or auto (default: what "
                  "--march has)")
      ->check(CLI::IsMember({"auto", "avx2", "avx512"}));
  cmd->add_option("--cxx", o->compile.cxx, "C++ compiler (default $CXX, else g++)");
  cmd->add_option("--layout", o->compile.layout,
                  "activation layout: nchw, nchwc8 (blocked regions around direct convolutions, reorders on their "
                  "edges) or auto (default: without AVX-512 the blocked regions that have a grouped conv, a channel Concat, "
                  "or a depthwise conv other than a 5x5 on a small map; with AVX-512 nchw)")
      ->check(CLI::IsMember({"auto", "nchw", "nchwc8"}));
  cmd->add_flag("--tune", o->compile.tune, "choose each convolution's kernel by timing the candidates here");
  cmd->add_option("--tuning-file", o->compile.tuningFile,
                  "--target cpu with --tune: save the kernel choices here; without: reuse the choices saved here. "
                  "--target npu: the record of `tessel tune` for this model and --hw (its winning schedules)");
  cmd->add_flag_function("--no-host-fallback", [o](int64_t) { o->compile.hostFallback = false; },
                "refuse (exit 2) a model with any node that would run through the host's reference interpreter");
  cmd->add_flag_function("--no-conv-chains", [o](int64_t) { o->compile.convChains = false; },
                         "--target cpu: lower each conv of an inverted residual block (1x1, depthwise, 1x1) alone "
                         "instead of as one step in bands of rows (docs/cpu-target.md)");
  cmd->add_flag("--json", o->json, "print one JSON object describing the result (keys: docs/cli.md) instead of text");
  cmd->callback([o]() { compileCommand(*o); });
});

}  // namespace tessel::cli
