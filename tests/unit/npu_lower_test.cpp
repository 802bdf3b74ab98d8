// Tests of the NPU lowering: small graphs of every op family lowered, run on the simulator and compared
// with the reference interpreter, with the default and the tiny configuration (forced tiling); hazards,
// capacity and the hazard checker catching a removed dependency.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "tessel/hw/hardware_config.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/schedule.h"

#include "npu_test_util.h"
#include "targets/npu/schedule/tiling_cost.h"

namespace {

using namespace tessel;

hw::HardwareConfig config(const std::string& name) { return test::shippedConfig(name); }
using test::randomTensor;


using test::maxAbsDiff;

/// Lowers `g` (every node on the NPU) for the config, with the compiler's schedule or the one `edit` makes of
/// it, runs it and checks it against the interpreter.
npu::SimReport checkAgainstInterpreter(const Graph& g, const std::string& cfgName,
                                       const std::function<void(npu::NpuSchedule&)>& edit = nullptr) {
  hw::HardwareConfig cfg = config(cfgName);
  const hw::Device& npu = *cfg.firstNpu();
  for (const auto& n : g.nodes()) {
    hw::SupportResult r = npu::loweringSupport(*n, npu);
    EXPECT_TRUE(r.supported) << n->describe() << ": " << r.reason;
  }
  npu::LoweredSubgraph lowered;
  if (edit) {
    npu::NpuSchedule schedule = npu::compilerSchedule(g, npu.npu, "test", false);
    edit(schedule);
    npu::verifySchedule(schedule, g, npu.npu);
    lowered = npu::lowerSubgraph(g, npu, schedule);
  } else {
    lowered = npu::lowerSubgraph(g, npu, "test");
  }
  std::vector<Tensor> inputs;
  std::map<std::string, Tensor> named;
  uint32_t seed = 11;
  for (const Value* in : g.inputs()) {
    inputs.push_back(randomTensor(in->type.staticShape(), seed++));
    named[in->name()] = inputs.back();
  }
  npu::NpuRun run = npu::runLowered(lowered, npu.npu, inputs);
  std::vector<Tensor> want = Interpreter(g).run(named);
  EXPECT_EQ(run.outputs.size(), want.size());
  for (size_t i = 0; i < want.size() && i < run.outputs.size(); ++i) {
    EXPECT_EQ(run.outputs[i].shape(), want[i].shape());
    float scale = 0, diff = maxAbsDiff(run.outputs[i], want[i], &scale);
    EXPECT_LE(diff, 1e-4f * std::max(scale, 1e-6f)) << cfgName << " output " << i << " differs by " << diff;
  }
  EXPECT_TRUE(run.report.hazards.empty()) << cfgName << ": " << run.report.hazards.front().describe();
  for (size_t b = 0; b < npu::kNumBuffers; ++b) EXPECT_LE(run.report.peakSramBytes[b], run.report.capacityBytes[b]);
  // The lower bounds (resource and critical path, accumulating Gemm chains included) never exceed the
  // simulated cycles, and the simulation stays within the list-schedule factor of them.
  uint64_t lb = run.report.bounds.bound();
  EXPECT_GE(run.report.totalCycles, lb) << run.report.toJson()["lower_bounds"].dump();
  EXPECT_LE(run.report.totalCycles, 5 * lb) << run.report.toJson()["lower_bounds"].dump();
  return run.report;
}

using GraphBuilder = std::function<void(Graph&)>;

void checkBoth(const GraphBuilder& build) {
  for (const char* cfg : {"default.json", "tiny.json"}) {
    Graph g;
    build(g);
    inferShapes(g);
    checkAgainstInterpreter(g, cfg);
  }
}

Value* conv(Graph& g, Value* x, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad, int64_t group,
            bool bias, uint32_t seed) {
  Value* w = g.addConstant(g.uniqueName("w"), randomTensor({cout, cin / group, k, k}, seed));
  std::vector<Value*> ins{x, w};
  if (bias) ins.push_back(g.addConstant(g.uniqueName("b"), randomTensor({cout}, seed + 1)));
  Node* n = g.addNode("Conv", ins, {g.uniqueName("y")});
  n->setAttr("group", group);
  n->setAttr("strides", std::vector<int64_t>{stride, stride});
  n->setAttr("pads", std::vector<int64_t>{pad, pad, pad, pad});
  n->setAttr("kernel_shape", std::vector<int64_t>{k, k});
  return n->output(0);
}

Value* constInts(Graph& g, const std::vector<int64_t>& v) {
  return g.addConstant(g.uniqueName("i"), Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

TEST(NpuLower, ConvPlainStridedPaddedWithBiasAndFusedRelu) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 20, 23, 19}));
    Value* y = conv(g, x, 20, 37, 3, 2, 1, 1, true, 1);
    y = g.addNode("Relu", {y}, {"r"})->output(0);
    g.addOutput(y);
  });
}

TEST(NpuLower, Conv7x7Stride2And1x1) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 3, 30, 30}));
    Value* y = conv(g, x, 3, 8, 7, 2, 3, 1, true, 2);
    y = conv(g, y, 8, 40, 1, 1, 0, 1, false, 3);
    g.addOutput(y);
  });
}

// Few input channels: every reduction layout (per tap, packed per kernel row, stacked kernel rows), unphased and
// split into stride phases, on odd tiles that cut the padding, with dilation and asymmetric strides.
TEST(NpuLower, FewChannelConvInEveryReductionLayout) {
  struct Case { int64_t c, m, h, w, k, sh, sw, pad, dil; };
  for (const Case& k : {Case{3, 20, 31, 29, 7, 2, 2, 3, 1}, Case{3, 64, 23, 25, 3, 2, 2, 1, 1}, Case{5, 17, 19, 18, 5, 1, 1, 2, 1},
                        Case{2, 9, 17, 21, 3, 2, 1, 2, 2}, Case{1, 16, 12, 13, 4, 3, 2, 1, 1}})
    for (const char* variant : {"matrix", "packed", "stacked"})
      for (bool phased : {false, true}) {
        if (phased && k.sh == 1 && k.sw == 1) continue;
        if (std::string(variant) != "matrix" && k.dil != 1) continue;  // packed layouts need unit column dilation
        for (const char* cfgName : {"default.json", "tiny.json"}) {
          SCOPED_TRACE(fmt::format("{}x{} conv C={} stride {}x{} dilation {}, {}{}, {}", k.k, k.k, k.c, k.sh, k.sw, k.dil, variant,
                                   phased ? " phased" : "", cfgName));
          Graph g;
          Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, k.c, k.h, k.w}));
          Value* w = g.addConstant("w", randomTensor({k.m, k.c, k.k, k.k}, 3));
          Node* n = g.addNode("Conv", {x, w, g.addConstant("b", randomTensor({k.m}, 4))}, {"y"});
          n->setAttr("strides", std::vector<int64_t>{k.sh, k.sw});
          n->setAttr("dilations", std::vector<int64_t>{k.dil, k.dil});
          n->setAttr("pads", std::vector<int64_t>{k.pad, k.pad, k.pad, k.pad});
          n->setAttr("kernel_shape", std::vector<int64_t>{k.k, k.k});
          Node* r = g.addNode("Relu", {n->output(0)}, {"r"});
          g.addOutput(r->output(0));
          inferShapes(g);
          checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
            ASSERT_NE(s.tilingOf(n->name()), nullptr);
            npu::NodeTiling& t = *s.tilingOf(n->name());
            t.variant = variant, t.phased = phased;
            t.rows = 3, t.cols = 5, t.channels = std::min<int64_t>(16, k.m), t.inChannels = k.c, t.coutPerPass = k.m;
            t.weightsResident = std::string(cfgName) == "default.json";  // tiny: streamed, in slices
          });
        }
      }
}

// Pools with their windows in the input buffer ("pool") and in the accumulator ("pool-wide"), on odd tiles.
TEST(NpuLower, PoolWindowsInEitherBuffer) {
  for (const char* op : {"MaxPool", "AveragePool"})
    for (const char* variant : {"pool", "pool-wide"})
      for (const char* cfgName : {"default.json", "tiny.json"}) {
        SCOPED_TRACE(fmt::format("{} {} {}", op, variant, cfgName));
        Graph g;
        Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 21, 17, 15}));
        Node* p = g.addNode(op, {x}, {"p"});
        p->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
        p->setAttr("strides", std::vector<int64_t>{2, 2});
        p->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
        if (std::string(op) == "AveragePool") p->setAttr("count_include_pad", int64_t{1});
        g.addOutput(p->output(0));
        inferShapes(g);
        checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
          ASSERT_NE(s.tilingOf("p"), nullptr);
          npu::NodeTiling& t = *s.tilingOf("p");
          t.variant = variant, t.rows = 3, t.cols = 4, t.channels = 16;
        });
      }
}

// Reductions over the contiguous axis and element-wise ops with one value per row, on the vector unit (lower_norm.cpp):
// a LayerNorm left decomposed (ReduceMean, Sub, Pow 2, ReduceMean, Add, Sqrt, Div: the Add and Sqrt fused into the
// reduction), rows of 37 (two vectors and a remainder of 5), ReduceSum without keepdims (each tile's values spanning
// rows of a rank-2 result), ReduceMax by attribute, a map's mean over its channels (a spatial-attention gate) multiplying
// the map, a per-row operand first in a Sub and a Div, Pow by 1, 0.5 and -0.5, RMSNorm as torch exports it (a scalar
// constant divided by a tensor: 1 / Sqrt(...), and -7 / it).
TEST(NpuLower, RowReductionsAndRowBroadcasts) {
  checkBoth([](Graph& g) {
    auto mean = [&](Value* v, const char* name, int64_t axis, int64_t keep) {
      Node* r = g.addNode("ReduceMean", {v}, {name});
      r->setAttr("axes", std::vector<int64_t>{axis});
      r->setAttr("keepdims", keep);
      return r->output(0);
    };
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {3, 5, 37}));
    Value* d = g.addNode("Sub", {x, mean(x, "m", -1, 1)}, {"d"})->output(0);
    Value* sq = g.addNode("Pow", {d, g.addConstant("two", Tensor::scalar(2.0f))}, {"sq"})->output(0);
    Value* var = g.addNode("Add", {mean(sq, "var", 2, 1), g.addConstant("eps", Tensor::scalar(1e-5f))}, {"ve"})->output(0);
    Value* sd = g.addNode("Sqrt", {var}, {"sd"})->output(0);
    g.addOutput(g.addNode("Div", {d, sd}, {"ln"})->output(0));
    // RMSNorm as torch exports rsqrt: x * (1 / Sqrt(mean(x * x) + eps)), the 1 / y a scalar constant divided by a tensor.
    Value* ms = mean(g.addNode("Mul", {x, x}, {"xx"})->output(0), "ms", -1, 1);
    Value* inv = g.addNode("Div", {g.addConstant("one", Tensor::scalar(1.0f)),
                                   g.addNode("Sqrt", {g.addNode("Add", {ms, g.addConstant("eps2", Tensor::scalar(1e-6f))}, {"mse"})->output(0)},
                                             {"rms"})->output(0)},
                           {"inv"})->output(0);
    g.addOutput(g.addNode("Mul", {x, inv}, {"rmsnorm"})->output(0));
    g.addOutput(g.addNode("Div", {g.addConstant("seven", Tensor::scalar(-7.0f)), sd}, {"neg"})->output(0));
    // Rows near -60 within +-0.01: the mean subtracted (the sums add each row minus its first element).
    Value* far = g.addNode("Add", {g.addNode("Mul", {x, g.addConstant("hundredth", Tensor::scalar(0.01f))}, {"small"})->output(0),
                                   g.addConstant("minus60", Tensor::scalar(-60.0f))},
                           {"far"})->output(0);
    g.addOutput(g.addNode("Sub", {far, mean(far, "farmean", -1, 1)}, {"centred"})->output(0));
    g.addOutput(g.addNode("ReduceSum", {far, constInts(g, {2})}, {"farsum"})->output(0));  // C x0 added back
    Node* sum = g.addNode("ReduceSum", {x, constInts(g, {-1})}, {"sum"});
    sum->setAttr("keepdims", int64_t{0});
    g.addOutput(sum->output(0));  // [3, 5]
    Node* mx = g.addNode("ReduceMax", {x}, {"mx"});
    mx->setAttr("axes", std::vector<int64_t>{2});
    g.addOutput(g.addNode("Sub", {mx->output(0), x}, {"below"})->output(0));  // the per-row operand first
    Value* pos = g.addNode("Add", {g.addNode("Relu", {x}, {"rx"})->output(0), g.addConstant("half", Tensor::scalar(0.5f))},
                           {"pos"})->output(0);
    for (float e : {1.0f, 0.5f, -0.5f}) {
      const std::string name = fmt::format("pow{}", e);
      g.addOutput(g.addNode("Pow", {pos, g.addConstant(name + "_e", Tensor::scalar(e))}, {name})->output(0));
    }
    // A map: the mean over its channels gates it; a rank-2 row max divides its rows.
    Value* z = g.addInput("z", TensorType::fromShape(DType::Float32, {1, 24, 5, 7}));
    Value* gate = g.addNode("Sigmoid", {mean(z, "cm", 1, 1)}, {"gate"})->output(0);  // [1, 1, 5, 7]
    g.addOutput(g.addNode("Mul", {z, gate}, {"gated"})->output(0));
    Value* v = g.addInput("v", TensorType::fromShape(DType::Float32, {6, 40}));
    Node* vm = g.addNode("ReduceMax", {v}, {"vm"});
    vm->setAttr("axes", std::vector<int64_t>{1});
    g.addOutput(g.addNode("Div", {vm->output(0), g.addNode("Add", {v, g.addConstant("three", Tensor::scalar(3.0f))}, {"v3"})->output(0)},
                          {"ratio"})->output(0));
  });
}

// An average's divisor where windows reach outside the image (count_include_pad=0) or past the padding (ceil_mode):
// one more scale per border row and column of a tile, on odd tiles of both variants, with asymmetric padding.
TEST(NpuLower, AverageDivisorsAtTheBorders) {
  for (int64_t include : {0, 1})
    for (int64_t ceil : {0, 1})
      for (const char* variant : {"pool", "pool-wide"}) {
        SCOPED_TRACE(fmt::format("count_include_pad {} ceil_mode {} {}", include, ceil, variant));
        Graph g;
        Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 19, 16, 13}));
        Node* p = g.addNode("AveragePool", {x}, {"p"});
        p->setAttr("kernel_shape", std::vector<int64_t>{3, 4});
        p->setAttr("strides", std::vector<int64_t>{2, 3});
        p->setAttr("pads", std::vector<int64_t>{1, 2, 0, 1});
        p->setAttr("count_include_pad", include);
        p->setAttr("ceil_mode", ceil);
        g.addOutput(p->output(0));
        inferShapes(g);
        checkAgainstInterpreter(g, "default.json", [&](npu::NpuSchedule& s) {
          ASSERT_NE(s.tilingOf("p"), nullptr);
          npu::NodeTiling& t = *s.tilingOf("p");
          t.variant = variant, t.rows = 3, t.cols = 2, t.channels = 16;
        });
      }
}

// An activation behind a max pool (pool-before-activation moves it there) is the pool's epilogue: applied to each
// result tile before the store, in both pool variants; and in a fused group on edge, where the pool's tiles feed
// the next convolution's window on chip.
TEST(NpuLower, ActivationBehindAPoolIsItsEpilogue) {
  auto build = [](Graph& g, const char* act) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 5, 23, 19}));
    Value* y = conv(g, x, 5, 18, 3, 1, 1, 1, true, 51);
    Node* p = g.addNode("MaxPool", {y}, {"p"}, "pool");
    p->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
    p->setAttr("strides", std::vector<int64_t>{2, 2});
    p->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
    std::vector<Value*> ins{p->output(0)};
    if (std::string(act) == "Clip") {
      ins.push_back(g.addConstant("lo", Tensor::scalar(-0.25f)));
      ins.push_back(g.addConstant("hi", Tensor::scalar(0.5f)));
    }
    Value* a = g.addNode(act, ins, {"a"}, "act")->output(0);
    g.addOutput(conv(g, a, 18, 7, 1, 1, 0, 1, true, 53));
    inferShapes(g);
  };
  for (const char* act : {"Relu", "Clip"})
    for (const char* variant : {"pool", "pool-wide"})
      for (const char* cfgName : {"default.json", "tiny.json"}) {
        SCOPED_TRACE(fmt::format("{} {} {}", act, variant, cfgName));
        Graph g;
        build(g, act);
        checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
          ASSERT_NE(s.tilingOf("pool"), nullptr);
          npu::NodeTiling& t = *s.tilingOf("pool");
          EXPECT_EQ(t.epilogue, std::vector<std::string>{"act"});
          t.variant = variant, t.rows = 3, t.cols = 4, t.channels = 16;
        });
      }
  Graph g;
  build(g, "Relu");
  const npu::SimReport r = checkAgainstInterpreter(g, "edge.json");
  (void)r;
}

