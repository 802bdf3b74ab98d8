// Text-IR tests of the single-node and fusion passes: input .tir -> pass -> hand-written expected .tir,
// plus the interpreter's outputs before and after on random inputs.
#include <fmt/format.h>

#include "passes_test_util.h"

#include "tessel/ir/graph.h"
#include "tessel/support/error.h"

namespace tessel {
namespace {

using testing::expectPassCase;
using testing::semanticDifference;

std::unique_ptr<Model> parse(const std::string& text) { return parseModelText(text, "test.tir"); }

TEST(PassesSingleNode, FoldConstantsEvaluatesConstantSubgraphs) { expectPassCase("fold_constants", "fold-constants"); }
TEST(PassesSingleNode, EliminateIdentityRemovesNoOps) { expectPassCase("eliminate_identity", "eliminate-identity"); }
// Transposes moving only axes of size 1 (ViT's [1, 197, 768] <-> [197, 1, 768], the default reversed perm of [1, 5])
// become Reshapes; one that swaps two axes longer than 1 stays.
TEST(PassesSingleNode, TransposeOfUnitAxesBecomesReshape) { expectPassCase("transpose_to_reshape", "transpose-to-reshape"); }
// ReduceMean/ReduceMax over H and W (either sign of axes, keepdims 0 or 1) become global pools; other axes and
// other reductions stay.
TEST(PassesSingleNode, SpatialReduceBecomesGlobalPool) { expectPassCase("reduce_to_global_pool", "reduce-to-global-pool"); }
// A max pool after an activation that never decreases (Relu, Clip with constant bounds) takes its place: the
// activation runs on the pooled map; HardSwish (not monotone), an average pool and a shared activation stay.
TEST(PassesSingleNode, MaxPoolMovesBeforeMonotoneActivation) { expectPassCase("pool_before_activation", "pool-before-activation"); }
// A max pool of a channel Concat read by nothing else pools each part (ceil_mode and padding kept; axis -3 is the
// channel axis too); a Concat along H, one that is also an output, and an average pool stay.
TEST(PassesSingleNode, MaxPoolOfAChannelConcatPoolsEachPart) { expectPassCase("pool_before_concat", "pool-before-concat"); }
// DenseNet's transition (1x1 conv, then a 2x2/2 average pool): the pool moves before the convolution, which then
// runs on a quarter of the pixels. Left alone: a padded pool, a 3x3 conv, ceil_mode, a max pool, a conv whose result
// is also an output.
TEST(PassesSingleNode, AveragePoolMovesBeforePointwiseConv) {
  expectPassCase("pool_before_pointwise_conv", "pool-before-pointwise-conv");
}
// Atrous taps that read only padding are cut: rate 6 on a 5x5 map -> 1x1 (a), rows only (c); (b) reads the map
// through every tap, (d) would need a negative pad.
TEST(PassesSingleNode, CropDeadConvTapsCutsKernelRowsThatReadOnlyPadding) {
  expectPassCase("crop_dead_conv_taps", "crop-dead-conv-taps");
}
// ShuffleNet's Reshape-Transpose-Reshape becomes a Gather of channels (g = 2, C = 6: 0 3 1 4 2 5); a split and
// transpose that is not merged back stays.
TEST(PassesFusion, ChannelShuffleBecomesGather) { expectPassCase("channel_shuffle", "channel-shuffle-to-gather"); }
TEST(PassesSingleNode, CseMergesEqualConstantsAndNodes) { expectPassCase("cse", "cse"); }

TEST(PassesSingleNode, EliminateIdentityKeepsGraphOutputNames) {
  auto m = parse(R"(tessel.model opset{"": 13}
graph @main(%x: f32[2]) -> (%y: f32[2]) {
  %y = Identity(%x) : f32[2]
})");
  PassPipeline({"eliminate-identity"}).run(*m, {});
  ASSERT_EQ(m->graph->numNodes(), 1u);  // removing it would rename the output to %x
  EXPECT_EQ(m->graph->outputs()[0]->name(), "y");
}

// Opset < 11 spells Pad's pads as an attribute: all zero is removed, a real pad stays.
TEST(PassesSingleNode, EliminateIdentityRemovesAZeroPadAttribute) {
  auto m = parse(R"(tessel.model opset{"": 10}
graph @main(%x: f32[1,2,3,3]) -> (%y: f32[1,2,4,3]) {
  %p = Pad(%x) {pads=[0, 0, 0, 0, 0, 0, 0, 0]} : f32[1,2,3,3]
  %r = Relu(%p) : f32[1,2,3,3]
  %y = Pad(%r) {pads=[0, 0, 1, 0, 0, 0, 0, 0]} : f32[1,2,4,3]
})");
  PassPipeline({"eliminate-identity"}).run(*m, {});
  ASSERT_EQ(m->graph->numNodes(), 2u);
  EXPECT_EQ(m->graph->nodes()[0]->opType(), "Relu");
  EXPECT_EQ(m->graph->nodes()[0]->input(0)->name(), "x");
  EXPECT_EQ(m->graph->nodes()[1]->opType(), "Pad");
}

TEST(PassesSingleNode, SpecializeShapesMakesShapeConstant) {
  auto m = parse(R"(tessel.model opset{"": 13}
graph @main(%x: f32[N,3]) -> (%y: f32[N,3]) {
  %s = Shape(%x) : i64[2]
  %y = Reshape(%x, %s) : f32[N,3]
})");
  PassOptions options;
  options.values["shape.x"] = "4x3";
  PassPipeline({"specialize-shapes", "fold-constants"}).run(*m, options);
  EXPECT_EQ(m->graph->inputs()[0]->type.toString(), "f32[4,3]");
  const Node* reshape = m->graph->nodes().back().get();
  ASSERT_TRUE(reshape->input(1)->isConstant());
  EXPECT_EQ(reshape->input(1)->constant().toInt64Vector(), (std::vector<int64_t>{4, 3}));
  options.values["shape.x"] = "4xz";
  EXPECT_THROW(PassPipeline({"specialize-shapes"}).run(*m, options), UserError);
}

TEST(PassesFusion, ConvResidualClip) { expectPassCase("conv_epilogue", "fuse-conv-epilogue"); }
TEST(PassesFusion, ConvBiasAddAndSilu) { expectPassCase("conv_bias_silu", "fuse-conv-epilogue"); }
TEST(PassesFusion, GemmBiasLeakyRelu) { expectPassCase("gemm_epilogue", "fuse-gemm-epilogue"); }
TEST(PassesFusion, BatchNormFoldsIntoConv) { expectPassCase("fold_batchnorm", "fold-batchnorm"); }
// x * HardSigmoid(x) with HardSwish's constants becomes HardSwish; other constants, or another operand, stay.
TEST(PassesFusion, HardSigmoidTimesInputBecomesHardSwish) { expectPassCase("hardswish", "fuse-activation-patterns"); }
TEST(PassesFusion, ElementwiseChainBecomesOneNode) { expectPassCase("fuse_elementwise", "fuse-elementwise"); }

TEST(PassesFusion, ActivationWithSecondReaderIsNotAbsorbed) {
  auto m = parse(R"(tessel.model opset{"": 13}
graph @main(%x: f32[1,1,3,3]) -> (%y: f32[1,1,3,3], %z: f32[1,1,3,3]) {
  const %w: f32[1,1,1,1] = [2.0]
  %c = Conv(%x, %w) : f32[1,1,3,3]
  %y = Relu(%c) : f32[1,1,3,3]
  %z = Neg(%c) : f32[1,1,3,3]
})");
  auto original = m->clone();
  PassPipeline({"fuse-conv-epilogue"}).run(*m, {});
  const Node* conv = m->graph->findNode("c");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->opType(), "FusedConv");
  EXPECT_EQ(conv->attrString("activation"), "");
  EXPECT_NE(m->graph->findNode("y"), nullptr);
  EXPECT_LE(semanticDifference(*original, *m), 1e-5);
}

TEST(PassesFusion, FusedConvRejectsBadActivation) {
  auto m = parse(R"(tessel.model opset{"": 13, "tessel": 1}
graph @main(%x: f32[1,1,3,3]) -> (%y: f32[1,1,3,3]) {
  const %w: f32[1,1,1,1] = [2.0]
  %y = tessel.FusedConv(%x, %w) {activation="Swish"} : f32[1,1,3,3]
})");
  try {
    PassPipeline({"infer-shapes"}).run(*m, {});
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown activation 'Swish'"), std::string::npos) << e.what();
  }
}

const char* kTwoConvs = R"(tessel.model opset{"": 13}
graph @main(%x: f32[1,16,20,20]) -> (%y: f32[1,16]) {
  const %w3: f32[16,16,3,3] = @side(offset=0, bytes=9216)
  const %dw: f32[16,1,3,3] = @side(offset=9216, bytes=576)
  %a = Conv(%x, %w3) {kernel_shape=[3, 3], pads=[1, 1, 1, 1]} : f32[1,16,20,20]
  %b = Conv(%a, %dw) {group=16, kernel_shape=[3, 3], pads=[1, 1, 1, 1]} : f32[1,16,20,20]
  %p = GlobalAveragePool(%b) : f32[1,16,1,1]
  %y = Flatten(%p) : f32[1,16]
})";

