// Randomised test of the CPU target: the random graphs of the NPU lowering test (tests/npu_random/random_graph.h:
// convolutions with kernels 1-7, strides, dilation, asymmetric padding, grouped and depthwise, odd sizes; pools,
// element-wise, normalisation and shape operators) compiled like `tessel compile` with --isa avx2 and avx512 (when the
// CPU has it) and --layout nchw and nchwc8, run at 1 and 2 threads and compared with the reference interpreter.
// Graph i has seed TESSEL_CPU_RANDOM_SEED + i (default 1); TESSEL_CPU_RANDOM_GRAPHS graphs (default 12, 4 under
// AddressSanitizer; each compiled by the C++ compiler once per variant) in two shards. A failure prints the seed,
// the variant and the graph; replay:
//   TESSEL_CPU_RANDOM_SEED=SEED TESSEL_CPU_RANDOM_GRAPHS=1 build/tessel_unit_tests --gtest_filter='*CpuRandomGraphs*'
// Longer runs: build/tessel_cpu_random --graphs 200 (tests/cpu_random/main.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

#include "../cpu_random/cpu_check.h"
#include "../npu_random/random_graph.h"

namespace {

namespace fs = std::filesystem;
using namespace tessel;

constexpr int kShards = 2;

// Under AddressSanitizer (the sanitize stage, one test at a time) a third of the graphs: the unit stage runs them all.
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kDefaultGraphs = 4;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr uint64_t kDefaultGraphs = 4;
#else
constexpr uint64_t kDefaultGraphs = 12;
#endif
#else
constexpr uint64_t kDefaultGraphs = 12;
#endif

class CpuRandomGraphs : public ::testing::TestWithParam<int> {};

TEST_P(CpuRandomGraphs, MatchTheInterpreterInEveryIsaLayoutAndThreadCount) {
  const uint64_t first = test::envNumber("TESSEL_CPU_RANDOM_SEED", 1),
                 count = test::envNumber("TESSEL_CPU_RANDOM_GRAPHS", kDefaultGraphs);
  const fs::path work = fs::temp_directory_path() / fmt::format("tessel-cpu-random-{}-{}", getpid(), GetParam());
  fs::create_directories(work);
  const std::vector<test::CpuVariant> variants = test::cpuRandomVariants();
  test::CpuRunStats stats;
  for (uint64_t i = static_cast<uint64_t>(GetParam()); i < count; i += kShards)
    for (const std::string& failure : test::checkRandomGraphOnCpu(first + i, variants, work.string(), stats))
      ADD_FAILURE() << failure;
  fs::remove_all(work);
  std::cout << fmt::format("[ random  ] shard {}: {} graphs, {} compiles, {} runs, {} kernel calls, {} nodes through the "
                           "interpreter, {} failing\n",
                           GetParam(), stats.graphs, stats.compiles, stats.runs, stats.kernelCalls, stats.hostSteps,
                           stats.failures);
  // The graphs must mostly run as compiled kernels, or the test would check the interpreter against itself.
  if (stats.compiles > 0) {
    EXPECT_GT(stats.kernelCalls, 2 * stats.hostSteps) << "most nodes ran through the interpreter";
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, CpuRandomGraphs, ::testing::Range(0, kShards));

}  // namespace
