// Tests of the neural-network operator family (conv, matmul, pool, norm, quantise, detection) against
// naive loops written here and hand-computed values, plus diagnostics and symbolic shape inference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/registry.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

using Attrs = std::map<std::string, AttrValue>;

/// A graph with one node `n1` whose inputs are graph inputs of the given tensors' types.
struct SingleNodeGraph {
  Graph graph;
  Node* node = nullptr;
  std::map<std::string, Tensor> feeds;

  SingleNodeGraph(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs, size_t outputs) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        ins.push_back(nullptr);
        continue;
      }
      std::string name = "in" + std::to_string(i);
      ins.push_back(graph.addInput(name, TensorType::fromShape(inputs[i].dtype(), inputs[i].shape())));
      feeds[name] = inputs[i];
    }
    std::vector<std::string> outNames;
    for (size_t i = 0; i < outputs; ++i) outNames.push_back("out" + std::to_string(i));
    node = graph.addNode(op, ins, outNames, "n1");
    for (const auto& [k, v] : attrs) node->setAttr(k, v);
    for (Value* v : node->outputs()) graph.addOutput(v);
  }
};

/// Verifies, infers and runs one node; checks that the inferred types equal the computed tensors'.
std::vector<Tensor> runOp(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
                          size_t outputs = 1) {
  SingleNodeGraph s(op, inputs, attrs, outputs);
  auto problems = verifyGraph(s.graph);
  EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems[0]);
  inferShapes(s.graph);
  std::vector<Tensor> out = Interpreter(s.graph).run(s.feeds);
  for (size_t i = 0; i < out.size(); ++i) {
    const TensorType& t = s.node->output(i)->type;
    EXPECT_EQ(t.dtype, out[i].dtype()) << op << " output " << i;
    if (t.isStatic()) {
      EXPECT_EQ(t.staticShape(), out[i].shape()) << op << " output " << i;
    }
  }
  return out;
}

/// The UserError message of inferring (and, if inference passes, running) one node.
std::string errorOf(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {}, size_t outputs = 1) {
  SingleNodeGraph s(op, inputs, attrs, outputs);
  try {
    inferShapes(s.graph);
    Interpreter(s.graph).run(s.feeds);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

Tensor randomTensor(Shape shape, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(shapeSize(shape)));
  for (float& f : v) f = dist(gen);
  return Tensor::fromVector<float>(std::move(shape), v);
}

void expectNear(const Tensor& got, const std::vector<double>& want, double tol = 1e-4) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.elementAsDouble(static_cast<int64_t>(i)), want[i], tol * (1 + std::fabs(want[i]))) << "at " << i;
}

// ------------------------------------------------------------------------------------------------ Conv

/// Direct 2-D convolution, the textbook definition.
std::vector<double> naiveConv2d(const Tensor& x, const Tensor& w, const Tensor* b, int64_t groups, Shape stride, Shape dil,
                                Shape pads, int64_t OH, int64_t OW) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), KH = w.dim(2), KW = w.dim(3);
  const int64_t cg = C / groups, mg = M / groups;
  std::vector<double> y(static_cast<size_t>(N * M * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? b->elementAsDouble(m) : 0.0;
          const int64_t g = m / mg;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * stride[0] + kh * dil[0] - pads[0], iw = ow * stride[1] + kw * dil[1] - pads[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += x.elementAsDouble(((n * C + g * cg + c) * H + ih) * W + iw) *
                       w.elementAsDouble(((m * cg + c) * KH + kh) * KW + kw);
              }
          y[static_cast<size_t>(((n * M + m) * OH + oh) * OW + ow)] = acc;
        }
  return y;
}

TEST(OpsNnConv, GroupedDilatedStridedMatchesNaiveLoop) {
  Tensor x = randomTensor({2, 6, 11, 9}, 1), w = randomTensor({4, 3, 3, 2}, 2), b = randomTensor({4}, 3);
  Attrs a{{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2, 1}}, {"dilations", std::vector<int64_t>{2, 3}},
          {"pads", std::vector<int64_t>{1, 2, 0, 1}}};
  // H: (11 + 1 + 0 - 5) / 2 + 1 = 4; W: (9 + 2 + 1 - 4) / 1 + 1 = 9
  auto y = runOp("Conv", {x, w, b}, a);
  ASSERT_EQ(y[0].shape(), (Shape{2, 4, 4, 9}));
  expectNear(y[0], naiveConv2d(x, w, &b, 2, {2, 1}, {2, 3}, {1, 2}, 4, 9));
}