std::unique_ptr<Model> twoConvs() {
  std::string side(9216 + 576, '\0');
  for (size_t i = 0; i < side.size() / 4; ++i) {
    float v = static_cast<float>((i * 37) % 17) / 17.0f - 0.5f;
    std::memcpy(&side[i * 4], &v, 4);
  }
  return parseModelText(kTwoConvs, "two_convs.tir", side);
}

std::string metaString(const Node* n, const std::string& key) {
  auto it = n->meta.find(key);
  return it == n->meta.end() ? "" : std::get<std::string>(it->second);
}

// A 1x1 conv, Relu and a depthwise conv form a region; the 3x3 conv after them is one the runtime runs
// with Winograd, whose NCHWc8 twin needs whole 8-channel blocks out (20 channels here), so it and the pool
// behind it (a region without a conv) stay NCHW.
const char* kLayoutNet = R"(tessel.model opset{"": 13}
graph @main(%x: f32[1,16,12,12]) -> (%y: f32[1,20]) {
  const %w1: f32[24,16,1,1] = @side(offset=0, bytes=1536)
  const %dw: f32[24,1,3,3] = @side(offset=1536, bytes=864)
  const %w3: f32[20,24,3,3] = @side(offset=2400, bytes=17280)
  %a = Conv(%x, %w1) {kernel_shape=[1, 1]} : f32[1,24,12,12]
  %r = Relu(%a) : f32[1,24,12,12]
  %b = Conv(%r, %dw) {group=24, kernel_shape=[3, 3], pads=[1, 1, 1, 1]} : f32[1,24,12,12]
  %c = Conv(%b, %w3) {kernel_shape=[3, 3], pads=[1, 1, 1, 1]} : f32[1,20,12,12]
  %p = MaxPool(%c) {kernel_shape=[2, 2], strides=[2, 2]} : f32[1,20,6,6]
  %g = GlobalAveragePool(%p) : f32[1,20,1,1]
  %y = Flatten(%g) : f32[1,20]
})";