TEST(NpuLower, GroupedAndDepthwiseConv) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 24, 14, 14}));
    Value* y = conv(g, x, 24, 24, 3, 1, 1, 24, true, 4);  // depthwise
    Node* clip = g.addNode("Clip", {y, g.addConstant("lo", Tensor::scalar(0.0f)), g.addConstant("hi", Tensor::scalar(0.5f))}, {"c"});
    y = conv(g, clip->output(0), 24, 36, 3, 2, 1, 3, true, 5);  // grouped, 8 in / 12 out per group
    y = conv(g, y, 36, 36, 5, 1, 2, 36, false, 6);              // depthwise 5x5 without bias
    g.addOutput(y);
  });
}

// Depthwise tiles on the matrix unit (block-diagonal gemms per tap, the bias as a one-row gemm), alone or sharing
// the tiles with the vector unit, with and without bias, strided and dilated, channel blocks wider than DIM and
// odd: every tile matches the interpreter.
TEST(NpuLower, DepthwiseTilesOnTheMatrixUnit) {
  struct Case { int64_t c, h, w, k, stride, dil; bool bias; };
  for (const Case& k : {Case{24, 13, 11, 3, 1, 1, true}, Case{40, 17, 15, 3, 2, 1, false}, Case{37, 9, 12, 5, 1, 2, true}})
    for (int64_t every : {1, 2, 3})
      for (int64_t channels : {int64_t{16}, std::min<int64_t>(k.c, 48)})
        for (const char* cfgName : {"default.json", "tiny.json"}) {
          SCOPED_TRACE(fmt::format("{}x{} depthwise C={} stride {} dilation {}{}, one tile in {} on MM, {} ch, {}", k.k, k.k, k.c,
                                   k.stride, k.dil, k.bias ? " bias" : "", every, channels, cfgName));
          Graph g;
          Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, k.c, k.h, k.w}));
          std::vector<Value*> ins{x, g.addConstant("w", randomTensor({k.c, 1, k.k, k.k}, 3))};
          if (k.bias) ins.push_back(g.addConstant("b", randomTensor({k.c}, 4)));
          Node* n = g.addNode("Conv", ins, {"y"});
          const int64_t pad = (k.k - 1) * k.dil / 2;
          n->setAttr("group", k.c);
          n->setAttr("strides", std::vector<int64_t>{k.stride, k.stride});
          n->setAttr("dilations", std::vector<int64_t>{k.dil, k.dil});
          n->setAttr("pads", std::vector<int64_t>{pad, pad, pad, pad});
          n->setAttr("kernel_shape", std::vector<int64_t>{k.k, k.k});
          Node* r = g.addNode("Relu", {n->output(0)}, {"r"});
          g.addOutput(r->output(0));
          inferShapes(g);
          auto edit = [&](npu::NpuSchedule& s) {
            ASSERT_NE(s.tilingOf("y"), nullptr);
            npu::NodeTiling& t = *s.tilingOf("y");
            t.variant = "vector", t.rows = 2, t.cols = 3, t.channels = channels, t.inChannels = channels, t.matrixEvery = every;
          };
          if (std::string(cfgName) == "tiny.json") {
            // tiny's weight buffer (2048 words) cannot hold the diagonal blocks: the schedule is refused, naming why.
            const hw::HardwareConfig cfg = config(cfgName);
            npu::NpuSchedule s = npu::compilerSchedule(g, cfg.firstNpu()->npu, "test", false);
            edit(s);
            EXPECT_THROW(
                try { npu::verifySchedule(s, g, cfg.firstNpu()->npu); } catch (const UserError& e) {
                  EXPECT_NE(std::string(e.what()).find("with matrix-unit tiles needs"), std::string::npos) << e.what();
                  throw;
                },
                UserError);
            continue;
          }
          const npu::SimReport report = checkAgainstInterpreter(g, cfgName, edit);
          // The matrix unit did work (a depthwise conv has no other use for it).
          EXPECT_GT(report.units[1].busyCycles, 0u);
        }
}

// A channel block loads the parameters of the units its tiles run on: the vector unit's per-tap weights and bias
// (9 x 16 + 16 words) only when one of its tiles runs there, the matrix unit's diagonal blocks, bias row and the
// word 1.0 (9 x 16 x 16 + 16 + 1 words) only when one runs there. With one tile per block (a 7x7 map, 64 channels in
// blocks of 16), one tile in `every` on the matrix unit puts 4 / every blocks there: the DRAM reads exceed those of
// the all-vector tiling by that many blocks' matrix parameters less their vector ones, and match the interpreter.
TEST(NpuLower, DepthwiseBlocksLoadTheParametersOfTheirUnitsOnly) {
  const int64_t C = 64, H = 7, W = 7, taps = 9, lanes = 16;
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, H, W}));
  Value* y = conv(g, x, C, C, 3, 1, 1, C, true, 4);  // depthwise, with bias
  g.addOutput(g.addNode("Relu", {y}, {"r"})->output(0));
  inferShapes(g);
  const std::string dw = y->producer()->name();
  auto run = [&](int64_t every) {
    SCOPED_TRACE(fmt::format("one tile in {} on the matrix unit", every));
    return checkAgainstInterpreter(g, "default.json", [&](npu::NpuSchedule& s) {
      ASSERT_NE(s.tilingOf(dw), nullptr);
      npu::NodeTiling& t = *s.tilingOf(dw);
      t.variant = "vector", t.rows = H, t.cols = W, t.channels = lanes, t.inChannels = lanes, t.matrixEvery = every;
    });
  };
  const uint64_t vectorOnly = run(0).dramBytesRead;
  const uint64_t vectorWords = taps * lanes + lanes, matrixWords = taps * lanes * lanes + lanes + 1;
  for (int64_t every : {1, 2, 4}) {
    const uint64_t onMatrix = static_cast<uint64_t>(C / lanes / every);
    EXPECT_EQ(run(every).dramBytesRead, vectorOnly + 4 * onMatrix * (matrixWords - vectorWords)) << "one tile in " << every;
  }
}

// SiLU (x * Sigmoid(x)) fused into a conv's and a depthwise conv's epilogue is one `silu` vector pass per tile:
// no copy of the tile, no sigmoid, no multiply (and either operand order of the Mul); the result matches the
// interpreter. The lower bound prices the pair as one complex pass: the Mul adds nothing to the vector work.
TEST(NpuLower, SiluEpilogueIsOneVectorPass) {
  for (const char* cfgName : {"default.json", "tiny.json"}) {
    Graph g;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 24, 13, 11}));
    Value* y = conv(g, x, 24, 32, 3, 1, 1, 1, true, 4);
    Value* s = g.addNode("Sigmoid", {y}, {"s"})->output(0);
    y = g.addNode("Mul", {y, s}, {"m"})->output(0);
    y = conv(g, y, 32, 32, 3, 2, 1, 32, true, 5);  // depthwise
    s = g.addNode("Sigmoid", {y}, {"s2"})->output(0);
    g.addOutput(g.addNode("Mul", {s, y}, {"m2"})->output(0));
    inferShapes(g);
    checkAgainstInterpreter(g, cfgName);
    const hw::HardwareConfig cfg = config(cfgName);
    const npu::LoweredSubgraph lowered = npu::lowerSubgraph(g, *cfg.firstNpu(), "test");
    std::map<std::string, int> ops;
    for (const npu::Instruction& inst : lowered.program.instructions)
      if (inst.opcode == npu::Opcode::VecUnary || inst.opcode == npu::Opcode::VecBinary) ++ops[std::string(npu::vecOpName(inst.vecOp))];
    EXPECT_GT(ops["silu"], 1) << cfgName;
    EXPECT_EQ(ops["sigmoid"], 0) << cfgName;
    EXPECT_EQ(ops["copy"], 0) << cfgName;
    EXPECT_EQ(ops["mul"], 0) << cfgName;
    // Vector work: the two Sigmoids at the complex rate, the Muls free.
    const hw::NpuConfig& n = cfg.firstNpu()->npu;
    const npu::SubgraphWork w = npu::subgraphWork(g, n);
    EXPECT_EQ(w.vectorCycles, (32u * 13 * 11 + 32u * 7 * 6) * n.vectorCyclesPerVectorComplex) << cfgName;
  }
}

// A residual Add first in a conv's epilogue (NodeTiling::residualInAcc): the other operand's tile is loaded into the
// accumulator and every gemm accumulates onto it, so no vector pass adds it. Both operand orders, batch 2, odd
// channel counts, the compiler's tiles and forced odd ones (several passes of output channels); the vector work
// of the bound counts the Add as free; a schedule that asks for it where the epilogue does not start with such an
// Add is refused.
TEST(NpuLower, ResidualAddLoadsIntoTheAccumulator) {
  for (const char* cfgName : {"default.json", "tiny.json", "edge.json"})
    for (bool convFirst : {true, false})
      for (int forced : {0, 1, 2}) {
        Graph g;
        Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 20, 9, 7}));
        Value* y = conv(g, x, 20, 40, 3, 1, 1, 1, true, 31);
        Value* r = conv(g, x, 20, 40, 1, 1, 0, 1, false, 33);  // the residual branch, through DRAM
        Node* add = g.addNode("Add", convFirst ? std::vector<Value*>{y, r} : std::vector<Value*>{r, y}, {"sum"}, "add");
        g.addOutput(g.addNode("Relu", {add->output(0)}, {"out"}, "relu")->output(0));
        inferShapes(g);
        const std::string conv3 = y->producer()->name();
        SCOPED_TRACE(fmt::format("{} conv first {} forced {}", cfgName, convFirst, forced));
        std::function<void(npu::NpuSchedule&)> edit;
        if (forced)
          edit = [&](npu::NpuSchedule& s) {
            npu::NodeTiling& t = *s.tilingOf(conv3);
            ASSERT_TRUE(t.residualInAcc) << s.toText();
            t.variant = "matrix", t.phased = false, t.rows = 2, t.cols = 5, t.channels = 16, t.inChannels = 16;
            t.coutPerPass = forced == 1 ? 16 : 0, t.weightsResident = forced == 1 && std::string(cfgName) != "tiny.json";
          };
        checkAgainstInterpreter(g, cfgName, edit);
        const hw::HardwareConfig cfg = config(cfgName);
        const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
        npu::NpuSchedule s = npu::compilerSchedule(g, npuCfg, "test", false);
        ASSERT_NE(s.tilingOf(conv3), nullptr);
        EXPECT_TRUE(s.tilingOf(conv3)->residualInAcc) << s.toText();
        if (edit) edit(s);
        const npu::LoweredSubgraph lowered = npu::lowerSubgraph(g, *cfg.firstNpu(), s);
        int tensorAdds = 0, accLoads = 0;
        for (const npu::Instruction& in : lowered.program.instructions) {
          if (in.opcode == npu::Opcode::VecBinary && in.vecOp == npu::VecOp::Add && (in.srcB.strideOuter || in.srcB.strideInner))
            ++tensorAdds;  // a bias add reads its vector with strides 0
          if (in.opcode == npu::Opcode::Load && in.dst.buffer == npu::Buffer::Accumulator) ++accLoads;
        }
        EXPECT_EQ(tensorAdds, 0);
        EXPECT_GT(accLoads, 0);
        // Vector work of the bound: the Relu only.
        EXPECT_EQ(npu::subgraphWork(g, npuCfg).vectorCycles, 2u * 40 * 9 * 7 * npuCfg.vectorCyclesPerVector);
        s.tilingOf(r->producer()->name())->residualInAcc = true;  // its epilogue is empty
        EXPECT_THROW(npu::verifySchedule(s, g, npuCfg), UserError);
      }
}

// The lower bound's compulsory loads count the input pixels some window reads: a 1x1 stride-2 convolution reads
// rows and columns 0, 2, ..., 8 of a 9x9 input (25 of 81 pixels); a second reader of the whole input (a 3x3 pool)
// makes every pixel compulsory. Random graph seed 209 had a subgraph simulated below its bound before.
TEST(NpuLower, CompulsoryLoadsCountTheInputPixelsWindowsRead) {
  const hw::HardwareConfig cfg = config("default.json");
  const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
  for (bool pooled : {false, true}) {
    Graph g;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 8, 9, 9}));
    g.addOutput(conv(g, x, 8, 4, 1, 2, 0, 1, false, 41));
    if (pooled) {
      Node* p = g.addNode("MaxPool", {x}, {"p"}, "pool");
      p->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
      p->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
      g.addOutput(p->output(0));
    }
    inferShapes(g);
    const uint64_t weights = 4 * 8 * 4, input = 4 * 8 * (pooled ? 81 : 25);
    EXPECT_EQ(npu::subgraphWork(g, npuCfg).compulsoryLoadBytes, weights + input) << pooled;
    checkAgainstInterpreter(g, "default.json");
  }
}

// The lower bound's vector work of a pool counts the window taps inside the input only (a max pool from a
// convolution's accumulator tiles never touches padding): 3x3, stride 1, padding 1 on 4x4 takes per channel
// 4 corners x (4 - 1) + 8 edges x (6 - 1) + 4 inside x (9 - 1) = 84 ops, an average pool 16 scales more; an 8x8
// window padded by 7 leaves most taps outside. Random graph seed 30135 (such a max pool after a conv) was
// simulated below its bound before: 39,401 cycles against 43,763.
TEST(NpuLower, PoolWorkCountsTheTapsInsideTheInput) {
  const hw::HardwareConfig cfg = config("default.json");
  const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
  auto poolWork = [&](const char* op, int64_t H, int64_t W, int64_t k, std::vector<int64_t> pads) {
    Graph g;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, H, W}));
    Node* p = g.addNode(op, {x}, {"p"}, "pool");
    p->setAttr("kernel_shape", std::vector<int64_t>{k, k});
    p->setAttr("pads", pads);
    g.addOutput(p->output(0));
    inferShapes(g);
    return npu::subgraphWork(g, npuCfg).vectorCycles;
  };
  EXPECT_EQ(poolWork("MaxPool", 4, 4, 3, {1, 1, 1, 1}), 84u * 16 * npuCfg.vectorCyclesPerVector);
  EXPECT_EQ(poolWork("AveragePool", 4, 4, 3, {1, 1, 1, 1}), (84u + 16) * 16 * npuCfg.vectorCyclesPerVector);
  // 8x8 on a 3x2 map padded by 7 / 5 rows and 7 / 2 columns (outputs 9 x 4): each window holds at most the
  // whole map (6 taps, 5 ops); counting every tap gave 63 ops per output.
  EXPECT_LE(poolWork("MaxPool", 3, 2, 8, {7, 7, 5, 2}), 9u * 4 * 5 * 16 * npuCfg.vectorCyclesPerVector);

  // Seed 30135's shape: the pool runs from the convolution's accumulator tiles; the bound stays below the cycles.
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 13, 20, 18}));
  Node* p = g.addNode("MaxPool", {conv(g, x, 13, 60, 1, 1, 0, 1, true, 43)}, {"p"}, "pool");
  p->setAttr("kernel_shape", std::vector<int64_t>{8, 8});
  p->setAttr("pads", std::vector<int64_t>{7, 7, 5, 2});
  p->setAttr("strides", std::vector<int64_t>{3, 1});
  g.addOutput(p->output(0));
  inferShapes(g);
  const npu::SimReport report = checkAgainstInterpreter(g, "default.json");
  EXPECT_GE(report.totalCycles, npu::subgraphWork(g, npuCfg).lowerBound(npuCfg));
}

