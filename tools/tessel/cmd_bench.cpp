// `tessel bench`: times a compiled model (or compiles a .onnx first) and prints latency statistics.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "command.h"
#include "common.h"
#include "compiled_model_cli.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/rt/cpu.h"

namespace tessel::cli {
namespace {

struct BenchOptions {
  ModelOptions model;
  InputOptions inputs;
  int threads = 0;
  int warmup = 5;
  int iterations = 20;
  bool json = false;
  std::string march = "native";
};

/// Compiles a non-.so model into a temporary library and returns its path.
std::string compileForBench(const BenchOptions& o) {
  auto model = o.model.load(InferenceMode::Strict);
  cpu::prepareModel(*model);
  auto path = std::filesystem::temp_directory_path() / fmt::format("tessel-bench-{}.so", getpid());
  cpu::CompileOptions co;
  co.march = o.march;
  if (!o.json) co.progress = [](const std::string& m) { fmt::print(stderr, "  {}\n", m); };
  cpu::compileSharedLibrary(*model, path.string(), co);
  return path.string();
}

double percentile(const std::vector<double>& sorted, double p) {
  double idx = p * (static_cast<double>(sorted.size()) - 1);
  size_t lo = static_cast<size_t>(idx);
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - static_cast<double>(lo));
}

void benchCommand(const BenchOptions& o) {
  if (o.iterations < 1) throw UserError("--iterations must be at least 1");
  if (o.warmup < 0) throw UserError("--warmup must not be negative");
  bool compiled = isCompiledModelPath(o.model.path);
  std::string path = compiled ? o.model.path : compileForBench(o);
  int threads = o.threads > 0 ? o.threads : rt::hardware_thread_count();
  std::vector<double> ms;
  double flops = 0;
  std::string hash;
  {
    cpu::CompiledModel model(path, threads);
    flops = model.flops();
    hash = model.hash();
    auto tensors = compiledModelInputs(model, o.inputs, true);
    std::vector<const void*> in;
    for (const auto& info : model.inputs()) in.push_back(tensors.at(info.name).rawData());
    std::vector<Tensor> outs;
    std::vector<void*> out;
    for (const auto& info : model.outputs()) {
      outs.emplace_back(info.dtype, info.shape);
      out.push_back(outs.back().rawData());
    }
    for (int i = 0; i < o.warmup; ++i) model.runRaw(in.data(), out.data());
    for (int i = 0; i < o.iterations; ++i) {
      auto start = std::chrono::steady_clock::now();
      model.runRaw(in.data(), out.data());
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  if (!compiled) std::filesystem::remove(path);
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double median = percentile(sorted, 0.5), p90 = percentile(sorted, 0.9);
  double mean = 0;
  for (double v : ms) mean += v / static_cast<double>(ms.size());
  double gflops = flops / (median * 1e6);
  if (o.json) {
    nlohmann::json j = {{"model", o.model.path}, {"hash", hash},       {"threads", threads},
                        {"warmup", o.warmup},    {"iterations", o.iterations}, {"median_ms", median},
                        {"min_ms", sorted.front()}, {"p90_ms", p90}, {"mean_ms", mean},
                        {"max_ms", sorted.back()},  {"gflops", flops / 1e9}, {"gflop_per_s", gflops}};
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{}: {} thread(s), {} warm-up + {} timed runs\n", o.model.path, threads, o.warmup, o.iterations);
  fmt::print("  median {:.3f} ms  min {:.3f} ms  p90 {:.3f} ms  mean {:.3f} ms  max {:.3f} ms\n", median,
             sorted.front(), p90, mean, sorted.back());
  fmt::print("  {:.2f} GFLOP per inference, {:.1f} GFLOP/s at the median\n", flops / 1e9, gflops);
}

}  // namespace

TESSEL_REGISTER_COMMAND(bench, 45, [](CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time a compiled model (a .so, or a .onnx compiled first)");
  cmd->footer(
      "Examples:\n"
      "  tessel bench resnet18.so --threads 1 --warmup 5 --iterations 50\n"
      "  tessel bench resnet18.onnx --threads 2 --json\n"
      "Exit status: 0 success, 2 bad input or unsupported model, 1 internal error.");
  o->model.addTo(cmd, "compiled model (.so) or a model file (.onnx, .tir) to compile first");
  o->inputs.addTo(cmd);
  cmd->add_option("--threads", o->threads, "threads (default: all cores)");
  cmd->add_option("--warmup", o->warmup, "untimed runs first (default 5)");
  cmd->add_option("--iterations", o->iterations, "timed runs (default 20)");
  cmd->add_option("--march", o->march, "-march when compiling a model file (default native)");
  cmd->add_flag("--json", o->json, "print one JSON object (median_ms, min_ms, p90_ms, threads, ...)");
  cmd->callback([o]() { benchCommand(*o); });
});

}  // namespace tessel::cli