TEST(OpsNnConv, PointwiseAndSameLowerMatchNaiveLoop) {
  Tensor x = randomTensor({1, 5, 7, 7}, 4), w1 = randomTensor({3, 5, 1, 1}, 5);
  expectNear(runOp("Conv", {x, w1})[0], naiveConv2d(x, w1, nullptr, 1, {1, 1}, {1, 1}, {0, 0}, 7, 7));
  // SAME_LOWER, stride 2, kernel 4 on 7: out 4, total pad (4-1)*2+4-7 = 3, begin 2 (the larger half).
  Tensor w4 = randomTensor({2, 5, 4, 4}, 6);
  auto y = runOp("Conv", {x, w4}, {{"auto_pad", std::string("SAME_LOWER")}, {"strides", std::vector<int64_t>{2, 2}}});
  expectNear(y[0], naiveConv2d(x, w4, nullptr, 1, {2, 2}, {1, 1}, {2, 2}, 4, 4));
}

TEST(OpsNnConv, OneAndThreeDimensionalAgreeWithTwoDimensionalForm) {
  // A 1-D conv equals a 2-D conv with a height-1 image; a 3-D conv with depth-1 kernel on depth-1 input too.
  Tensor x = randomTensor({1, 2, 10}, 7), w = randomTensor({3, 2, 3}, 8);
  auto y1 = runOp("Conv", {x, w}, {{"pads", std::vector<int64_t>{1, 0}}, {"strides", std::vector<int64_t>{2}}});
  Tensor x2 = x.reshaped({1, 2, 1, 10}), w2 = w.reshaped({3, 2, 1, 3});
  expectNear(y1[0], naiveConv2d(x2, w2, nullptr, 1, {1, 2}, {1, 1}, {0, 1}, 1, 5));
  Tensor x3 = x.reshaped({1, 2, 1, 1, 10}), w3 = w.reshaped({3, 2, 1, 1, 3});
  auto y3 = runOp("Conv", {x3, w3}, {{"pads", std::vector<int64_t>{0, 0, 1, 0, 0, 0}}, {"strides", std::vector<int64_t>{1, 1, 2}}});
  ASSERT_EQ(y3[0].shape(), (Shape{1, 3, 1, 1, 5}));
  expectNear(y3[0], naiveConv2d(x2, w2, nullptr, 1, {1, 2}, {1, 1}, {0, 1}, 1, 5));
}

TEST(OpsNnConv, ChannelMismatchNamesTheNode) {
  std::string msg = errorOf("Conv", {randomTensor({1, 3, 5, 5}, 1), randomTensor({4, 4, 3, 3}, 2)});
  EXPECT_NE(msg.find("node 'n1' (Conv)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input has 3 channels, weight expects 4"), std::string::npos) << msg;
  msg = errorOf("Conv", {randomTensor({1, 3, 5, 5}, 1), randomTensor({4, 3, 3, 3}, 2)}, {{"strides", std::vector<int64_t>{1}}});
  EXPECT_NE(msg.find("'strides' has 1 values, expected 2"), std::string::npos) << msg;
  msg = errorOf("Conv", {randomTensor({1, 3, 5, 5}, 1), randomTensor({4, 3, 3, 3}, 2)}, {{"auto_pad", std::string("SAME")}});
  EXPECT_NE(msg.find("auto_pad 'SAME' is not one of"), std::string::npos) << msg;
}

TEST(OpsNnConv, InfersSymbolicBatchAndUnknownSpatialExtents) {
  Graph g;
  Value* x = g.addInput("x", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("N"), Dim::known(3), Dim::unknown(), Dim::known(32)}));
  Value* w = g.addConstant("w", randomTensor({8, 3, 3, 3}, 1));
  Node* n = g.addNode("Conv", {x, w}, {"y"}, "c");
  n->setAttr("strides", std::vector<int64_t>{2, 2});
  n->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
  g.addOutput(n->output(0));
  inferShapes(g);
  EXPECT_EQ(n->output(0)->type.toString(), "f32[N,8,?,16]");
}

TEST(OpsNnConv, HalfPrecisionComputesInFloat) {
  Tensor x = randomTensor({1, 2, 5, 5}, 9), w = randomTensor({3, 2, 3, 3}, 10);
  Tensor xh = x.castTo(DType::Float16), wh = w.castTo(DType::Float16);
  auto y = runOp("Conv", {xh, wh});
  EXPECT_EQ(y[0].dtype(), DType::Float16);
  // The reference is computed from the f16-rounded operands, so only the output rounding differs.
  expectNear(y[0], naiveConv2d(xh, wh, nullptr, 1, {1, 1}, {1, 1}, {0, 0}, 3, 3), 2e-3);
}

