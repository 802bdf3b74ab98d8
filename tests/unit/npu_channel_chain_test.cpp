// Tests of channel chains (GroupSchedule::channelChain): a depthwise convolution and the 1x1 convolution reading its
// result, computed tile by tile over depthwise channel blocks without storing the depthwise result, with or without
// the 1x1 expand convolution before it as a first stage. Inverted
// residual blocks of odd shapes (channels not a multiple of the array, odd H and W, stride 1 with a residual Add
// and stride 2, with and without biases) match the interpreter for every chain option the compiler prices, with
// no hazard; the verifier refuses chains that are not one; the schedule's JSON keeps the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>
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

struct Block {
  int64_t cin = 24, hidden = 40, cout = 24, H = 13, W = 11, stride = 1;
  bool bias = true, residual = true, pool = false;
};

/// x -> 1x1 expand -> Clip(0, 6) -> 3x3 depthwise (stride, pad 1) -> Clip(0, 6) -> 1x1 project [-> + x]
/// [-> GlobalAveragePool].
void invertedResidual(Graph& g, const Block& b) {
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, b.cin, b.H, b.W}));
  uint32_t seed = 21;
  auto conv = [&](Value* in, const std::string& name, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t group) {
    std::vector<Value*> inputs{in, g.addConstant(name + "_w", randomTensor({cout, cin / group, k, k}, seed++))};
    if (b.bias) inputs.push_back(g.addConstant(name + "_b", randomTensor({cout}, seed++)));
    Node* c = g.addNode("Conv", inputs, {name});
    c->setAttr("kernel_shape", std::vector<int64_t>{k, k});
    c->setAttr("strides", std::vector<int64_t>{stride, stride});
    const int64_t p = k / 2;
    c->setAttr("pads", std::vector<int64_t>{p, p, p, p});
    c->setAttr("group", group);
    return c->output(0);
  };
  auto clip = [&](Value* in, const std::string& name) {
    return g.addNode("Clip", {in, g.addConstant(name + "_lo", Tensor::scalar(0.0f)), g.addConstant(name + "_hi", Tensor::scalar(6.0f))},
                     {name})
        ->output(0);
  };
  Value* e = clip(conv(x, "expand", b.cin, b.hidden, 1, 1, 1), "expand_clip");
  Value* d = clip(conv(e, "dw", b.hidden, b.hidden, 3, b.stride, b.hidden), "dw_clip");
  Value* y = conv(d, "project", b.hidden, b.cout, 1, 1, 1);
  if (b.residual) y = g.addNode("Add", {y, x}, {"sum"})->output(0);
  if (b.pool) y = g.addNode("GlobalAveragePool", {y}, {"pool"})->output(0);
  g.addOutput(y);
  inferShapes(g);
}

/// Lowers `s`, simulates it on random input and checks it against the interpreter (1e-4 of the largest magnitude)
/// with no hazard.
void expectMatches(const Graph& g, const hw::Device& dev, const NpuSchedule& s, const Block& b, const std::string& what) {
  verifySchedule(s, g, dev.npu);
  const std::map<std::string, Tensor> named{{"x", randomTensor({1, b.cin, b.H, b.W}, 77)}};
  const Tensor want = Interpreter(g).run(named).at(0);
  const NpuRun run = runLowered(lowerSubgraph(g, dev, s), dev.npu, {named.at("x")});
  EXPECT_TRUE(run.report.hazards.empty()) << what << ": " << run.report.hazards.front().describe();
  float scale = 0;
  const float diff = test::maxAbsDiff(run.outputs.at(0), want, &scale);
  EXPECT_GT(scale, 0.0f) << what;
  EXPECT_LE(diff, 1e-4f * scale) << what;
}

/// Each option as given (biases by gemms on the matrix unit), with its biases added on the vector unit instead, and
/// with them broadcast into the accumulator by the load unit (NodeTiling::biasLoad; a 1x1 stage that loads its
/// residual there keeps its bias gemm, a stage without a bias has none to load).
std::vector<GroupSchedule> withEachBiasPlacement(const std::vector<GroupSchedule>& options, const Graph& g) {
  std::vector<GroupSchedule> out;
  for (const GroupSchedule& o : options) {
    out.push_back(o);
    GroupSchedule v = o, l = o;
    for (NodeTiling& t : v.tiling) t.biasGemm = false;
    out.push_back(v);
    for (NodeTiling& t : l.tiling)
      if (biasLoadRefusal(l, t, g).empty()) t.biasGemm = false, t.biasLoad = true;
    out.push_back(l);
  }
  return out;
}

