// tessel_cpu_random: the long run of the randomised CPU target test (tests/unit/cpu_random_graph_test.cpp runs a few
// graphs in the test command). Compiles graphs SEED .. SEED+GRAPHS-1 for both vector ISAs (AVX-512 when the CPU has
// it) and both layouts, runs them at 1 and 2 threads and prints each failure with its seed and graph; exit 1 if any
// failed.
//   tessel_cpu_random [--seed S] [--graphs N] [--save DIR]   (DIR: failing graphs as SEED.tir)
#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

#include "../npu_random/random_graph.h"
#include "cpu_check.h"

int main(int argc, char** argv) {
  const std::optional<tessel::test::RandomRunArgs> args =
      tessel::test::parseRandomRunArgs(argc, argv, "tessel_cpu_random", 100);
  if (!args) return 2;
  const uint64_t seed = args->seed, graphs = args->graphs;
  const std::string& save = args->save;
  namespace fs = std::filesystem;
  const fs::path work = fs::temp_directory_path() / fmt::format("tessel-cpu-random-{}", getpid());
  fs::create_directories(work);
  const auto start = std::chrono::steady_clock::now();
  tessel::test::CpuRunStats stats;
  const std::vector<tessel::test::CpuVariant> variants = tessel::test::cpuRandomVariants();
  for (uint64_t s = seed; s < seed + graphs; ++s) {
    for (const std::string& f : tessel::test::checkRandomGraphOnCpu(s, variants, work.string(), stats, save))
      std::cout << f << "\n";
    if ((s - seed + 1) % 10 == 0)
      std::cout << fmt::format("{} graphs, {} failing, {:.0f} s\n", s - seed + 1, stats.failures,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())
                << std::flush;
  }
  fs::remove_all(work);
  std::string kernels;
  for (const auto& [k, n] : stats.kernels) kernels += fmt::format(" {} {},", k, n);
  if (!kernels.empty()) kernels.pop_back();
  std::cout << fmt::format("seeds {}..{}: {} graphs, {} variants, {} compiles ({:.0f} s compiling), {} runs, {} kernel calls, "
                           "{} nodes through the interpreter; {} passed, {} failed ({:.0f} s)\nkernel calls by kernel (1 "
                           "thread, every variant):{}\n",
                           seed, seed + graphs - 1, stats.graphs, variants.size(), stats.compiles, stats.seconds, stats.runs,
                           stats.kernelCalls, stats.hostSteps, stats.graphs - stats.failures, stats.failures,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), kernels);
  return stats.failures ? 1 : 0;
}