TEST(OpsNnConv, IntegerConvWithPerChannelWeightZeroPoints) {
  // 1x1 kernel: y[m] = sum_c (x[c] - 2) * (w[m, c] - wz[m]).
  Tensor x = Tensor::fromVector<uint8_t>({1, 2, 1, 2}, {3, 4, 5, 6});
  Tensor w = Tensor::fromVector<uint8_t>({2, 2, 1, 1}, {1, 2, 10, 20});
  Tensor wz = Tensor::fromVector<uint8_t>({2}, {1, 10});
  auto y = runOp("ConvInteger", {x, w, Tensor::scalar<uint8_t>(2), wz});
  EXPECT_EQ(y[0].dtype(), DType::Int32);
  // x - 2 = c0 [1, 2], c1 [3, 4]; w - wz = m0 [0, 1], m1 [0, 10]
  EXPECT_EQ(y[0].toInt64Vector(), (std::vector<int64_t>{3, 4, 30, 40}));
  // QLinearConv on the same data: round(acc * 0.5 * [1, 0.1] / 1) + 100, bias [1, -30] added to acc first.
  auto q = runOp("QLinearConv", {x, Tensor::scalar<float>(0.5f), Tensor::scalar<uint8_t>(2), w,
                                 Tensor::fromVector<float>({2}, {1.f, 0.1f}), wz, Tensor::scalar<float>(1.f),
                                 Tensor::scalar<uint8_t>(100), Tensor::fromVector<int32_t>({2}, {1, -30})});
  // m0: (3+1)*0.5 = 2, (4+1)*0.5 = 2.5 -> 2; m1: 0*0.05 = 0, 10*0.05 = 0.5 -> 0
  EXPECT_EQ(q[0].toInt64Vector(), (std::vector<int64_t>{102, 102, 100, 100}));
}

// -------------------------------------------------------------------------------------- ConvTranspose

TEST(OpsNnConvTranspose, GroupedStridedMatchesNaiveScatter) {
  const int64_t N = 1, C = 4, H = 3, W = 4, groups = 2, mg = 3, K = 3, S = 2, D = 1, P = 1, OP = 1;
  Tensor x = randomTensor({N, C, H, W}, 11), w = randomTensor({C, mg, K, K}, 12);
  auto y = runOp("ConvTranspose", {x, w},
                 {{"group", groups}, {"strides", std::vector<int64_t>{S, S}}, {"pads", std::vector<int64_t>{P, P, P, P}},
                  {"output_padding", std::vector<int64_t>{OP, OP}}});
  const int64_t OH = S * (H - 1) + OP + (K - 1) * D + 1 - 2 * P, OW = S * (W - 1) + OP + (K - 1) * D + 1 - 2 * P;
  ASSERT_EQ(y[0].shape(), (Shape{N, groups * mg, OH, OW}));
  std::vector<double> want(static_cast<size_t>(groups * mg * OH * OW), 0.0);
  const int64_t cg = C / groups;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t m = 0; m < mg; ++m)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw)
          for (int64_t kh = 0; kh < K; ++kh)
            for (int64_t kw = 0; kw < K; ++kw) {
              const int64_t oh = ih * S + kh * D - P, ow = iw * S + kw * D - P;
              if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
              const int64_t om = (c / cg) * mg + m;
              want[static_cast<size_t>((om * OH + oh) * OW + ow)] +=
                  x.elementAsDouble((c * H + ih) * W + iw) * w.elementAsDouble(((c * mg + m) * K + kh) * K + kw);
            }
  expectNear(y[0], want);
}

TEST(OpsNnConvTranspose, OutputShapeBeyondTheFullResultLeavesZerosAtTheEnd) {
  // x 1x1x2, w 1x1x2, stride 1: full result has 3 values [x0*w0, x0*w1 + x1*w0, x1*w1]; output_shape 5.
  Tensor x = Tensor::fromVector<float>({1, 1, 2}, {1, 2}), w = Tensor::fromVector<float>({1, 1, 2}, {3, 4});
  expectNear(runOp("ConvTranspose", {x, w}, {{"output_shape", std::vector<int64_t>{5}}})[0], {3, 10, 8, 0, 0});
  // output_shape 2 trims one value: total padding 1, the larger half (1) at the beginning.
  expectNear(runOp("ConvTranspose", {x, w}, {{"output_shape", std::vector<int64_t>{2}}})[0], {10, 8});
}

// ------------------------------------------------------------------------------------- MatMul and Gemm

std::vector<double> naiveMatMul(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> y(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) y[static_cast<size_t>(i * N + j)] += a[static_cast<size_t>(i * K + k)] * b[static_cast<size_t>(k * N + j)];
  return y;
}

