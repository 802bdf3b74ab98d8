// tessel_npu_random: the long run of the randomised NPU lowering test (tests/unit/npu_random_graph_test.cpp runs
// a few hundred graphs in the test command). Checks graphs SEED .. SEED+GRAPHS-1 on the default, tiny and edge
// configurations and prints each failure with its seed and graph; exit 1 if any failed.
//   tessel_npu_random [--seed S] [--graphs N] [--save DIR]   (DIR: failing graphs as SEED.tir)
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

#include "random_graph.h"

int main(int argc, char** argv) {
  const std::optional<tessel::test::RandomRunArgs> args =
      tessel::test::parseRandomRunArgs(argc, argv, "tessel_npu_random", 1000);
  if (!args) return 2;
  const uint64_t seed = args->seed, graphs = args->graphs;
  const std::string& save = args->save;
  namespace fs = std::filesystem;
  const fs::path work = fs::temp_directory_path() / fmt::format("tessel-npu-random-{}", getpid());
  fs::create_directories(work);
  const auto start = std::chrono::steady_clock::now();
  tessel::test::RandomRunStats stats;
  const std::vector<std::string> configs = tessel::test::randomTestConfigs();
  for (uint64_t s = seed; s < seed + graphs; ++s) {
    for (const std::string& f : tessel::test::checkRandomGraph(s, configs, work.string(), stats, save)) std::cout << f << "\n";
    if ((s - seed + 1) % 100 == 0)
      std::cout << fmt::format("{} graphs, {} failing, {:.0f} s\n", s - seed + 1, stats.failures,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count())
                << std::flush;
  }
  fs::remove_all(work);
  std::cout << fmt::format("seeds {}..{}: {} graphs, {} compiles, {} nodes ({} on the host), {} graphs wholly on the NPU, "
                           "{} NPU cycles, {} fused groups, {} channel chains ({} with an expand stage, {} with windows in the accumulator beside matrix-unit blocks), {} biases loaded into the accumulator, {} input normalisations on load, {} residuals added in the "
                           "accumulator, {} max pools from accumulator tiles, {} shortcut convolutions in an accumulator, {} convolutions with their passes inside the tiles, {} layer normalisations, {} outputs matched against the prepared graph's reference; {} passed, {} failed ({:.0f} s)\n",
                           seed, seed + graphs - 1, stats.graphs, stats.compiles, stats.nodes, stats.hostNodes,
                           stats.graphsAllOnNpu, stats.cycles, stats.fusedGroups, stats.channelChains, stats.expandChains, stats.sharedWindows, stats.biasLoads, stats.inputNorms, stats.residualsInAcc, stats.maxPools, stats.residualConvs, stats.passesInside, stats.layerNorms, stats.preparedOracle, stats.graphs - stats.failures, stats.failures,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::vector<std::string> host;
  for (const auto& [op, n] : stats.hostOps) host.push_back(fmt::format("{} {}", op, n));
  std::cout << fmt::format("nodes left on the host by the partitioner: {}\n", fmt::join(host, ", "));
  return stats.failures ? 1 : 0;
}