/// Squeeze-and-excitation on a C-channel map (a depthwise conv of the input): GlobalAveragePool -> 1x1 conv -> Relu
/// -> 1x1 conv -> Sigmoid -> Mul with the map (broadcast over H and W, node "se_mul") -> the consumer conv "proj"
/// (k x k, stride, groups) -> output.
void squeezeExcitation(Graph& g, int64_t C, int64_t H, int64_t W, int64_t M, int64_t k, int64_t stride, int64_t group) {
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, H, W}));
  Value* map = conv(g, x, C, C, 3, 1, 1, C, true, 21);
  Value* v = g.addNode("GlobalAveragePool", {map}, {"gap"}, "gap")->output(0);
  v = g.addNode("Relu", {conv(g, v, C, 4, 1, 1, 0, 1, true, 22)}, {"se_relu"}, "se_relu")->output(0);
  v = g.addNode("Sigmoid", {conv(g, v, 4, C, 1, 1, 0, 1, true, 23)}, {"se_sigmoid"})->output(0);
  Value* scaled = g.addNode("Mul", {map, v}, {"se_out"}, "se_mul")->output(0);
  Value* w = g.addConstant("proj_w", randomTensor({M, C / group, k, k}, 24));
  Node* proj = g.addNode("Conv", {scaled, w, g.addConstant("proj_b", randomTensor({M}, 25))}, {"y"}, "proj");
  proj->setAttr("group", group);
  proj->setAttr("strides", std::vector<int64_t>{stride, stride});
  proj->setAttr("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
  proj->setAttr("kernel_shape", std::vector<int64_t>{k, k});
  g.addOutput(proj->output(0));
  inferShapes(g);
}

/// Moves the Mul "se_mul" into the input loads of "proj" (NodeTiling::inputScale), unless the schedule already has.
void scaleProjInput(npu::NpuSchedule& s) {
  for (size_t gi = 0; gi < s.groups.size(); ++gi)
    if (s.groups[gi].nodes == std::vector<std::string>{"se_mul"}) {
      s.groups.erase(s.groups.begin() + static_cast<long>(gi));
      break;
    }
  for (npu::GroupSchedule& grp : s.groups)
    if (grp.nodes.back() == "proj" && grp.nodes.front() != "se_mul") grp.nodes.insert(grp.nodes.begin(), "se_mul");
  s.tilingOf("proj")->inputScale = "se_mul";
}

// Squeeze-and-excitation without round trips of the map: the pool is reduced from the depthwise conv's output
// tiles (NodeTiling::globalPool) and the broadcast Mul is applied by the convolution that reads its product, to each
// input block it loads (NodeTiling::inputScale): the compiler chooses both (cheaper than their own passes), the map
// is loaded once and the product never stored, and the result matches the interpreter; then forced on strided, phased, packed, stacked and
// grouped consumers; a schedule naming a node that cannot scale the input is refused.
TEST(NpuLower, SqueezeExcitationMulScalesTheConsumersInputLoads) {
  const int64_t C = 40, H = 13, W = 11, M = 24;
  for (const char* cfgName : {"default.json", "tiny.json", "edge.json"}) {
    SCOPED_TRACE(cfgName);
    Graph g;
    squeezeExcitation(g, C, H, W, M, 1, 1, 1);
    const hw::HardwareConfig cfg = config(cfgName);
    const npu::NpuSchedule s = npu::compilerSchedule(g, cfg.firstNpu()->npu, "test");
    ASSERT_NE(s.tilingOf("proj"), nullptr);
    EXPECT_EQ(s.tilingOf("proj")->inputScale, "se_mul");
    EXPECT_EQ(s.tilingOf("se_mul"), nullptr);  // no element-wise pass of its own
    EXPECT_NE(s.toText().find("input blocks x se_mul"), std::string::npos) << s.toText();
    // The pool is computed from the depthwise conv's output tiles, not by a pass of its own over the map.
    EXPECT_EQ(s.tilingOf("gap"), nullptr);
    EXPECT_TRUE(std::any_of(s.groups.begin(), s.groups.end(), [](const npu::GroupSchedule& grp) {
      return grp.tiling.size() == 1 && grp.tiling[0].globalPool == "gap" && grp.nodes.back() == "gap";
    })) << s.toText();
    EXPECT_EQ(npu::NpuSchedule::fromJson(s.toJson(), "test"), s);
    const npu::SimReport report = checkAgainstInterpreter(g, cfgName);
    // The same schedule with the pool and the Mul in groups of their own: the map is loaded twice more (by the pool
    // and the Mul) and the product stored.
    const npu::NpuSchedule plain = npu::defaultSchedule(g, cfg.firstNpu()->npu, "test");
    const npu::SimReport apart = checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& sched) {
      auto own = [&](const std::string& node) {
        for (const npu::GroupSchedule& p : plain.groups)
          if (p.nodes == std::vector<std::string>{node}) return p;
        ADD_FAILURE() << node << " has no group of its own";
        return npu::GroupSchedule{};
      };
      std::vector<npu::GroupSchedule> groups;
      for (npu::GroupSchedule grp : sched.groups) {
        std::erase(grp.nodes, std::string("gap"));
        std::erase(grp.nodes, std::string("se_mul"));
        npu::NodeTiling& t = grp.tiling.at(0);
        const bool pooled = !t.globalPool.empty(), scaled = !t.inputScale.empty();
        t.globalPool.clear(), t.inputScale.clear();
        if (scaled) groups.push_back(own("se_mul"));
        groups.push_back(grp);
        if (pooled) groups.push_back(own("gap"));
      }
      sched.groups = groups;
    });
    EXPECT_GE(apart.dramBytesRead, report.dramBytesRead + 4u * 2 * C * H * W);
    EXPECT_GE(apart.dramBytesWritten, report.dramBytesWritten + 4u * C * H * W);
  }
  struct Case { int64_t c, k, stride, group; const char* variant; bool phased; };
  for (const Case& k : {Case{8, 3, 2, 1, "matrix", false}, Case{8, 3, 2, 1, "matrix", true}, Case{8, 3, 2, 1, "packed", true},
                        Case{8, 3, 1, 1, "stacked", false}, Case{8, 3, 2, 1, "stacked", true}, Case{40, 3, 1, 2, "matrix", false},
                        Case{40, 1, 1, 1, "matrix", false}})
    for (const char* cfgName : {"default.json", "tiny.json"})
      for (bool passesInside : {false, true}) {  // NodeTiling::inputResident: the scaled blocks read by both passes
        SCOPED_TRACE(fmt::format("{}x{} consumer of {} channels, stride {}, group {}, {}{}, {}{}", k.k, k.k, k.c, k.stride, k.group,
                                 k.variant, k.phased ? " phased" : "", cfgName, passesInside ? ", passes inside the tiles" : ""));
        Graph g;
        squeezeExcitation(g, k.c, H, W, M, k.k, k.stride, k.group);
        checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
          scaleProjInput(s);
          npu::NodeTiling& t = *s.tilingOf("proj");
          t.variant = k.variant, t.phased = k.phased;
          t.rows = 3, t.cols = 5, t.channels = 16, t.inChannels = std::min<int64_t>(16, k.c / k.group), t.coutPerPass = 0;
          t.weightsResident = std::string(cfgName) == "default.json";
          t.inputResident = passesInside;
        });
      }
  Graph g;
  squeezeExcitation(g, C, H, W, M, 1, 1, 1);
  const hw::HardwareConfig defaultCfg = config("default.json");
  const hw::NpuConfig& npuCfg = defaultCfg.firstNpu()->npu;
  npu::NpuSchedule s = npu::compilerSchedule(g, npuCfg, "test", false);
  scaleProjInput(s);
  npu::verifySchedule(s, g, npuCfg);
  s.tilingOf("proj")->inputScale = "se_relu";
  EXPECT_THROW(npu::verifySchedule(s, g, npuCfg), UserError);
}

// Global pools reduced from their producer's output tiles (NodeTiling::globalPool), forced by the schedule on odd
// tiles: a conv (matrix unit, with Relu) and a depthwise conv (vector unit), batch 2, average and max, with the map
// also an output (stored) or only pooled (not stored).
TEST(NpuLower, GlobalPoolFromTheProducersTiles) {
  for (const char* pool : {"GlobalAveragePool", "GlobalMaxPool"})
    for (bool depthwise : {false, true})
      for (bool mapOut : {false, true})
        for (const char* cfgName : {"default.json", "tiny.json"}) {
          SCOPED_TRACE(fmt::format("{} of a {} conv{}, {}", pool, depthwise ? "depthwise" : "matrix", mapOut ? ", map stored" : "", cfgName));
          Graph g;
          Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 24, 9, 7}));
          Value* y = conv(g, x, 24, depthwise ? 24 : 20, 3, 1, 1, depthwise ? 24 : 1, true, 31);
          const std::string producer = y->producer()->name();
          y = g.addNode("Relu", {y}, {"r"}, "relu")->output(0);
          g.addOutput(g.addNode(pool, {y}, {"pooled"}, "pool")->output(0));
          if (mapOut) g.addOutput(y);
          inferShapes(g);
          checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
            for (size_t gi = 0; gi < s.groups.size(); ++gi)
              if (s.groups[gi].nodes == std::vector<std::string>{"pool"}) {
                s.groups.erase(s.groups.begin() + static_cast<long>(gi));
                break;
              }
            for (npu::GroupSchedule& grp : s.groups)
              if (grp.tiling.size() == 1 && grp.tiling[0].node == producer && grp.nodes.back() != "pool") grp.nodes.push_back("pool");
            npu::NodeTiling& t = *s.tilingOf(producer);
            t.globalPool = "pool";
            t.rows = 2, t.cols = 3, t.channels = 16;
          });
        }
}

// Max pools computed from their convolution's accumulator tiles (NodeTiling::maxPool): every tiling option the compiler
// offers (maxPoolTilings) and a forced odd tile, on pools with and without padding, ceil_mode windows past the map,
// stride 1 and 2, batch 2, a 3-channel stem (stacked or packed) and wider convolutions; the conv's bias and the pool's
// Relu applied to the pooled tile. A schedule that drops the pool's epilogue is refused.
TEST(NpuLower, MaxPoolFromTheConvsAccumulatorTiles) {
  struct Case {
    int64_t n, cin, cout, h, w, k, stride, pad, pk, ps, pp;
    bool ceil;
  };
  for (const Case& c : {Case{1, 3, 24, 23, 21, 3, 2, 0, 3, 2, 0, true}, Case{2, 3, 20, 18, 17, 7, 2, 3, 3, 2, 1, false},
                        Case{1, 20, 36, 13, 11, 3, 1, 1, 2, 2, 0, false}, Case{1, 16, 17, 9, 14, 1, 1, 0, 3, 1, 1, false},
                        Case{1, 8, 16, 12, 12, 3, 1, 1, 3, 2, 0, true}})
    for (const char* cfgName : {"default.json", "tiny.json"}) {
      Graph g;
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {c.n, c.cin, c.h, c.w}));
      Value* y = conv(g, x, c.cin, c.cout, c.k, c.stride, c.pad, 1, true, 53);
      Node* pool = g.addNode("MaxPool", {y}, {"p"}, "pool");
      pool->setAttr("kernel_shape", std::vector<int64_t>{c.pk, c.pk});
      pool->setAttr("strides", std::vector<int64_t>{c.ps, c.ps});
      pool->setAttr("pads", std::vector<int64_t>{c.pp, c.pp, c.pp, c.pp});
      pool->setAttr("ceil_mode", int64_t{c.ceil ? 1 : 0});
      g.addOutput(g.addNode("Relu", {pool->output(0)}, {"r"}, "relu")->output(0));
      inferShapes(g);
      const hw::HardwareConfig cfg = config(cfgName);
      const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
      const npu::NpuSchedule base = npu::compilerSchedule(g, npuCfg, "test", false);
      const auto candidates = npu::maxPoolCandidates(base, g);
      ASSERT_EQ(candidates.size(), 1u) << cfgName;
      std::vector<npu::NodeTiling> options = npu::maxPoolTilings(base, g, npuCfg, candidates[0].first, candidates[0].second);
      ASSERT_FALSE(options.empty());
      EXPECT_EQ(options[0].epilogue, std::vector<std::string>{"relu"});
      npu::NodeTiling odd = options[0];
      odd.rows = 2, odd.cols = 3, odd.coutPerPass = 16;
      options.push_back(odd);
      for (const npu::NodeTiling& t : options) {
        SCOPED_TRACE(fmt::format("{}x{}x{} conv k{} s{} p{}, pool k{} s{} p{}{}, {}: pooled tile {}x{}, {} per pass", c.cin, c.h, c.w,
                                 c.k, c.stride, c.pad, c.pk, c.ps, c.pp, c.ceil ? " ceil" : "", cfgName, t.rows, t.cols, t.coutPerPass));
        checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
          const auto found = npu::maxPoolCandidates(s, g);
          ASSERT_EQ(found.size(), 1u);
          s = npu::withMaxPool(s, found[0].first, found[0].second, t);
          ASSERT_EQ(s.groups.size(), 1u);
          EXPECT_EQ(npu::NpuSchedule::fromJson(s.toJson(), "test"), s);  // max_pool written and read back
          EXPECT_EQ(s.groups[0].nodes, (std::vector<std::string>{y->producer()->name(), "pool", "relu"}));
        });
      }
      // The group lists the pool's Relu but the tiling does not apply it: refused.
      npu::NpuSchedule wrong = npu::withMaxPool(base, candidates[0].first, candidates[0].second, options[0]);
      wrong.groups[0].tiling[0].epilogue.clear();
      EXPECT_THROW(npu::verifySchedule(wrong, g, npuCfg), UserError);
    }
}

