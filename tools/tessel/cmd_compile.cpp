// `tessel compile`: compiles a model for the cpu target into a shared library, C++ source or a standalone app.
#include <chrono>
#include <filesystem>
#include <fmt/format.h>

#include "command.h"
#include "common.h"
#include "npu_cli.h"
#include "tessel/targets/cpu/compiler.h"

namespace tessel::cli {

namespace {

struct CompileCmdOptions {
  ModelOptions model;
  std::string output;
  std::string target = "cpu";
  std::string hw;  ///< --target npu: hardware configuration
  NpuScheduleFlags npu;  ///< --target npu: schedule overrides
  std::string emit = "so";
  std::string emitApp;
  int threads = 0;
  bool json = false;
  cpu::CompileOptions compile;
};

/// The largest --threads a compiled model may default to (it may run on a larger machine than this one).
constexpr int kMaxCompiledThreads = 256;

void printReport(const cpu::CompileReport& r, double seconds, const std::string& what) {
  fmt::print("compiled {} in {:.1f} s (generate {:.2f} s, C++ compiler {:.1f} s)\n", what, seconds, r.generateSeconds,
             r.cxxSeconds);
  fmt::print("  kernel calls: {} ({} nodes fused into them), {} FLOP per inference\n", r.steps, r.fusedNodes,
             humanCount(r.flops));
  if (r.inPlaceConcatInputs > 0)
    fmt::print("  concat: {} input(s) written in place into their slice of the output (no copy)\n",
               r.inPlaceConcatInputs);
  if (!r.hostSteps.empty()) {
    fmt::print("  host interpreter: {} node(s) without a compiled code path run through the reference interpreter "
               "(tessel run/bench provide it; --emit-app and --no-host-fallback refuse them):\n",
               r.hostSteps.size());
    for (const cpu::HostStep& h : r.hostSteps) fmt::print("    {}: {}\n", h.node, h.reason);
  }
  fmt::print("  peak arena: {} (without reuse: {}); weights: {} (packed: {}); hash {}\n", humanBytes(r.arenaBytes),
             humanBytes(r.naiveArenaBytes), humanBytes(r.weightBytes), humanBytes(r.packedWeightBytes), r.hash);
}

nlohmann::json reportJson(const cpu::CompileReport& r, const CompileCmdOptions& o, double seconds) {
  nlohmann::json j = {{"target", "cpu"},
                      {"model", o.model.path},
                      {"output", o.emitApp.empty() ? o.output : o.emitApp},
                      {"emit", o.emitApp.empty() ? o.emit : "app"},
                      {"seconds", seconds},
                      {"generate_seconds", r.generateSeconds},
                      {"cxx_seconds", r.cxxSeconds},
                      {"kernel_calls", r.steps},
                      {"fused_nodes", r.fusedNodes},
                      {"flops", r.flops},
                      {"in_place_concat_inputs", r.inPlaceConcatInputs},
                      {"fallback_nodes", r.fallbackNodes},
                      {"arena_bytes", r.arenaBytes},
                      {"naive_arena_bytes", r.naiveArenaBytes},
                      {"weight_bytes", r.weightBytes},
                      {"packed_weight_bytes", r.packedWeightBytes},
                      {"hash", r.hash}};
  nlohmann::json host = nlohmann::json::array();
  for (const cpu::HostStep& h : r.hostSteps) host.push_back({{"node", h.node}, {"op", h.op}, {"reason", h.reason}});
  j["host_steps"] = host;
  if (o.compile.tune)
    j["tuning"] = {{"convs", r.tunedConvs}, {"changed", r.tunedChanged}, {"vector_lanes", r.tunerVectorLanes},
                   {"seconds", r.tuneSeconds}};
  return j;
}

void compileCommand(CompileCmdOptions& o) {
  if (o.target == "npu") {  // cmd_compile_npu.cpp
    nlohmann::json j = compileNpuModel(o.model, o.hw, o.output, o.json, o.npu);
    if (o.json) fmt::print("{}\n", j.dump());
    return;
  }
  if (o.target != "cpu") throw UserError(fmt::format("tessel compile: unknown --target '{}' (known: cpu, npu)", o.target));
  if (!o.npu.strategy.empty() || o.npu.window >= 0)
    throw UserError("--npu-strategy and --npu-window apply to --target npu only");
  if (o.emit != "so" && o.emit != "cpp") throw UserError(fmt::format("--emit={}: expected 'so' or 'cpp'", o.emit));
  auto start = std::chrono::steady_clock::now();
  int stage = 0;
  const int stages = (o.emit == "cpp" ? 3 : 4) + (o.compile.tune ? 1 : 0);
  o.compile.progress = [&](const std::string& msg) {
    if (o.json) return;
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
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o.json) fmt::print("{}\n", reportJson(report, o, seconds).dump());
  else printReport(report, seconds, what);
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
      "Exit status: 0 success, 2 bad input or unsupported model, 1 internal error.");
  o->model.addTo(cmd);
  cmd->add_option("-o,--output", o->output, "output file (default: MODEL's name with .so / .cpp)");
  cmd->add_option("--target", o->target, "target: cpu, or npu (writes a .tnpu; needs --hw)");
  cmd->add_option("--hw", o->hw, "hardware configuration for --target npu: a file, or a name (default, tiny, ...)");
  cmd->add_option("--npu-strategy", o->npu.strategy,
                  "--target npu: how instructions are scheduled: window (default: list scheduling admitting a few "
                  "tiles at a time), greedy (no window) or sequential (no overlap); docs/scheduling.md")
      ->check(CLI::IsMember({"window", "greedy", "sequential"}));
  cmd->add_option("--npu-window", o->npu.window,
                  "--target npu: tiles the window admits at once (0: the compiler chooses, the default)")
      ->check(CLI::Range(0, 1 << 20));
  addThreadsOption(cmd, o->threads, "default thread count of the compiled model (default: all cores of the machine it "
                   "runs on)", kMaxCompiledThreads);
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
  cmd->add_flag_function("--no-host-fallback", [o](int64_t) { o->compile.hostFallback = false; },
                "refuse (exit 2) a model with any node that would run through the host's reference interpreter");
  cmd->add_flag("--json", o->json, "print one JSON object describing the result (keys: docs/cli.md) instead of text");
  cmd->callback([o]() { compileCommand(*o); });
});

}  // namespace tessel::cli