std::string biasPlacement(const GroupSchedule& o) {
  std::string s;
  for (const NodeTiling& t : o.tiling)
    if (t.variant == "matrix") s += t.biasLoad ? " load" : t.biasGemm ? " gemm" : " vector";
  return s;
}

TEST(NpuChannelChain, InvertedResidualsMatchTheInterpreterForEveryOption) {
  Block strided;
  strided.cin = 16, strided.hidden = 56, strided.cout = 20, strided.H = 15, strided.W = 9, strided.stride = 2, strided.residual = false;
  Block noBias;
  noBias.bias = false, noBias.hidden = 33, noBias.H = 7, noBias.W = 17;
  Block pooled;
  pooled.residual = false, pooled.pool = true, pooled.cout = 48;
  for (const char* config : {"default.json", "tiny.json"})
    for (const Block& b : {Block{}, strided, noBias, pooled}) {
      Graph g;
      invertedResidual(g, b);
      hw::HardwareConfig cfg = test::shippedConfig(config);
      const hw::Device& dev = *cfg.firstNpu();
      const NpuSchedule layered = tiledSchedule(g, dev.npu, "block");
      const std::vector<std::pair<size_t, size_t>> candidates = channelChainCandidates(layered, g);
      ASSERT_EQ(candidates.size(), 1u) << config;
      EXPECT_EQ(layered.groups[candidates[0].first].tiling[0].node, "dw");
      EXPECT_EQ(layered.groups[candidates[0].second].tiling[0].node, "project");
      const std::vector<GroupSchedule> options = channelChainOptions(layered, candidates[0].first, candidates[0].second, g, dev.npu, 8);
      ASSERT_FALSE(options.empty()) << config;
      for (const GroupSchedule& option : withEachBiasPlacement(options, g)) {
        NpuSchedule s = layered;
        replaceByFusedGroups(s, {{{candidates[0].first, candidates[0].second}, option}});
        const std::string what = fmt::format("{} stride {} hidden {}: cb {} every {} tile {}x{} biases{}", config, b.stride,
                                             b.hidden, option.tiling[0].channels, option.tiling[0].matrixEvery, option.tiling[0].rows,
                                             option.tiling[0].cols, biasPlacement(option));
        if (b.pool) {
          ASSERT_TRUE(foldGlobalPool(s, g, "pool", "project")) << what;
          EXPECT_EQ(s.groups.back().tiling.back().globalPool, "pool") << what;
        }
        EXPECT_TRUE(std::any_of(s.groups.begin(), s.groups.end(), [](const GroupSchedule& gs) { return gs.channelChain; })) << what;
        expectMatches(g, dev, s, b, what);
      }
      // With the expand convolution as the chain's first stage (its windows computed block by block from the tile's
      // input pixels, the padding ring zeroed): every option of the chain with the first option of the pair.
      NpuSchedule chained = layered;
      replaceByFusedGroups(chained, {{{candidates[0].first, candidates[0].second}, options.front()}});
      const std::vector<size_t> expandable = expandChainCandidates(chained, g);
      ASSERT_EQ(expandable.size(), 1u) << config;
      const size_t at = expandable[0];
      const std::vector<GroupSchedule> withExpand = expandChainOptions(chained, at, g, dev.npu, 8);
      if (std::string(config) == "default.json") {
        EXPECT_FALSE(withExpand.empty());
        // Among them windows kept in the accumulator (NodeTiling::windowInAcc), with larger tiles than the same block
        // width with windows in the input buffer.
        auto inAcc = std::find_if(withExpand.begin(), withExpand.end(), [](const GroupSchedule& o) { return o.tiling[1].windowInAcc; });
        ASSERT_NE(inAcc, withExpand.end());
        auto inInp = std::find_if(withExpand.begin(), withExpand.end(), [&](const GroupSchedule& o) {
          return !o.tiling[1].windowInAcc && o.tiling[1].channels == inAcc->tiling[1].channels && o.tiling[1].matrixEvery == 0;
        });
        if (inInp != withExpand.end()) {
          EXPECT_GT(inAcc->tiling[1].rows * inAcc->tiling[1].cols, inInp->tiling[1].rows * inInp->tiling[1].cols);
        }
        // And windows in the accumulator with every 4th block's taps on the matrix unit (those windows in the input
        // buffer), which the loop below checks against the interpreter.
        EXPECT_TRUE(std::any_of(withExpand.begin(), withExpand.end(),
                                [](const GroupSchedule& o) { return o.tiling[1].windowInAcc && o.tiling[1].matrixEvery == 4; }))
            << "hidden " << b.hidden;
      }
      for (const GroupSchedule& option : withEachBiasPlacement(withExpand, g)) {
        NpuSchedule s = chained;
        replaceByFusedGroups(s, {{{at - 1, at}, option}});
        const std::string what = fmt::format("{} stride {} hidden {}: expand + cb {} every {} tile {}x{} biases{} window in acc {}",
                                             config, b.stride, b.hidden, option.tiling[1].channels, option.tiling[1].matrixEvery,
                                             option.tiling[1].rows, option.tiling[1].cols, biasPlacement(option),
                                             option.tiling[1].windowInAcc);
        ASSERT_EQ(option.tiling.size(), 3u) << what;
        EXPECT_EQ(option.tiling[0].node, "expand") << what;
        EXPECT_EQ(NpuSchedule::fromJson(s.toJson(), "test"), s) << what;
        if (b.pool) {
          ASSERT_TRUE(foldGlobalPool(s, g, "pool", "project")) << what;
        }
        expectMatches(g, dev, s, b, what);
      }
      // The compiler's own choice (a chain or not) matches too.
      expectMatches(g, dev, compilerSchedule(g, dev.npu, "block"), b, std::string(config) + " compiler's choice");
    }
}

