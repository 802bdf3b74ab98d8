// The CPU target's random-graph check (see cpu_check.h).
#include "cpu_check.h"

#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "../npu_random/random_graph.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/cpu/loader.h"

namespace fs = std::filesystem;

namespace tessel::test {

std::vector<CpuVariant> cpuRandomVariants() {
  std::vector<CpuVariant> v = {{"avx2", "nchw"}, {"avx2", "nchwc8"}};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    v.push_back({"avx512", "nchw"});
    v.push_back({"avx512", "nchwc8"});
  }
  return v;
}

std::vector<std::string> checkRandomGraphOnCpu(uint64_t seed, const std::vector<CpuVariant>& variants,
                                               const std::string& workDir, CpuRunStats& stats,
                                               const std::string& saveDir) {
  // Odd seeds as the NPU test draws them; even seeds with channel counts rounded up to multiples of 8, which the
  // NCHWc8 layout's regions need (with odd counts only a tenth of the graphs had one).
  const std::unique_ptr<Model> model = randomNpuGraph(seed, RandomGraphOptions{seed % 2 == 0});
  const std::map<std::string, Tensor> inputs = randomInputs(*model, seed);
  const std::vector<Tensor> want = Interpreter(*model->graph).run(inputs);
  std::vector<std::string> failures;
  for (const CpuVariant& variant : variants) {
    std::vector<std::string> problems;
    const fs::path so = fs::path(workDir) / fmt::format("random-{}-{}-{}.so", seed, variant.isa, variant.layout);
    cpu::CompileOptions options;
    options.isa = variant.isa;
    options.layout = variant.layout;
    try {
      std::unique_ptr<Model> m = model->clone();
      cpu::prepareModel(*m, options);
      const cpu::CompileReport report = cpu::compileSharedLibrary(*m, so.string(), options);
      stats.compiles++;
      stats.kernelCalls += static_cast<size_t>(report.steps);
      stats.hostSteps += report.hostSteps.size();
      stats.seconds += report.generateSeconds + report.cxxSeconds;
      for (int threads : {1, 2}) {
        cpu::CompiledModel compiled(so.string(), threads);
        if (threads == 1)
          for (const cpu::CompiledStepInfo& step : compiled.steps()) stats.kernels[step.kernel]++;
        const std::vector<Tensor> got = compiled.run(inputs);
        stats.runs++;
        if (got.size() != want.size()) {
          problems.push_back(fmt::format("{} outputs at {} thread(s), {} from the interpreter", got.size(), threads, want.size()));
          continue;
        }
        for (size_t i = 0; i < want.size(); ++i) {
          const std::string p = compareOutput(model->graph->outputs()[i]->name(), got[i], want[i],
                                              fmt::format("cpu {} at {} thread(s)", variant.name(), threads));
          if (!p.empty()) problems.push_back(p);
        }
      }
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("compile or run: {}", e.what()));
    }
    std::error_code ec;
    fs::remove(so, ec);
    if (problems.empty()) continue;
    std::string s = fmt::format("random graph, seed {}, cpu --isa {} --layout {}:\n", seed, variant.isa, variant.layout);
    for (const std::string& p : problems) s += "  " + p + "\n";
    s += fmt::format("replay: TESSEL_CPU_RANDOM_SEED={} TESSEL_CPU_RANDOM_GRAPHS=1 build/tessel_unit_tests "
                     "--gtest_filter='*CpuRandomGraphs*'  (or: build/tessel_cpu_random --seed {} --graphs 1 --save DIR)\n",
                     seed, seed);
    s += "graph (constants elided):\n" + printGraphText(*model->graph);
    failures.push_back(s);
  }
  stats.graphs++;
  stats.failures += !failures.empty();
  if (!failures.empty() && !saveDir.empty()) {
    fs::create_directories(saveDir);
    writeModelTextFile(*model, (fs::path(saveDir) / fmt::format("{}.tir", seed)).string());
  }
  return failures;
}

}  // namespace tessel::test
