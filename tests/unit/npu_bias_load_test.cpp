// Tests of NodeTiling::biasLoad on layer-by-layer groups: each accumulator tile starts as the bias row, broadcast by
// a load whose DRAM strides are 0, instead of a vector pass adding the bias after the gemms. Convolutions (1x1, a
// strided padded 3x3, grouped ones packed or not, batch 2, passes of output channels, a global pool from the tiles)
// and a Gemm with a scalar C match the interpreter on `default` and `tiny` with the loads, each vector bias pass is
// replaced by exactly one broadcast load; the verifier refuses the field where the accumulator does not start empty;
// the compiler takes it where the vector unit bounds a group and not on a convolution the matrix unit bounds.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <functional>
#include <map>
#include <string>

#include "tessel/interp/interpreter.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/schedule.h"

#include "npu_test_util.h"

namespace {

using namespace tessel;
using namespace tessel::npu;
using test::randomTensor;

Value* conv(Graph& g, Value* x, const std::string& name, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t group,
            bool bias, uint32_t seed) {
  std::vector<Value*> in{x, g.addConstant(name + "_w", randomTensor({cout, cin / group, k, k}, seed))};
  if (bias) in.push_back(g.addConstant(name + "_b", randomTensor({cout}, seed + 1)));
  Node* c = g.addNode("Conv", in, {name}, name);
  c->setAttr("kernel_shape", std::vector<int64_t>{k, k});
  c->setAttr("strides", std::vector<int64_t>{stride, stride});
  c->setAttr("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
  c->setAttr("group", group);
  return c->output(0);
}

struct Counts {
  int broadcastLoads = 0, vectorOps = 0;
};

/// Lowers `s`, checks it against the interpreter (1e-4 of the largest magnitude, no hazard) and counts its broadcast
/// loads (DRAM strides 0 over more than one pixel) and vector instructions.
Counts checkAndCount(const Graph& g, const hw::Device& dev, const NpuSchedule& s, const std::string& what) {
  verifySchedule(s, g, dev.npu);
  std::vector<Tensor> inputs;
  std::map<std::string, Tensor> named;
  uint32_t seed = 31;
  for (const Value* in : g.inputs()) inputs.push_back(named[in->name()] = randomTensor(in->type.staticShape(), seed++));
  const LoweredSubgraph lowered = lowerSubgraph(g, dev, s);
  const NpuRun run = runLowered(lowered, dev.npu, inputs);
  const std::vector<Tensor> want = Interpreter(g).run(named);
  EXPECT_TRUE(run.report.hazards.empty()) << what << ": " << run.report.hazards.front().describe();
  for (size_t i = 0; i < want.size(); ++i) {
    float scale = 0;
    const float diff = test::maxAbsDiff(run.outputs.at(i), want[i], &scale);
    EXPECT_GT(scale, 0.0f) << what;
    EXPECT_LE(diff, 1e-4f * scale) << what << " output " << i;
  }
  Counts c;
  for (const Instruction& in : lowered.program.instructions) {
    c.broadcastLoads += in.opcode == Opcode::Load && in.dramStrideOuter == 0 && in.dramStrideInner == 0 && in.outer * in.inner > 1;
    c.vectorOps += in.unit() == Unit::Vector;
  }
  return c;
}

/// Every group biasLoadRefusal accepts, with the field set.
NpuSchedule withBiasLoads(NpuSchedule s, const Graph& g) {
  for (GroupSchedule& grp : s.groups)
    for (NodeTiling& t : grp.tiling)
      if (biasLoadRefusal(grp, t, g).empty()) t.biasLoad = true;
  return s;
}

struct Case {
  std::string name;
  std::function<void(Graph&)> build;
};

std::vector<Case> cases() {
  return {
      {"1x1 24->40 + HardSwish, 13x11",
       [](Graph& g) {
         Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 24, 13, 11}));
         g.addOutput(g.addNode("HardSwish", {conv(g, x, "c", 24, 40, 1, 1, 1, true, 3)}, {"y"}, "hs")->output(0));
       }},
      {"3x3 stride 2 pad 1 20->72 + Relu, batch 2, 15x9",
       [](Graph& g) {
         Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 20, 15, 9}));
         g.addOutput(g.addNode("Relu", {conv(g, x, "c", 20, 72, 3, 2, 1, true, 5)}, {"y"}, "relu")->output(0));
       }},
      {"grouped 3x3 32->48 in 4 groups + Sigmoid, 9x10",
       [](Graph& g) {
         Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 32, 9, 10}));
         g.addOutput(g.addNode("Sigmoid", {conv(g, x, "c", 32, 48, 3, 1, 4, true, 7)}, {"y"}, "sig")->output(0));
       }},
      {"1x1 16->40 + Relu -> GlobalAveragePool, 7x7",
       [](Graph& g) {
         Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 7, 7}));
         Value* r = g.addNode("Relu", {conv(g, x, "c", 16, 40, 1, 1, 1, true, 9)}, {"r"}, "relu")->output(0);
         g.addOutput(g.addNode("GlobalAveragePool", {r}, {"y"}, "pool")->output(0));
       }},
      {"Gemm 3x50 x (40x50)^T + scalar C, Relu",
       [](Graph& g) {
         Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {3, 50}));
         Node* gm = g.addNode("Gemm", {x, g.addConstant("w", randomTensor({40, 50}, 11)), g.addConstant("cc", Tensor::scalar(0.75f))},
                              {"m"}, "gemm");
         gm->setAttr("transB", int64_t{1});
         gm->setAttr("beta", 0.5f);
         g.addOutput(g.addNode("Relu", {gm->output(0)}, {"y"}, "relu")->output(0));
       }},
  };
}