// A chain's depthwise blocks hold the matrix unit's diagonal blocks (16x their weights) only when one of their tiles
// runs there: 576 channels on 7x7 in blocks of 16 take 36 x 2,464 words with diagonal blocks in every block, more
// than `default`'s 65,536-word weight buffer, but with one tile in 2, 3 or 4 on the matrix unit (one spatial tile:
// the block index decides) 18, 12 or 9 blocks need them. Such options are offered, verified and match the
// interpreter.
TEST(NpuChannelChain, OnlyTheBlocksWithMatrixTilesHoldDiagonalBlocks) {
  Block b;
  b.cin = 96, b.hidden = 576, b.cout = 96, b.H = 7, b.W = 7;
  Graph g;
  invertedResidual(g, b);
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& dev = *cfg.firstNpu();
  const NpuSchedule layered = tiledSchedule(g, dev.npu, "block");
  const std::vector<std::pair<size_t, size_t>> candidates = channelChainCandidates(layered, g);
  ASSERT_EQ(candidates.size(), 1u);
  std::set<int64_t> everies;
  for (const GroupSchedule& option : channelChainOptions(layered, candidates[0].first, candidates[0].second, g, dev.npu, 8)) {
    const NodeTiling& d = option.tiling[0];
    if (d.matrixEvery == 0) continue;
    everies.insert(d.matrixEvery);
    ASSERT_EQ(d.channels, 16);
    ASSERT_EQ(std::make_pair(d.rows, d.cols), std::make_pair(int64_t{7}, int64_t{7}));
    NpuSchedule s = layered;
    replaceByFusedGroups(s, {{{candidates[0].first, candidates[0].second}, option}});
    expectMatches(g, dev, s, b, fmt::format("one tile in {} on the matrix unit", d.matrixEvery));
  }
  EXPECT_EQ(everies, (std::set<int64_t>{2, 3, 4}));
}

