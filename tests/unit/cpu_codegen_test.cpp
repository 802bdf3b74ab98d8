// cpu target: compiled (.so) models against the reference interpreter on small graphs with odd shapes,
// memory planning, and the errors of the compile driver.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/cpu/loader.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

Tensor randomTensor(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(DType::Float32, shape);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* d = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = dist(gen);
  return t;
}

/// A model under construction, built through the Graph API.
struct Builder {
  std::unique_ptr<Model> model = std::make_unique<Model>();
  Graph& g;
  uint32_t seed = 1;
  Builder() : g(*(model->graph = std::make_unique<Graph>("test"))) { model->opsetImports[""] = 13; }
  Value* input(const std::string& name, const Shape& s) { return g.addInput(name, TensorType::fromShape(DType::Float32, s)); }
  Value* weight(const std::string& name, const Shape& s, float lo = -1.0f, float hi = 1.0f) {
    return g.addConstant(name, randomTensor(s, seed++, lo, hi));
  }
  Value* node(const std::string& op, const std::vector<Value*>& ins, std::map<std::string, AttrValue> attrs = {}) {
    Node* n = g.addNode(op, ins, {g.uniqueName(op + "_out")}, g.uniqueName(op));
    for (auto& [k, v] : attrs) n->setAttr(k, v);
    return n->output(0);
  }
  Value* conv(Value* x, int64_t cin, int64_t cout, int64_t k, int64_t stride, std::vector<int64_t> pads,
              int64_t group = 1) {
    Value* w = weight(g.uniqueName("w"), {cout, cin / group, k, k});
    Value* b = weight(g.uniqueName("b"), {cout});
    return node("Conv", {x, w, b},
                {{"kernel_shape", std::vector<int64_t>{k, k}}, {"strides", std::vector<int64_t>{stride, stride}},
                 {"pads", pads}, {"group", group}, {"dilations", std::vector<int64_t>{1, 1}}});
  }
  Value* batchNorm(Value* x, int64_t c) {
    return node("BatchNormalization", {x, weight(g.uniqueName("gamma"), {c}), weight(g.uniqueName("beta"), {c}),
                                       weight(g.uniqueName("mean"), {c}), weight(g.uniqueName("var"), {c}, 0.5f, 2.0f)});
  }
};