TEST(NpuBiasLoad, EachVectorBiasPassBecomesOneBroadcastLoad) {
  for (const char* config : {"default.json", "tiny.json"})
    for (const Case& k : cases()) {
      Graph g;
      k.build(g);
      inferShapes(g);
      hw::HardwareConfig cfg = test::shippedConfig(config);
      const hw::Device& dev = *cfg.firstNpu();
      const std::string what = fmt::format("{}: {}", config, k.name);
      const NpuSchedule base = compilerSchedule(g, dev.npu, "test", false);
      const NpuSchedule loaded = withBiasLoads(base, g);
      ASSERT_NE(loaded, base) << what << ": no group takes bias_load";
      EXPECT_EQ(NpuSchedule::fromJson(loaded.toJson(), "test"), loaded) << what;
      EXPECT_NE(loaded.toText().find("bias loaded into the accumulator"), std::string::npos) << what;
      const Counts before = checkAndCount(g, dev, base, what + ", vector bias");
      const Counts after = checkAndCount(g, dev, loaded, what + ", bias loaded");
      EXPECT_EQ(before.broadcastLoads, 0) << what;
      EXPECT_GT(after.broadcastLoads, 0) << what;
      EXPECT_EQ(before.vectorOps - after.vectorOps, after.broadcastLoads) << what;
    }
}

TEST(NpuBiasLoad, PassesOfOutputChannelsInsideTheTiles) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 24, 11, 13}));
  g.addOutput(g.addNode("Relu", {conv(g, x, "c", 24, 72, 3, 1, 1, true, 13)}, {"y"}, "relu")->output(0));
  inferShapes(g);
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& dev = *cfg.firstNpu();
  for (bool inside : {false, true}) {
    NpuSchedule s = compilerSchedule(g, dev.npu, "test", false);
    NodeTiling& t = s.groups.at(0).tiling.at(0);
    t.rows = 5, t.cols = 13, t.channels = 16, t.coutPerPass = 32, t.inputResident = inside;  // three passes (32, 32, 8)
    const Counts before = checkAndCount(g, dev, s, "vector bias");
    t.biasLoad = true;
    const Counts after = checkAndCount(g, dev, s, fmt::format("bias loaded, passes {}", inside ? "inside" : "outside"));
    EXPECT_EQ(after.broadcastLoads, 3 * 3) << "three row tiles of three passes";
    EXPECT_EQ(before.vectorOps - after.vectorOps, after.broadcastLoads);
  }
}