// A residual block's shortcut convolution computed into the accumulator of the convolution it is added to
// (NodeTiling::residualConv): every option residualConvTilings offers and forced odd ones (tiles of 3x5, passes inside
// the tile or outside, narrow input blocks, streamed weights), on ResNet's strided 1x1 downsampling, a stride-1 1x1
// widening one (ResNet-50's first block), a padded 3x3 shortcut, batch 2, the Add's operands either way round, with
// and without biases. The shortcut's result is never stored: the DRAM traffic drops by at least its store and load.
// Schedules naming a convolution whose result something else reads, or not listing it in the group, are refused.
TEST(NpuLower, ResidualConvComputedIntoTheAccumulator) {
  struct Case {
    int64_t n, cin, mid, cout, h, w, stride, dk, dpad;
    bool shortcutFirst, bias;
  };
  for (const Case& c : {Case{1, 16, 32, 32, 14, 13, 2, 1, 0, false, true}, Case{2, 20, 16, 40, 9, 11, 1, 1, 0, true, true},
                        Case{1, 24, 24, 24, 10, 10, 2, 3, 1, false, false}, Case{1, 40, 48, 36, 8, 7, 2, 1, 0, true, true}})
    for (const char* cfgName : {"default.json", "tiny.json"}) {
      Graph g;
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {c.n, c.cin, c.h, c.w}));
      Value* a = g.addNode("Relu", {conv(g, x, c.cin, c.mid, 3, c.stride, 1, 1, true, 71)}, {"a"})->output(0);
      Value* b = conv(g, a, c.mid, c.cout, 3, 1, 1, 1, c.bias, 73);
      Value* d = conv(g, x, c.cin, c.cout, c.dk, c.stride, c.dpad, 1, c.bias, 75);
      Node* add = g.addNode("Add", c.shortcutFirst ? std::vector<Value*>{d, b} : std::vector<Value*>{b, d}, {"sum"}, "add");
      g.addOutput(g.addNode("Relu", {add->output(0)}, {"out"}, "relu")->output(0));
      inferShapes(g);
      const std::string shortcut = d->producer()->name(), reader = b->producer()->name();
      const hw::HardwareConfig cfg = config(cfgName);
      const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
      const npu::NpuSchedule base = npu::compilerSchedule(g, npuCfg, "test", false);
      const auto candidates = npu::residualConvCandidates(base, g);
      ASSERT_EQ(candidates.size(), 1u) << cfgName;
      ASSERT_EQ(base.groups[candidates[0].first].nodes, std::vector<std::string>{shortcut});
      ASSERT_EQ(base.groups[candidates[0].second].tiling[0].node, reader);
      std::vector<npu::NodeTiling> options = npu::residualConvTilings(base, g, npuCfg, candidates[0].first, candidates[0].second);
      ASSERT_FALSE(options.empty()) << cfgName;
      const size_t offered = options.size();
      for (bool inside : {false, true}) {
        npu::NodeTiling odd = options[0];
        odd.rows = 3, odd.cols = 5, odd.coutPerPass = 16, odd.channels = 16, odd.inChannels = 16, odd.weightsResident = true;
        odd.inputResident = inside, odd.residualInChannels = 8, odd.residualWeightsResident = inside;
        for (bool resident : {true, false}) {
          odd.weightsResident = resident;
          if (npu::residualConvOverflow(*b->producer(), *d->producer(), odd, npuCfg).empty()) {
            options.push_back(odd);
            break;
          }
        }
      }
      if (std::string(cfgName) == "default.json") {
        ASSERT_EQ(options.size(), offered + 2) << "both forced tilings fit default's buffers";
      }
      const int64_t OH = (c.h - 1) / c.stride + 1, OW = (c.w - 1) / c.stride + 1;
      const npu::SimReport apart = checkAgainstInterpreter(g, cfgName, [](npu::NpuSchedule&) {});  // unfused: the shortcut stored
      EXPECT_EQ(apart.dramBytesWritten, static_cast<uint64_t>(4 * c.n * OH * OW * (c.mid + 2 * c.cout)));
      for (const npu::NodeTiling& t : options) {
        SCOPED_TRACE(fmt::format("{}x{}x{} -> {}, shortcut k{} s{}, {}: tile {}x{}, {} per pass{}, shortcut blocks of {}, weights {}",
                                 c.cin, c.h, c.w, c.cout, c.dk, c.stride, cfgName, t.rows, t.cols, t.coutPerPass,
                                 t.inputResident ? " inside" : "", t.residualInChannels, t.residualWeightsResident ? "resident" : "streamed"));
        const npu::SimReport r = checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
          const auto found = npu::residualConvCandidates(s, g);
          ASSERT_EQ(found.size(), 1u);
          s = npu::withResidualConv(s, found[0].first, found[0].second, t);
          EXPECT_EQ(npu::NpuSchedule::fromJson(s.toJson(), "test"), s);  // residual_conv written and read back
          EXPECT_EQ(s.groups.back().nodes, (std::vector<std::string>{shortcut, reader, "add", "relu"}));
        });
        // Only the first convolution's result and the block's are stored.
        EXPECT_EQ(r.dramBytesWritten, static_cast<uint64_t>(4 * c.n * OH * OW * (c.mid + c.cout)));
      }
      // Refused: the group does not list the shortcut (it is left in a group of its own), or the named node is no
      // convolution whose result only the Add reads.
      npu::NpuSchedule unlisted = npu::withResidualConv(base, candidates[0].first, candidates[0].second, options[0]);
      unlisted.groups.back().nodes.erase(unlisted.groups.back().nodes.begin());
      unlisted.groups.insert(unlisted.groups.end() - 1, base.groups[candidates[0].first]);
      EXPECT_THROW(npu::verifySchedule(unlisted, g, npuCfg), UserError);
      npu::NpuSchedule notConv = npu::withResidualConv(base, candidates[0].first, candidates[0].second, options[0]);
      notConv.groups.back().tiling[0].residualConv = a->producer()->name();
      EXPECT_THROW(npu::verifySchedule(notConv, g, npuCfg), UserError);
    }
}

// ResNet-18's layer2.0 conv1 on `edge` (3x3 stride 2, 64 -> 128 channels on a 56x56 map): the whole map's window
// does not fit the input buffer, so the tiling the estimate picks runs four passes of 32 channels that each load the
// input again. chooseInsideTiles offers half-height tiles with the passes inside (the window loaded once per tile),
// which the instruction scheduler prices within 2 % of the cycles for fewer bytes: the compiler takes them, the
// program matches the interpreter and reads less than half the bytes of the passes-outside tiling.
TEST(NpuLower, PassesInsideFewerRowsWhenTheWholeWindowDoesNotFit) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 64, 56, 56}));
  g.addOutput(g.addNode("Relu", {conv(g, x, 64, 128, 3, 2, 1, 1, true, 81)}, {"r"}, "relu")->output(0));
  inferShapes(g);
  const hw::HardwareConfig cfg = config("edge.json");
  const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
  const npu::NpuSchedule s = npu::tiledSchedule(g, npuCfg, "test");
  const npu::NodeTiling& t = s.groups.at(0).tiling.at(0);
  ASSERT_TRUE(t.inputResident) << npu::NpuSchedule(s).toText();
  EXPECT_LT(t.rows, 28);
  EXPECT_LT(t.coutPerPass > 0 ? t.coutPerPass : t.channels, 128) << "several passes, inside each tile";
  const uint64_t inside = checkAgainstInterpreter(g, "edge.json", [](npu::NpuSchedule&) {}).dramBytesRead;
  const uint64_t outside = checkAgainstInterpreter(g, "edge.json", [](npu::NpuSchedule& u) {
                             npu::NodeTiling& v = u.groups.at(0).tiling.at(0);
                             v.rows = 28, v.inputResident = false, v.weightsResident = true;
                           }).dramBytesRead;
  EXPECT_LT(2 * inside, outside) << "inside " << inside << " bytes, outside " << outside;
}

// ShuffleNet v2's stem (3 -> 24, 3x3 stride 2 on 224x224, then a 3x3 stride-2 max pool): the pooled tile with the most
// rows whose input region fits the input buffer takes 88 % of it, so no tile's region loads while the one before runs
// its gemms. A tile whose region fits twice is offered too (to `tessel tune`, not to the compiler's pricing); taken,
// ShuffleNet v2 on `default` runs in 1,442,494 cycles instead of 1,457,658, for 92 KB more DRAM traffic.
TEST(NpuLower, MaxPoolTilingsOfferATileWhoseInputRegionFitsTwice) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 3, 224, 224}));
  Value* y = conv(g, x, 3, 24, 3, 2, 1, 1, true, 61);
  Node* pool = g.addNode("MaxPool", {y}, {"p"}, "pool");  // the pipeline moves the stem's Relu behind the pool
  pool->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
  pool->setAttr("strides", std::vector<int64_t>{2, 2});
  pool->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
  g.addOutput(g.addNode("Relu", {pool->output(0)}, {"r"}, "relu")->output(0));
  inferShapes(g);
  const hw::HardwareConfig cfg = config("default.json");
  const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
  const npu::NpuSchedule base = npu::compilerSchedule(g, npuCfg, "test", false);
  const auto candidates = npu::maxPoolCandidates(base, g);
  ASSERT_EQ(candidates.size(), 1u);
  const npu::ConvGeometry geo = npu::convGeometry(*y->producer());
  const npu::PoolGeometry q = npu::poolGeometry(*pool);
  const uint64_t inputWords = npuCfg.bufferWords(static_cast<size_t>(npu::Buffer::Input));
  uint64_t largest = 0, smallest = inputWords;
  std::optional<npu::NodeTiling> twice;
  for (const npu::NodeTiling& t : npu::maxPoolTilings(base, g, npuCfg, candidates[0].first, candidates[0].second, true)) {
    const auto words = static_cast<uint64_t>(
        npu::tileWindowWordsPerChannel(geo, t, std::min(q.H, q.inRows(t.rows)), std::min(q.W, q.inCols(t.cols)), true) * geo.C);
    EXPECT_LE(words, inputWords) << t.rows << "x" << t.cols;
    largest = std::max(largest, words), smallest = std::min(smallest, words);
    if (2 * words <= inputWords && !twice) twice = t;
  }
  EXPECT_GT(2 * largest, inputWords);  // the tile with the most rows fills more than half the buffer
  ASSERT_TRUE(twice.has_value()) << "smallest region " << smallest << " of " << inputWords << " words";
  checkAgainstInterpreter(g, "default.json", [&](npu::NpuSchedule& s) {
    const auto found = npu::maxPoolCandidates(s, g);
    ASSERT_EQ(found.size(), 1u);
    s = npu::withMaxPool(s, found[0].first, found[0].second, *twice);
  });
}

// The passes of output channels inside each tile (NodeTiling::inputResident): every input block of a tile loaded once
// and read by all passes, on odd tiles and channel counts (a narrower last pass and block), batch 2, weights resident
// (all passes' at once) and streamed, strided and split into phases, grouped, a few-channel stem stacked, a residual
// Add loaded into the accumulator, a global pool reduced per pass from the tiles, and a max pool from the accumulator
// tiles. Such a tiling reads from DRAM exactly what one pass of all the output channels over the same tiles reads
// (the input once per tile, the weights once, or once per tile when streamed): a lowering that loaded the input per
// pass, or reloaded a pass's resident weights per tile, would read more. A schedule keeping a window larger than the
// input buffer, or resident weights larger than the weight buffer, is refused.
// A convolution whose tile is the whole image and whose passes' weights do not all fit the weight buffer (128->128
// 3x3 on 28x28 on `edge`: 147,456 weight words, 131,072 in the buffer) runs its passes inside the tile with its
// weights streamed: the compiler's schedule reads the input, the weights and the bias from DRAM once each (the
// resident-weights tiling it picks first read the input once per pass), and matches the interpreter.
TEST(NpuLower, PassesInsideAWholeImageTileStreamTheWeightsThatDoNotFit) {
  const int64_t C = 128, H = 28, W = 28;
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, H, W}));
  Value* y = conv(g, x, C, C, 3, 1, 1, 1, true, 4);
  g.addOutput(g.addNode("Relu", {y}, {"r"})->output(0));
  inferShapes(g);
  const hw::HardwareConfig cfg = config("edge.json");
  const npu::NpuSchedule s = npu::compilerSchedule(g, cfg.firstNpu()->npu, "test", false);
  const npu::NodeTiling* t = s.tilingOf(y->producer()->name());
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->inputResident);
  EXPECT_FALSE(t->weightsResident);
  EXPECT_EQ(t->rows * t->cols, H * W);
  EXPECT_LT(t->coutPerPass, C);  // several passes, each of which used to reload the input
  const npu::SimReport r = checkAgainstInterpreter(g, "edge.json");
  EXPECT_EQ(r.dramBytesRead, 4u * (C * H * W + C * C * 9 + C));
}

TEST(NpuLower, StreamedWeightsEstimateLoadsEachInputBlocksChunksApart) {
  // 512 input channels in blocks of 16 on a 2x2 map, weights streamed: the lowering loads each block's weights
  // (16 x 32 words) on its own, so the load unit pays 32 setups per tile, not one for the pass's 16,384 words. The
  // estimate the tiles are chosen by must count them: before it did, it priced this node's loads 25 % low.
  const int64_t C = 512, M = 32, H = 2, W = 2;
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, H, W}));
  Value* y = conv(g, x, C, M, 1, 1, 0, 1, false, 5);
  g.addOutput(y);
  inferShapes(g);
  npu::NodeTiling forced;
  const npu::SimReport r = checkAgainstInterpreter(g, "default.json", [&](npu::NpuSchedule& s) {
    npu::NodeTiling& t = s.groups.at(0).tiling.at(0);
    t.variant = "matrix", t.rows = H, t.cols = W, t.inChannels = 16, t.coutPerPass = M, t.channels = 16;
    t.weightsResident = false, t.inputResident = false, t.phased = false;
    forced = t;
  });
  const hw::HardwareConfig hwConfig = config("default.json");
  const hw::NpuConfig& cfg = hwConfig.firstNpu()->npu;
  const npu::MatrixCost c = npu::matrixCost(npu::convGeometry(*y->producer()), forced, cfg, npu::EpilogueShape{});
  const auto simulated = static_cast<double>(r.units[0].busyCycles);
  EXPECT_GE(r.units[0].instructions, static_cast<uint64_t>(2 * C / 16));  // an input and a weight load per block
  EXPECT_NEAR(static_cast<double>(c.units[0]), simulated, 0.05 * simulated);
}

TEST(NpuLower, PassesInsideEachTileLoadItsInputOnce) {
  struct Case {
    const char* what;
    int64_t n, cin, cout, h, w, k, stride, pad, group;
    const char* variant;
    bool phased, residual, globalPool, maxPool;
  };
  for (const Case& c : {Case{"plain", 2, 40, 50, 11, 13, 3, 1, 1, 1, "matrix", false, false, false, false},
                        Case{"strided", 1, 24, 37, 15, 14, 3, 2, 1, 1, "matrix", true, false, false, false},
                        Case{"grouped", 1, 32, 48, 9, 10, 3, 1, 1, 2, "matrix", false, false, false, false},
                        Case{"stem", 1, 3, 40, 19, 17, 7, 2, 3, 1, "stacked", false, false, false, false},
                        Case{"residual", 1, 20, 36, 9, 11, 1, 1, 0, 1, "matrix", false, true, false, false},
                        Case{"global pool", 2, 24, 40, 9, 7, 3, 1, 1, 1, "matrix", false, false, true, false},
                        Case{"max pool", 1, 20, 36, 13, 11, 3, 1, 1, 1, "matrix", false, false, false, true}})
    for (const char* cfgName : {"default.json", "tiny.json"})
      for (bool resident : {true, false}) {
        const bool tiny = std::string(cfgName) == "tiny.json";
        const int64_t Cg = c.cin / c.group, Mg = c.cout / c.group;
        if (tiny && resident && Cg * c.k * c.k * Mg > 2048) continue;  // every pass's weights exceed tiny's weight buffer
        SCOPED_TRACE(fmt::format("{}: {}x{}x{} conv k{} s{} group {} -> {}, {}, weights {}", c.what, c.cin, c.h, c.w, c.k,
                                 c.stride, c.group, c.cout, cfgName, resident ? "resident" : "streamed"));
        Graph g;
        Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {c.n, c.cin, c.h, c.w}));
        Value* y = conv(g, x, c.cin, c.cout, c.k, c.stride, c.pad, c.group, true, 61);
        const std::string producer = y->producer()->name();
        if (c.residual) {
          Value* r = g.addInput("r", TensorType::fromShape(DType::Float32, {c.n, c.cout, c.h, c.w}));
          y = g.addNode("Add", {y, r}, {"sum"}, "add")->output(0);
        }
        if (c.maxPool) {  // the Relu behind the pool (its epilogue), where pool-before-activation puts it
          Node* pool = g.addNode("MaxPool", {y}, {"p"}, "pool");
          pool->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
          pool->setAttr("strides", std::vector<int64_t>{2, 2});
          pool->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
          y = pool->output(0);
        }
        y = g.addNode("Relu", {y}, {"relu_out"}, "relu")->output(0);
        if (c.globalPool) y = g.addNode("GlobalAveragePool", {y}, {"pooled"}, "gap")->output(0);
        g.addOutput(y);
        inferShapes(g);
        const hw::HardwareConfig cfg = config(cfgName);
        const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
        // The conv tiled as forced, its pool computed from its tiles when the case has one: passes of 16 output
        // channels inside the tiles, or (`inside` false) one pass of all of them.
        auto force = [&](npu::NpuSchedule& s, bool inside) {
          if (c.maxPool) {
            const auto found = npu::maxPoolCandidates(s, g);
            ASSERT_EQ(found.size(), 1u) << s.toText();
            s = npu::withMaxPool(s, found[0].first, found[0].second,
                                 npu::maxPoolTilings(s, g, npuCfg, found[0].first, found[0].second).at(0));
          }
          if (c.globalPool && std::erase_if(s.groups, [](const npu::GroupSchedule& grp) {
                return grp.nodes == std::vector<std::string>{"gap"};
              })) {  // the compiler reduces it from the tiles already
            for (npu::GroupSchedule& grp : s.groups)
              if (grp.tiling.size() == 1 && grp.tiling[0].node == producer) grp.nodes.push_back("gap");
            s.tilingOf(producer)->globalPool = "gap";
          }
          if (c.globalPool) {
            ASSERT_EQ(s.tilingOf(producer)->globalPool, "gap") << s.toText();
          }
          npu::NodeTiling& t = *s.tilingOf(producer);
          t.variant = c.variant, t.phased = c.phased;
          t.rows = c.maxPool ? 1 : tiny ? 2 : 3, t.cols = tiny ? 2 : 4, t.channels = 16;
          t.inChannels = std::min<int64_t>(16, Cg), t.coutPerPass = inside ? 16 : Mg;
          t.weightsResident = resident, t.inputResident = inside;
          if (c.residual) {
            EXPECT_TRUE(t.residualInAcc) << s.toText();
          }
          if (inside) {
            EXPECT_EQ(npu::NpuSchedule::fromJson(s.toJson(), "test"), s);  // input_resident written and read back
          }
        };
        const npu::SimReport passesInside = checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) { force(s, true); });
        const npu::SimReport onePass = checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) { force(s, false); });
        EXPECT_EQ(passesInside.dramBytesRead, onePass.dramBytesRead);
        EXPECT_EQ(passesInside.dramBytesWritten, onePass.dramBytesWritten);
        // Without the passes inside, the 16-channel passes load the input again each.
        const npu::SimReport perPass = checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
          force(s, true);
          s.tilingOf(producer)->inputResident = false;
        });
        EXPECT_GT(perPass.dramBytesRead, passesInside.dramBytesRead);
      }
  // Refused on tiny (1,024 input and 2,048 weight words): a window larger than the input buffer kept for all passes,
  // all passes' weights resident beyond the weight buffer.
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 96, 12, 12}));
  Value* y = conv(g, x, 96, 32, 3, 1, 1, 1, true, 63);
  const std::string producer = y->producer()->name();
  g.addOutput(y);
  inferShapes(g);
  const hw::HardwareConfig tinyCfg = config("tiny.json");
  const hw::NpuConfig& tiny = tinyCfg.firstNpu()->npu;
  npu::NpuSchedule s = npu::compilerSchedule(g, tiny, "test", false);
  npu::NodeTiling& t = *s.tilingOf(producer);
  t.variant = "matrix", t.phased = false, t.channels = 16, t.inChannels = 16, t.coutPerPass = 16, t.inputResident = true;
  t.rows = 1, t.cols = 1, t.weightsResident = false;
  EXPECT_NO_THROW(npu::verifySchedule(s, g, tiny));  // a 3 x 3 window of 96 channels: 864 words
  t.cols = 2;
  EXPECT_THROW(npu::verifySchedule(s, g, tiny), UserError);  // 3 x 4 x 96 = 1,152 words
  t.cols = 1, t.weightsResident = true;
  EXPECT_THROW(npu::verifySchedule(s, g, tiny), UserError);  // 96 x 9 x 32 = 27,648 weight words
  // Every pass's bias stays in the output buffer: 520 words are more than half of tiny's 1,024.
  Graph wide;
  Value* w = wide.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 2, 2}));
  Value* z = conv(wide, w, 16, 520, 1, 1, 0, 1, true, 65);
  wide.addOutput(z);
  inferShapes(wide);
  npu::NpuSchedule ws = npu::compilerSchedule(wide, tiny, "test", false);
  npu::NodeTiling& wt = *ws.tilingOf(z->producer()->name());
  wt.variant = "matrix", wt.rows = wt.cols = 1, wt.channels = 16, wt.inChannels = 16, wt.coutPerPass = 16, wt.weightsResident = false;
  EXPECT_NO_THROW(npu::verifySchedule(ws, wide, tiny));
  wt.inputResident = true;
  EXPECT_THROW(npu::verifySchedule(ws, wide, tiny), UserError);
}