fs::path tempDir() {
  fs::path d = fs::temp_directory_path() / ("tessel-cpu-test-" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

/// Compiles the model (through the cpu pass pipeline), runs it and the interpreter on the graph as built
/// (before any pass) on seeded random inputs, and compares every output within 1e-4 of the reference
/// output's largest magnitude.
/// Inputs listed in `given` (e.g. integer ones) are used as they are.
cpu::CompileReport expectCompiledMatchesInterpreter(Builder& b, const std::string& name, int threads = 1,
                                                    std::map<std::string, Tensor> given = {},
                                                    const cpu::CompileOptions& options = {}) {
  std::map<std::string, Tensor> inputs = std::move(given);
  uint32_t seed = 100;
  for (const Value* in : b.g.inputs())
    if (!inputs.count(in->name())) inputs[in->name()] = randomTensor(in->type.staticShape(), seed++);
  std::unique_ptr<Model> original = b.model->clone();
  inferShapes(*original->graph);
  std::vector<Tensor> expected = Interpreter(*original->graph).run(inputs);
  cpu::prepareModel(*b.model, options);
  fs::path so = tempDir() / (name + ".so");
  cpu::CompileReport report = cpu::compileSharedLibrary(*b.model, so.string(), options);
  EXPECT_GT(report.steps, 0);
  cpu::CompiledModel compiled(so.string(), threads);
  std::vector<Tensor> actual = compiled.run(inputs);
  EXPECT_EQ(actual.size(), expected.size());
  if (actual.size() != expected.size()) return report;
  for (size_t o = 0; o < actual.size(); ++o) {
    EXPECT_EQ(actual[o].shape(), expected[o].shape()) << name << " output " << o;
    if (actual[o].shape() != expected[o].shape()) continue;
    const float* a = actual[o].data<float>();
    const float* e = expected[o].data<float>();
    double maxMag = 0;
    for (int64_t i = 0; i < expected[o].numel(); ++i) maxMag = std::max(maxMag, std::fabs(double(e[i])));
    EXPECT_GT(maxMag, 0.0) << name << ": degenerate reference output";
    double worst = 0;
    for (int64_t i = 0; i < expected[o].numel(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - e[i]));
    EXPECT_LE(worst, 1e-4 * maxMag) << name << " output " << o << " max |diff| " << worst << " of max " << maxMag;
  }
  return report;
}

TEST(CpuCodegen, ConvBatchNormResidualReluOddShapes) {
  Builder b;
  Value* x = b.input("x", {1, 5, 13, 11});
  Value* c1 = b.conv(x, 5, 12, 3, 1, {1, 1, 2, 1});          // asymmetric pads: 14x11 output
  Value* r1 = b.node("Relu", {b.batchNorm(c1, 12)});
  Value* c2 = b.conv(r1, 12, 12, 3, 1, {1, 1, 1, 1});
  Value* side = b.conv(x, 5, 12, 1, 1, {0, 0, 1, 0});        // 1x1 with padding: 14x11
  Value* sum = b.node("Add", {b.batchNorm(c2, 12), side});   // residual computed after c2 in node order
  Value* y = b.node("Relu", {sum});
  Value* c3 = b.conv(y, 12, 9, 3, 2, {1, 1, 1, 1});          // strided im2col
  b.g.addOutput(b.node("Clip", {c3, b.g.addConstant("lo", Tensor::scalar(0.0f)), b.g.addConstant("hi", Tensor::scalar(0.5f))}));
  expectCompiledMatchesInterpreter(b, "conv_bn_residual");
}

TEST(CpuCodegen, WinogradDepthwisePoolingConcatHeadTwoThreads) {
  Builder b;
  Value* x = b.input("x", {1, 16, 30, 30});
  Value* w = b.conv(x, 16, 16, 3, 1, {1, 1, 1, 1});                // Winograd-sized map
  Value* dw = b.node("Relu", {b.conv(w, 16, 16, 3, 2, {1, 1, 1, 1}, 16)});  // depthwise stride 2
  Value* mp = b.node("MaxPool", {dw}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                      {"strides", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t{1}},
                                      {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  Value* ap = b.node("AveragePool", {dw}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                          {"strides", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t{1}},
                                          {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  Value* cat = b.node("Concat", {mp, ap}, {{"axis", int64_t{1}}});
  Value* gap = b.node("GlobalAveragePool", {cat});
  Value* flat = b.node("Flatten", {gap}, {{"axis", int64_t{1}}});
  Value* fc = b.node("Gemm", {flat, b.weight("fcw", {7, 32}), b.weight("fcb", {7})}, {{"transB", int64_t{1}}});
  b.g.addOutput(b.node("Softmax", {fc}, {{"axis", int64_t{-1}}}));
  b.g.addOutput(mp);  // an intermediate that is also an output
  expectCompiledMatchesInterpreter(b, "winograd_dw_pool", 2);
}

// Channel Concat at batch 1: inputs computed by earlier kernels are written straight into their slice of
// the output; a graph input, a repeated input and a concat along another axis still copy. One sliced
// input (r) is also read after the concat, another feeds the next slice's producer.
TEST(CpuCodegen, ConcatInputsWrittenInPlaceIntoTheirSlices) {
  Builder b;
  Value* x = b.input("x", {1, 4, 9, 7});
  Value* c1 = b.conv(x, 4, 6, 3, 1, {1, 1, 1, 1});
  Value* r = b.node("Relu", {c1});
  Value* c2 = b.conv(r, 6, 5, 1, 1, {0, 0, 0, 0});
  Value* cat = b.node("Concat", {c2, x, r, r}, {{"axis", int64_t{1}}});      // 5 + 4 + 6 + 6 channels
  Value* c3 = b.conv(cat, 21, 8, 3, 2, {1, 1, 1, 1});
  Value* wide = b.node("Concat", {c3, c3}, {{"axis", int64_t{3}}});         // outer != 1: copies
  Value* tail = b.node("Add", {r, b.conv(x, 4, 6, 1, 1, {0, 0, 0, 0})});   // r read after the concat
  b.g.addOutput(wide);
  b.g.addOutput(tail);
  cpu::CompileReport report = expectCompiledMatchesInterpreter(b, "concat_in_place");
  EXPECT_EQ(report.inPlaceConcatInputs, 2);  // c2 and the first r
}

// ShuffleNet's blocks: the input split in two halves, one half through a conv, Concat, then the channel shuffle
// (Reshape [1, C, H, W] -> [1, G, C/G, H, W], Transpose [0, 2, 1, 3, 4], Reshape back). Each Concat + shuffle is one
// gather of planes; odd channel counts, 2 and 3 groups, a three-input Concat, and a Concat whose output has a
// second user (then the Concat and the Transpose run as before). A pointwise conv whose channels fall in one
// group of the shuffle writes its planes in place (b1, b3); one whose channels straddle two groups (b2) is copied.
// All match the interpreter at 1 and 2 threads.
TEST(CpuCodegen, ConcatAndChannelShuffleAreOneGather) {
  auto build = [](Builder& b, bool secondUser) {
    auto shapeConst = [&](std::vector<int64_t> dims) {
      return b.g.addConstant(b.g.uniqueName("shape"), Tensor::fromVector<int64_t>({static_cast<int64_t>(dims.size())}, dims));
    };
    auto shuffle = [&](Value* v, int64_t c, int64_t groups, int64_t h, int64_t w) {
      Value* r = b.node("Reshape", {v, shapeConst({1, groups, c / groups, h, w})});
      Value* t = b.node("Transpose", {r}, {{"perm", std::vector<int64_t>{0, 2, 1, 3, 4}}});
      return b.node("Reshape", {t, shapeConst({1, c, h, w})});
    };
    auto slice = [&](Value* v, int64_t from, int64_t to) {
      return b.node("Slice", {v, shapeConst({from}), shapeConst({to}), shapeConst({1})});
    };
    const int64_t H = 9, W = 7;
    Value* x = b.input("x", {1, 10, H, W});
    // Block 1: 5 + 5 channels, 2 groups.
    Value* b1 = b.node("Relu", {b.conv(slice(x, 5, 10), 5, 5, 1, 1, {0, 0, 0, 0})});
    Value* cat1 = b.node("Concat", {slice(x, 0, 5), b1}, {{"axis", int64_t{1}}});
    Value* s1 = shuffle(cat1, 10, 2, H, W);
    // Block 2: three inputs (4 + 5 + 3 channels), 3 groups of 4: b2 (channels 4-8) straddles two groups.
    Value* b2 = b.conv(slice(s1, 5, 10), 5, 5, 1, 1, {0, 0, 0, 0});
    Value* b3 = b.node("Relu", {b.conv(slice(s1, 2, 7), 5, 3, 1, 1, {0, 0, 0, 0})});
    Value* cat2 = b.node("Concat", {slice(s1, 0, 4), b2, b3}, {{"axis", int64_t{1}}});
    Value* s2 = shuffle(cat2, 12, 3, H, W);
    b.g.addOutput(b.conv(s2, 12, 6, 3, 1, {1, 1, 1, 1}));
    if (secondUser) b.g.addOutput(b.node("Sigmoid", {cat2}));
  };
  cpu::CompileOptions nchw;
  nchw.layout = "nchw";  // AVX2 hosts would otherwise block the convs and put reorders around the Concats
  for (bool secondUser : {false, true})
    for (int threads : {1, 2}) {
      Builder b;
      build(b, secondUser);
      const std::string name = std::string(secondUser ? "shuffle_unfused_" : "shuffle_fused_") + std::to_string(threads);
      cpu::CompileReport report = expectCompiledMatchesInterpreter(b, name, threads, {}, nchw);
      EXPECT_EQ(report.shuffledConcats, secondUser ? 1 : 2) << name;
      EXPECT_EQ(report.inPlaceShuffleInputs, secondUser ? 1 : 2) << name;
    }
}

// Squeeze-and-excitation (global pool, 1x1 convs, Sigmoid, channel-scale Mul) before a pointwise conv: on a map
// with at least 64 pixels per output channel the Mul is folded into the conv (weights scaled each run), with the
// scale as either Mul operand; on a small map, or when the scaled tensor has a second user, the Mul runs as before.
// All match the interpreter at 1 and 2 threads.
TEST(CpuCodegen, SqueezeExcitationScaleFoldsIntoThePointwiseConvAfterIt) {
  auto se = [](Builder& b, Value* d, int64_t c, bool scaleFirst) {
    Value* g = b.node("GlobalAveragePool", {d});
    Value* r = b.node("Relu", {b.conv(g, c, 3, 1, 1, {0, 0, 0, 0})});
    Value* sc = b.node("Sigmoid", {b.conv(r, 3, c, 1, 1, {0, 0, 0, 0})});
    return scaleFirst ? b.node("Mul", {sc, d}) : b.node("Mul", {d, sc});
  };
  auto build = [&](Builder& b) {
    Value* x = b.input("x", {1, 6, 24, 20});  // 480 pixels
    Value* d = b.node("Relu", {b.conv(x, 6, 6, 3, 1, {1, 1, 1, 1}, 6)});
    Value* y1 = b.conv(se(b, d, 6, true), 6, 5, 1, 1, {0, 0, 0, 0});          // 5 x 64 <= 480: folded
    Value* d2 = b.node("Relu", {b.conv(y1, 5, 5, 3, 1, {1, 1, 1, 1}, 5)});
    Value* y2 = b.conv(se(b, d2, 5, false), 5, 8, 1, 1, {0, 0, 0, 0});       // 8 x 64 > 480: the Mul runs
    Value* d3 = b.node("Relu", {b.conv(y2, 8, 8, 3, 1, {1, 1, 1, 1}, 8)});
    Value* m3 = se(b, d3, 8, false);
    b.g.addOutput(b.conv(m3, 8, 4, 1, 1, {0, 0, 0, 0}));                     // m3 has a second user: runs
    b.g.addOutput(b.node("Tanh", {m3}));
  };
  cpu::CompileOptions nchw;
  nchw.layout = "nchw";  // AVX2 hosts would block these convs (and keep the Mul inside the blocked region)
  for (int threads : {1, 2}) {
    Builder b;
    build(b);
    cpu::CompileReport report =
        expectCompiledMatchesInterpreter(b, "se_fold_" + std::to_string(threads), threads, {}, nchw);
    EXPECT_EQ(report.scaledConvInputs, 1);
  }
}

// Inverted residual blocks (1x1 -> depthwise -> 1x1, MobileNetV2's) on a map of at least 28 x 28 whose expanded
// tensor has at least 512 KiB run as one banded step (rt::conv_chain_nchw): a 3x3 block with its residual Add and a
// 5x5/2 one; a block whose depthwise output has a second user, and one on a 14x14 map, stay three steps. All match
// the interpreter at 1 and 2 threads, and so does the same model compiled with the chains off.
TEST(CpuCodegen, InvertedResidualBlocksOnLargeMapsRunAsOneBandedStep) {
  auto block = [](Builder& b, Value* x, int64_t c, int64_t e, int64_t out, int64_t k, int64_t stride) {
    Value* ex = b.node("Relu", {b.conv(x, c, e, 1, 1, {0, 0, 0, 0})});
    const int64_t p = k / 2;
    Value* dw = b.node("Relu", {b.conv(ex, e, e, k, stride, {p, p, p, p}, e)});
    return std::make_pair(dw, b.conv(dw, e, out, 1, 1, {0, 0, 0, 0}));
  };
  auto build = [&](Builder& b) {
    Value* x = b.input("x", {1, 8, 30, 29});
    auto [d1, p1] = block(b, x, 8, 160, 8, 3, 1);  // 160 x 30 x 29 floats = 557 KB: chained
    Value* y1 = b.node("Add", {p1, x});
    auto [d2, p2] = block(b, y1, 8, 160, 12, 5, 2);  // chained, 30x29 -> 15x15
    (void)d2;
    auto [d3, p3] = block(b, p2, 12, 640, 12, 3, 1);  // 15x15: not chained
    (void)d3;
    Value* x4 = b.input("x4", {1, 8, 28, 28});
    auto [d4, p4] = block(b, x4, 8, 192, 8, 3, 1);  // the depthwise output has a second user: not chained
    b.g.addOutput(b.node("Add", {p3, b.conv(p3, 12, 12, 1, 1, {0, 0, 0, 0})}));
    b.g.addOutput(p4);
    b.g.addOutput(b.node("Tanh", {d4}));
    (void)d1;
  };
  cpu::CompileOptions nchw;
  nchw.layout = "nchw";  // AVX2 hosts would block the depthwise convs
  for (bool chains : {true, false}) {
    nchw.convChains = chains;
    for (int threads : {1, 2}) {
      Builder b;
      build(b);
      const cpu::CompileReport report = expectCompiledMatchesInterpreter(
          b, std::string("conv_chain_") + (chains ? "on_" : "off_") + std::to_string(threads), threads, {}, nchw);
      EXPECT_EQ(report.chainedConvBlocks, chains ? 2 : 0);
    }
  }
}

// A stem conv (3 input channels) whose only user is a MaxPool (after its ReLU) runs as one fused kernel;
// when the conv's output has a second user the pool stays a separate step. Both match the interpreter.
TEST(CpuCodegen, StemConvAndMaxPoolFuseOnlyWhenThePoolIsTheOnlyUser) {
  auto stem = [](Builder& b, bool secondUser) {
    Value* x = b.input("x", {1, 3, 37, 41});
    Value* r = b.node("Relu", {b.conv(x, 3, 16, 7, 2, {3, 3, 3, 3})});
    Value* mp = b.node("MaxPool", {r}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                        {"strides", std::vector<int64_t>{2, 2}},
                                        {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    b.g.addOutput(b.conv(mp, 16, 8, 3, 1, {1, 1, 1, 1}));
    if (secondUser) b.g.addOutput(b.node("Sigmoid", {r}));
  };
  for (bool secondUser : {false, true}) {
    Builder b;
    stem(b, secondUser);
    expectCompiledMatchesInterpreter(b, secondUser ? "stem_pool_unfused" : "stem_pool_fused", 2);
    Builder g;
    stem(g, secondUser);
    cpu::prepareModel(*g.model);
    const std::string src = cpu::generateModel(*g.model, {}).source;
    EXPECT_EQ(src.find("rt::conv2d_nchw_direct_small_cin_maxpool(") != std::string::npos, !secondUser) << src;
    // Unfused, the pool runs on its own: blocked with the 3x3 conv behind it on an AVX2 host (mode auto blocks
    // on AVX2 only), NCHW on an AVX-512 one.
    const char* pool = __builtin_cpu_supports("avx512f") ? "rt::maxpool2d_nchw(" : "rt::maxpool2d_nchwc8(";
    EXPECT_EQ(src.find(pool) != std::string::npos, secondUser) << src;
  }
}

TEST(CpuCodegen, BroadcastingElementwiseAndMatMul) {
  Builder b;
  Value* x = b.input("x", {2, 3, 5, 7});
  Value* s = b.node("Mul", {x, b.weight("scale", {3, 1, 1})});        // per channel
  Value* t = b.node("Sub", {b.weight("row", {7}), s});                  // general broadcast, constant first
  Value* u = b.node("Div", {t, b.g.addConstant("two", Tensor::scalar(2.0f))});
  Value* v = b.node("Sigmoid", {u});
  Value* m = b.node("MatMul", {v, b.weight("mm", {7, 4})});
  b.g.addOutput(b.node("Max", {m, b.node("Neg", {m})}));
  expectCompiledMatchesInterpreter(b, "broadcast_matmul");
}

// Outputs produced inside an NCHWc8 region leave through a reorder to NCHW that keeps the output's name (the
// callers look outputs up by name; it was '<name>.nchw'), also when the blocked value has another user.
TEST(CpuCodegen, BlockedOutputsKeepTheirNames) {
  Builder b;
  Value* x = b.input("x", {1, 8, 9, 9});
  Value* r = b.node("Relu", {b.conv(x, 8, 16, 3, 1, {1, 1, 1, 1})});
  Value* c = b.conv(r, 16, 8, 1, 1, {0, 0, 0, 0});
  b.g.addOutput(r);
  b.g.addOutput(c);
  const std::string rName = r->name(), cName = c->name();  // the passes replace the values
  cpu::CompileOptions blocked;
  blocked.layout = "nchwc8";
  expectCompiledMatchesInterpreter(b, "blocked_outputs", 1, {}, blocked);
  const cpu::CompiledModel model((tempDir() / "blocked_outputs.so").string(), 1);
  ASSERT_EQ(model.outputs().size(), 2u);
  EXPECT_EQ(model.outputs()[0].name, rName);
  EXPECT_EQ(model.outputs()[1].name, cName);
  bool reorders = false;
  for (const cpu::CompiledStepInfo& s : model.steps()) reorders = reorders || s.kernel == "reorder_nchwc8_to_nchw";
  EXPECT_TRUE(reorders);  // the outputs were blocked
}

TEST(CpuCodegen, MemoryPlanReusesTheArena) {
  Builder b;
  Value* x = b.input("x", {1, 8, 16, 16});
  Value* h = x;
  for (int i = 0; i < 6; ++i) h = b.node("Relu", {b.conv(h, 8, 8, 3, 1, {1, 1, 1, 1})});
  b.g.addOutput(h);
  cpu::CompileOptions nchw;
  nchw.layout = "nchw";  // no reorder buffers: the plan of the convs' own outputs
  cpu::prepareModel(*b.model, nchw);
  cpu::GeneratedModel gen = cpu::generateModel(*b.model, nchw);
  // Six 8x16x16 intermediates, one the output: a chain needs at most two live buffers at a time.
  EXPECT_EQ(gen.report.naiveArenaBytes, 5u * 8 * 16 * 16 * 4);
  EXPECT_LE(gen.report.arenaBytes, 2u * 8 * 16 * 16 * 4);
  EXPECT_EQ(gen.report.fusedNodes, 6);
  EXPECT_NE(gen.source.find("Generated by tessel compile"), std::string::npos);
}

// A node whose output shape depends on the data (NonZero) has no storage to plan: one error naming it.
// (Integer outputs such as a Cast to int64 compile; see IntegerAndBoolTensorsCompile.)
TEST(CpuCodegen, DynamicShapeNodeIsOneErrorNamingTheNode) {
  Builder b;
  Value* x = b.input("x", {2, 3});
  Node* n = b.g.addNode("NonZero", {x}, {"where"}, "my_nonzero");
  b.g.addOutput(n->output(0));
  cpu::prepareModel(*b.model);
  try {
    cpu::generateModel(*b.model, {});
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("my_nonzero"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dynamic shape"), std::string::npos) << e.what();
  }
}

TEST(CpuCodegen, OperatorsWithoutKernelRunThroughTheInterpreter) {
  Builder b;
  Value* x = b.input("x", {2, 3, 5});
  Value* r = b.node("Relu", {x});
  Value* t = b.node("Softplus", {r});  // no compiled kernel (nor a vector form in the fused loop)
  Value* m = b.node("Mul", {t, b.weight("s", {1, 3, 1})});
  b.g.addOutput(b.node("ReduceSum", {m, b.g.addConstant("axes", Tensor::fromVector<int64_t>({1}, {1}))}));
  expectCompiledMatchesInterpreter(b, "fallback");
  cpu::GeneratedModel gen = cpu::generateModel(*b.model, {});
  ASSERT_EQ(gen.report.hostSteps.size(), 1u);  // ReduceSum over constant axes compiles (reduce_mapped)
  EXPECT_EQ(gen.report.hostSteps[0].op, "Softplus");
  EXPECT_NE(gen.report.hostSteps[0].reason.find("no compiled kernel for Softplus"), std::string::npos)
      << gen.report.hostSteps[0].reason;
  // --no-host-fallback: the same model is refused, naming the node and the reason.
  cpu::CompileOptions strict;
  strict.hostFallback = false;
  try {
    cpu::generateModel(*b.model, strict);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--no-host-fallback"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(Softplus): no compiled kernel for Softplus"), std::string::npos) << e.what();
  }
}

/// Kernel names of a compiled library's steps, joined.
std::string stepKernels(const std::string& so) {
  std::string kernels;
  const cpu::CompiledModel model(so, 1);
  for (const cpu::CompiledStepInfo& s : model.steps()) kernels += s.kernel + " ";
  return kernels;
}

// --isa avx2 and --isa avx512 build both kernel paths on one machine; each matches the interpreter, the
// library and the report say which it is, and the AVX-512-only conv kernel is chosen only for avx512.
TEST(CpuCodegen, IsaAvx2AndAvx512BothMatchTheInterpreter) {
  auto build = [] {
    auto b = std::make_unique<Builder>();
    Value* x = b->input("x", {1, 32, 14, 14});
    Value* c = b->node("Relu", {b->conv(x, 32, 24, 3, 2, {1, 1, 1, 1})});  // K = 288 on a 7x7 map: pixel tile
    Value* dw = b->node("Sigmoid", {b->conv(c, 24, 24, 3, 1, {1, 1, 1, 1}, 24)});
    b->g.addOutput(b->conv(dw, 24, 40, 1, 1, {0, 0, 0, 0}));
    return b;
  };
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  for (const std::string isa : {"avx2", "avx512"}) {
    cpu::CompileOptions options;
    options.isa = isa;
    auto b = build();
    if (isa == "avx512" && !avx512) {
      cpu::prepareModel(*b->model, {});
      EXPECT_THROW(cpu::compileSharedLibrary(*b->model, (tempDir() / "isa.so").string(), options), UserError);
      continue;
    }
    cpu::CompileReport report = expectCompiledMatchesInterpreter(*b, "isa_" + isa, 1, {}, options);
    EXPECT_EQ(report.isa, isa);
    const std::string so = (tempDir() / ("isa_" + isa + ".so")).string();
    EXPECT_EQ(cpu::CompiledModel(so, 1).isa(), isa);
    EXPECT_EQ(stepKernels(so).find("pixel_tile") != std::string::npos, isa == "avx512") << stepKernels(so);
  }
  cpu::CompileOptions bad;
  bad.isa = "avx3";
  auto b = build();
  EXPECT_THROW(cpu::prepareModel(*b->model, bad), UserError);
}

// A Pad of nothing (PyTorch's export of DenseNet's transition pooling) shares its input's storage: no
// kernel call, outputs still those of the interpreter; a real Pad still pads.
TEST(CpuCodegen, ZeroPadIsNoKernelCall) {
  auto build = [](std::vector<int64_t> pads) {
    auto b = std::make_unique<Builder>();
    Value* x = b->input("x", {1, 8, 12, 12});
    Value* c = b->node("Relu", {b->conv(x, 8, 8, 1, 1, {0, 0, 0, 0})});
    Value* p = b->node("Pad", {c, b->g.addConstant(b->g.uniqueName("pads"), Tensor::fromVector<int64_t>({8}, pads))},
                       {{"mode", std::string("constant")}});
    b->g.addOutput(b->node("AveragePool", {p}, {{"kernel_shape", std::vector<int64_t>{2, 2}},
                                                {"strides", std::vector<int64_t>{2, 2}}}));
    return b;
  };
  auto zero = build({0, 0, 0, 0, 0, 0, 0, 0});
  expectCompiledMatchesInterpreter(*zero, "zero_pad");
  EXPECT_EQ(stepKernels((tempDir() / "zero_pad.so").string()).find("pad"), std::string::npos)
      << stepKernels((tempDir() / "zero_pad.so").string());
  auto real = build({0, 0, 1, 1, 0, 0, 1, 1});
  expectCompiledMatchesInterpreter(*real, "real_pad");
  EXPECT_NE(stepKernels((tempDir() / "real_pad.so").string()).find("pad"), std::string::npos);
}

// DenseNet's pre-activation: BatchNormalization -> Relu -> conv is one channel_affine pass before the conv; a
// BatchNormalization whose output has two users keeps its activation separate.
TEST(CpuCodegen, BatchNormAndItsActivationAreOnePass) {
  Builder b;
  Value* x = b.input("x", {1, 16, 9, 11});
  Value* r = b.node("Relu", {b.batchNorm(x, 16)});
  b.g.addOutput(b.conv(r, 16, 8, 1, 1, {0, 0, 0, 0}));
  Value* bn2 = b.batchNorm(x, 16);
  b.g.addOutput(b.node("Sigmoid", {bn2}));
  b.g.addOutput(b.node("Add", {bn2, x}));
  cpu::CompileOptions nchw;
  nchw.layout = "nchw";  // blocked, the Relu would join the conv's NCHWc8 region
  expectCompiledMatchesInterpreter(b, "bn_act", 1, {}, nchw);
  const cpu::CompiledModel model((tempDir() / "bn_act.so").string(), 1);
  int fused = 0, plain = 0;
  for (const cpu::CompiledStepInfo& s : model.steps()) {
    fused += s.op == "BatchNormalization+Relu" && s.kernel == "channel_affine";
    plain += s.op == "BatchNormalization" && s.kernel == "channel_affine";
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(plain, 1);
}

TEST(CpuCodegen, DriverErrorsAreUserErrors) {
  Builder b;
  b.g.addOutput(b.node("Relu", {b.input("x", {4})}));
  cpu::prepareModel(*b.model);
  cpu::CompileOptions badMarch;
  badMarch.march = "no-such-cpu";
  EXPECT_THROW(cpu::compileSharedLibrary(*b.model, (tempDir() / "m.so").string(), badMarch), UserError);
  cpu::CompileOptions badCxx;
  badCxx.cxx = "/nonexistent/c++";
  EXPECT_THROW(cpu::compileSharedLibrary(*b.model, (tempDir() / "m.so").string(), badCxx), UserError);
  EXPECT_THROW(cpu::compileSharedLibrary(*b.model, "/nonexistent-dir/m.so", {}), UserError);
  EXPECT_THROW(cpu::CompiledModel("/nonexistent.so", 1), UserError);
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

TEST(CpuCodegen, TuningFileReplaysChoicesAndRejectsOtherModels) {
  auto build = [](int64_t channels) {
    auto b = std::make_unique<Builder>();
    Value* x = b->input("x", {1, channels, 12, 12});
    b->g.addOutput(b->node("Relu", {b->conv(x, channels, 8, 3, 1, {1, 1, 1, 1})}));
    cpu::prepareModel(*b->model);
    return b;
  };
  auto model = build(8);
  fs::path file = tempDir() / "tune.json";
  cpu::CompileOptions tune;
  tune.tune = true;
  tune.tuningFile = file.string();
  cpu::GeneratedModel tuned = cpu::generateModel(*model->model, tune);
  ASSERT_TRUE(fs::exists(file));
  cpu::CompileOptions replay;
  replay.tuningFile = file.string();
  // Replaying gives the tuned program (kernel names are part of the hashed code).
  EXPECT_EQ(cpu::generateModel(*model->model, replay).report.hash, tuned.report.hash);
  auto other = build(16);
  EXPECT_THROW(cpu::generateModel(*other->model, replay), UserError);
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

/// The runtime functions the generated code of a compiled model calls, one per step (the profiler's table).
std::vector<std::string> stepKernels(const fs::path& so) {
  cpu::CompiledModel m(so.string(), 1);
  std::vector<std::string> kernels;
  for (const auto& step : m.steps()) kernels.push_back(step.kernel);
  return kernels;
}

bool calls(const std::vector<std::string>& kernels, const std::string& k) {
  return std::find(kernels.begin(), kernels.end(), k) != kernels.end();
}

// A pre-norm transformer block as exporters write it (LayerNorm decomposed into ReduceMean/Sub/Pow/...,
// attention as MatMul/Div/Softmax/MatMul, Erf GELU): the cpu pipeline recognises the patterns and the
// code generator calls the LayerNorm, attention, batched MatMul, Transpose and Split kernels; nothing
// runs through the host interpreter.
TEST(CpuCodegen, TransformerBlockCompilesWithoutFallbacks) {
  Builder b;
  const int64_t T = 7, D = 12, H = 2, dh = D / H;
  Value* x = b.input("x", {1, T, D});
  auto layerNorm = [&](Value* v) {
    Value* mean = b.node("ReduceMean", {v}, {{"axes", std::vector<int64_t>{-1}}});
    Value* centered = b.node("Sub", {v, mean});
    Value* sq = b.node("Pow", {centered, b.g.addConstant(b.g.uniqueName("two"), Tensor::scalar(2.0f))});
    Value* var = b.node("ReduceMean", {sq}, {{"axes", std::vector<int64_t>{-1}}});
    Value* den = b.node("Sqrt", {b.node("Add", {var, b.g.addConstant(b.g.uniqueName("eps"), Tensor::scalar(1e-5f))})});
    Value* normed = b.node("Div", {centered, den});
    return b.node("Add", {b.node("Mul", {normed, b.weight(b.g.uniqueName("gamma"), {D}, 0.5f, 1.5f)}),
                          b.weight(b.g.uniqueName("beta"), {D})});
  };
  auto shapeConst = [&](std::vector<int64_t> dims) {
    return b.g.addConstant(b.g.uniqueName("shape"), Tensor::fromVector<int64_t>({static_cast<int64_t>(dims.size())}, dims));
  };
  Value* h1 = layerNorm(x);
  Value* qkv = b.node("Add", {b.node("MatMul", {h1, b.weight("wqkv", {D, 3 * D})}), b.weight("bqkv", {3 * D})});
  Node* split = b.g.addNode("Split", {qkv}, {"q", "k", "v"}, "split");
  split->setAttr("axis", int64_t{2});
  split->setAttr("split", std::vector<int64_t>{D, D, D});  // opset 13 takes the sizes as an input; 11 style here
  b.model->opsetImports[""] = 11;
  auto heads = [&](Value* v, std::vector<int64_t> perm) {
    return b.node("Transpose", {b.node("Reshape", {v, shapeConst({1, T, H, dh})})}, {{"perm", perm}});
  };
  Value* q = heads(split->output(0), {0, 2, 1, 3});
  Value* kt = heads(split->output(1), {0, 2, 3, 1});
  Value* v = heads(split->output(2), {0, 2, 1, 3});
  Value* scores = b.node("Div", {b.node("MatMul", {q, kt}), b.g.addConstant("sqrt_dh", Tensor::scalar(std::sqrt(float(dh))))});
  Value* ctx = b.node("MatMul", {b.node("Softmax", {scores}, {{"axis", int64_t{-1}}}), v});
  Value* merged = b.node("Reshape", {b.node("Transpose", {ctx}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}), shapeConst({1, T, D})});
  Value* x2 = b.node("Add", {x, b.node("MatMul", {merged, b.weight("wo", {D, D})})});
  Value* h2 = layerNorm(x2);
  Value* f = b.node("MatMul", {h2, b.weight("w1", {D, 2 * D})});
  Value* gelu = b.node("Mul", {b.node("Mul", {f, b.g.addConstant("half", Tensor::scalar(0.5f))}),
                               b.node("Add", {b.node("Erf", {b.node("Div", {f, b.g.addConstant("sqrt2", Tensor::scalar(std::sqrt(2.0f)))})}),
                                              b.g.addConstant("one", Tensor::scalar(1.0f))})});
  b.g.addOutput(b.node("Add", {x2, b.node("MatMul", {gelu, b.weight("w2", {2 * D, D})})}));
  cpu::CompileReport report = expectCompiledMatchesInterpreter(b, "transformer_block", 2);
  EXPECT_TRUE(report.fallbackNodes.empty()) << report.fallbackNodes.size() << " node(s) through the interpreter";
  const auto kernels = stepKernels(tempDir() / "transformer_block.so");
  for (const char* k : {"layer_norm", "attention", "transpose", "sgemm_packed_b"})
    EXPECT_TRUE(calls(kernels, k)) << "no call of " << k;
}

// MatMul of two computed operands with numpy batch broadcasting ([2, 3, 4, 5] x [3, 5, 6], a 1-D right
// operand), LayerNormalization over two trailing axes, and Split along the last axis (rows copied) and
// along the first (slices, no copy).
TEST(CpuCodegen, BatchedMatMulLayerNormSplitTranspose) {
  Builder b;
  b.model->opsetImports[""] = 17;
  Value* a = b.input("a", {2, 3, 4, 5});
  Value* m = b.node("MatMul", {a, b.input("b", {3, 5, 6})});
  Value* v = b.node("MatMul", {a, b.input("c", {5})});  // [2, 3, 4]
  Node* ln = b.g.addNode("LayerNormalization", {m, b.weight("g", {4, 6}), b.weight("be", {4, 6})}, {"ln"}, "ln");
  ln->setAttr("axis", int64_t{-2});
  Node* split = b.g.addNode("Split", {ln->output(0), b.g.addConstant("sizes", Tensor::fromVector<int64_t>({2}, {2, 4}))},
                            {"s0", "s1"}, "split_last");
  split->setAttr("axis", int64_t{-1});
  Node* split0 = b.g.addNode("Split", {b.node("Relu", {v}), b.g.addConstant("halves", Tensor::fromVector<int64_t>({2}, {1, 1}))},
                             {"h0", "h1"}, "split_first");
  split0->setAttr("axis", int64_t{0});
  b.g.addOutput(b.node("Transpose", {split->output(0)}, {{"perm", std::vector<int64_t>{3, 1, 0, 2}}}));
  b.g.addOutput(b.node("Sigmoid", {split->output(1)}));
  b.g.addOutput(b.node("Add", {split0->output(0), split0->output(1)}));
  cpu::CompileReport report = expectCompiledMatchesInterpreter(b, "batched_matmul", 2);
  EXPECT_TRUE(report.fallbackNodes.empty());
  EXPECT_TRUE(calls(stepKernels(tempDir() / "batched_matmul.so"), "matmul_batched"));
}

// Element-wise chains become one generated loop (tails of 1-7 floats, a scalar input, in place), and a
// chain the loop cannot express (a per-channel input) still compiles node by node.
TEST(CpuCodegen, FusedElementwiseChainsAreOneLoop) {
  Builder b;
  Value* x = b.input("x", {3, 37});   // 111 floats: a masked tail
  Value* y = b.input("y", {3, 37});
  Value* s = b.input("s", {1});
  Value* t = b.node("Tanh", {b.node("Add", {b.node("Mul", {x, y}), s})});
  Value* u = b.node("Clip", {b.node("Sub", {t, b.node("Exp", {y})}), b.g.addConstant("lo", Tensor::scalar(-0.5f)),
                             b.g.addConstant("hi", Tensor::scalar(2.0f))});
  b.g.addOutput(b.node("Sigmoid", {b.node("Pow", {u, b.g.addConstant("two", Tensor::scalar(2.0f))})}));
  Value* c = b.input("c", {2, 4, 5});
  b.g.addOutput(b.node("Relu", {b.node("Mul", {c, b.weight("perchannel", {4, 1})})}));
  cpu::CompileReport report = expectCompiledMatchesInterpreter(b, "fused_elementwise", 2);
  EXPECT_TRUE(report.fallbackNodes.empty());
  const auto kernels = stepKernels(tempDir() / "fused_elementwise.so");
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "fused_loop"), 1);
}

// Nodes the kernels do not cover (weights computed at run time) compile through the host interpreter
// instead of failing the compile; a dilated pool, which the 2-D kernels do not cover, is rt::pool_nd.
TEST(CpuCodegen, UncoveredConvPoolAndBatchNormFallBack) {
  Builder b;
  Value* x = b.input("x", {1, 3, 9, 9});
  Value* w = b.node("Relu", {b.input("w", {4, 3, 3, 3})});  // computed weights
  Value* c = b.node("Conv", {x, w}, {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  Value* p = b.node("MaxPool", {c}, {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"dilations", std::vector<int64_t>{2, 2}}});
  b.g.addOutput(b.node("Relu", {p}));
  cpu::CompileReport report = expectCompiledMatchesInterpreter(b, "uncovered");
  EXPECT_EQ(report.fallbackNodes.size(), 1u);  // the Conv
  const auto kernels = stepKernels(tempDir() / "uncovered.so");
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "pool_nd"), 1);
}

// Tensors of other element types: int64 token ids through an embedding Gather, an int64 padding mask
// turned into a bool (Equal) and a float bias (Where, Expand, Cast), a strided and a contiguous Slice, an
// int64 CumSum as a generated loop; an out-of-range id is one error naming the
// Gather node.
TEST(CpuCodegen, IntegerAndBoolTensorsCompile) {
  Builder b;
  b.model->opsetImports[""] = 13;
  const int64_t T = 6, V = 11, D = 8;
  Value* ids = b.g.addInput("ids", TensorType::fromShape(DType::Int64, {1, T}));
  Value* mask = b.g.addInput("mask", TensorType::fromShape(DType::Int64, {1, T}));
  Value* emb = b.node("Gather", {b.weight("table", {V, D}), ids}, {{"axis", int64_t{0}}});  // [1, T, D]
  Value* pad = b.node("Equal", {mask, b.g.addConstant("zero", Tensor::fromVector<int64_t>({}, {0}))});
  Value* bias = b.node("Where", {pad, b.g.addConstant("neg", Tensor::scalar(-100.0f)), b.g.addConstant("nil", Tensor::scalar(0.0f))});
  Value* wide = b.node("Expand", {b.node("Unsqueeze", {bias, b.g.addConstant("ax", Tensor::fromVector<int64_t>({1}, {2}))}),
                                  b.g.addConstant("to", Tensor::fromVector<int64_t>({3}, {1, T, D}))});
  Value* masked = b.node("Add", {emb, wide});
  Value* sum = b.node("CumSum", {mask, b.g.addConstant("axis1", Tensor::fromVector<int64_t>({}, {1}))});
  Value* pos = b.node("Cast", {sum}, {{"to", int64_t{1}}});
  auto slice = [&](Value* x, std::vector<int64_t> st, std::vector<int64_t> en, std::vector<int64_t> ax, std::vector<int64_t> sp) {
    auto c = [&](const std::vector<int64_t>& v) {
      return b.g.addConstant(b.g.uniqueName("sl"), Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v));
    };
    return b.node("Slice", {x, c(st), c(en), c(ax), c(sp)});
  };
  b.g.addOutput(slice(masked, {1, 7}, {T, 0}, {1, 2}, {2, -3}));   // strided, a negative step
  b.g.addOutput(b.node("Relu", {slice(masked, {0}, {1}, {0}, {1})})); // the whole block: an alias
  b.g.addOutput(pos);
  std::map<std::string, Tensor> given = {{"ids", Tensor::fromVector<int64_t>({1, T}, {3, 0, 10, -1, 7, 3})},
                                         {"mask", Tensor::fromVector<int64_t>({1, T}, {1, 1, 1, 1, 0, 0})}};
  cpu::CompileReport report = expectCompiledMatchesInterpreter(b, "typed", 2, given);
  EXPECT_TRUE(report.hostSteps.empty());  // CumSum over a constant axis is a generated loop (cum_sum)
  const auto kernels = stepKernels(tempDir() / "typed.so");
  for (const char* k : {"gather", "broadcast_loop", "cast_copy", "strided_copy", "cum_sum"})
    EXPECT_TRUE(calls(kernels, k)) << k;
  cpu::CompiledModel compiled((tempDir() / "typed.so").string(), 1);
  given["ids"] = Tensor::fromVector<int64_t>({1, T}, {3, 0, 11, 1, 7, 3});
  try {
    compiled.run(given);
    ADD_FAILURE() << "an out-of-range id ran";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("Gather"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

// --layout nchwc8: select-layout's blocked regions run the NCHWc8 kernels (1x1 and depthwise direct
// convs with a residual, max pooling, channel Concat in place, element-wise ops and a fused loop on the
// blocked buffers) with reorders on the region edges: from the NCHW input, to an NCHW consumer (Flatten
// + Gemm) and to a graph output; at 1 and 2 threads.
TEST(CpuCodegen, Nchwc8RegionsWithReordersOnTheirEdges) {
  for (int threads : {1, 2}) {
    Builder b;
    Value* x = b.input("x", {1, 16, 14, 13});
    Value* e = b.node("Clip", {b.conv(x, 16, 24, 1, 1, {0, 0, 0, 0}), b.g.addConstant("lo", Tensor::scalar(0.0f)),
                               b.g.addConstant("hi", Tensor::scalar(6.0f))});
    Value* d = b.node("Relu", {b.conv(e, 24, 24, 3, 2, {1, 1, 1, 1}, 24)});            // depthwise s2: 7x7
    Value* p = b.conv(d, 24, 24, 1, 1, {0, 0, 0, 0});
    Value* r = b.node("Add", {p, d});                                                    // residual
    Value* q = b.node("Mul", {b.node("Sigmoid", {r}), b.g.addConstant("k", Tensor::scalar(0.5f))});
    Value* cat = b.node("Concat", {q, r}, {{"axis", int64_t{1}}});                        // 48 channels
    Value* mp = b.node("MaxPool", {cat}, {{"kernel_shape", std::vector<int64_t>{3, 3}},
                                          {"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    Value* flat = b.node("Flatten", {mp}, {{"axis", int64_t{1}}});
    b.g.addOutput(b.node("Gemm", {flat, b.weight("fc", {5, 48 * 16}), b.weight("fcb", {5})}, {{"transB", int64_t{1}}}));
    b.g.addOutput(mp);
    cpu::CompileOptions options;
    options.layout = "nchwc8";
    const std::string name = "nchwc8_" + std::to_string(threads);
    expectCompiledMatchesInterpreter(b, name, threads, {}, options);
    const auto kernels = stepKernels(tempDir() / (name + ".so"));
    for (const char* k : {"reorder_nchw_to_nchwc8", "conv2d_nchwc8_direct_avx2", "conv2d_nchwc8_depthwise_avx2",
                          "maxpool2d_nchwc8", "reorder_nchwc8_to_nchw"})
      EXPECT_TRUE(calls(kernels, k)) << "no call of " << k;
    EXPECT_FALSE(calls(kernels, "conv2d_nchw_1x1_gemm_avx2"));
  }
}

// A per-channel constant inside a fused element-wise chain (fuse-elementwise moves it into the body) cannot run on
// a blocked buffer: the chain's code reads it at NCHW positions. Random graph 426 of the CPU test: a depthwise conv
// whose output feeds Add(conv, c[8,1,1]) and Add(conv, that); select-layout had put the fused chain in the conv's
// NCHWc8 region and the chain added c per NCHW plane to the blocked buffer.
TEST(CpuCodegen, Nchwc8RegionsLeaveChainsWithPerChannelConstantsInNchw) {
  for (const char* isa : {"avx2", "avx512"}) {
    if (std::string(isa) == "avx512" && !__builtin_cpu_supports("avx512f")) continue;
    Builder b;
    Value* x = b.input("x", {1, 8, 6, 7});
    Value* conv = b.conv(x, 8, 8, 3, 1, {0, 0, 0, 0}, 8);  // depthwise: NCHWc8 with both ISAs
    Value* biased = b.node("Add", {conv, b.weight("c", {8, 1, 1})});
    b.g.addOutput(b.node("Add", {conv, biased}));
    cpu::CompileOptions options;
    options.isa = isa;
    options.layout = "nchwc8";
    const std::string name = std::string("nchwc8_chain_constant_") + isa;
    expectCompiledMatchesInterpreter(b, name, 1, {}, options);
    const auto kernels = stepKernels(tempDir() / (name + ".so"));
    EXPECT_TRUE(calls(kernels, "conv2d_nchwc8_depthwise_avx2")) << "the conv left the NCHWc8 layout: nothing tested";
  }
}

// Squeeze-and-excitation inside an NCHWc8 region: the global pool reads the blocked value, the scale's
// 1x1 convs and Sigmoid run on [N, C, 1, 1] (whose blocked layout is its NCHW one) and the Mul by the
// per-image scale and an Add of a per-channel constant for both images run on the blocked buffer: batch 2,
// 1 and 2 threads, one reorder in and one per output.
TEST(CpuCodegen, Nchwc8RegionsKeepSqueezeExcitationBlocked) {
  for (int threads : {1, 2}) {
    Builder b;
    Value* x = b.input("x", {2, 16, 9, 11});
    Value* d = b.conv(b.conv(x, 16, 32, 1, 1, {0, 0, 0, 0}), 32, 32, 3, 1, {1, 1, 1, 1}, 32);
    Value* g = b.node("GlobalAveragePool", {d});
    Value* s = b.node("Sigmoid", {b.conv(b.node("Relu", {b.conv(g, 32, 8, 1, 1, {0, 0, 0, 0})}), 8, 32, 1, 1,
                                         {0, 0, 0, 0})});
    Value* scaled = b.node("Mul", {d, s});
    Value* m = b.node("Add", {b.weight("shift", {1, 32, 1, 1}), scaled});
    b.g.addOutput(b.conv(m, 32, 16, 1, 1, {0, 0, 0, 0}));
    b.g.addOutput(scaled);  // a second use: fuse-elementwise leaves Mul and Add two nodes
    cpu::CompileOptions options;
    options.layout = "nchwc8";
    const std::string name = "nchwc8_se_" + std::to_string(threads);
    expectCompiledMatchesInterpreter(b, name, threads, {}, options);
    const auto kernels = stepKernels(tempDir() / (name + ".so"));
    EXPECT_TRUE(calls(kernels, "global_avgpool_nchwc8"));
    EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "binary_channel_nchwc8"), 2);
    EXPECT_FALSE(calls(kernels, "binary_channel"));
    EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "reorder_nchw_to_nchwc8"), 1);
    EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "reorder_nchwc8_to_nchw"), 2);  // the two outputs
  }
}

// A 3x3 stem of a few input channels at the start of an NCHWc8 region reads the NCHW input and writes the
// blocked layout itself (conv2d_stem_nchwc8_avx2): no reorder into the region; odd sizes, stride 2 with
// asymmetric padding, batch 2, HardSwish (the buffered epilogue) and Clip (the assembly tail).
TEST(CpuCodegen, Nchwc8StemReadsTheNchwInput) {
  for (const char* act : {"HardSwish", "Relu"}) {
    Builder b;
    Value* x = b.input("x", {2, 3, 17, 20});
    Value* stem = b.node(act, {b.conv(x, 3, 24, 3, 2, {1, 0, 0, 1})});
    Value* d = b.conv(stem, 24, 24, 3, 1, {1, 1, 1, 1}, 24);
    b.g.addOutput(b.conv(d, 24, 16, 1, 1, {0, 0, 0, 0}));
    cpu::CompileOptions options;
    options.layout = "nchwc8";
    const std::string name = std::string("nchwc8_stem_") + act;
    expectCompiledMatchesInterpreter(b, name, 2, {}, options);
    const auto kernels = stepKernels(tempDir() / (name + ".so"));
    EXPECT_TRUE(calls(kernels, "conv2d_stem_nchwc8_avx2"));
    EXPECT_FALSE(calls(kernels, "reorder_nchw_to_nchwc8"));
  }
}

// Element-wise nodes inside an NCHWc8 region (a lone Div by a scalar, Neg, a Max of two blocked values)
// run their flat kernels on the blocked buffers: no reorder between the convs, results as the interpreter's.
TEST(CpuCodegen, Nchwc8RegionsRunElementwiseKernelsOnBlockedBuffers) {
  Builder b;
  Value* x = b.input("x", {1, 16, 10, 10});
  Value* d = b.node("Div", {b.conv(x, 16, 16, 1, 1, {0, 0, 0, 0}), b.g.addConstant("four", Tensor::scalar(4.0f))});
  Value* n = b.node("Neg", {b.conv(d, 16, 16, 3, 1, {1, 1, 1, 1}, 16)});
  b.g.addOutput(b.node("Max", {b.conv(n, 16, 16, 1, 1, {0, 0, 0, 0}), d}));
  cpu::CompileOptions options;
  options.layout = "nchwc8";
  expectCompiledMatchesInterpreter(b, "nchwc8_elementwise", 1, {}, options);
  const auto kernels = stepKernels(tempDir() / "nchwc8_elementwise.so");
  for (const char* k : {"binary_scalar", "unary", "binary_same", "conv2d_nchwc8_depthwise_avx2"})
    EXPECT_TRUE(calls(kernels, k)) << "no call of " << k;
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "reorder_nchw_to_nchwc8"), 1);
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "reorder_nchwc8_to_nchw"), 1);
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

/// x [2, 3] -> Loop (4 trips: h = tanh(h W + relu(x)), the sum also stacked as a scan output; W and relu(x)
/// captured from the main graph) -> If (sum of x > 0: sigmoid of the final h, else -x, both captured).
void buildLoopAndIf(Builder& b) {
  Value* x = b.input("x", {2, 3});
  b.weight("w", {3, 3});
  Value* rx = b.node("Relu", {x});
  auto body = std::make_shared<Graph>("body");
  body->setParent(&b.g);
  body->addInput("i", TensorType::fromShape(DType::Int64, {}));
  Value* cond = body->addInput("c", TensorType::fromShape(DType::Bool, {}));
  Value* h = body->addInput("h", TensorType());  // typed by inference from the Loop's input
  Node* mm = body->addNode("MatMul", {h, body->addValue("w")}, {"hw"}, "mm");
  Node* add = body->addNode("Add", {mm->output(0), body->addValue(rx->name())}, {"pre"}, "add");
  Node* next = body->addNode("Tanh", {add->output(0)}, {"h_next"}, "tanh");
  body->addOutput(body->addNode("Identity", {cond}, {"c_out"}, "keep")->output(0));
  body->addOutput(next->output(0));
  body->addOutput(add->output(0));  // scan output
  Node* loop = b.g.addNode("Loop", {b.g.addConstant("M", Tensor::fromVector<int64_t>({}, {4})), nullptr, x},
                           {"h_final", "pre_all"}, "loop");
  loop->setAttr("body", body);
  Value* sum = b.node("ReduceSum", {x}, {{"keepdims", int64_t{0}}});
  Value* positive = b.node("Greater", {sum, b.g.addConstant("zero", Tensor::scalar(0.0f))});
  auto thenG = std::make_shared<Graph>("then");
  thenG->setParent(&b.g);
  thenG->addOutput(thenG->addNode("Sigmoid", {thenG->addValue("h_final")}, {"t"}, "sigmoid")->output(0));
  auto elseG = std::make_shared<Graph>("else");
  elseG->setParent(&b.g);
  elseG->addOutput(elseG->addNode("Neg", {elseG->addValue("x")}, {"e"}, "neg")->output(0));
  Node* branch = b.g.addNode("If", {positive}, {"y"}, "branch");
  branch->setAttr("then_branch", thenG);
  branch->setAttr("else_branch", elseG);
  b.g.addOutput(branch->output(0));
  b.g.addOutput(loop->output(1));
}

// If and Loop compile to C++ control flow around their bodies' steps: no host step, both branches and
// the loop's carried value and scan output match the interpreter; --no-host-fallback accepts the model.
TEST(CpuCodegen, LoopAndIfCompileWithoutHostSteps) {
  for (float sign : {1.0f, -1.0f}) {
    Builder b;
    buildLoopAndIf(b);
    Tensor x = randomTensor({2, 3}, 7, 0.1f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= sign;
    cpu::CompileOptions strict;
    strict.hostFallback = false;
    const std::string name = sign > 0 ? "loop_if_then" : "loop_if_else";
    cpu::CompileReport report = expectCompiledMatchesInterpreter(b, name, 1, {{"x", x}}, strict);
    EXPECT_TRUE(report.hostSteps.empty());
    const auto kernels = stepKernels(tempDir() / (name + ".so"));
    for (const char* k : {"for", "if", "else", "reduce_mapped"}) EXPECT_TRUE(calls(kernels, k)) << k;
  }
}

// Bodies are typed before any pass: the captured values and the loop-carried input take their outer types,
// and the verifier names a captured value whose type disagrees with its definition.
TEST(CpuCodegen, NestedGraphsAreTypedAndVerified) {
  Builder b;
  buildLoopAndIf(b);
  inferShapes(*b.model->graph);
  const Graph& body = b.model->graph->findNode("loop")->attrGraph("body");
  EXPECT_EQ(body.findValue("h")->type.toString(), "f32[2,3]");
  EXPECT_EQ(body.findValue("w")->type.toString(), "f32[3,3]");
  EXPECT_EQ(body.findValue("h_next")->type.toString(), "f32[2,3]");
  EXPECT_EQ(b.model->graph->findValue("pre_all")->type.toString(), "f32[4,2,3]");
  EXPECT_EQ(b.model->graph->findValue("y")->type.toString(), "f32[2,3]");
  EXPECT_TRUE(verifyGraph(*b.model->graph).empty());
  const_cast<Graph&>(body).findValue("w")->type = TensorType::fromShape(DType::Int64, {3, 3});
  const std::vector<std::string> problems = verifyGraph(*b.model->graph);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("captured value 'w' is i64[3,3] here but f32[3,3]"), std::string::npos) << problems[0];
}

}  // namespace
}  // namespace tessel