TEST(PassesSchedule, LayoutBlocksConvRegionsOnly) {
  auto m = parseModelText(kLayoutNet, "layout_net.tir", std::string(2400 + 17280, '\0'));
  PassOptions blocked8;
  blocked8.values["select-layout.mode"] = "nchwc8";
  PassPipeline({"select-layout"}).run(*m, blocked8);
  for (const char* blocked : {"a", "r", "b"})
    EXPECT_EQ(metaString(m->graph->findNode(blocked), "layout"), "nchwc8") << blocked;
  for (const char* nchw : {"c", "p", "g", "y"})
    EXPECT_EQ(metaString(m->graph->findNode(nchw), "layout"), "") << nchw;
  // Mode auto: %b is a 3x3 depthwise conv, which blocks its region on any map
  // (LayoutAutoBlocksOnlyWideDepthwiseRegions has the rule's other cases).
  PassOptions autoMode;
  autoMode.values["select-layout.mode"] = "auto";
  PassPipeline({"select-layout"}).run(*m, autoMode);
  for (const char* blocked : {"a", "r", "b"})
    EXPECT_EQ(metaString(m->graph->findNode(blocked), "layout"), "nchwc8") << blocked;
  EXPECT_EQ(metaString(m->graph->findNode("c"), "layout"), "");
  // Mode auto blocks a region of dense convs too (%b without its group).
  auto dense = parseModelText(std::string(kLayoutNet), "layout_net.tir", std::string(2400 + 17280, '\0'));
  PassOptions options;
  options.values["select-layout.mode"] = "auto";
  Node* b = dense->graph->findNode("b");
  b->setAttr("group", int64_t{1});
  b->input(1)->type = TensorType::fromShape(DType::Float32, {24, 24, 3, 3});
  PassPipeline({"select-layout"}).run(*dense, options);
  for (const char* blocked : {"a", "r", "b"})
    EXPECT_EQ(metaString(dense->graph->findNode(blocked), "layout"), "nchwc8") << blocked;
  EXPECT_EQ(metaString(dense->graph->findNode("c"), "layout"), "");
  PassOptions nchw;
  nchw.values["select-layout.mode"] = "nchw";
  PassPipeline({"select-layout"}).run(*m, nchw);
  EXPECT_EQ(metaString(m->graph->findNode("a"), "layout"), "");
}

