// Randomised lowering test of the NPU target (issue 18, point 2): random graphs of convolutions, pools,
// element-wise and shape operators (tests/npu_random/random_graph.h) compiled for the default, tiny and edge
// configurations like `tessel compile --target npu`, simulated, and compared with the reference interpreter;
// the verifier and the hazard checker must find nothing. Graph i has seed TESSEL_NPU_RANDOM_SEED + i (default
// 1); TESSEL_NPU_RANDOM_GRAPHS graphs (default 400, 100 under AddressSanitizer) in four shards (separate ctest
// tests, so they run in parallel); TESSEL_NPU_RANDOM_STRATEGY overrides the schedule strategy (greedy,
// sequential). A failure prints the seed, the problems and the graph; replay one graph with
//   TESSEL_NPU_RANDOM_SEED=SEED TESSEL_NPU_RANDOM_GRAPHS=1 build/tessel_unit_tests --gtest_filter='*NpuRandomGraphs*'
// Longer runs: build/tessel_npu_random --graphs 1000 (tests/npu_random/main.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

#include "../npu_random/random_graph.h"

namespace {

namespace fs = std::filesystem;
using namespace tessel;

constexpr int kShards = 4;

// Under AddressSanitizer (the sanitize stage) a quarter of the graphs by default: the unit stage runs them all.
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kDefaultGraphs = 100;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr uint64_t kDefaultGraphs = 100;
#else
constexpr uint64_t kDefaultGraphs = 400;
#endif
#else
constexpr uint64_t kDefaultGraphs = 400;
#endif

class NpuRandomGraphs : public ::testing::TestWithParam<int> {};

TEST_P(NpuRandomGraphs, MatchTheInterpreterWithoutHazardsOrVerifierProblems) {
  const uint64_t first = test::envNumber("TESSEL_NPU_RANDOM_SEED", 1),
                 count = test::envNumber("TESSEL_NPU_RANDOM_GRAPHS", kDefaultGraphs);
  const fs::path work = fs::temp_directory_path() / fmt::format("tessel-npu-random-{}-{}", getpid(), GetParam());
  fs::create_directories(work);
  const std::vector<std::string> configs = test::randomTestConfigs();
  test::RandomRunStats stats;
  for (uint64_t i = static_cast<uint64_t>(GetParam()); i < count; i += kShards)
    for (const std::string& failure : test::checkRandomGraph(first + i, configs, work.string(), stats))
      ADD_FAILURE() << failure;
  fs::remove_all(work);
  std::cout << fmt::format("[ random  ] shard {}: {} graphs, {} compiles, {} nodes ({} on the host), {} graphs wholly on the "
                           "NPU, {} failing, {} NPU cycles, {} fused groups, {} channel chains\n",
                           GetParam(), stats.graphs, stats.compiles, stats.nodes, stats.hostNodes, stats.graphsAllOnNpu,
                           stats.failures, stats.cycles, stats.fusedGroups, stats.channelChains);
  // The generator must mostly make graphs the NPU runs whole, or the test would check the host instead.
  if (stats.graphs >= 20) {
    EXPECT_GE(stats.graphsAllOnNpu * 2, stats.graphs) << "too few graphs wholly on the NPU";
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, NpuRandomGraphs, ::testing::Range(0, kShards));

// The generator covers what the test promises (over the default graphs' seeds): every operator family, kernel
// sizes 1-7, strides 1 and 2, dilation, asymmetric padding, depthwise and grouped convolutions, odd sizes.
TEST(NpuRandomGraphGenerator, CoversTheOperatorsAndConvolutionShapes) {
  std::set<std::string> ops;
  std::set<int64_t> kernels, strides, dilations;
  bool asymmetric = false, depthwise = false, grouped = false, noBias = false, oddChannels = false, oddSize = false;
  for (uint64_t seed = 1; seed <= 240; ++seed) {
    std::unique_ptr<Model> m = test::randomNpuGraph(seed);
    for (const auto& n : m->graph->nodes()) {
      ops.insert(n->opType());
      if (n->opType() != "Conv") continue;
      const Shape x = n->input(0)->type.staticShape();
      if (!n->hasAttr("kernel_shape")) continue;  // the 1x1 convolutions of a squeeze-and-excitation
      const std::vector<int64_t> k = n->attrInts("kernel_shape"), s = n->attrInts("strides"), p = n->attrInts("pads");
      kernels.insert(k[0]);
      strides.insert(s[0]);
      if (n->hasAttr("dilations")) dilations.insert(n->attrInts("dilations")[0]);
      asymmetric = asymmetric || p[0] != p[2] || p[1] != p[3];
      const int64_t group = n->attrInt("group");
      depthwise = depthwise || (group > 1 && group == x[1]);
      grouped = grouped || (group > 1 && group < x[1]);
      noBias = noBias || n->numInputs() == 2;
      oddChannels = oddChannels || x[1] % 2 == 1;
      oddSize = oddSize || x[2] % 2 == 1 || x[3] % 2 == 1;
    }
  }
  for (const char* op : {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Relu", "Clip", "LeakyRelu",
                         "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Exp", "Add", "Sub", "Mul", "Div", "Max", "Min",
                         "Concat", "BatchNormalization", "Flatten", "Reshape", "Gemm", "MatMul", "Erf", "Pow", "Resize", "ReduceMean",
                         "Sqrt", "Transpose", "Softmax", "Gather", "Slice", "Split", "ReduceSum", "ReduceMax"})
    EXPECT_TRUE(ops.count(op)) << op;
  for (int64_t k = 1; k <= 7; ++k) EXPECT_TRUE(kernels.count(k)) << "kernel " << k;
  EXPECT_TRUE(strides.count(1) && strides.count(2));
  EXPECT_TRUE(dilations.count(2));
  EXPECT_TRUE(asymmetric && depthwise && grouped && noBias && oddChannels && oddSize);
}

}  // namespace
