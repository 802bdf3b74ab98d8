// `tessel bench`: times a compiled model (or compiles a .onnx first) and prints latency statistics; with
// --profile a per-layer table (each kernel call's median time, GFLOP/s, share), with --trace a Chrome trace.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "command.h"
#include "common.h"
#include "plot.h"
#include "tessel/eval/runner.h"
#include "tessel/rt/cpu.h"
#include "tessel/targets/cpu/bench.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/cpu/loader.h"

namespace tessel::cli {
namespace {

using cpu::ProfileRow;
using cpu::TimedRun;

struct BenchOptions {
  ModelOptions model;
  InputOptions inputs;
  int threads = 0;
  int warmup = 5;
  int iterations = 20;
  bool json = false;
  bool profile = false;
  std::string trace;
  std::string plot;
  int plotTop = 20;
  std::string march = "native";
  std::string isa = "auto";
};

/// Compiles a non-.so model into a temporary library and returns its path.
std::string compileForBench(const BenchOptions& o) {
  auto model = o.model.load(InferenceMode::Strict);
  cpu::CompileOptions co;
  co.march = o.march;
  co.isa = o.isa;
  cpu::prepareModel(*model, co);
  auto path = std::filesystem::temp_directory_path() / fmt::format("tessel-bench-{}.so", getpid());
  if (!o.json) co.progress = [](const std::string& m) { fmt::print(stderr, "  {}\n", m); };
  cpu::compileSharedLibrary(*model, path.string(), co);
  return path.string();
}

std::string gflopsText(double flops, double ms) {
  return flops > 0 && ms > 0 ? fmt::format("{:.1f}", flops / (ms * 1e6)) : "-";
}

void printProfile(const std::vector<ProfileRow>& rows, double medianRunMs, double cover) {
  double total = 0;
  for (const ProfileRow& r : rows) total += r.ms;
  size_t wNode = 4, wOp = 2, wKernel = 6, wShape = 6;
  for (const ProfileRow& r : rows) {
    wNode = std::max(wNode, r.step->node.size());
    wOp = std::max(wOp, r.step->op.size());
    wKernel = std::max(wKernel, r.step->kernel.size());
    wShape = std::max(wShape, shapeToString(r.step->shape).size());
  }
  fmt::print("\nper-layer profile (median over the timed runs, in execution order):\n");
  // Times with 5 decimals (10 ns): a small model's pooling or copy call takes well under 0.1 us.
  fmt::print("{:>4}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>10}  {:>10}  {:>8}  {:>6}\n", "#", "node", wNode, "op", wOp,
             "kernel", wKernel, "output", wShape, "ms", "min ms", "GFLOP/s", "share");
  double totalMin = 0, flops = 0;
  for (const ProfileRow& r : rows) {
    fmt::print("{:>4}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>10.5f}  {:>10.5f}  {:>8}  {:>5.1f}%\n", r.index, r.step->node,
               wNode, r.step->op, wOp, r.step->kernel, wKernel, shapeToString(r.step->shape), wShape, r.ms, r.minMs,
               gflopsText(r.step->flops, r.ms), total > 0 ? 100.0 * r.ms / total : 0.0);
    totalMin += r.minMs;
    flops += r.step->flops;
  }
  size_t label = wNode + wOp + wKernel + wShape + 12;
  fmt::print("{:<{}}  {:>10.5f}  {:>10.5f}  {:>8}  {:>5.1f}%\n",
             fmt::format("      total of {} kernel calls", rows.size()), label, total, totalMin,
             gflopsText(flops, total), 100.0);
  fmt::print("{:<{}}  {:>10.5f}\n", "      whole inference (median)", label, medianRunMs);
  fmt::print("      (the sum of medians differs from the median of sums when runs vary; within each run the calls "
             "took {:.2f}% of the wall time, median)\n",
             100.0 * cover);
  fmt::print("\nby kernel:\n{:<{}}  {:>5}  {:>10}  {:>8}  {:>6}\n", "kernel", wKernel, "calls", "ms", "GFLOP/s",
             "share");
  for (const cpu::KernelTotal& k : cpu::byKernel(rows))
    fmt::print("{:<{}}  {:>5}  {:>10.5f}  {:>8}  {:>5.1f}%\n", k.kernel, wKernel, k.calls, k.ms,
               gflopsText(k.flops, k.ms), total > 0 ? 100.0 * k.ms / total : 0.0);
}

/// Chrome/Perfetto trace of every timed run: one "inference" event per run on the calling thread's track,
/// the kernel calls nested in it (microseconds from the first run's start).
void writeTrace(std::ofstream& f, const std::string& path, const std::string& model, int threads,
                const std::vector<cpu::CompiledStepInfo>& steps, const std::vector<TimedRun>& runs) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "tessel bench " + model}}}});
  std::string thread = threads > 1 ? fmt::format("inference thread (each step's wall time; the {} pool worker(s) "
                                                 "working inside the steps are not traced)",
                                                 threads - 1)
                                   : "inference thread";
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", thread}}}});
  double origin = runs.front().startNs;
  for (size_t r = 0; r < runs.size(); ++r) {
    const TimedRun& run = runs[r];
    events.push_back({{"name", fmt::format("inference {}", r)},
                      {"cat", "inference"},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", (run.startNs - origin) / 1e3},
                      {"dur", run.ns / 1e3}});
    double t = run.steps[steps.size()];
    for (size_t i = 0; i < steps.size(); ++i) {
      const cpu::CompiledStepInfo& s = steps[i];
      nlohmann::json args = {{"step", i}, {"node", s.node}, {"kernel", s.kernel}, {"shape", shapeToString(s.shape)}};
      if (s.flops > 0) args["gflop_per_s"] = s.flops / run.steps[i];
      events.push_back({{"name", s.op + " " + s.node},
                        {"cat", s.kernel},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", 1},
                        {"ts", (t - origin) / 1e3},
                        {"dur", run.steps[i] / 1e3},
                        {"args", args}});
      t += run.steps[i];
    }
  }
  f << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  f.close();
  if (!f) throw UserError(fmt::format("cannot write trace '{}'", path));
}