// A chain x -> (1x1 conv, depthwise conv) per entry of `dws` on 8 channels (one region), for the auto rule;
// without the 1x1 convs when `pointwise` is false (the depthwise convs alone).
struct DwSpec {
  int k, stride;
};
std::unique_ptr<Model> depthwiseChain(int64_t size, const std::vector<DwSpec>& dws, bool pointwise = true) {
  std::string text = fmt::format("tessel.model opset{{\"\": 13}}\ngraph @main(%x: f32[1,8,{0},{0}]) -> (%d{1}: f32[1,8,", size,
                                 dws.size() - 1);
  int64_t out = size;
  for (const DwSpec& d : dws) out = (out + 2 * (d.k / 2) - d.k) / d.stride + 1;
  text += fmt::format("{0},{0}]) {{\n  const %w1: f32[8,8,1,1] = @side(offset=0, bytes=256)\n", out);
  text += "  const %k3: f32[8,1,3,3] = @side(offset=256, bytes=288)\n  const %k5: f32[8,1,5,5] = @side(offset=544, bytes=800)\n";
  std::string in = "x";
  int64_t h = size;
  for (size_t i = 0; i < dws.size(); ++i) {
    const DwSpec& d = dws[i];
    const int64_t o = (h + 2 * (d.k / 2) - d.k) / d.stride + 1;
    if (pointwise) text += fmt::format("  %c{0} = Conv(%{1}, %w1) {{kernel_shape=[1, 1]}} : f32[1,8,{2},{2}]\n", i, in, h);
    text += fmt::format("  %d{0} = Conv(%{5}, %k{1}) {{group=8, kernel_shape=[{1}, {1}], pads=[{2}, {2}, {2}, {2}], "
                        "strides=[{3}, {3}]}} : f32[1,8,{4},{4}]\n",
                        i, d.k, d.k / 2, d.stride, o, pointwise ? fmt::format("c{}", i) : in);
    in = fmt::format("d{}", i);
    h = o;
  }
  text += "}";
  return parseModelText(text, "dw_chain.tir", std::string(1344, '\0'));
}