TEST(NpuChannelChain, VerifierRefusesWhatIsNoChainAndJsonKeepsTheFlag) {
  const Block b;
  Graph g;
  invertedResidual(g, b);
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& dev = *cfg.firstNpu();
  const NpuSchedule layered = tiledSchedule(g, dev.npu, "block");
  const auto candidates = channelChainCandidates(layered, g);
  ASSERT_EQ(candidates.size(), 1u);
  const GroupSchedule option = channelChainOptions(layered, candidates[0].first, candidates[0].second, g, dev.npu, 1).at(0);
  NpuSchedule good = layered;
  replaceByFusedGroups(good, {{{candidates[0].first, candidates[0].second}, option}});
  verifySchedule(good, g, dev.npu);
  const NpuSchedule back = NpuSchedule::fromJson(good.toJson(), "test");
  EXPECT_EQ(back, good);
  EXPECT_NE(good.toText().find("channel chain"), std::string::npos);
  const size_t at = candidates[0].first;
  auto refused = [&](const NpuSchedule& s, const std::string& needle) {
    try {
      verifySchedule(s, g, dev.npu);
      ADD_FAILURE() << "accepted; expected a refusal mentioning '" << needle << "'";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  NpuSchedule tiles = good;
  tiles.groups[at].tiling[1].rows += 1;
  refused(tiles, "different tiles");
  NpuSchedule onChip = good;
  onChip.groups[at].onChip = {"expand_clip"};
  refused(onChip, "keeps exactly its depthwise result");
  NpuSchedule swapped = good;
  std::swap(swapped.groups[at].tiling[0].variant, swapped.groups[at].tiling[1].variant);
  refused(swapped, "'vector' then a 'matrix' tiling");
  NpuSchedule outside = layered;
  outside.groups[at - 1].tiling[0].biasGemm = true;  // the expand conv, a layer-by-layer group
  refused(outside, "bias_gemm applies to the matrix stages of a channel chain only");
  NpuSchedule loadAndGemm = good;
  loadAndGemm.groups[at].tiling[1].residualInAcc = false;
  loadAndGemm.groups[at].tiling[1].biasLoad = loadAndGemm.groups[at].tiling[1].biasGemm = true;
  refused(loadAndGemm, "bias_load needs no bias_gemm as well");
  NpuSchedule loadOnDepthwise = good;
  loadOnDepthwise.groups[at].tiling[0].biasLoad = true;
  refused(loadOnDepthwise, "bias_load needs a matrix-unit tiling");
  NpuSchedule loaded = good;
  NodeTiling& project = loaded.groups[at].tiling[1];
  project.biasGemm = false, project.biasLoad = true;
  ASSERT_TRUE(project.residualInAcc);  // the Add's other operand loaded into the accumulator: the bias cannot be
  refused(loaded, "bias_load needs no residual loaded into the accumulator");
  project.residualInAcc = false;  // the Add then a vector step of the epilogue
  expectMatches(g, dev, loaded, b, "1x1 bias loaded, residual added by the vector unit");
  EXPECT_EQ(NpuSchedule::fromJson(loaded.toJson(), "test"), loaded);
  EXPECT_NE(loaded.toText().find("bias loaded into the accumulator"), std::string::npos);
  NpuSchedule accWithoutExpand = good;  // windows in the accumulator need the expand stage that makes them there
  accWithoutExpand.groups[at].tiling[0].windowInAcc = true;
  refused(accWithoutExpand, "window_in_acc applies to the depthwise stage of a channel chain with an expand stage");
  NpuSchedule huge = good;
  huge.groups[at].tiling[0].rows = huge.groups[at].tiling[1].rows = 13;
  huge.groups[at].tiling[0].cols = huge.groups[at].tiling[1].cols = 11;
  huge.groups[at].tiling[0].channels = 40;
  refused(huge, "input-buffer words");
  // The expand conv and the depthwise conv are no chain (the chain's second node must be a 1x1 conv reading the
  // depthwise result).
  NpuSchedule wrongPair = layered;
  GroupSchedule expandDw;
  expandDw.nodes = layered.groups[at - 1].nodes;
  expandDw.nodes.insert(expandDw.nodes.end(), layered.groups[at].nodes.begin(), layered.groups[at].nodes.end());
  expandDw.tiling = {layered.groups[at].tiling[0], layered.groups[at - 1].tiling[0]};
  expandDw.onChip = {"dw_clip"};
  expandDw.channelChain = true;
  replaceByFusedGroups(wrongPair, {{{at - 1, at}, expandDw}});
  refused(wrongPair, "not a channel chain");
}

TEST(NpuChannelChain, NoCandidateWhenTheDepthwiseResultHasAnotherReader) {
  Block b;
  Graph g;
  invertedResidual(g, b);
  // A second reader of the depthwise result: it must go to DRAM, so the pair is no chain.
  g.addOutput(g.findValue("dw_clip"));
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const NpuSchedule layered = tiledSchedule(g, cfg.firstNpu()->npu, "block");
  EXPECT_TRUE(channelChainCandidates(layered, g).empty());
}

// A stride-2 block whose depthwise -> 1x1 pair loses to its two layer-by-layer groups on `default` (small tiles,
// 96-channel windows in a 32 KiB input buffer) while the three stages together win: the 96x40x40 expanded tensor no
// longer goes to DRAM and back. The compiler tries the expand stage on pairs it left apart, not only on the chains
// it took, so its schedule is one three-stage chain (MobileNetV2's features.2 and .4 on `default`).
TEST(NpuChannelChain, TheExpandStageIsTriedOnPairsLeftApart) {
  Block b;
  b.cin = 16, b.hidden = 96, b.cout = 24, b.H = b.W = 40, b.stride = 2, b.residual = false;
  Graph g;
  invertedResidual(g, b);
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& dev = *cfg.firstNpu();
  const NpuSchedule s = compilerSchedule(g, dev.npu, "block");
  ASSERT_EQ(s.groups.size(), 1u) << s.toText();
  EXPECT_TRUE(s.groups[0].channelChain);
  ASSERT_EQ(s.groups[0].tiling.size(), 3u) << s.toText();
  EXPECT_EQ(s.groups[0].tiling[0].node, "expand");
  expectMatches(g, dev, s, b, "compiler's three-stage chain");
}

// NodeTiling::biasLoad takes every bias off the matrix unit: the chain's program has no gemm of K = 1 (the bias
// gemms of a word holding 1.0) and one load whose DRAM strides are both 0 per accumulator tile it initialises (per
// tile the 1x1 stage's, per tile and block the expand stage's), where the bias-gemm program has none; both match
// the interpreter (checked for every option above).
TEST(NpuChannelChain, BiasLoadsReplaceTheBiasGemms) {
  Block b;
  b.residual = false;  // a residual loaded into the accumulator keeps the 1x1 stage's bias gemm
  Graph g;
  invertedResidual(g, b);
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& dev = *cfg.firstNpu();
  NpuSchedule chained = tiledSchedule(g, dev.npu, "block");
  const auto candidates = channelChainCandidates(chained, g);
  ASSERT_EQ(candidates.size(), 1u);
  replaceByFusedGroups(chained, {{{candidates[0].first, candidates[0].second},
                                  channelChainOptions(chained, candidates[0].first, candidates[0].second, g, dev.npu, 1).at(0)}});
  const size_t at = expandChainCandidates(chained, g).at(0);
  NpuSchedule withGemms = chained;
  replaceByFusedGroups(withGemms, {{{at - 1, at}, expandChainOptions(chained, at, g, dev.npu, 1).at(0)}});
  const size_t chain = at - 1;
  ASSERT_TRUE(withGemms.groups[chain].channelChain);
  ASSERT_TRUE(withGemms.groups[chain].tiling[0].biasGemm && withGemms.groups[chain].tiling[2].biasGemm);
  NpuSchedule withLoads = withGemms;
  for (size_t t : {size_t{0}, size_t{2}}) withLoads.groups[chain].tiling[t].biasGemm = false, withLoads.groups[chain].tiling[t].biasLoad = true;
  verifySchedule(withLoads, g, dev.npu);
  auto count = [&](const NpuSchedule& s) {
    const LoweredSubgraph lowered = lowerSubgraph(g, dev, s);
    std::pair<int, int> kOneGemmsAndBroadcastLoads{0, 0};
    for (const Instruction& in : lowered.program.instructions) {
      kOneGemmsAndBroadcastLoads.first += in.opcode == Opcode::Gemm && in.gemmK == 1;
      kOneGemmsAndBroadcastLoads.second += in.opcode == Opcode::Load && in.dramStrideOuter == 0 && in.dramStrideInner == 0 && in.outer * in.inner > 1;
    }
    return kOneGemmsAndBroadcastLoads;
  };
  const NodeTiling& d = withGemms.groups[chain].tiling[1];
  auto up = [](int64_t a, int64_t q) { return (a + q - 1) / q; };
  const int64_t tiles = up(b.H, d.rows) * up(b.W, d.cols), blocks = up(b.hidden, d.channels);
  const auto [gemmsBefore, loadsBefore] = count(withGemms);
  EXPECT_EQ(loadsBefore, 0);
  EXPECT_GE(gemmsBefore, tiles * (blocks + 1));
  const auto [gemmsAfter, loadsAfter] = count(withLoads);
  EXPECT_EQ(gemmsAfter, 0);
  EXPECT_EQ(loadsAfter, tiles * (blocks + 1));
  expectMatches(g, dev, withLoads, b, "biases loaded");
}

}  // namespace