/// What timing a compiled model measured, and the facts of the model it read.
struct Timing {
  std::vector<TimedRun> runs;
  std::vector<cpu::CompiledStepInfo> steps;
  nlohmann::json json;  ///< the --json object
};

/// Checks and places the inputs of a library loaded on `threads` threads, and times the warm-up and timed runs
/// (each kernel call too when `profiling`).
Timing timeModel(cpu::CompiledModel& model, int threads, const BenchOptions& o, bool profiling) {
  Timing t;
  t.steps = model.steps();
  auto tensors = o.inputs.resolve(*eval::inputSignature(model.inputs()), true);
  t.runs = cpu::timeRuns(model, tensors, o.warmup, o.iterations, profiling);
  t.json = cpu::benchJson(o.model.path, model, threads, o.warmup, t.runs, o.profile);
  return t;
}

/// The --plot chart: the `top` slowest kernel calls (median ms), the rest folded into one bar.
nlohmann::json profileChart(const std::vector<ProfileRow>& rows, size_t top, const std::string& model, int threads) {
  std::vector<const ProfileRow*> sorted;
  for (const ProfileRow& r : rows) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ProfileRow* a, const ProfileRow* b) { return a->ms > b->ms; });
  nlohmann::json bars = nlohmann::json::array();
  double rest = 0, total = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const ProfileRow& r = *sorted[i];
    total += r.ms;
    if (i >= top) {
      rest += r.ms;
      continue;
    }
    bars.push_back({{"label", fmt::format("#{} {} ({})", r.index, r.step->node, r.step->op)},
                    {"value", r.ms},
                    {"group", r.step->kernel}});
  }
  nlohmann::json folded = nullptr;
  if (sorted.size() > top) folded = {{"label", fmt::format("the other {} calls", sorted.size() - top)}, {"value", rest}};
  return {{"title", fmt::format("{}: per-layer time, {} thread(s); {} kernel calls, {:.3f} ms in total (medians)", model,
                                threads, rows.size(), total)},
          {"xlabel", "median ms per inference"},
          {"rows", bars},
          {"folded", folded}};
}