TEST(NpuBiasLoad, VerifierRefusesItWhereTheAccumulatorDoesNotStartEmpty) {
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& dev = *cfg.firstNpu();
  auto refused = [&](const NpuSchedule& s, const Graph& g, const std::string& needle) {
    try {
      verifySchedule(s, g, dev.npu);
      ADD_FAILURE() << "accepted; expected a refusal mentioning '" << needle << "'";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // A residual Add loaded into the accumulator.
  Graph r;
  Value* x = r.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 8, 8}));
  r.addOutput(r.addNode("Add", {conv(r, x, "c", 16, 16, 3, 1, 1, true, 15), x}, {"y"}, "add")->output(0));
  inferShapes(r);
  NpuSchedule s = compilerSchedule(r, dev.npu, "test", false);
  ASSERT_TRUE(s.groups.at(0).tiling.at(0).residualInAcc) << s.toText();
  s.groups[0].tiling[0].biasLoad = true;
  refused(s, r, "no residual loaded into the accumulator");
  // No bias to load.
  Graph nb;
  Value* y = nb.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 8, 8}));
  nb.addOutput(conv(nb, y, "c", 16, 24, 1, 1, 1, false, 17));
  inferShapes(nb);
  NpuSchedule t = compilerSchedule(nb, dev.npu, "test", false);
  t.groups.at(0).tiling.at(0).biasLoad = true;
  refused(t, nb, "a Conv or Gemm with a bias");
  // A depthwise convolution on the vector unit.
  Graph dw;
  Value* z = dw.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 8, 8}));
  dw.addOutput(conv(dw, z, "c", 16, 16, 3, 1, 16, true, 19));
  inferShapes(dw);
  NpuSchedule u = compilerSchedule(dw, dev.npu, "test", false);
  ASSERT_EQ(u.groups.at(0).tiling.at(0).variant, "vector");
  u.groups[0].tiling[0].biasLoad = true;
  refused(u, dw, "a matrix-unit tiling");
}

// A 1x1 convolution with SiLU (Sigmoid and Mul, four cycles a vector) over a large map is bound by the vector unit
// (bias pass and SiLU against one reduction slice): the compiler broadcasts its bias by loads, 2.3x the vector pass's
// cycles on a load unit that idles, and the simulator agrees. With a HardSwish (one cycle a vector) the same
// convolution is bound by its stores, the loads would only add work: priced, not taken. A 3x3 convolution of 64
// channels with a ReLU is bound by the matrix unit (36 reduction slices): no candidate.
TEST(NpuBiasLoad, TheCompilerTakesItWhereTheVectorUnitBounds) {
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& dev = *cfg.firstNpu();
  Graph v;
  Value* x = v.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 56, 56}));
  Value* c = conv(v, x, "c", 16, 64, 1, 1, 1, true, 21);
  v.addOutput(v.addNode("Mul", {c, v.addNode("Sigmoid", {c}, {"s"}, "sig")->output(0)}, {"y"}, "silu")->output(0));
  inferShapes(v);
  const NpuSchedule layered = compilerSchedule(v, dev.npu, "test", false);
  EXPECT_EQ(biasLoadCandidates(layered, v, dev.npu), std::vector<size_t>{0});
  const NpuSchedule chosen = compilerSchedule(v, dev.npu, "test", true);
  ASSERT_EQ(chosen.groups.size(), 1u);
  EXPECT_TRUE(chosen.groups[0].tiling[0].biasLoad) << chosen.toText();
  EXPECT_GT(checkAndCount(v, dev, chosen, "the compiler's choice").broadcastLoads, 0);
  // Cheaper than the vector pass, as the simulator counts it.
  NpuSchedule vectorBias = chosen;
  vectorBias.groups[0].tiling[0].biasLoad = false;
  std::vector<Tensor> in{randomTensor({1, 16, 56, 56}, 1)};
  const uint64_t withLoads = runLowered(lowerSubgraph(v, dev, chosen), dev.npu, in).report.totalCycles;
  const uint64_t withPass = runLowered(lowerSubgraph(v, dev, vectorBias), dev.npu, in).report.totalCycles;
  EXPECT_LT(withLoads, withPass);

  Graph h;
  Value* hx = h.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 56, 56}));
  h.addOutput(h.addNode("HardSwish", {conv(h, hx, "c", 16, 64, 1, 1, 1, true, 21)}, {"y"}, "hs")->output(0));
  inferShapes(h);
  EXPECT_EQ(biasLoadCandidates(compilerSchedule(h, dev.npu, "test", false), h, dev.npu), std::vector<size_t>{0});
  EXPECT_FALSE(compilerSchedule(h, dev.npu, "test", true).groups.at(0).tiling.at(0).biasLoad);

  Graph m;
  Value* y = m.addInput("x", TensorType::fromShape(DType::Float32, {1, 64, 28, 28}));
  m.addOutput(m.addNode("Relu", {conv(m, y, "c", 64, 64, 3, 1, 1, true, 23)}, {"y"}, "relu")->output(0));
  inferShapes(m);
  EXPECT_TRUE(biasLoadCandidates(compilerSchedule(m, dev.npu, "test", false), m, dev.npu).empty());
}

}  // namespace