// Two global pools (max and average) of one conv's result: the compiler reduces at most one from the conv's tiles,
// the other reads the stored map (both used to be folded, the first then had no DRAM location: random seed 570).
TEST(NpuLower, TwoGlobalPoolsOfOneConv) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 17, 38, 47}));
    Value* y = conv(g, x, 17, 17, 5, 1, 2, 17, true, 41);
    g.addOutput(g.addNode("GlobalMaxPool", {y}, {"max"})->output(0));
    g.addOutput(g.addNode("GlobalAveragePool", {y}, {"avg"})->output(0));
  });
}

// A pool's vector kept in the output buffer beside a conv's bias and a residual Add's tile of its other operand: a schedule whose
// tile leaves no room for them is refused by verifySchedule, naming the node (not an internal error of the
// list scheduler); with a smaller tile it is accepted.
TEST(NpuLower, GlobalPoolVectorMustFitBesideTheEpilogueTile) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 24, 9, 7}));
  Value* r = g.addInput("r", TensorType::fromShape(DType::Float32, {1, 20, 9, 7}));
  Value* y = conv(g, x, 24, 20, 3, 1, 1, 1, true, 41);
  const std::string producer = y->producer()->name();
  y = g.addNode("Add", {y, r}, {"sum"}, "add")->output(0);
  g.addOutput(g.addNode("GlobalAveragePool", {y}, {"pooled"}, "pool")->output(0));
  inferShapes(g);
  const hw::HardwareConfig cfg = config("tiny.json");
  const hw::NpuConfig& npuCfg = cfg.firstNpu()->npu;
  npu::NpuSchedule sched = npu::compilerSchedule(g, npuCfg, "test", false);
  std::erase_if(sched.groups, [](const npu::GroupSchedule& grp) { return grp.nodes == std::vector<std::string>{"pool"}; });
  for (npu::GroupSchedule& grp : sched.groups)
    if (grp.tiling.size() == 1 && grp.tiling[0].node == producer && grp.nodes.back() != "pool") grp.nodes.push_back("pool");
  npu::NodeTiling& t = *sched.tilingOf(producer);
  ASSERT_EQ(t.epilogue, (std::vector<std::string>{"add"}));
  t.globalPool = "pool";
  t.rows = 9, t.cols = 7, t.channels = 16, t.coutPerPass = 0, t.inChannels = 8;  // 16 bias + 16 sums + 63 x 16 addend > 1024
  try {
    npu::verifySchedule(sched, g, npuCfg);
    ADD_FAILURE() << "a schedule without room for the pool's vector was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("output-buffer words"), std::string::npos) << e.what();
  }
  t.rows = 3;
  npu::verifySchedule(sched, g, npuCfg);
}

TEST(NpuLower, GemmMatMulWithBiasAndTransB) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {3, 70}));
    Node* gemm = g.addNode("Gemm", {x, g.addConstant("B", randomTensor({45, 70}, 7)), g.addConstant("C", randomTensor({45}, 8))}, {"g"});
    gemm->setAttr("transB", int64_t{1});
    gemm->setAttr("alpha", 0.5f);
    Node* mm = g.addNode("MatMul", {gemm->output(0), g.addConstant("M", randomTensor({45, 20}, 9))}, {"m"});
    Node* s = g.addNode("Sigmoid", {mm->output(0)}, {"s"});
    g.addOutput(s->output(0));
  });
}

// A MatMul of many rows by one input channel (random graph seed 38194 on `tiny`): its rows, one row of pixels to the
// tiler, need more than 16 column tiles there, and a single input channel has no smaller block to retry with; it
// was refused with "no tiling of this 1x1 convolution of 1 channels fits".
TEST(NpuLower, MatMulOfManyRowsByOneChannel) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {4810, 1}));
    Node* mm = g.addNode("MatMul", {x, g.addConstant("B", randomTensor({1, 15}, 5))}, {"m"});
    g.addOutput(mm->output(0));
  });
}

TEST(NpuLower, ElementwiseSameShapePerChannelAndScalar) {
  checkBoth([](Graph& g) {
    Shape s{1, 40, 9, 7};
    Value* a = g.addInput("a", TensorType::fromShape(DType::Float32, s));
    Value* b = g.addInput("b", TensorType::fromShape(DType::Float32, s));
    Value* sum = g.addNode("Add", {a, b}, {"sum"})->output(0);
    Value* scaled = g.addNode("Mul", {g.addConstant("ch", randomTensor({40, 1, 1}, 3)), sum}, {"ch_mul"})->output(0);
    Value* sub = g.addNode("Sub", {g.addConstant("two", Tensor::scalar(2.0f)), scaled}, {"sub"})->output(0);
    Value* mx = g.addNode("Max", {sub, a}, {"mx"})->output(0);
    Value* dv = g.addNode("Div", {mx, g.addConstant("four", Tensor::scalar(4.0f))}, {"dv"})->output(0);
    Node* hs = g.addNode("HardSwish", {dv}, {"hs"});
    Node* lr = g.addNode("LeakyRelu", {hs->output(0)}, {"lr"});
    lr->setAttr("alpha", 0.3f);
    Node* th = g.addNode("Tanh", {lr->output(0)}, {"th"});
    g.addOutput(th->output(0));
    g.addOutput(mx);
  });
}

// A batch's squeeze-and-excitation scale: one vector of channels per image (`[N, C, 1, 1]` against `[N, C, H, W]`), computed
// or constant, either operand order where the op commutes; tiles stay within an image and stage that image's vector
// (on tiny a 11x13 image takes several tiles, on default one). A Mul feeding a conv takes this path too with N > 1.
TEST(NpuLower, PerImageChannelVectors) {
  checkBoth([](Graph& g) {
    Shape s{3, 40, 11, 13};
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, s));
    Value* pooled = g.addNode("GlobalAveragePool", {x}, {"gap"})->output(0);
    Value* gate = g.addNode("Sigmoid", {pooled}, {"gate"})->output(0);
    Value* scaled = g.addNode("Mul", {x, gate}, {"se_mul"})->output(0);
    Value* again = g.addNode("Mul", {gate, scaled}, {"mul_vector_first"})->output(0);
    Value* shifted = g.addNode("Sub", {again, pooled}, {"sub"})->output(0);
    Value* biased = g.addNode("Add", {shifted, g.addConstant("per_image", randomTensor({3, 40, 1, 1}, 5))}, {"add"})->output(0);
    Value* divided = g.addNode("Div", {biased, g.addNode("Add", {gate, g.addConstant("one", Tensor::scalar(1.0f))},
                                                         {"gate1"})->output(0)}, {"div"})->output(0);
    g.addOutput(divided);
    g.addOutput(conv(g, scaled, 40, 8, 1, 1, 0, 1, true, 9));
  });
}

Value* channelSlice(Graph& g, Value* x, int64_t start, int64_t end, int64_t axis) {
  const std::string n = g.uniqueName("slice");
  Value* starts = g.addConstant(n + "_starts", Tensor::fromVector<int64_t>({1}, {start}));
  Value* ends = g.addConstant(n + "_ends", Tensor::fromVector<int64_t>({1}, {end}));
  Value* axes = g.addConstant(n + "_axes", Tensor::fromVector<int64_t>({1}, {axis}));
  return g.addNode("Slice", {x, starts, ends, axes}, {n})->output(0);
}

// ShuffleNet's channel split: Slices of a contiguous channel range are views into the producer's tensor (its
// pixel stride) read by a conv, an element-wise op and a concat; a slice that is a subgraph output is copied
// out densely; negative and clamped bounds. A slice with a negative step is refused with the reason (other axes and
// positive steps are copies: NpuLower.CopiesAlongOtherAxes).
TEST(NpuLower, ChannelSlicesAreViews) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 40, 9, 7}));
    Value* y = conv(g, x, 40, 48, 1, 1, 0, 1, true, 5);
    Value* lo = channelSlice(g, y, 0, 24, 1);
    Value* hi = channelSlice(g, y, -24, 1000, 1);
    Value* mid = channelSlice(g, y, 8, 40, -3);
    Value* c = conv(g, hi, 24, 24, 3, 1, 1, 1, true, 7);
    Value* r = g.addNode("Relu", {mid}, {"r"})->output(0);
    Node* cat = g.addNode("Concat", {lo, c}, {"cat"});
    cat->setAttr("axis", int64_t{1});
    g.addOutput(cat->output(0));
    g.addOutput(r);
    g.addOutput(channelSlice(g, y, 16, 32, 1));
  });
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 9, 7}));
  Node* back = g.addNode("Slice", {x, g.addConstant("st", Tensor::fromVector<int64_t>({1}, {5})),
                                   g.addConstant("en", Tensor::fromVector<int64_t>({1}, {1})),
                                   g.addConstant("ax", Tensor::fromVector<int64_t>({1}, {2})),
                                   g.addConstant("sp", Tensor::fromVector<int64_t>({1}, {-1}))},
                         {"back"});
  g.addOutput(back->output(0));
  inferShapes(g);
  hw::SupportResult r = npu::loweringSupport(*back, *config("default.json").firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("every step positive"), std::string::npos) << r.reason;
}

// A dense block (DenseNet): layer k reads Concat(x0, y1, ..., yk-1) and every y is read by all later concats and
// x0 also by the first layer's conv. All of them share the last concat's tensor: x0 and each y are written into their
// slices of it, every concat is a view of a channel prefix (no instruction of any Concat), and the layers read those
// prefixes with the block's pixel stride. A concat whose inputs are not consecutive slices (here the reversed one)
// is still copied.
TEST(NpuLower, DenseBlockConcatsAreViewsOfOneTensor) {
  for (const char* cfgName : {"default.json", "tiny.json"}) {
    SCOPED_TRACE(cfgName);
    Graph g;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 6, 11, 9}));
    Value* x0 = conv(g, x, 6, 10, 3, 1, 1, 1, true, 61);
    std::vector<Value*> features{x0};
    Value* in = x0;
    int64_t channels = 10;
    for (int k = 1; k <= 3; ++k) {
      Value* r = g.addNode("Relu", {in}, {g.uniqueName("r")})->output(0);
      features.push_back(conv(g, r, channels, 7, 3, 1, 1, 1, true, 62 + static_cast<uint32_t>(k)));
      channels += 7;
      Node* cat = g.addNode("Concat", features, {"cat" + std::to_string(k)}, "concat" + std::to_string(k));
      cat->setAttr("axis", int64_t{1});
      in = cat->output(0);
    }
    g.addOutput(conv(g, in, channels, 5, 1, 1, 0, 1, true, 70));
    Node* reversed = g.addNode("Concat", {features[2], features[1]}, {"rev"}, "reversed");
    reversed->setAttr("axis", int64_t{1});
    g.addOutput(conv(g, reversed->output(0), 14, 3, 1, 1, 0, 1, true, 71));
    inferShapes(g);
    checkAgainstInterpreter(g, cfgName);
    const hw::HardwareConfig cfg = config(cfgName);
    const npu::LoweredSubgraph lowered = npu::lowerSubgraph(g, *cfg.firstNpu(), "test");
    std::map<std::string, int> perOp;
    for (const npu::LoweredOp& op : lowered.ops) perOp[op.node] += static_cast<int>(op.instructions);
    for (const auto& [name, count] : perOp)
      if (name.rfind("concat", 0) == 0 && count > 0) ADD_FAILURE() << name << " emits " << count << " instructions";
    EXPECT_GT(perOp["reversed"], 0);
  }
}

// A BatchNormalization no convolution absorbs (DenseNet's, on a concat) followed by a ReLU: the ReLU is the
// element-wise node's epilogue, applied to each tile before its store, so the normalised map is never stored.
TEST(NpuLower, ReluAfterBatchNormIsItsEpilogue) {
  for (const char* cfgName : {"default.json", "tiny.json"}) {
    SCOPED_TRACE(cfgName);
    Graph g;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 21, 9, 13}));
    std::vector<Value*> ins{x};
    for (uint32_t i = 0; i < 4; ++i) {
      Tensor t = randomTensor({21}, 80 + i);
      if (i == 3)  // variance > 0
        for (int64_t c = 0; c < 21; ++c) t.data<float>()[c] = 0.5f + std::fabs(t.data<float>()[c]);
      ins.push_back(g.addConstant(g.uniqueName("bn"), t));
    }
    Value* n = g.addNode("BatchNormalization", ins, {"n"}, "bn")->output(0);
    Value* r = g.addNode("Relu", {n}, {"r"}, "relu")->output(0);
    g.addOutput(conv(g, r, 21, 8, 3, 1, 1, 1, true, 85));
    inferShapes(g);
    checkAgainstInterpreter(g, cfgName, [](npu::NpuSchedule& s) {
      ASSERT_NE(s.tilingOf("bn"), nullptr);
      EXPECT_EQ(s.tilingOf("bn")->epilogue, std::vector<std::string>{"relu"});
    });
  }
}