// Mode auto (AVX2 targets) blocks every region with a dense conv (the chains with their 1x1 convs), and a
// region of depthwise convs alone unless all of them run on the NCHW kernel's small-map path (kernel width 5,
// stride 1 or 2, at most 28 output columns; since the NCHWc8 tiles' assembly tail, 2026-12-04, the blocked
// kernel wins every 3x3); mode nchwc8 blocks every one of these chains.
TEST(PassesSchedule, LayoutAutoBlocksOnlyWideDepthwiseRegions) {
  struct Case {
    int64_t size;
    std::vector<DwSpec> dws;
    bool blockedInAuto;
  };
  const std::vector<Case> cases = {
      {32, {{3, 1}}, true},           // 3x3 on 32 columns: wider than 28
      {64, {{3, 2}}, true},           // 3x3 stride 2, 64 -> 32
      {28, {{3, 1}}, true},           // 3x3 on 28 columns: the NCHW 3x3 row path, not the small-map one
      {28, {{5, 1}}, false},          // 5x5 on 28 columns (MnasNet's, EfficientNet's)
      {56, {{5, 2}}, false},          // 5x5 stride 2, 56 -> 28
      {14, {{3, 1}}, true},           // 3x3 on 14 columns
      {28, {{3, 2}}, true},           // 3x3 stride 2, 28 -> 14
      {7, {{5, 1}}, false},           // 5x5 on 7 columns
      {14, {{5, 2}, {5, 1}}, false},  // a region with only small-map depthwise convs
      {14, {{3, 1}, {5, 1}}, true},   // a 3x3 blocks the region of a small-map 5x5
      {56, {{3, 2}, {5, 1}}, true},   // one wide depthwise conv (56 -> 28, 3x3) blocks the whole region
  };
  for (size_t c = 0; c < cases.size(); ++c)
    for (bool pointwise : {true, false})
      for (const char* mode : {"auto", "nchwc8"}) {
        auto m = depthwiseChain(cases[c].size, cases[c].dws, pointwise);
        PassOptions options;
        options.values["select-layout.mode"] = mode;
        PassPipeline({"select-layout"}).run(*m, options);
        const bool blocked = std::string(mode) == "nchwc8" || pointwise || cases[c].blockedInAuto;
        for (size_t i = 0; i < cases[c].dws.size(); ++i)
          for (const std::string& name : {fmt::format("c{}", i), fmt::format("d{}", i)}) {
            const Node* n = m->graph->findNode(name);
            if (!pointwise && name[0] == 'c') continue;
            ASSERT_NE(n, nullptr) << name;
            EXPECT_EQ(metaString(n, "layout"), blocked ? "nchwc8" : "")
                << "case " << c << " node " << name << " mode " << mode << " pointwise " << pointwise;
          }
      }
}

// Mode auto blocks a region of dense convs whether a channel Concat (fire and inception modules) or an Add
// joins them; a region whose convs are all small-map depthwise ones (5x5 on 10 columns) is blocked only when
// it has a Concat (whose inputs the convs write in place).
TEST(PassesSchedule, LayoutAutoBlocksConcatRegions) {
  for (bool depthwise : {false, true})
    for (bool concat : {true, false}) {
      const std::string conv = depthwise ? "{group=16, kernel_shape=[5, 5], pads=[2, 2, 2, 2]}" : "{kernel_shape=[1, 1]}";
      const std::string text = fmt::format(R"(tessel.model opset{{"": 13}}
graph @main(%x: f32[1,16,10,10]) -> (%y: f32[1,{0},10,10]) {{
  const %w: f32[{3}] = @side(offset=0, bytes={4})
  %a = Conv(%x, %w) {2} : f32[1,16,10,10]
  %b = Conv(%x, %w) {2} : f32[1,16,10,10]
  %y = {1} : f32[1,{0},10,10]
}})", concat ? 32 : 16, concat ? "Concat(%a, %b) {axis=1}" : "Add(%a, %b)", conv, depthwise ? "16,1,5,5" : "16,16,1,1", depthwise ? 1600 : 1024);
      auto m = parseModelText(text, "concat_region.tir", std::string(1600, '\0'));
      PassOptions options;
      options.values["select-layout.mode"] = "auto";
      PassPipeline({"select-layout"}).run(*m, options);
      const bool blocked = concat || !depthwise;
      for (const char* name : {"a", "b", "y"})
        EXPECT_EQ(metaString(m->graph->findNode(name), "layout"), blocked ? "nchwc8" : "")
            << name << " concat " << concat << " depthwise " << depthwise;
    }
}