/// Times an artifact that is not a CPU library (a .tnpu) as a whole, through the target that made it.
void benchArtifact(const BenchOptions& o, eval::Runner& runner, int threads) {
  if (o.profile || !o.trace.empty() || !o.plot.empty())
    throw UserError(fmt::format("--profile, --trace and --plot time the kernel calls of a .so or of a model file "
                                "compiled for the cpu; '{}' is timed as a whole", o.model.path));
  auto inputs = o.inputs.resolve(runner.signature(), true);
  for (int i = 0; i < o.warmup; ++i) runner.run(inputs);
  std::vector<TimedRun> runs;
  for (int i = 0; i < o.iterations; ++i) {
    auto start = std::chrono::steady_clock::now();
    runner.run(inputs);
    runs.push_back({0, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count(), {}});
  }
  const cpu::LatencyStats s = cpu::latencyStats(runs);
  nlohmann::json j = {{"model", o.model.path}, {"threads", threads},     {"warmup", o.warmup},
                      {"iterations", runs.size()}, {"median_ms", s.median}, {"min_ms", s.min},
                      {"p90_ms", s.p90},          {"mean_ms", s.mean},     {"max_ms", s.max},
                      {"runner", runner.label()}, {"last_run", runner.lastRunSummary()}};
  if (o.json) return fmt::print("{}\n", j.dump());
  fmt::print("{}: {} thread(s), {} warm-up + {} timed runs\n  {}\n", o.model.path, threads, o.warmup, o.iterations,
             runner.lastRunSummary());
  fmt::print("  median {:.3f} ms  min {:.3f} ms  p90 {:.3f} ms  mean {:.3f} ms  max {:.3f} ms\n", s.median, s.min,
             s.p90, s.mean, s.max);
}

void benchCommand(const BenchOptions& o) {
  if (o.iterations < 1) throw UserError("--iterations must be at least 1");
  if (o.warmup < 0) throw UserError("--warmup must not be negative");
  if (o.plotTop < 1) throw UserError(fmt::format("--plot-top {}: expected at least 1", o.plotTop));
  if (!o.plot.empty()) checkPictureOutput("--plot", o.plot);
  o.model.refuseShapesOfCompiled();
  const bool modelFile = eval::artifactKind(o.model.path) == "model";
  // Open the trace first: a bad path is reported before minutes of compiling and timing.
  std::ofstream traceFile;
  if (!o.trace.empty()) {
    if (std::filesystem::is_directory(o.trace))
      throw UserError(fmt::format("cannot write trace '{}': it is a directory", o.trace));
    traceFile.open(o.trace, std::ios::binary | std::ios::trunc);
    if (!traceFile) throw UserError(fmt::format("cannot write trace '{}': {}", o.trace, std::strerror(errno)));
  }
  // An error below leaves no empty trace behind.
  struct RemoveOnError {
    const std::string& path;
    int uncaught = std::uncaught_exceptions();
    ~RemoveOnError() {
      std::error_code ec;
      if (!path.empty() && std::uncaught_exceptions() > uncaught) std::filesystem::remove(path, ec);
    }
  } removeOnError{o.trace};
  bool profiling = o.profile || !o.trace.empty() || !o.plot.empty();
  std::string path = modelFile ? compileForBench(o) : o.model.path;
  int threads = o.threads > 0 ? o.threads : rt::hardware_thread_count();
  eval::RunnerOptions ro;
  ro.threads = threads;
  std::unique_ptr<eval::Runner> runner = eval::openArtifact(path, ro);
  if (modelFile) std::filesystem::remove(path);  // a loaded library stays mapped
  cpu::CompiledModel* library = runner->cpuLibrary();
  if (!library) return benchArtifact(o, *runner, threads);
  Timing timing = timeModel(*library, threads, o, profiling);
  const std::vector<TimedRun>& runs = timing.runs;
  const std::vector<cpu::CompiledStepInfo>& steps = timing.steps;
  std::vector<ProfileRow> rows;
  if (profiling) rows = cpu::profileRows(steps, runs);
  if (!o.trace.empty()) writeTrace(traceFile, o.trace, o.model.path, threads, steps, runs);
  if (!o.plot.empty()) drawChart("layers", profileChart(rows, static_cast<size_t>(o.plotTop), o.model.path, threads), o.plot);
  nlohmann::json& j = timing.json;
  if (o.json) {
    if (!o.trace.empty()) j["trace"] = o.trace;
    if (!o.plot.empty()) j["plot"] = o.plot;
    fmt::print("{}\n", j.dump());
    return;
  }
  const double med = j["median_ms"], gflops = j["gflop_per_s"];
  fmt::print("{}: {} thread(s), {} warm-up + {} timed runs{}\n", o.model.path, threads, o.warmup, o.iterations,
             profiling ? " (each kernel call timed)" : "");
  fmt::print("  median {:.3f} ms  min {:.3f} ms  p90 {:.3f} ms  mean {:.3f} ms  max {:.3f} ms\n", med,
             j["min_ms"].get<double>(), j["p90_ms"].get<double>(), j["mean_ms"].get<double>(), j["max_ms"].get<double>());
  fmt::print("  {:.2f} GFLOP per inference, {:.1f} GFLOP/s at the median", j["gflops"].get<double>(), gflops);
  if (j.contains("peak_gflop_per_s"))
    fmt::print(" ({:.0f}% of one core's {} FMA peak, {:.1f} GFLOP/s)", 100.0 * j["peak_fraction"].get<double>(),
               j["isa"].get<std::string>(), j["peak_gflop_per_s"].get<double>());
  fmt::print("\n");
  if (o.profile) printProfile(rows, med, cpu::profileCoverage(runs, steps.size()));
  if (!o.trace.empty())
    fmt::print("  trace of {} runs ({} kernel calls each) written to {}\n", runs.size(), steps.size(), o.trace);
  if (!o.plot.empty()) fmt::print("  per-layer chart written to {}\n", o.plot);
}

}  // namespace