/// DenseNet's pre-activation layer: x -> conv "grow" (C -> G, 3x3); concat(x, grow) -> BatchNormalization "bn" ->
/// Relu "relu" -> Conv "proj" (k x k, no padding, stride, group) -> output; the concat is an output too (read raw).
void preActivation(Graph& g, int64_t C, int64_t G, int64_t H, int64_t W, int64_t M, int64_t k, int64_t stride, int64_t group) {
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, H, W}));
  Node* cat = g.addNode("Concat", {x, conv(g, x, C, G, 3, 1, 1, 1, true, 91)}, {"cat"}, "cat");
  cat->setAttr("axis", int64_t{1});
  std::vector<Value*> ins{cat->output(0)};
  for (uint32_t i = 0; i < 4; ++i) {
    Tensor t = randomTensor({C + G}, 92 + i);
    if (i == 3)  // variance > 0
      for (int64_t c = 0; c < C + G; ++c) t.data<float>()[c] = 0.5f + std::fabs(t.data<float>()[c]);
    ins.push_back(g.addConstant(g.uniqueName("bn"), t));
  }
  Value* n = g.addNode("BatchNormalization", ins, {"n"}, "bn")->output(0);
  Value* r = g.addNode("Relu", {n}, {"r"}, "relu")->output(0);
  g.addOutput(conv(g, r, C + G, M, k, stride, 0, group, true, 97));
  g.addOutput(cat->output(0));
  inferShapes(g);
}

/// Moves "bn" and "relu" into the input loads of the convolution reading them (NodeTiling::inputNorm), unless the
/// schedule already has.
void normaliseOnLoad(npu::NpuSchedule& s) {
  for (const npu::GroupSchedule& grp : s.groups)
    if (grp.tiling.size() == 1 && !grp.tiling[0].inputNorm.empty()) return;
  for (size_t gi = 0; gi < s.groups.size(); ++gi)
    if (s.groups[gi].nodes == std::vector<std::string>{"bn", "relu"}) {
      s.groups.erase(s.groups.begin() + static_cast<long>(gi));  // the next group is the convolution reading relu
      s.groups[gi].nodes.insert(s.groups[gi].nodes.begin(), {"bn", "relu"});
      s.groups[gi].tiling[0].inputNorm = {"bn", "relu"};
      return;
    }
  ADD_FAILURE() << "no group [bn, relu]:\n" << s.toText();
}

// DenseNet's BatchNormalization -> ReLU -> 1x1 Conv: the convolution normalises each input block it loads
// (NodeTiling::inputNorm), so the normalised map is never stored. The compiler chooses it (cheaper than the
// normalisation's own pass), the result matches the interpreter, and the normalisation's own pass moved more DRAM
// bytes; then forced on strided, phased, packed, stacked, grouped and unpadded k x k consumers; schedules naming a
// padded consumer or a chain not starting with the normalisation are refused.
TEST(NpuLower, PreActivationNormalisationOnTheConvLoads) {
  const int64_t C = 24, G = 8, H = 11, W = 9, M = 20;
  for (const char* cfgName : {"default.json", "tiny.json", "edge.json"}) {
    SCOPED_TRACE(cfgName);
    Graph g;
    preActivation(g, C, G, H, W, M, 1, 1, 1);
    const hw::HardwareConfig cfg = config(cfgName);
    const npu::NpuSchedule s = npu::compilerSchedule(g, cfg.firstNpu()->npu, "test");
    EXPECT_EQ(s.tilingOf("bn"), nullptr) << s.toText();  // no element-wise pass of its own
    EXPECT_NE(s.toText().find("input blocks through bn + relu as loaded"), std::string::npos) << s.toText();
    EXPECT_EQ(npu::NpuSchedule::fromJson(s.toJson(), "test"), s);
    const npu::SimReport onLoad = checkAgainstInterpreter(g, cfgName);
    // Every tiling option the tuner may give the convolution keeps the normalisation on its loads.
    std::string proj;
    for (const npu::GroupSchedule& grp : s.groups)
      if (!grp.tiling[0].inputNorm.empty()) proj = grp.tiling[0].node;
    const Node* projNode = nullptr;
    for (const auto& n : g.nodes())
      if (n->name() == proj) projNode = n.get();
    ASSERT_NE(projNode, nullptr);
    const std::vector<npu::NodeTiling> options = npu::tilingOptions(*projNode, *s.tilingOf(proj), g, cfg.firstNpu()->npu);
    EXPECT_GT(options.size(), 1u);
    for (size_t k = 1; k < options.size() && k < 4; ++k) {
      EXPECT_EQ(options[k].inputNorm, (std::vector<std::string>{"bn", "relu"}));
      checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& sched) {
        normaliseOnLoad(sched);
        *sched.tilingOf(proj) = options[k];
      });
    }
    // The same schedule with the normalisation in a group of its own (its tiling as the default schedule has it).
    const npu::NpuSchedule plain = npu::defaultSchedule(g, cfg.firstNpu()->npu, "test");
    const npu::SimReport apart = checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& sched) {
      for (size_t gi = 0; gi < sched.groups.size(); ++gi)
        if (!sched.groups[gi].tiling[0].inputNorm.empty()) {
          sched.groups[gi].tiling[0].inputNorm.clear();
          sched.groups[gi].nodes.erase(sched.groups[gi].nodes.begin(), sched.groups[gi].nodes.begin() + 2);
          for (const npu::GroupSchedule& p : plain.groups)
            if (p.nodes == std::vector<std::string>{"bn", "relu"}) sched.groups.insert(sched.groups.begin() + static_cast<long>(gi), p);
          return;
        }
      ADD_FAILURE() << "no input normalisation:\n" << sched.toText();
    });
    // Its own pass loads the concat and stores the normalised map, which the convolution loads again.
    EXPECT_GE(apart.dramBytesRead, onLoad.dramBytesRead + 4u * (C + G) * H * W);
    EXPECT_GE(apart.dramBytesWritten, onLoad.dramBytesWritten + 4u * (C + G) * H * W);
  }
  struct Case { int64_t k, stride, group; const char* variant; bool phased; };
  for (const Case& k : {Case{1, 2, 1, "matrix", false}, Case{1, 2, 1, "matrix", true}, Case{3, 2, 2, "packed", true},
                        Case{3, 1, 1, "stacked", false}, Case{3, 2, 1, "stacked", true}, Case{3, 1, 2, "matrix", false},
                        Case{2, 1, 4, "matrix", false}})
    for (const char* cfgName : {"default.json", "tiny.json"}) {
      SCOPED_TRACE(fmt::format("{}x{} consumer, stride {}, group {}, {}{}, {}", k.k, k.k, k.stride, k.group, k.variant,
                               k.phased ? " phased" : "", cfgName));
      Graph g;  // 16 channels: every forced tiling's blocks fit tiny's buffers
      preActivation(g, 12, 4, H, W, M, k.k, k.stride, k.group);
      checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& s) {
        normaliseOnLoad(s);
        for (npu::GroupSchedule& grp : s.groups)
          if (!grp.tiling.empty() && !grp.tiling[0].inputNorm.empty()) {
            npu::NodeTiling& u = grp.tiling[0];
            u.variant = k.variant, u.phased = k.phased;
            u.rows = 3, u.cols = 4, u.channels = 16, u.inChannels = 16 / k.group, u.coutPerPass = 0;
            u.weightsResident = std::string(cfgName) == "default.json";
          }
      });
    }
  const hw::HardwareConfig defaultCfg = config("default.json");
  const hw::NpuConfig& npuCfg = defaultCfg.firstNpu()->npu;
  {
    Graph g;
    preActivation(g, C, G, H, W, M, 3, 1, 1);
    npu::NpuSchedule s = npu::compilerSchedule(g, npuCfg, "test", false);
    normaliseOnLoad(s);
    s.groups.back().tiling[0].variant = "packed";  // 32 channels: a packed block's gemm would exceed the array
    EXPECT_THROW(npu::verifySchedule(s, g, npuCfg), UserError);
  }
  {
    Graph g;
    preActivation(g, C, G, H, W, M, 1, 1, 1);
    npu::NpuSchedule s = npu::compilerSchedule(g, npuCfg, "test", false);
    npu::verifySchedule(s, g, npuCfg);
    for (npu::GroupSchedule& grp : s.groups)
      if (!grp.tiling[0].inputNorm.empty()) grp.tiling[0].inputNorm = {"relu"};
    EXPECT_THROW(npu::verifySchedule(s, g, npuCfg), UserError);
  }
  Graph padded;  // a 3x3 consumer with padding: relu(bn(0)) is not 0
  preActivation(padded, C, G, H, W, M, 1, 1, 1);
  for (const auto& n : padded.nodes())
    if (n->opType() == "Conv" && n->input(0)->name() == "r") {
      n->setAttr("kernel_shape", std::vector<int64_t>{1, 1});
      n->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
    }
  inferShapes(padded);
  npu::NpuSchedule s = npu::compilerSchedule(padded, npuCfg, "test", false);
  EXPECT_NE(s.tilingOf("bn"), nullptr) << s.toText();
  normaliseOnLoad(s);
  EXPECT_THROW(npu::verifySchedule(s, padded, npuCfg), UserError);
}

// DenseNet's transition after pool-before-pointwise-conv: BatchNormalization -> ReLU -> 2x2/2 average pool -> 1x1
// conv. The pool applies the normalisation to each window it loads (NodeTiling::inputNorm on a pool tiling, the
// vectors staged in the weight buffer); the result matches the interpreter with less DRAM traffic than the
// normalisation's own pass, also forced on max pools and 3x3/1 windows. A padded pool is never given it.
TEST(NpuLower, PreActivationNormalisationOnThePoolLoads) {
  struct Case { const char* op; int64_t k, stride, pad; };
  for (const Case& k : {Case{"AveragePool", 2, 2, 0}, Case{"MaxPool", 3, 1, 0}, Case{"AveragePool", 3, 2, 0}, Case{"MaxPool", 3, 2, 1}})
    for (const char* cfgName : {"default.json", "tiny.json", "edge.json"}) {
      SCOPED_TRACE(fmt::format("{} {}x{}/{} pad {}, {}", k.op, k.k, k.k, k.stride, k.pad, cfgName));
      const int64_t C = 40, H = 12, W = 10;
      Graph g;
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, H, W}));
      std::vector<Value*> ins{g.addNode("Relu", {x}, {"x_relu"}, "x_relu")->output(0)};  // the BN is not the input's
      for (uint32_t i = 0; i < 4; ++i) {
        Tensor t = randomTensor({C}, 120 + i);
        if (i == 3)
          for (int64_t c = 0; c < C; ++c) t.data<float>()[c] = 0.5f + std::fabs(t.data<float>()[c]);
        ins.push_back(g.addConstant(g.uniqueName("bn"), t));
      }
      Value* r = g.addNode("Relu", {g.addNode("BatchNormalization", ins, {"n"}, "bn")->output(0)}, {"r"}, "relu")->output(0);
      Node* pool = g.addNode(k.op, {r}, {"p"}, "pool");
      pool->setAttr("kernel_shape", std::vector<int64_t>{k.k, k.k});
      pool->setAttr("strides", std::vector<int64_t>{k.stride, k.stride});
      pool->setAttr("pads", std::vector<int64_t>{k.pad, k.pad, k.pad, k.pad});
      g.addOutput(conv(g, pool->output(0), C, 16, 1, 1, 0, 1, true, 125));
      g.addOutput(ins[0]);  // the map the normalisation reads stays needed
      inferShapes(g);
      const hw::HardwareConfig cfg = config(cfgName);
      const npu::NpuSchedule s = npu::compilerSchedule(g, cfg.firstNpu()->npu, "test");
      if (k.pad > 0) {
        EXPECT_TRUE(s.tilingOf("pool")->inputNorm.empty()) << s.toText();  // relu(bn(padding)) is not the padding
        checkAgainstInterpreter(g, cfgName);
        continue;
      }
      // Forced where the compiler did not choose it (its modelled cost decides), so the lowering is always checked.
      auto onLoad = [](npu::NpuSchedule& sched) {
        for (size_t gi = 0; gi < sched.groups.size(); ++gi)
          if (sched.groups[gi].nodes == std::vector<std::string>{"bn", "relu"}) {
            sched.groups.erase(sched.groups.begin() + static_cast<long>(gi));
            sched.groups[gi].nodes.insert(sched.groups[gi].nodes.begin(), {"bn", "relu"});
            sched.tilingOf("pool")->inputNorm = {"bn", "relu"};
            return;
          }
      };
      const npu::SimReport loaded = checkAgainstInterpreter(g, cfgName, onLoad);
      EXPECT_EQ(npu::NpuSchedule::fromJson(s.toJson(), "test"), s);
      // The normalisation in a group of its own (its tiling as the default schedule has it).
      const npu::NpuSchedule plain = npu::defaultSchedule(g, cfg.firstNpu()->npu, "test");
      const npu::SimReport apart = checkAgainstInterpreter(g, cfgName, [&](npu::NpuSchedule& sched) {
        for (size_t gi = 0; gi < sched.groups.size(); ++gi)
          if (!sched.groups[gi].tiling.empty() && !sched.groups[gi].tiling[0].inputNorm.empty()) {
            sched.groups[gi].tiling[0].inputNorm.clear();
            sched.groups[gi].nodes.erase(sched.groups[gi].nodes.begin(), sched.groups[gi].nodes.begin() + 2);
            for (const npu::GroupSchedule& p : plain.groups)
              if (p.nodes == std::vector<std::string>{"bn", "relu"}) sched.groups.insert(sched.groups.begin() + static_cast<long>(gi), p);
            return;
          }
      });
      EXPECT_GE(apart.dramBytesWritten, loaded.dramBytesWritten + 4u * C * H * W);  // the normalised map's store
    }
}