TEST(OpsNnMatMul, BroadcastsBatchAxes) {
  Tensor a = randomTensor({2, 1, 5, 7}, 21), b = randomTensor({3, 7, 6}, 22);
  auto y = runOp("MatMul", {a, b});
  ASSERT_EQ(y[0].shape(), (Shape{2, 3, 5, 6}));
  std::vector<double> av = a.toDoubleVector(), bv = b.toDoubleVector(), want;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      std::vector<double> as(av.begin() + i * 35, av.begin() + (i + 1) * 35), bs(bv.begin() + j * 42, bv.begin() + (j + 1) * 42);
      auto part = naiveMatMul(as, bs, 5, 7, 6);
      want.insert(want.end(), part.begin(), part.end());
    }
  expectNear(y[0], want);
}

TEST(OpsNnMatMul, OneDimensionalOperandsArePromotedAndDropped) {
  Tensor v = Tensor::fromVector<float>({3}, {1, 2, 3});
  Tensor m = Tensor::fromVector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  auto vm = runOp("MatMul", {v, m});
  ASSERT_EQ(vm[0].shape(), (Shape{2}));
  expectNear(vm[0], {22, 28});  // [1*1+2*3+3*5, 1*2+2*4+3*6]
  auto vv = runOp("MatMul", {v, v});
  EXPECT_EQ(vv[0].shape(), Shape{});
  expectNear(vv[0], {14});
  auto ints = runOp("MatMul", {Tensor::fromVector<int64_t>({1, 2}, {3, -4}), Tensor::fromVector<int64_t>({2, 1}, {5, 6})});
  EXPECT_EQ(ints[0].data<int64_t>()[0], -9);
}

TEST(OpsNnMatMul, SymbolicInferenceAndInnerMismatch) {
  Graph g;
  Value* a = g.addInput("a", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("B"), Dim::unknown(), Dim::known(8)}));
  Value* b = g.addInput("b", TensorType(DType::Float32, std::vector<Dim>{Dim::known(8), Dim::known(4)}));
  Node* n = g.addNode("MatMul", {a, b}, {"y"}, "mm");
  g.addOutput(n->output(0));
  inferShapes(g);
  EXPECT_EQ(n->output(0)->type.toString(), "f32[B,?,4]");
  std::string msg = errorOf("MatMul", {randomTensor({2, 3}, 1), randomTensor({4, 5}, 2)});
  EXPECT_NE(msg.find("node 'n1' (MatMul): inner dimensions differ"), std::string::npos) << msg;
}

TEST(OpsNnGemm, TransposesScalesAndBroadcastsBias) {
  Tensor a = randomTensor({4, 3}, 31), b = randomTensor({5, 4}, 32), c = randomTensor({1, 5}, 33);
  auto y = runOp("Gemm", {a, b, c}, {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", -2.f}});
  ASSERT_EQ(y[0].shape(), (Shape{3, 5}));
  std::vector<double> want(15);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < 4; ++k) acc += a.elementAsDouble(k * 3 + i) * b.elementAsDouble(j * 4 + k);
      want[static_cast<size_t>(i * 5 + j)] = 0.5 * acc - 2.0 * c.elementAsDouble(j);
    }
  expectNear(y[0], want);
  std::string msg = errorOf("Gemm", {a, b, randomTensor({3, 2}, 1)}, {{"transA", int64_t{1}}, {"transB", int64_t{1}}});
  EXPECT_NE(msg.find("cannot be broadcast"), std::string::npos) << msg;
}

TEST(OpsNnMatMul, IntegerAndQLinearWithZeroPoints) {
  Tensor a = Tensor::fromVector<uint8_t>({2, 2}, {10, 20, 30, 40});
  Tensor b = Tensor::fromVector<uint8_t>({2, 2}, {1, 2, 3, 4});
  // a - 10 = [[0,10],[20,30]], b - [1,2] per column = [[0,0],[2,2]] -> [[20,20],[60,60]]
  auto y = runOp("MatMulInteger", {a, b, Tensor::scalar<uint8_t>(10), Tensor::fromVector<uint8_t>({2}, {1, 2})});
  EXPECT_EQ(y[0].dtype(), DType::Int32);
  expectNear(y[0], {20, 20, 60, 60});
  // Requantised: round(acc * (0.5 * 0.25 / 1)) + 3, rounding half to even before the zero point is added:
  // round(2.5) + 3 = 5, round(7.5) + 3 = 11.
  auto q = runOp("QLinearMatMul", {a, Tensor::scalar<float>(0.5f), Tensor::scalar<uint8_t>(10), b, Tensor::scalar<float>(0.25f),
                                   Tensor::fromVector<uint8_t>({2}, {1, 2}), Tensor::scalar<float>(1.f), Tensor::scalar<uint8_t>(3)});
  EXPECT_EQ(q[0].dtype(), DType::UInt8);
  expectNear(q[0], {5, 5, 11, 11});
}