// Element-wise nodes join a region when the runtime computes them element by element (the registry's
// Elementwise ops with an activation, rt::unary or two-operand rt::binary kernel) on operands of their
// shape or scalars; a Clip whose bound is computed has no such kernel and stays NCHW.
const char* kElementwiseRegion = R"(tessel.model opset{"": 13}
graph @main(%x: f32[1,16,10,10], %lo: f32[]) -> (%m: f32[1,16,10,10], %k: f32[1,16,10,10]) {
  const %w1: f32[16,16,1,1] = @side(offset=0, bytes=1024)
  const %dw: f32[16,1,3,3] = @side(offset=1024, bytes=576)
  const %four: f32[] = @side(offset=1600, bytes=4)
  %c1 = Conv(%x, %w1) {kernel_shape=[1, 1]} : f32[1,16,10,10]
  %d = Div(%c1, %four) : f32[1,16,10,10]
  %c2 = Conv(%d, %dw) {group=16, kernel_shape=[3, 3], pads=[1, 1, 1, 1]} : f32[1,16,10,10]
  %n = Neg(%c2) : f32[1,16,10,10]
  %c3 = Conv(%n, %w1) {kernel_shape=[1, 1]} : f32[1,16,10,10]
  %m = Max(%c3, %d) : f32[1,16,10,10]
  %k = Clip(%c3, %lo) : f32[1,16,10,10]
})";

TEST(PassesSchedule, LayoutBlocksElementwiseOpsWithAFlatKernel) {
  auto m = parseModelText(kElementwiseRegion, "elementwise_region.tir", std::string(1604, '\0'));
  PassOptions options;
  options.values["select-layout.mode"] = "nchwc8";
  PassPipeline({"select-layout"}).run(*m, options);
  for (const char* blocked : {"c1", "d", "c2", "n", "c3", "m"})
    EXPECT_EQ(metaString(m->graph->findNode(blocked), "layout"), "nchwc8") << blocked;
  EXPECT_EQ(metaString(m->graph->findNode("k"), "layout"), "");
}

TEST(PassesSchedule, KernelsFollowShapeAndLayout) {
  auto m = twoConvs();
  PassPipeline({"select-kernels"}).run(*m, {});
  EXPECT_EQ(metaString(m->graph->findNode("a"), "kernel"), "conv2d_winograd_f43_avx2");  // 3x3 s1, 400 pixels
  EXPECT_EQ(metaString(m->graph->findNode("b"), "kernel"), "conv2d_nchw_depthwise_avx2");
  PassPipeline({"select-layout", "select-kernels"}).run(*m, {});
  // Blocked with the depthwise conv behind it (its 16 channels are whole blocks): Winograd's NCHWc8 twin.
  EXPECT_EQ(metaString(m->graph->findNode("a"), "kernel"), "conv2d_winograd_f43_nchwc8_avx2");
  EXPECT_EQ(metaString(m->graph->findNode("b"), "kernel"), "conv2d_nchwc8_depthwise_avx2");
}

TEST(PassesSchedule, KernelOverrideIsCheckedAndApplied) {
  auto m = twoConvs();
  PassOptions options;
  options.values["kernel.a"] = "conv2d_nchw_im2col_gemm_avx2";
  PassPipeline({"select-kernels"}).run(*m, options);
  EXPECT_EQ(metaString(m->graph->findNode("a"), "kernel"), "conv2d_nchw_im2col_gemm_avx2");
  options.values["kernel.a"] = "conv2d_nchw_depthwise_avx2";  // a is not depthwise
  EXPECT_THROW(PassPipeline({"select-kernels"}).run(*m, options), UserError);
  options.values["kernel.a"] = "no_such_kernel";
  EXPECT_THROW(PassPipeline({"select-kernels"}).run(*m, options), UserError);
}

TEST(PassesPipeline, CpuPipelineKeepsSemanticsOnSmallConvNet) {
  auto m = twoConvs();
  auto original = m->clone();
  namedPipeline("cpu").run(*m, testing::verifyEachPass());
  for (const auto& n : m->graph->nodes()) EXPECT_NE(n->opType(), "Conv");
  EXPECT_LE(semanticDifference(*original, *m), 1e-5);
}

}  // namespace
}  // namespace tessel