TESSEL_REGISTER_COMMAND(bench, 45, [](CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time a compiled model (a .so or .tnpu, or a .onnx compiled first)");
  cmd->footer(
      "Examples:\n"
      "  tessel bench resnet18.so --threads 1 --warmup 5 --iterations 50\n"
      "  tessel bench resnet18.onnx --threads 2 --json\n"
      "  tessel bench resnet18.tnpu --threads 1          (a partitioned model, timed as a whole)\n"
      "  tessel bench resnet18.so --threads 1 --profile --trace trace.json   (open it in ui.perfetto.dev)\n"
      "  tessel bench resnet18.so --profile --plot layers.svg                (bar chart of the slowest calls)\n"
      "--profile times every kernel call (a fused kernel is one call) in every timed run and prints one row per\n"
      "call: index, node, op, kernel, output shape, median and min ms over the runs, GFLOP/s at the median\n"
      "(FLOPs of convolutions and GEMMs, '-' for other calls), share of the calls' total; a total line; then\n"
      "the same totals per kernel. With --json the object gains \"profile\": {\"layers\": [...], \"by_kernel\":\n"
      "[...], \"total_ms\", \"coverage\"}. --trace FILE writes a Chrome/Perfetto trace of every timed run (ph \"X\"\n"
      "events in microseconds: one \"inference\" event per run, the kernel calls nested in it, on the calling\n"
      "thread's track; pool workers are not traced). Without --profile/--trace the run has no timing code.\n"
      "Exit status: 0 success, 2 bad input or unsupported model, 1 internal error.");
  o->model.addTo(cmd, "compiled model (.so, .tnpu) or a model file (.onnx, .tir) to compile for the cpu first");
  o->inputs.addTo(cmd);
  addThreadsOption(cmd, o->threads, "threads (default: all cores)");
  cmd->add_option("--warmup", o->warmup, "untimed runs first (default 5)");
  cmd->add_option("--iterations", o->iterations, "timed runs (default 20)");
  cmd->add_option("--march", o->march, "-march when compiling a model file (default native)");
  cmd->add_option("--isa", o->isa, "vector ISA when compiling a model file: avx2, avx512 or auto (default; "
                  "tessel compile --isa)")
      ->check(CLI::IsMember({"auto", "avx2", "avx512"}));
  cmd->add_flag("--json", o->json, "print one JSON object (median_ms, min_ms, p90_ms, threads, ...)");
  cmd->add_flag("--profile", o->profile, "time each kernel call; print a per-layer table (time, GFLOP/s, share)");
  cmd->add_option("--trace", o->trace, "write a Chrome/Perfetto trace (JSON) of the timed runs' kernel calls")
      ->type_name("FILE");
  cmd->add_option("--plot", o->plot, "draw the per-layer times as a bar chart (.svg, .png or .pdf; needs matplotlib)")
      ->type_name("FILE");
  cmd->add_option("--plot-top", o->plotTop, "bars in the --plot chart; slower calls first, the rest folded (default 20)");
  cmd->callback([o]() { benchCommand(*o); });
});

}  // namespace tessel::cli