// ------------------------------------------------------------------------------------------------ Pool

TEST(OpsNnPool, CeilModeDropsWindowStartingInPadding) {
  // in 5, kernel 2, stride 2, pads 1/1: floor -> 3; ceil -> ceil(5/2)+1 = 4, but the 4th window starts at
  // 6 - 1 = 5, inside the end padding, so it is dropped -> 3.
  Tensor x = randomTensor({1, 1, 5, 5}, 41);
  Attrs a{{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}},
          {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"ceil_mode", int64_t{1}}};
  EXPECT_EQ(runOp("MaxPool", {x}, a)[0].shape(), (Shape{1, 1, 3, 3}));
  a["pads"] = std::vector<int64_t>{0, 0, 0, 0};  // in 5, no pads: ceil(3/2)+1 = 3 (last window partial)
  auto y = runOp("MaxPool", {x}, a);
  ASSERT_EQ(y[0].shape(), (Shape{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(y[0].data<float>()[8], x.data<float>()[24]);  // the corner window holds one element
}

TEST(OpsNnPool, MaxPoolIndicesRowAndColumnMajor) {
  // 1x2x2x3 input; kernel 2x2 stride 1 -> 1x2x1x2. Maxima placed by hand.
  Tensor x = Tensor::fromVector<float>({1, 2, 2, 3}, {0, 9, 0, 0, 0, 0,  /* c1: */ 0, 0, 0, 7, 0, 8});
  Attrs a{{"kernel_shape", std::vector<int64_t>{2, 2}}};
  auto rowMajor = runOp("MaxPool", {x}, a, 2);
  expectNear(rowMajor[0], {9, 9, 7, 8});
  // Flat offsets over the whole input: c0 (0,1) = 1; c1 (1,0) = 6 + 3, c1 (1,2) = 6 + 5.
  EXPECT_EQ(rowMajor[1].toInt64Vector(), (std::vector<int64_t>{1, 1, 9, 11}));
  a["storage_order"] = int64_t{1};
  // Column-major within a plane: (h, w) -> h + w * H: (0,1) = 2; (1,0) = 1; (1,2) = 5.
  EXPECT_EQ(runOp("MaxPool", {x}, a, 2)[1].toInt64Vector(), (std::vector<int64_t>{2, 2, 6 + 1, 6 + 5}));
}

TEST(OpsNnPool, AveragePoolPaddingCountsMatchNaiveLoop) {
  Tensor x = randomTensor({1, 2, 4, 5}, 42);
  for (int64_t include : {0, 1}) {
    auto y = runOp("AveragePool", {x}, {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                                        {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"count_include_pad", include}});
    ASSERT_EQ(y[0].shape(), (Shape{1, 2, 2, 3}));
    std::vector<double> want;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t oh = 0; oh < 2; ++oh)
        for (int64_t ow = 0; ow < 3; ++ow) {
          double sum = 0;
          int count = 0;
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 3; ++kw) {
              int64_t ih = oh * 2 + kh - 1, iw = ow * 2 + kw - 1;
              if (ih < 0 || ih >= 4 || iw < 0 || iw >= 5) continue;
              sum += x.elementAsDouble((c * 4 + ih) * 5 + iw);
              ++count;
            }
          want.push_back(sum / (include ? 9 : count));
        }
    expectNear(y[0], want);
  }
}

TEST(OpsNnPool, MaxUnpoolInvertsMaxPoolAndLpPoolMatchesDefinition) {
  Tensor x = randomTensor({1, 1, 4, 4}, 43);
  Attrs a{{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}};
  auto pooled = runOp("MaxPool", {x}, a, 2);
  auto unpooled = runOp("MaxUnpool", {pooled[0], pooled[1]}, a);
  ASSERT_EQ(unpooled[0].shape(), x.shape());
  int nonZero = 0;
  for (int64_t i = 0; i < 16; ++i)
    if (unpooled[0].data<float>()[i] != 0) {
      ++nonZero;
      EXPECT_EQ(unpooled[0].data<float>()[i], x.data<float>()[i]);
    }
  EXPECT_EQ(nonZero, 4);
  auto lp = runOp("LpPool", {x}, {{"kernel_shape", std::vector<int64_t>{4, 4}}, {"p", int64_t{3}}});
  double s = 0;
  for (int64_t i = 0; i < 16; ++i) s += std::pow(std::fabs(x.elementAsDouble(i)), 3);
  expectNear(lp[0], {std::cbrt(s)});
  EXPECT_NE(errorOf("MaxPool", {x}).find("'kernel_shape' is missing"), std::string::npos);
}