// Grouped convolutions whose groups are narrower than the array (RegNet: 8 channels per group on a 16 x 16 array)
// compute several groups per gemm block with block-diagonal weights (NodeTiling::groupPack). Forced on odd cases
// (packs that divide the groups and packs whose last packed group overlaps the one before), the result matches the
// interpreter and takes fewer gemms and matrix-unit cycles than one group per block with the same tiles. On
// `default` the compiler packs RegNet's layers (13 and 6 groups of 8 channels at 14x14: two per block). A pack
// larger than the group count, or one on a depthwise convolution, is refused.
TEST(NpuLower, NarrowGroupsShareAGemmBlock) {
  struct Case { int64_t groups, cin, cout, k, stride; int64_t pack; };  // cin, cout: per group
  for (const Case& k : {Case{6, 8, 8, 3, 1, 2}, Case{8, 4, 4, 3, 2, 4}, Case{3, 4, 4, 3, 1, 3}, Case{4, 2, 6, 1, 1, 2},
                        Case{8, 1, 2, 3, 1, 8}, Case{13, 8, 8, 3, 1, 2}, Case{5, 4, 4, 5, 1, 3}, Case{6, 4, 4, 3, 1, 4},
                        Case{7, 5, 3, 3, 2, 3}})
    for (const char* cfgName : {"default.json", "tiny.json", "edge.json"}) {
      SCOPED_TRACE(fmt::format("{} groups of {} -> {} channels, {}x{} stride {}, {} per block, {}", k.groups, k.cin, k.cout, k.k,
                               k.k, k.stride, k.pack, cfgName));
      Graph g;
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, k.groups * k.cin, 11, 9}));
      g.addOutput(g.addNode("Relu", {conv(g, x, k.groups * k.cin, k.groups * k.cout, k.k, k.stride, k.k / 2, k.groups, true, 61)},
                            {"r"})->output(0));
      inferShapes(g);
      const std::string convName = g.nodes()[0]->name();
      checkAgainstInterpreter(g, cfgName);  // the compiler's choice
      auto withPack = [&](int64_t pack) {
        return [&, pack](npu::NpuSchedule& sched) {
          npu::NodeTiling& t = *sched.tilingOf(convName);
          t.groupPack = pack, t.variant = "matrix", t.phased = false, t.rows = 2, t.cols = 3, t.coutPerPass = 0;
          t.weightsResident = std::string(cfgName) != "tiny.json";
          t.inChannels = std::min<int64_t>(16, pack * k.cin), t.channels = std::min<int64_t>(16, pack * k.cout);
        };
      };
      const npu::SimReport packed = checkAgainstInterpreter(g, cfgName, withPack(k.pack));
      const npu::SimReport apart = checkAgainstInterpreter(g, cfgName, withPack(1));
      // One group per block: groups / packed groups times the gemms.
      const auto mm = static_cast<size_t>(npu::Unit::Matrix);
      const int64_t packedGroups = (k.groups + k.pack - 1) / k.pack;
      EXPECT_EQ(apart.units[mm].instructions * static_cast<uint64_t>(packedGroups),
                packed.units[mm].instructions * static_cast<uint64_t>(k.groups));
      EXPECT_LT(packed.units[mm].busyCycles, apart.units[mm].busyCycles);
    }
  for (int64_t groups : {13, 6}) {
    SCOPED_TRACE(fmt::format("{} groups of 8 channels at 14x14", groups));
    Graph g;
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, groups * 8, 14, 14}));
    g.addOutput(conv(g, x, groups * 8, groups * 8, 3, 1, 1, groups, true, 67));
    inferShapes(g);
    const hw::HardwareConfig cfg = config("default.json");
    const npu::NpuSchedule s = npu::compilerSchedule(g, cfg.firstNpu()->npu, "test");
    EXPECT_EQ(s.tilingOf(g.nodes()[0]->name())->groupPack, 2) << s.toText();
    EXPECT_NE(s.toText().find("2 groups per block"), std::string::npos) << s.toText();
    EXPECT_EQ(npu::NpuSchedule::fromJson(s.toJson(), "test"), s);
    checkAgainstInterpreter(g, "default.json");
  }
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 48, 7, 7}));
  g.addOutput(conv(g, conv(g, x, 48, 48, 3, 1, 1, 6, true, 71), 48, 48, 3, 1, 1, 48, true, 73));
  inferShapes(g);
  const hw::HardwareConfig defaultCfg = config("default.json");
  const hw::NpuConfig& npuCfg = defaultCfg.firstNpu()->npu;
  npu::NpuSchedule s = npu::compilerSchedule(g, npuCfg, "test", false);
  npu::verifySchedule(s, g, npuCfg);
  const std::string grouped = g.nodes()[0]->name(), depthwise = g.nodes()[1]->name();
  s.tilingOf(grouped)->groupPack = 7;  // 6 groups
  EXPECT_THROW(npu::verifySchedule(s, g, npuCfg), UserError);
  s.tilingOf(grouped)->groupPack = 4;  // the second packed group overlaps the first
  npu::verifySchedule(s, g, npuCfg);
  s.tilingOf(depthwise)->groupPack = 2;
  EXPECT_THROW(npu::verifySchedule(s, g, npuCfg), UserError);
}

// Split along the channels (opset 13: sizes as an input): each output a view at its channel offset, read by a
// conv and an element-wise op; an output that is a subgraph output is copied out densely. A split of rows is a
// copy per output (NpuLower.CopiesAlongOtherAxes).
TEST(NpuLower, ChannelSplitOutputsAreViews) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 40, 9, 7}));
    Value* y = conv(g, x, 40, 52, 1, 1, 0, 1, true, 9);
    Node* split = g.addNode("Split", {y, g.addConstant("sizes", Tensor::fromVector<int64_t>({3}, {20, 7, 25}))},
                            {"s0", "s1", "s2"});
    split->setAttr("axis", int64_t{1});
    g.addOutput(conv(g, split->output(0), 20, 8, 3, 1, 1, 1, false, 13));
    g.addOutput(split->output(1));
    g.addOutput(g.addNode("Sigmoid", {split->output(2)}, {"sg"})->output(0));
  });
}

// What addressing cannot do is copied by DMA (lower_copy.cpp), and matches the interpreter on default and tiny:
// a Reshape that changes the channels-last layout (a map flattened with its pixels, the pixels merged into one axis
// of a rank-3 tensor as ViT's patch embedding does, and a rank-3 tensor split back into a map), Concat along rows,
// columns and axis 1 of a rank-3 tensor (ViT's class token), Split of rows, Slice of rows and columns with steps,
// and Gather along rows (1-D indices, repeated and negative) and columns (a scalar index: the axis goes).
// Shapes are odd and the copies are longer than tiny's slots, so tiles split rows and columns.
TEST(NpuLower, CopiesAlongOtherAxes) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 20, 9, 7}));
    Value* y = conv(g, x, 20, 24, 1, 1, 0, 1, true, 3);
    // Reshapes across layouts
    Value* flat = g.addNode("Reshape", {y, constInts(g, {1, -1})}, {"flat"})->output(0);
    g.addOutput(g.addNode("Relu", {flat}, {"rf"})->output(0));
    Value* tokens = g.addNode("Reshape", {y, constInts(g, {1, 24, 63})}, {"tokens"})->output(0);
    Node* tr = g.addNode("Transpose", {tokens}, {"tt"});
    tr->setAttr("perm", std::vector<int64_t>{0, 2, 1});
    Value* t = tr->output(0);  // [1, 63, 24]
    Value* cls = g.addConstant("cls", randomTensor({1, 1, 24}, 4));
    Node* cat3 = g.addNode("Concat", {cls, t}, {"cat3"});
    cat3->setAttr("axis", int64_t{1});
    Value* seq = g.addNode("Relu", {cat3->output(0)}, {"seq"})->output(0);  // [1, 64, 24]
    Node* first = g.addNode("Gather", {seq, g.addConstant("zero", Tensor::fromVector<int64_t>({}, {0}))}, {"first"});
    first->setAttr("axis", int64_t{1});
    g.addOutput(first->output(0));  // [1, 24]
    Value* back = g.addNode("Reshape", {seq, constInts(g, {1, 8, 8, 24})}, {"back"})->output(0);
    g.addOutput(g.addNode("Sigmoid", {back}, {"sb"})->output(0));
    // Concat, Split, Slice and Gather of rows and columns of a map
    Value* r = g.addNode("Relu", {y}, {"r"})->output(0);
    Node* rows = g.addNode("Concat", {y, r}, {"rows"});
    rows->setAttr("axis", int64_t{2});
    g.addOutput(rows->output(0));  // [1, 24, 18, 7]
    Node* chans = g.addNode("Concat", {r, x}, {"chans"});
    chans->setAttr("axis", int64_t{1});  // channels still by addressing
    g.addOutput(g.addNode("Relu", {chans->output(0)}, {"rc"})->output(0));
    Node* wide = g.addNode("Concat", {y, r, y}, {"wide"});
    wide->setAttr("axis", int64_t{-1});
    g.addOutput(g.addNode("Relu", {wide->output(0)}, {"rw"})->output(0));  // [1, 24, 9, 21]
    Node* split = g.addNode("Split", {r, constInts(g, {2, 7})}, {"s0", "s1"});
    split->setAttr("axis", int64_t{2});
    g.addOutput(split->output(0));
    g.addOutput(conv(g, split->output(1), 24, 5, 3, 1, 1, 1, true, 6));
    Value* every = g.addNode("Slice", {r, constInts(g, {1, -6}), constInts(g, {9, 7}), constInts(g, {2, 3}),
                                       constInts(g, {2, 3})}, {"every"})->output(0);
    g.addOutput(every);  // rows 1, 3, 5, 7 of columns 1, 4: [1, 24, 4, 2]
    Node* g2 = g.addNode("Gather", {r, constInts(g, {8, 0, -1, 3})}, {"g2"});
    g2->setAttr("axis", int64_t{2});
    g.addOutput(g.addNode("Relu", {g2->output(0)}, {"rg"})->output(0));
    Node* g3 = g.addNode("Gather", {y, g.addConstant("two", Tensor::fromVector<int64_t>({}, {2}))}, {"g3"});
    g3->setAttr("axis", int64_t{3});
    g.addOutput(g3->output(0));  // [1, 24, 9]
  });
}

Node* resize(Graph& g, Value* x, const std::vector<float>& scales, const std::string& coordinates, const std::string& rounding) {
  Value* roi = g.addConstant(g.uniqueName("roi"), Tensor::fromVector<float>({0}, {}));
  Value* sc = g.addConstant(g.uniqueName("scales"), Tensor::fromVector<float>({4}, scales));
  Node* n = g.addNode("Resize", {x, roi, sc}, {g.uniqueName("up")});
  n->setAttr("mode", std::string("nearest"));
  n->setAttr("coordinate_transformation_mode", coordinates);
  n->setAttr("nearest_mode", rounding);
  return n;
}

/// A Resize to output `sizes` (empty roi and scales), in `mode`.
Node* resizeToSizes(Graph& g, Value* x, const std::vector<int64_t>& sizes, const std::string& mode) {
  Value* roi = g.addConstant(g.uniqueName("roi"), Tensor::fromVector<float>({0}, {}));
  Value* scales = g.addConstant(g.uniqueName("scales"), Tensor::fromVector<float>({0}, {}));
  Value* sz = g.addConstant(g.uniqueName("sizes"), Tensor::fromVector<int64_t>({4}, sizes));
  Node* n = g.addNode("Resize", {x, roi, scales, sz}, {g.uniqueName("up")});
  n->setAttr("mode", mode);
  return n;
}

// Nearest upsampling by integer factors (2x2 half_pixel, 3x2 asymmetric floor, 1x4 pytorch_half_pixel) as DMA:
// loads per column phase, stores per row phase; 300 channels make the default tiles split the columns and tiny
// the channels. Cubic mode, linear align_corners, fractional factors and asymmetric rounding that is not
// floor(x / s) are refused.
TEST(NpuLower, NearestResizeByStridedLoadsAndStores) {
  for (int64_t C : {5, 300})
    checkBoth([C](Graph& g) {
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, 7, 9}));
      Value* r = g.addNode("Relu", {x}, {"r"})->output(0);
      g.addOutput(resize(g, r, {1, 1, 2, 2}, "half_pixel", "round_prefer_floor")->output(0));
      g.addOutput(resize(g, r, {1, 1, 3, 2}, "asymmetric", "floor")->output(0));
      g.addOutput(resize(g, x, {1, 1, 1, 4}, "pytorch_half_pixel", "round_prefer_ceil")->output(0));
    });
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 8, 6, 6}));
  Node* cubic = resize(g, x, {1, 1, 2, 2}, "half_pixel", "round_prefer_floor");
  cubic->setAttr("mode", std::string("cubic"));
  Node* corners = resize(g, x, {1, 1, 2, 2}, "align_corners", "round_prefer_floor");
  corners->setAttr("mode", std::string("linear"));
  Node* fractional = resize(g, x, {1, 1, 1.5f, 1.5f}, "half_pixel", "round_prefer_floor");
  Node* rounding = resize(g, x, {1, 1, 3, 3}, "asymmetric", "round_prefer_floor");
  for (Node* n : {cubic, corners, fractional, rounding}) g.addOutput(n->output(0));
  inferShapes(g);
  for (const auto& [n, why] : std::vector<std::pair<Node*, std::string>>{{cubic, "only nearest and linear"},
                                                                         {corners, "'align_corners'"},
                                                                         {fractional, "not an integer upscaling"},
                                                                         {rounding, "does not map output x"}}) {
    hw::SupportResult r = npu::loweringSupport(*n, *config("default.json").firstNpu());
    EXPECT_FALSE(r.supported);
    EXPECT_NE(r.reason.find(why), std::string::npos) << r.reason;
  }
}

// Bilinear upsampling by integer factors on the vector unit (edge-clamped halo, per-phase weights along W then H):
// 2x2 half_pixel, 4x4 asymmetric, 2x4 pytorch_half_pixel and 1x3 half_pixel, on odd images; 300 channels and a
// 24x20 image make tiles split channels, rows and columns (inner tiles read real halo rows and columns), batch 2
// the image axis. The scales may also come as output sizes.
TEST(NpuLower, BilinearResizeByVectorInterpolation) {
  for (int64_t C : {3, 300})
    checkBoth([C](Graph& g) {
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, 7, 9}));
      Value* r = g.addNode("Relu", {x}, {"r"})->output(0);
      for (auto [scales, coordinates] : std::vector<std::pair<std::vector<float>, std::string>>{
               {{1, 1, 2, 2}, "half_pixel"}, {{1, 1, 4, 4}, "asymmetric"}, {{1, 1, 2, 4}, "pytorch_half_pixel"},
               {{1, 1, 1, 3}, "half_pixel"}}) {
        Node* n = resize(g, r, scales, coordinates, "round_prefer_floor");
        n->setAttr("mode", std::string("linear"));
        g.addOutput(n->output(0));
      }
    });
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 40, 24, 20}));
    g.addOutput(resizeToSizes(g, x, {2, 40, 48, 40}, "linear")->output(0));
  });
  // A one-pixel map upsampled 3x2 (random graph seed 613 of the long run): its output (6 words) is smaller than one
  // tile's 3x3 halo band, which must still fit (the tile is sized by the buffers, not by the node's output).
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 1, 1, 1}));
    Node* n = resize(g, g.addNode("Relu", {x}, {"r"})->output(0), {1, 1, 3, 2}, "asymmetric", "floor");
    n->setAttr("mode", std::string("linear"));
    g.addOutput(n->output(0));
  });
}

// A one-pixel map upsampled in any mode is a replication (DeepLabV3's image pooling branch, 1x1 -> 33x33 bilinear,
// which the linear lowering's factor limit of 8 had left on the host): linear half_pixel 33x33 on 300 channels
// (tiles split the channels on tiny), cubic 5x7, nearest asymmetric 4x3, and by output sizes.
TEST(NpuLower, OnePixelResizeInAnyModeIsAReplication) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 300, 1, 1}));
    Value* r = g.addNode("Relu", {x}, {"r"})->output(0);
    for (auto [scales, mode] : std::vector<std::pair<std::vector<float>, std::string>>{
             {{1, 1, 33, 33}, "linear"}, {{1, 1, 5, 7}, "cubic"}, {{1, 1, 4, 3}, "nearest"}}) {
      Node* n = resize(g, r, scales, mode == "nearest" ? "asymmetric" : "half_pixel", "round_prefer_floor");
      n->setAttr("mode", mode);
      g.addOutput(n->output(0));
    }
  });
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 24, 1, 1}));
    Node* n = resizeToSizes(g, x, {2, 24, 13, 11}, "linear");
    n->setAttr("coordinate_transformation_mode", std::string("align_corners"));
    g.addOutput(n->output(0));
  });
}

// Gelu (erf form, fused into the Conv's epilogue, and approximate="tanh" on its own) and Erf on the vector unit, on
// inputs scaled by 4 so that the tails are reached; a Gelu with an unknown approximation is refused with the reason.
TEST(NpuLower, GeluAndErfOnTheVectorUnit) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 19, 6, 7}));
    Value* wide = g.addNode("Mul", {x, g.addConstant("four", Tensor::scalar(4.0f))}, {"wide"})->output(0);
    g.addOutput(g.addNode("Gelu", {conv(g, wide, 19, 21, 3, 1, 1, 1, true, 5)}, {"gelu"})->output(0));
    Node* approx = g.addNode("Gelu", {wide}, {"gelu_tanh"});
    approx->setAttr("approximate", std::string("tanh"));
    g.addOutput(approx->output(0));
    g.addOutput(g.addNode("Erf", {wide}, {"erf"})->output(0));
  });
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 4, 3, 3}));
  Node* bad = g.addNode("Gelu", {x}, {"bad"});
  bad->setAttr("approximate", std::string("cubic"));
  g.addOutput(bad->output(0));
  inferShapes(g);
  hw::SupportResult r = npu::loweringSupport(*bad, *config("default.json").firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("no vector sub-op"), std::string::npos) << r.reason;
}