TEST(OpsNnPool, MaxUnpoolOutputShapePadsAtTheEndOfEachAxis) {
  // Indices address the default 2x2 result; output_shape 3x3 keeps those coordinates and pads with zeros.
  Tensor x = Tensor::fromVector<float>({1, 1, 1, 1}, {5});
  Tensor idx = Tensor::fromVector<int64_t>({1, 1, 1, 1}, {3});  // (1, 1) of the 2x2 default
  Attrs a{{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}};
  expectNear(runOp("MaxUnpool", {x, idx}, a)[0], {0, 0, 0, 5});
  auto y = runOp("MaxUnpool", {x, idx, Tensor::fromVector<int64_t>({4}, {1, 1, 3, 3})}, a);
  expectNear(y[0], {0, 0, 0, 0, 5, 0, 0, 0, 0});
  std::string msg = errorOf("MaxUnpool", {x, Tensor::fromVector<int64_t>({1, 1, 1, 1}, {4})}, a);
  EXPECT_NE(msg.find("index 4 is outside the unpooled tensor"), std::string::npos) << msg;
}

TEST(OpsNnPool, GlobalPoolsKeepSymbolicBatchAndReduceSpatialAxes) {
  Graph g;
  Value* x = g.addInput("x", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("N"), Dim::known(4), Dim::unknown(), Dim::unknown()}));
  Node* avg = g.addNode("GlobalAveragePool", {x}, {"a"}, "gap");
  Node* mx = g.addNode("GlobalMaxPool", {x}, {"m"}, "gmp");
  g.addOutput(avg->output(0));
  g.addOutput(mx->output(0));
  inferShapes(g);
  EXPECT_EQ(avg->output(0)->type.toString(), "f32[N,4,1,1]");
  Tensor t = Tensor::fromVector<float>({1, 2, 1, 3}, {1, -2, 4, -1, -5, 0});
  expectNear(runOp("GlobalAveragePool", {t})[0], {1, -2});
  expectNear(runOp("GlobalMaxPool", {t})[0], {4, 0});
  expectNear(runOp("GlobalLpPool", {t})[0], {std::sqrt(21.0), std::sqrt(26.0)});
}

// ----------------------------------------------------------------------------------------- Normalisation

TEST(OpsNnBatchNorm, TrainingModeUsesBatchStatisticsAndUpdatesRunningOnes) {
  Tensor x = randomTensor({3, 2, 2, 2}, 51), scale = Tensor::fromVector<float>({2}, {1.5f, -1.f});
  Tensor bias = Tensor::fromVector<float>({2}, {0.1f, 0.2f}), mean = Tensor::fromVector<float>({2}, {0.3f, -0.3f});
  Tensor var = Tensor::fromVector<float>({2}, {0.5f, 2.f});
  auto y = runOp("BatchNormalization", {x, scale, bias, mean, var}, {{"training_mode", int64_t{1}}, {"momentum", 0.8f}}, 3);
  std::vector<double> want(24), runMean, runVar;
  for (int64_t c = 0; c < 2; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 4; ++i) m += x.elementAsDouble((n * 2 + c) * 4 + i) / 12;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 4; ++i) v += std::pow(x.elementAsDouble((n * 2 + c) * 4 + i) - m, 2) / 12;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 4; ++i) {
        int64_t at = (n * 2 + c) * 4 + i;
        want[static_cast<size_t>(at)] = scale.elementAsDouble(c) * (x.elementAsDouble(at) - m) / std::sqrt(v + 1e-5) + bias.elementAsDouble(c);
      }
    runMean.push_back(mean.elementAsDouble(c) * 0.8 + m * 0.2);
    runVar.push_back(var.elementAsDouble(c) * 0.8 + v * 0.2);
  }
  expectNear(y[0], want);
  expectNear(y[1], runMean);
  expectNear(y[2], runVar);
  std::string msg = errorOf("BatchNormalization", {x, Tensor::fromVector<float>({3}, {1, 1, 1}), bias, mean, var});
  EXPECT_NE(msg.find("has 3 values, expected 2"), std::string::npos) << msg;
}

TEST(OpsNnNorm, InstanceNormAndLrnMatchDefinitions) {
  Tensor x = Tensor::fromVector<float>({1, 2, 3}, {1, 2, 3, -1, 0, 5});
  auto y = runOp("InstanceNormalization", {x, Tensor::fromVector<float>({2}, {2, 1}), Tensor::fromVector<float>({2}, {0, 1})},
                 {{"epsilon", 0.f}});
  const double s0 = std::sqrt(2.0 / 3.0), m1 = 4.0 / 3.0, s1 = std::sqrt((std::pow(-1 - m1, 2) + m1 * m1 + std::pow(5 - m1, 2)) / 3);
  expectNear(y[0], {2 * -1 / s0, 0, 2 * 1 / s0, (-1 - m1) / s1 + 1, -m1 / s1 + 1, (5 - m1) / s1 + 1});
  // LRN, size 3 over 2 channels: each channel sums the squares of both.
  Tensor z = Tensor::fromVector<float>({1, 2, 1}, {1, 2});
  auto l = runOp("LRN", {z}, {{"size", int64_t{3}}, {"alpha", 0.3f}, {"beta", 0.5f}, {"bias", 2.f}});
  const double d = std::sqrt(2 + 0.3 / 3 * 5);
  expectNear(l[0], {1 / d, 2 / d});
}

// -------------------------------------------------------------------------------------------- Dropout

TEST(OpsNnDropout, SeededTrainingMaskReproducesNumpy) {
  // np.random.seed(0); np.random.uniform(0, 1, 4) = [0.5488, 0.7152, 0.6028, 0.5449]; keep where >= 0.6.
  Tensor x = Tensor::fromVector<float>({4}, {1, 2, 3, 4});
  auto y = runOp("Dropout", {x, Tensor::scalar<float>(0.6f), Tensor::scalar<bool>(true)}, {{"seed", int64_t{0}}}, 2);
  expectNear(y[0], {0, 2 / 0.4, 3 / 0.4, 0});
  EXPECT_EQ(y[1].dtype(), DType::Bool);
  EXPECT_EQ(y[1].toInt64Vector(), (std::vector<int64_t>{0, 1, 1, 0}));
  auto inference = runOp("Dropout", {x, Tensor::scalar<float>(0.6f)}, {}, 2);
  expectNear(inference[0], {1, 2, 3, 4});
  EXPECT_EQ(inference[1].toInt64Vector(), (std::vector<int64_t>{1, 1, 1, 1}));
}

// ------------------------------------------------------------------------------------------ Quantisation

TEST(OpsNnQuantize, PerAxisRoundsHalfToEvenAndSaturates) {
  Tensor x = Tensor::fromVector<float>({2, 3}, {2.5f, 3.5f, -300.f, 1.f, -1.f, 1000.f});
  Tensor scale = Tensor::fromVector<float>({2}, {1.f, 0.5f});
  Tensor zero = Tensor::fromVector<int8_t>({2}, {0, 10});
  auto q = runOp("QuantizeLinear", {x, scale, zero}, {{"axis", int64_t{0}}});
  EXPECT_EQ(q[0].dtype(), DType::Int8);
  // row 0: 2.5 -> 2, 3.5 -> 4, -300 -> -128; row 1: 1/0.5+10 = 12, -2+10 = 8, 2000+10 -> 127
  EXPECT_EQ(q[0].toInt64Vector(), (std::vector<int64_t>{2, 4, -128, 12, 8, 127}));
  auto d = runOp("DequantizeLinear", {q[0], scale, zero}, {{"axis", int64_t{0}}});
  expectNear(d[0], {2, 4, -128, 1, -1, 58.5});
  std::string msg = errorOf("QuantizeLinear", {x, Tensor::fromVector<float>({3}, {1, 1, 1}), Tensor::fromVector<int8_t>({3}, {0, 0, 0})},
                            {{"axis", int64_t{0}}});
  EXPECT_NE(msg.find("scale has 3 values but axis 0 of the input has extent 2"), std::string::npos) << msg;
}

TEST(OpsNnQuantize, DynamicQuantizeIncludesZeroInRange) {
  auto y = runOp("DynamicQuantizeLinear", {Tensor::fromVector<float>({3}, {1.f, 2.f, 2.55f})}, {}, 3);
  // range [0, 2.55] -> scale 0.01, zero point 0
  EXPECT_NEAR(y[1].elementAsDouble(0), 0.01, 1e-7);
  EXPECT_EQ(y[2].elementAsDouble(0), 0);
  EXPECT_EQ(y[0].toInt64Vector(), (std::vector<int64_t>{100, 200, 255}));
}

// -------------------------------------------------------------------------------------------- Detection