Node* layerNorm(Graph& g, Value* x, int64_t C, bool bias, float eps, uint32_t seed) {
  std::vector<Value*> ins{x, g.addConstant(g.uniqueName("gamma"), randomTensor({C}, seed))};
  if (bias) ins.push_back(g.addConstant(g.uniqueName("beta"), randomTensor({C}, seed + 1)));
  Node* n = g.addNode("LayerNormalization", ins, {g.uniqueName("ln")});
  n->setAttr("axis", int64_t{-1});
  n->setAttr("epsilon", eps);
  return n;
}

// LayerNormalization over the last axis on the vector unit (row sums by vred and a butterfly of vbin adds, rsqrt):
// channel counts with and without a remainder of 16 lanes (100 = 6 x 16 + 4, 7 < 16), without bias, followed by an
// activation (its epilogue) and by a second LN reading the first; input values far from zero (the deviations are
// taken from the mean first, as the reference does). 768 channels (ViT-B) fit `default` but not `tiny`, which refuses
// it naming the buffers.
TEST(NpuLower, LayerNormalizationOnTheVectorUnit) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 37, 100}));
    Value* shifted = g.addNode("Add", {x, g.addConstant("far", Tensor::scalar(50.0f))}, {"shifted"})->output(0);
    Value* y = layerNorm(g, shifted, 100, true, 1e-5f, 3)->output(0);
    g.addOutput(g.addNode("Relu", {y}, {"relu"})->output(0));
    g.addOutput(layerNorm(g, y, 100, true, 1e-3f, 5)->output(0));
    Value* small = g.addInput("small", TensorType::fromShape(DType::Float32, {3, 7}));
    g.addOutput(layerNorm(g, small, 7, false, 1e-6f, 7)->output(0));
  });
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 19, 768}));
  Node* ln = layerNorm(g, x, 768, true, 1e-6f, 9);
  g.addOutput(ln->output(0));
  inferShapes(g);
  // Rows far from zero with a small spread (epsilon below the variance): 1365 values near -60 within +-0.01, as in
  // random graph 5515 of the twenty-seventh session (near -38). The float32 row sums lost 5.4e-4 of the result's scale
  // here (2.3e-4 there) before each row was shifted by its first element.
  Value* wide = g.addInput("wide", TensorType::fromShape(DType::Float32, {2, 1365}));
  Value* narrow = g.addNode("Mul", {wide, g.addConstant("spread", Tensor::scalar(0.01f))}, {"narrow"})->output(0);
  Value* offset = g.addNode("Add", {narrow, g.addConstant("offset", Tensor::scalar(-60.0f))}, {"offset"})->output(0);
  g.addOutput(layerNorm(g, offset, 1365, true, 1e-6f, 13)->output(0));
  inferShapes(g);
  const npu::SimReport report = checkAgainstInterpreter(g, "default.json");
  EXPECT_GT(report.totalCycles, 0u);
  hw::SupportResult r = npu::loweringSupport(*ln, *config("tiny.json").firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("does not fit"), std::string::npos) << r.reason;
  Node* axis1 = layerNorm(g, x, 768, true, 1e-6f, 11);
  axis1->setAttr("axis", int64_t{1});
  g.addOutput(axis1->output(0));
  inferShapes(g);
  r = npu::loweringSupport(*axis1, *config("default.json").firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("last axis"), std::string::npos) << r.reason;
}

// Transpose by DMA: a transformer's head split [T, H, D] -> [H, T, D] (whole rows of D words) and its key transpose
// [T, H, D] -> [H, D, T] (one word per element), a matrix, permutations of a rank-4 map (stored channels-last: its
// contiguous axis is C) and of a rank-5 tensor; tiny forces tiles of rows and of row pieces.
TEST(NpuLower, TransposeByStridedLoads) {
  checkBoth([](Graph& g) {
    auto transpose = [&](const std::string& name, const Shape& shape, const std::vector<int64_t>& perm) {
      Value* x = g.addInput(name, TensorType::fromShape(DType::Float32, shape));
      Value* a = g.addNode("Relu", {x}, {name + "_relu"})->output(0);
      Node* t = g.addNode("Transpose", {a}, {name + "_t"});
      t->setAttr("perm", perm);
      g.addOutput(g.addNode("Relu", {t->output(0)}, {name + "_y"})->output(0));
    };
    transpose("heads", {37, 6, 24}, {1, 0, 2});
    transpose("keys", {37, 6, 24}, {1, 2, 0});
    transpose("matrix", {29, 70}, {1, 0});
    transpose("nhwc", {2, 5, 6, 7}, {0, 2, 3, 1});
    transpose("reversed", {2, 3, 5, 7}, {3, 2, 1, 0});
    transpose("rank5", {2, 3, 4, 5, 6}, {4, 0, 3, 1, 2});
  });
}

// Softmax over the last axis on the vector unit (row max and sum by vred and butterflies, exp, the inverse sum as
// rsqrt squared): rows with and without a 16-lane remainder, logits scaled by 200 (exp would overflow without the max subtracted), a
// rank-2 one; Softmax over another axis is refused.
TEST(NpuLower, SoftmaxOnTheVectorUnit) {
  checkBoth([](Graph& g) {
    auto softmax = [&](const std::string& name, const Shape& shape, float scale) {
      Value* x = g.addInput(name, TensorType::fromShape(DType::Float32, shape));
      Value* s = g.addNode("Mul", {x, g.addConstant(name + "_scale", Tensor::scalar(scale))}, {name + "_s"})->output(0);
      Node* n = g.addNode("Softmax", {s}, {name + "_y"});
      n->setAttr("axis", int64_t{-1});
      g.addOutput(n->output(0));
    };
    softmax("scores", {3, 9, 37}, 1.0f);
    softmax("sharp", {2, 5, 48}, 200.0f);  // exp(200) overflows: the max must be subtracted first
    softmax("matrix", {4, 7}, 3.0f);
  });
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {3, 5, 6}));
  Node* n = g.addNode("Softmax", {x}, {"y"});
  n->setAttr("axis", int64_t{1});
  g.addOutput(n->output(0));
  inferShapes(g);
  hw::SupportResult r = npu::loweringSupport(*n, *config("default.json").firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("last axis"), std::string::npos) << r.reason;
}

// MatMul of two computed tensors (attention's Q Kt and P V): batched with B's batch dims, B of rank 2 shared by the
// batches, odd sizes (partial K and N blocks, several row tiles and column chunks), an activation after it (its
// epilogue); tiny refuses B's blocks that do not fit half its weight buffer, naming them.
TEST(NpuLower, MatMulOfComputedOperands) {
  auto build = [](Graph& g) {
    auto matmul = [&](const std::string& name, const Shape& a, const Shape& b) {
      Value* x = g.addNode("Relu", {g.addInput(name + "_a", TensorType::fromShape(DType::Float32, a))}, {name + "_ra"})->output(0);
      Value* y = g.addNode("Relu", {g.addInput(name + "_b", TensorType::fromShape(DType::Float32, b))}, {name + "_rb"})->output(0);
      return g.addNode("MatMul", {x, y}, {name + "_m"})->output(0);
    };
    g.addOutput(matmul("batched", {3, 37, 21}, {3, 21, 50}));
    g.addOutput(g.addNode("Relu", {matmul("shared", {2, 9, 30}, {30, 7})}, {"shared_relu"})->output(0));
    g.addOutput(matmul("rows", {300, 20}, {20, 40}));
  };
  Graph g;
  build(g);
  inferShapes(g);
  checkAgainstInterpreter(g, "default.json");
  const Node* mm = g.findValue("rows_m")->producer();
  hw::SupportResult r = npu::loweringSupport(*mm, *config("tiny.json").firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("weight buffer"), std::string::npos) << r.reason;
  Graph small;
  Value* a = small.addInput("a", TensorType::fromShape(DType::Float32, {2, 20, 12}));
  Value* b = small.addInput("b", TensorType::fromShape(DType::Float32, {2, 12, 9}));
  small.addOutput(small.addNode("MatMul", {small.addNode("Relu", {a}, {"ra"})->output(0), small.addNode("Relu", {b}, {"rb"})->output(0)},
                                {"m"})->output(0));
  inferShapes(small);
  checkAgainstInterpreter(small, "tiny.json");
}

// A Gather of channels with constant indices moves runs of consecutive input channels by strided loads: a
// channel shuffle (g = 4, the runs interleave), and arbitrary indices with repeats, a negative index and a
// descending run; 40 channels with the tiny configuration's 512-word slots, 600 with default (channel blocks).
TEST(NpuLower, ChannelGatherByStridedLoads) {
  for (int64_t C : {40, 600}) {
    checkBoth([C](Graph& g) {
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, C, 5, 3}));
      std::vector<int64_t> shuffle;
      for (int64_t c = 0; c < C; ++c) shuffle.push_back((c % 4) * (C / 4) + c / 4);
      Node* a = g.addNode("Gather", {x, g.addConstant("shuffle", Tensor::fromVector<int64_t>({C}, shuffle))}, {"a"});
      a->setAttr("axis", int64_t{1});
      std::vector<int64_t> odd = {5, 0, 1, 2, 7, 7, 3, -1, 9, 8, 7, 6, 20, 22, 24};
      Node* b = g.addNode("Gather", {a->output(0), g.addConstant("odd", Tensor::fromVector<int64_t>({15}, odd))}, {"b"});
      b->setAttr("axis", int64_t{-3});
      g.addOutput(g.addNode("Relu", {a->output(0)}, {"r"})->output(0));
      g.addOutput(b->output(0));
    });
  }
}

// ShuffleNet's unit: the input's first half (a channel view) and a conv of its second half are concatenated and
// shuffled. The concat is never materialised: the shuffle's strided loads read each run from the concat input that
// holds it, so the only stores are the conv's and the shuffle's results (the view would otherwise be copied). Also a
// gather whose runs cross from one concat input into the next (uneven inputs, odd indices).
TEST(NpuLower, ShuffleGathersFromTheConcatsInputs) {
  for (bool odd : {false, true})
    for (const char* cfgName : {"default.json", "tiny.json"}) {
      SCOPED_TRACE(fmt::format("{}, {}", odd ? "odd gather of three inputs" : "shuffle", cfgName));
      const int64_t H = 6, W = 5;
      Graph g;
      Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 24, H, W}));
      Value* b2 = conv(g, channelSlice(g, x, 12, 24, 1), 12, 12, 1, 1, 0, 1, true, 41);
      std::vector<Value*> pieces{channelSlice(g, x, 0, 12, 1), b2};
      if (odd) pieces.push_back(channelSlice(g, x, 3, 8, 1));
      Node* cat = g.addNode("Concat", pieces, {"cat"});
      cat->setAttr("axis", int64_t{1});
      const int64_t C = odd ? 29 : 24;
      std::vector<int64_t> idx;
      for (int64_t c = 0; c < C; ++c) idx.push_back(odd ? (c * 7 + 3) % C : (c % 2) * 12 + c / 2);
      if (odd) std::iota(idx.begin() + 10, idx.begin() + 22, 6);  // channels 6-17: one run across two inputs
      Node* shuffle = g.addNode("Gather", {cat->output(0), g.addConstant("idx", Tensor::fromVector<int64_t>({C}, idx))}, {"y"});
      shuffle->setAttr("axis", int64_t{1});
      g.addOutput(shuffle->output(0));
      inferShapes(g);
      const npu::SimReport r = checkAgainstInterpreter(g, cfgName);
      EXPECT_EQ(r.dramBytesWritten, 4u * H * W * (12 + C));  // the conv's result and the gather's, nothing else
    }
}

TEST(NpuLower, PoolsMaxAverageGlobalAndCeilMode) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 35, 15, 13}));
    Node* mp = g.addNode("MaxPool", {x}, {"mp"});
    mp->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
    mp->setAttr("strides", std::vector<int64_t>{2, 2});
    mp->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
    Node* ceil = g.addNode("MaxPool", {mp->output(0)}, {"mpc"});
    ceil->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
    ceil->setAttr("strides", std::vector<int64_t>{2, 2});
    ceil->setAttr("ceil_mode", int64_t{1});
    Node* ap = g.addNode("AveragePool", {mp->output(0)}, {"ap"});
    ap->setAttr("kernel_shape", std::vector<int64_t>{2, 2});
    Node* gap = g.addNode("GlobalAveragePool", {ap->output(0)}, {"gap"});
    Node* gmp = g.addNode("GlobalMaxPool", {ceil->output(0)}, {"gmp"});
    g.addOutput(gap->output(0));
    g.addOutput(gmp->output(0));
  });
}

TEST(NpuLower, BatchNormalization) {
  checkBoth([](Graph& g) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 20, 5, 5}));
    Tensor var = randomTensor({20}, 4);
    for (int64_t i = 0; i < 20; ++i) var.data<float>()[i] = std::fabs(var.data<float>()[i]) + 0.1f;
    Node* bn = g.addNode("BatchNormalization", {x, g.addConstant("g", randomTensor({20}, 1)), g.addConstant("b", randomTensor({20}, 2)),
                                                g.addConstant("m", randomTensor({20}, 3)), g.addConstant("v", var)}, {"y"});
    g.addOutput(bn->output(0));
  });
}

TEST(NpuLower, TilesAreForcedByTheTinyConfiguration) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 32, 28, 28}));
  g.addOutput(conv(g, x, 32, 32, 3, 1, 1, 1, true, 9));
  inferShapes(g);
  npu::SimReport big = checkAgainstInterpreter(g, "default.json");
  npu::SimReport tiny = checkAgainstInterpreter(g, "tiny.json");
  // The tiny buffers need more, smaller transfers: more instructions and more DRAM traffic.
  EXPECT_GT(tiny.units[0].instructions, big.units[0].instructions);
  EXPECT_GT(tiny.dramBytesRead, big.dramBytesRead);
}

TEST(NpuLower, HazardCheckerCatchesARemovedDependency) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 8, 8}));
  g.addOutput(g.addNode("Relu", {conv(g, x, 16, 16, 3, 1, 1, 1, true, 3)}, {"r"})->output(0));
  inferShapes(g);
  hw::HardwareConfig cfg = config("default.json");
  npu::LoweredSubgraph lowered = npu::lowerSubgraph(g, *cfg.firstNpu(), "t");
  // Drop the first wait of the matrix unit on a load: the Gemm may now read its input before it arrives.
  bool removed = false;
  for (auto& inst : lowered.program.instructions)
    if (inst.opcode == npu::Opcode::Gemm && (inst.waitMask & 1u)) {
      inst.waitMask &= static_cast<uint8_t>(~1u);
      removed = true;
      break;
    }
  ASSERT_TRUE(removed);
  // The producer still signals, so the token count is unbalanced but no unit deadlocks.
  npu::NpuRun run = npu::runLowered(lowered, cfg.firstNpu()->npu, {randomTensor({1, 16, 8, 8}, 1)});
  ASSERT_FALSE(run.report.hazards.empty());
  EXPECT_EQ(run.report.hazards.front().kind, npu::HazardKind::ReadAfterWrite);
}

TEST(NpuLower, RefusalsNameTheReason) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 3}));
  Value* y = g.addInput("y", TensorType::fromShape(DType::Float32, {1, 1, 3, 4}));  // computed, rank 4
  Node* mm = g.addNode("MatMul", {x, y}, {"m"});
  // One value per row ([2, 1]) is lowered (NpuLower.RowReductionsAndRowBroadcasts); a middle axis broadcast is not.
  Value* x3 = g.addInput("x3", TensorType::fromShape(DType::Float32, {2, 3, 4}));
  Node* add = g.addNode("Add", {x3, g.addConstant("mid", randomTensor({2, 1, 4}, 1))}, {"a"});
  g.addOutput(mm->output(0));
  g.addOutput(add->output(0));
  inferShapes(g);
  hw::HardwareConfig cfg = config("default.json");
  hw::SupportResult r = npu::loweringSupport(*mm, *cfg.firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("rank 4 is stored channels-last"), std::string::npos) << r.reason;
  r = npu::loweringSupport(*add, *cfg.firstNpu());
  EXPECT_FALSE(r.supported);
  EXPECT_NE(r.reason.find("broadcast"), std::string::npos) << r.reason;
}

}  // namespace