TEST(OpsNnDetection, NonMaxSuppressionKeepsBestAndDropsOverlaps) {
  // Boxes (y1, x1, y2, x2): 0 and 1 overlap with IoU 0.81 / (1 + 1 - 0.81) > 0.5; 2 is separate.
  Tensor boxes = Tensor::fromVector<float>({1, 3, 4}, {0, 0, 1, 1, 0.1f, 0.1f, 1, 1, 5, 5, 6, 6});
  Tensor scores = Tensor::fromVector<float>({1, 1, 3}, {0.7f, 0.9f, 0.8f});
  auto y = runOp("NonMaxSuppression", {boxes, scores, Tensor::scalar<int64_t>(10), Tensor::scalar<float>(0.5f)});
  EXPECT_EQ(y[0].toInt64Vector(), (std::vector<int64_t>{0, 0, 1, 0, 0, 2}));
  auto thresholded = runOp("NonMaxSuppression", {boxes, scores, Tensor::scalar<int64_t>(10), Tensor::scalar<float>(0.5f),
                                                 Tensor::scalar<float>(0.85f)});
  EXPECT_EQ(thresholded[0].toInt64Vector(), (std::vector<int64_t>{0, 0, 1}));
  std::string msg = errorOf("NonMaxSuppression", {boxes, Tensor::fromVector<float>({1, 1, 2}, {1, 2})});
  EXPECT_NE(msg.find("scores must be [batch, classes, boxes]"), std::string::npos) << msg;
}

TEST(OpsNnDetection, GridSampleAndRoiAlignOnConstantRamps) {
  // A ramp image v(y, x) = x: bilinear sampling returns the unnormalised x coordinate.
  Tensor img = Tensor::fromVector<float>({1, 1, 2, 4}, {0, 1, 2, 3, 0, 1, 2, 3});
  Tensor grid = Tensor::fromVector<float>({1, 1, 2, 2}, {-1.f, 0.f, 0.5f, 1.f});
  auto g = runOp("GridSample", {img, grid}, {{"align_corners", int64_t{1}}});
  expectNear(g[0], {0, 2.25});  // x = (g + 1) / 2 * 3
  auto border = runOp("GridSample", {img, Tensor::fromVector<float>({1, 1, 1, 2}, {2.f, 0.f})}, {{"padding_mode", std::string("border")}});
  expectNear(border[0], {3});
  EXPECT_NE(errorOf("GridSample", {img, grid}, {{"mode", std::string("cubic")}}).find("mode must be bilinear"), std::string::npos);
  // RoiAlign of a ramp over x in [0.5, 2.5] (half_pixel shifts by 0.5) averages to the bin centres' x.
  Tensor rois = Tensor::fromVector<float>({1, 4}, {1, 0, 3, 2});
  auto r = runOp("RoiAlign", {img, rois, Tensor::fromVector<int64_t>({1}, {0})},
                 {{"output_height", int64_t{1}}, {"output_width", int64_t{2}}, {"sampling_ratio", int64_t{2}}});
  expectNear(r[0], {1.0, 2.0});
}

// ---------------------------------------------------------------------------------------- Opset upgrade

void upgradeNode(Graph& g, Node* n, int64_t opset) {
  ASSERT_TRUE(n->def() && n->def()->upgradeFn) << n->opType();
  UpgradeContext ctx{*n, opset, g};
  n->def()->upgradeFn(ctx);
}

TEST(OpsNnUpgrade, LegacyAttributesBecomeTheLatestForm) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 2, 3, 3}));
  Value* c = g.addConstant("c", Tensor::fromVector<float>({2}, {1, 1}));
  Node* bn = g.addNode("BatchNormalization", {x, c, c, c, c}, {"y", "m", "v", "sm", "sv"}, "bn");
  bn->setAttr("spatial", int64_t{1});
  upgradeNode(g, bn, 9);
  EXPECT_FALSE(bn->hasAttr("spatial"));
  EXPECT_EQ(bn->attrInt("training_mode"), 1);
  Node* bnInference = g.addNode("BatchNormalization", {x, c, c, c, c}, {"y2"}, "bn2");
  upgradeNode(g, bnInference, 9);
  EXPECT_EQ(bnInference->attrInt("training_mode"), 0);
  Node* drop = g.addNode("Dropout", {x}, {"d"}, "drop");
  drop->setAttr("ratio", 0.3f);
  upgradeNode(g, drop, 10);
  EXPECT_FALSE(drop->hasAttr("ratio"));
  Value* rois = g.addConstant("rois", Tensor::fromVector<float>({1, 4}, {0, 0, 1, 1}));
  Value* idx = g.addConstant("idx", Tensor::fromVector<int64_t>({1}, {0}));
  Node* roi10 = g.addNode("RoiAlign", {x, rois, idx}, {"r"}, "roi10");
  upgradeNode(g, roi10, 10);
  EXPECT_EQ(roi10->attrString("coordinate_transformation_mode"), "output_half_pixel");
  Node* roi16 = g.addNode("RoiAlign", {x, rois, idx}, {"r16"}, "roi16");
  upgradeNode(g, roi16, 16);
  EXPECT_EQ(roi16->attrString("coordinate_transformation_mode"), "half_pixel");
}

}  // namespace
}  // namespace tessel
