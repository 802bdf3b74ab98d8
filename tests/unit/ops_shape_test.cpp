// Tests of the shape/transform/index/resize operator family: inference with symbolic dims, error messages,
// opset upgrades, and kernels on odd shapes checked against naive loops or hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/registry.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

using Attrs = std::map<std::string, AttrValue>;

/// One-node graph: inputs are graph inputs (or constants where `constant[i]`), outputs y0..yN.
struct OneNode {
  Graph graph;
  Node* node = nullptr;

  OneNode(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs, size_t numOutputs,
          const std::vector<bool>& constant = {}) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        ins.push_back(nullptr);
      } else if (i < constant.size() && constant[i]) {
        ins.push_back(graph.addConstant(fmt::format("c{}", i), inputs[i]));
      } else {
        ins.push_back(graph.addInput(fmt::format("x{}", i), TensorType::fromShape(inputs[i].dtype(), inputs[i].shape())));
        feeds[fmt::format("x{}", i)] = inputs[i];
      }
    }
    std::vector<std::string> outs;
    for (size_t i = 0; i < numOutputs; ++i) outs.push_back(fmt::format("y{}", i));
    node = graph.addNode(op, ins, outs, "n1");
    for (const auto& [k, v] : attrs) node->setAttr(k, v);
    for (Value* o : node->outputs()) graph.addOutput(o);
  }

  std::vector<Tensor> run() {
    auto problems = verifyGraph(graph);
    EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems[0]);
    inferShapes(graph);
    auto outs = Interpreter(graph).run(feeds);
    for (size_t i = 0; i < outs.size(); ++i) {  // static inference must agree with what the kernel made
      const TensorType& t = node->output(i)->type;
      if (t.isStatic()) {
        EXPECT_EQ(t.staticShape(), outs[i].shape()) << "output " << i;
      }
      EXPECT_EQ(t.dtype, outs[i].dtype());
    }
    return outs;
  }
  std::map<std::string, Tensor> feeds;
};

std::vector<Tensor> runOp(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
                          size_t numOutputs = 1, const std::vector<bool>& constant = {}) {
  OneNode n(op, inputs, attrs, numOutputs, constant);
  return n.run();
}

Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shapeSize(shape)));
  std::iota(v.begin(), v.end(), 0.f);
  return Tensor::fromVector<float>(shape, v);
}
Tensor i64(std::vector<int64_t> v) { return Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v); }
std::vector<float> floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }
std::vector<int64_t> ints(const Tensor& t) { return t.toInt64Vector(); }

/// Expects a UserError whose message names node 'n1' and contains `fragment`.
template <class Fn>
void expectUserError(Fn fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected a UserError containing '" << fragment << "'";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'n1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

// Builds x (symbolic type) -> op(x, const...) and returns the inferred output type string.
std::string inferWith(const std::string& op, const TensorType& xType, const std::vector<Tensor>& constInputs,
                      const Attrs& attrs = {}) {
  Graph g;
  std::vector<Value*> ins{g.addInput("x", xType)};
  for (size_t i = 0; i < constInputs.size(); ++i)
    ins.push_back(constInputs[i].defined() ? g.addConstant(fmt::format("c{}", i), constInputs[i]) : nullptr);
  Node* n = g.addNode(op, ins, {"y"}, "n1");
  for (const auto& [k, v] : attrs) n->setAttr(k, v);
  g.addOutput(n->output(0));
  inferShapes(g);
  return n->output(0)->type.toString();
}

TensorType sym(DType t, std::vector<Dim> d) { return TensorType(t, std::move(d)); }
Dim N() { return Dim::symbolic("N"); }
Dim K(int64_t v) { return Dim::known(v); }

// ---------------------------------------------------------------- inference

TEST(OpsShapeInference, SymbolicDimsFlowThroughShapeOps) {
  EXPECT_EQ(inferWith("Reshape", sym(DType::Float32, {N(), K(3), K(4), K(5)}), {i64({0, -1})}), "f32[N,60]");
  EXPECT_EQ(inferWith("Reshape", sym(DType::Float32, {N(), K(6)}), {i64({-1, 3})}), "f32[?,3]");
  EXPECT_EQ(inferWith("Reshape", sym(DType::Float32, {Dim::unknown(), K(3), K(4)}), {i64({0, 2, -1})}), "f32[?,2,6]");
  EXPECT_EQ(inferWith("Reshape", sym(DType::Float32, {N(), K(3), K(4)}), {i64({2, -1, 0})}), "f32[2,?,4]");
  EXPECT_EQ(inferWith("Flatten", sym(DType::Float32, {N(), K(3), K(4)}), {}), "f32[N,12]");
  EXPECT_EQ(inferWith("Flatten", sym(DType::Float32, {N(), K(3), K(4)}), {}, {{"axis", int64_t{0}}}), "f32[1,?]");
  EXPECT_EQ(inferWith("Unsqueeze", sym(DType::Float32, {N(), K(3)}), {i64({-1, 0})}), "f32[1,N,3,1]");
  EXPECT_EQ(inferWith("Squeeze", sym(DType::Float32, {N(), K(1), K(3)}), {i64({1})}), "f32[N,3]");
  EXPECT_EQ(inferWith("Squeeze", sym(DType::Float32, {N(), K(1)}), {}), "f32[*]");  // N may be 1
  EXPECT_EQ(inferWith("Expand", sym(DType::Float32, {N(), K(1)}), {i64({2, 1, 5})}), "f32[2,N,5]");
  EXPECT_EQ(inferWith("Transpose", sym(DType::Float32, {N(), K(3), K(5)}), {}, {{"perm", std::vector<int64_t>{2, 0, 1}}}),
            "f32[5,N,3]");
  EXPECT_EQ(inferWith("Slice", sym(DType::Float32, {N(), K(10)}), {i64({-1}), i64({-11}), i64({1}), i64({-3})}),
            "f32[N,4]");
  EXPECT_EQ(inferWith("Gather", sym(DType::Float32, {N(), K(7), K(2)}), {Tensor::fromVector<int64_t>({2, 3}, {0, 1, 2, 3, 4, 5})},
                      {{"axis", int64_t{1}}}),
            "f32[N,2,3,2]");
  EXPECT_EQ(inferWith("Resize", sym(DType::Float32, {N(), K(3), K(5), K(6)}),
                      {Tensor(), Tensor::fromVector<float>({4}, {1, 1, 2, 0.5f})}),
            "f32[N,3,10,3]");
}

TEST(OpsShapeInference, ShapeValueMakesReshapeTargetStatic) {
  // y = Reshape(z, Shape(x)[1:]) must be static at compile time because x's dims after the first are known.
  Graph g;
  Value* x = g.addInput("x", sym(DType::Float32, {N(), K(3), K(4)}));
  Value* z = g.addInput("z", TensorType::fromShape(DType::Float32, {12}));
  Node* shape = g.addNode("Shape", {x}, {"s"}, "shape");
  shape->setAttr("start", int64_t{1});
  Node* reshape = g.addNode("Reshape", {z, shape->output(0)}, {"y"}, "reshape");
  g.addOutput(reshape->output(0));
  inferShapes(g);
  EXPECT_EQ(shape->output(0)->type.toString(), "i64[2]");
  EXPECT_EQ(reshape->output(0)->type.toString(), "f32[3,4]");
}

TEST(OpsShapeInference, ConcatAndSplitTypes) {
  Graph g;
  Value* a = g.addInput("a", sym(DType::Float32, {N(), K(2)}));
  Value* b = g.addInput("b", sym(DType::Float32, {N(), K(3)}));
  Node* cat = g.addNode("Concat", {a, b}, {"c"}, "cat");
  cat->setAttr("axis", int64_t{-1});
  Node* split = g.addNode("Split", {cat->output(0)}, {"s0", "s1"}, "split");
  split->setAttr("axis", int64_t{1});
  g.addOutput(split->output(0));
  g.addOutput(split->output(1));
  inferShapes(g);
  EXPECT_EQ(cat->output(0)->type.toString(), "f32[N,5]");
  EXPECT_EQ(split->output(0)->type.toString(), "f32[N,3]");  // uneven: ceil first, remainder last
  EXPECT_EQ(split->output(1)->type.toString(), "f32[N,2]");
}

// ---------------------------------------------------------------- errors name the node

TEST(OpsShapeErrors, BadShapesAndAttributesNameTheNode) {
  expectUserError([] { runOp("Reshape", {iota({2, 3}), i64({4, -1})}, {}, 1, {false, true}); }, "cannot reshape 2x3");
  expectUserError([] { runOp("Reshape", {iota({2, 3}), i64({-1, -1})}); }, "more than one -1");
  expectUserError([] { runOp("Squeeze", {iota({2, 3}), i64({0})}); }, "cannot squeeze axis 0 of extent 2");
  expectUserError([] { runOp("Unsqueeze", {iota({2}), i64({0, 0})}); }, "appears more than once");
  expectUserError([] { runOp("Transpose", {iota({2, 3})}, {{"perm", std::vector<int64_t>{0, 0}}}); }, "not a permutation");
  expectUserError([] { runOp("Concat", {iota({2, 3}), iota({3, 3})}, {{"axis", int64_t{1}}}); }, "only axis 1 may differ");
  expectUserError([] { runOp("Gather", {iota({4}), i64({4})}); }, "value 4 is out of range [-4, 4)");
  expectUserError([] { runOp("Split", {iota({5}), i64({2, 2})}, {}, 2); }, "add up to 4 but the axis has extent 5");
  // A scalar has no axis 0 (the fuzzer found Split reading past an empty shape here).
  expectUserError([] { runOp("Split", {iota({}), i64({1})}, {}, 1); }, "axis 0 is out of range for a tensor of rank 0");
  expectUserError([] { runOp("Gather", {iota({}), i64({0})}); }, "axis 0 is out of range for a tensor of rank 0");
  expectUserError([] { runOp("Expand", {iota({3}), i64({2, 4})}); }, "cannot be broadcast");
  expectUserError([] { runOp("Pad", {iota({3}), i64({-2, -2})}); }, "remove more than");
  expectUserError([] { runOp("DepthToSpace", {iota({1, 3, 2, 2})}, {{"blocksize", int64_t{2}}}); }, "not divisible by 4");
  expectUserError([] { runOp("Slice", {iota({3}), i64({0}), i64({3}), i64({0}), i64({0})}); }, "step is 0");
  expectUserError([] { runOp("Resize", {iota({1, 1, 2, 2}), Tensor(), Tensor(), i64({1, 1, 4, 4})}, {{"mode", std::string("bicubic")}}); },
                  "unknown mode 'bicubic'");
  expectUserError([] { runOp("GatherND", {iota({2, 2}), Tensor::fromVector<int64_t>({1, 3}, {0, 0, 0})}); },
                  "last indices extent 3");
}

// ---------------------------------------------------------------- kernels vs naive loops

TEST(OpsShapeKernels, ReshapeFamilyReturnsViews) {
  Tensor x = iota({2, 3, 4});
  for (auto& [op, extra] : std::vector<std::pair<std::string, Tensor>>{{"Reshape", i64({4, 0, 2})},
                                                                       {"Unsqueeze", i64({1})},
                                                                       {"Flatten", Tensor()},
                                                                       {"Squeeze", Tensor()}}) {
    std::vector<Tensor> ins{x};
    if (extra.defined()) ins.push_back(extra);
    Tensor y = runOp(op, ins)[0];
    EXPECT_EQ(y.rawData(), x.rawData()) << op << " copied its input";
  }
  EXPECT_EQ(runOp("Reshape", {iota({2, 3, 4}), i64({4, 0, 2})})[0].shape(), (Shape{4, 3, 2}));
  // allowzero: 0 is a real zero extent (only valid for empty tensors).
  Tensor empty(DType::Float32, {0, 3});
  EXPECT_EQ(runOp("Reshape", {empty, i64({3, 0})}, {{"allowzero", int64_t{1}}})[0].shape(), (Shape{3, 0}));
  EXPECT_EQ(runOp("Flatten", {Tensor(DType::Float32, {2, 0, 3})}, {{"axis", int64_t{2}}})[0].shape(), (Shape{0, 3}));
}

TEST(OpsShapeKernels, TransposeMatchesNaiveLoop) {
  Tensor x = iota({2, 3, 4, 5});
  std::vector<int64_t> perm{3, 1, 0, 2};
  Tensor y = runOp("Transpose", {x}, {{"perm", perm}})[0];
  ASSERT_EQ(y.shape(), (Shape{5, 3, 2, 4}));
  const float* d = y.data<float>();
  int k = 0;
  for (int l = 0; l < 5; ++l)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i)
        for (int m = 0; m < 4; ++m) EXPECT_EQ(d[k++], static_cast<float>(((i * 3 + j) * 4 + m) * 5 + l));
}

TEST(OpsShapeKernels, SliceNegativeStepsAndClampingMatchPythonSlicing) {
  Tensor x = iota({7, 6});
  // Python: x[INT_MAX:-100:-2, -2:INT64_MAX:1] (starts clamp to the last element, ends clamp before the first).
  Tensor y = runOp("Slice", {x, i64({INT64_MAX, -2}), i64({-100, INT64_MAX}), i64({0, 1}), i64({-2, 1})})[0];
  std::vector<float> expected;
  for (int r = 6; r >= 0; r -= 2)
    for (int c = 4; c < 6; ++c) expected.push_back(static_cast<float>(r * 6 + c));
  EXPECT_EQ(y.shape(), (Shape{4, 2}));
  EXPECT_EQ(floats(y), expected);
  // Empty result when start is past end for a positive step.
  EXPECT_EQ(runOp("Slice", {x, i64({5}), i64({2}), i64({1})})[0].shape(), (Shape{7, 0}));
}

TEST(OpsShapeKernels, PadModesAndNegativePads) {
  Tensor x = Tensor::fromVector<float>({4}, {1, 2, 3, 4});
  auto pad = [&](const std::string& mode, std::vector<int64_t> pads) {
    return floats(runOp("Pad", {x, i64(pads), Tensor::scalar<float>(9)}, {{"mode", mode}})[0]);
  };
  EXPECT_EQ(pad("constant", {2, 1}), (std::vector<float>{9, 9, 1, 2, 3, 4, 9}));
  EXPECT_EQ(pad("reflect", {3, 2}), (std::vector<float>{4, 3, 2, 1, 2, 3, 4, 3, 2}));
  EXPECT_EQ(pad("edge", {2, 2}), (std::vector<float>{1, 1, 1, 2, 3, 4, 4, 4}));
  EXPECT_EQ(pad("constant", {-1, 1}), (std::vector<float>{2, 3, 4, 9}));
  EXPECT_EQ(pad("reflect", {-2, 2}), (std::vector<float>{3, 4, 3, 2}));  // reflects around the original borders
}

TEST(OpsShapeKernels, StringTensorsMoveThroughDataOps) {
  Tensor s = Tensor::fromVector<std::string>({2, 2}, {"a", "b", "c", "d"});
  Tensor g = runOp("Gather", {s, i64({-1, 0})})[0];
  EXPECT_EQ(std::vector<std::string>(g.data<std::string>(), g.data<std::string>() + 4),
            (std::vector<std::string>{"c", "d", "a", "b"}));
  Tensor t = runOp("Transpose", {s})[0];
  EXPECT_EQ(t.data<std::string>()[1], "c");
  Tensor u = runOp("Unique", {Tensor::fromVector<std::string>({4}, {"z", "a", "z", "b"})}, {}, 1)[0];
  EXPECT_EQ(std::vector<std::string>(u.data<std::string>(), u.data<std::string>() + 3),
            (std::vector<std::string>{"a", "b", "z"}));
}

TEST(OpsShapeKernels, DepthToSpaceCrdAndSpaceToDepthMatchFormulas) {
  int64_t n = 1, c = 2, h = 2, w = 3, b = 2;
  Tensor x = iota({n, c * b * b, h, w});
  Tensor y = runOp("DepthToSpace", {x}, {{"blocksize", b}, {"mode", std::string("CRD")}})[0];
  ASSERT_EQ(y.shape(), (Shape{n, c, h * b, w * b}));
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t yy = 0; yy < h * b; ++yy)
      for (int64_t xx = 0; xx < w * b; ++xx) {
        int64_t srcC = ci * b * b + (yy % b) * b + (xx % b);  // CRD: channel-major blocks
        float expected = static_cast<float>((srcC * h + yy / b) * w + xx / b);
        EXPECT_EQ(y.data<float>()[(ci * h * b + yy) * w * b + xx], expected);
      }
  // SpaceToDepth inverts DCR DepthToSpace.
  Tensor d = runOp("DepthToSpace", {x}, {{"blocksize", b}})[0];
  Tensor back = runOp("SpaceToDepth", {d}, {{"blocksize", b}})[0];
  EXPECT_EQ(floats(back), floats(x));
}

TEST(OpsShapeKernels, TileTriluReverseSequence) {
  Tensor t = runOp("Tile", {Tensor::fromVector<int32_t>({1, 2}, {1, 2}), i64({2, 2})})[0];
  EXPECT_EQ(ints(t), (std::vector<int64_t>{1, 2, 1, 2, 1, 2, 1, 2}));
  Tensor x = iota({2, 3, 3});
  Tensor lower = runOp("Trilu", {x, Tensor::scalar<int64_t>(-1)}, {{"upper", int64_t{0}}})[0];
  for (int64_t i = 0; i < 18; ++i) {
    int64_t r = (i / 3) % 3, c = i % 3;
    EXPECT_EQ(lower.data<float>()[i], c - r <= -1 ? static_cast<float>(i) : 0.f) << i;
  }
  // time_axis 0, batch_axis 1, lens [2, 3]: column b reverses its first lens[b] rows.
  Tensor rs = runOp("ReverseSequence", {iota({3, 2}), i64({2, 3})})[0];
  EXPECT_EQ(floats(rs), (std::vector<float>{2, 5, 0, 3, 4, 1}));
}

TEST(OpsShapeKernels, GatherNDWithBatchDimsAndScatterReductions) {
  // data [2,2,2], indices [2,1,1] with batch_dims 1: out[b] = data[b, idx[b]].
  Tensor data = iota({2, 2, 2});
  Tensor idx = Tensor::fromVector<int64_t>({2, 1, 1}, {1, 0});
  Tensor g = runOp("GatherND", {data, idx}, {{"batch_dims", int64_t{1}}})[0];
  EXPECT_EQ(g.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(floats(g), (std::vector<float>{2, 3, 4, 5}));
  // ScatterND add with a duplicated index accumulates both updates.
  Tensor s = runOp("ScatterND", {Tensor::fromVector<float>({4}, {1, 1, 1, 1}), Tensor::fromVector<int64_t>({3, 1}, {1, 3, 1}),
                                 Tensor::fromVector<float>({3}, {10, 20, 30})},
                   {{"reduction", std::string("add")}})[0];
  EXPECT_EQ(floats(s), (std::vector<float>{1, 41, 1, 21}));
  Tensor e = runOp("ScatterElements", {Tensor::fromVector<float>({2, 2}, {1, 2, 3, 4}), Tensor::fromVector<int64_t>({1, 2}, {1, -2}),
                                       Tensor::fromVector<float>({1, 2}, {5, 6})},
                   {{"axis", int64_t{0}}, {"reduction", std::string("mul")}})[0];
  EXPECT_EQ(floats(e), (std::vector<float>{1, 12, 15, 4}));
}

TEST(OpsShapeKernels, UniqueUnsortedGivesAllFourOutputs) {
  auto outs = runOp("Unique", {Tensor::fromVector<float>({6}, {2, 1, 1, 3, 4, 3})}, {{"sorted", int64_t{0}}}, 4);
  EXPECT_EQ(floats(outs[0]), (std::vector<float>{2, 1, 3, 4}));
  EXPECT_EQ(ints(outs[1]), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(ints(outs[2]), (std::vector<int64_t>{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(ints(outs[3]), (std::vector<int64_t>{1, 2, 2, 1}));
  // Along axis 1: columns [1,0],[1,0],[0,2] -> sorted unique columns [0,2],[1,0].
  auto ax = runOp("Unique", {Tensor::fromVector<int32_t>({2, 3}, {1, 1, 0, 0, 0, 2})}, {{"axis", int64_t{1}}}, 4);
  EXPECT_EQ(ints(ax[0]), (std::vector<int64_t>{0, 1, 2, 0}));
  EXPECT_EQ(ints(ax[2]), (std::vector<int64_t>{1, 1, 0}));
}

TEST(OpsShapeKernels, OneHotNonZeroCompress) {
  Tensor oh = runOp("OneHot", {i64({1, -1, 5}), Tensor::scalar<int64_t>(3), Tensor::fromVector<int32_t>({2}, {0, 7})},
                    {{"axis", int64_t{0}}})[0];
  EXPECT_EQ(oh.shape(), (Shape{3, 3}));  // depth along axis 0
  EXPECT_EQ(ints(oh), (std::vector<int64_t>{0, 0, 0, 7, 0, 0, 0, 7, 0}));  // -1 wraps to 2; 5 is all off
  Tensor nz = runOp("NonZero", {Tensor::fromVector<bool>({2, 2}, {true, false, false, true})})[0];
  EXPECT_EQ(ints(nz), (std::vector<int64_t>{0, 1, 0, 1}));
  Tensor c = runOp("Compress", {iota({3, 2}), Tensor::fromVector<bool>({2}, {false, true})}, {{"axis", int64_t{0}}})[0];
  EXPECT_EQ(floats(c), (std::vector<float>{2, 3}));
}

/// Naive bilinear align_corners reference for a 2-D image.
float bilinearAlignCorners(const Tensor& x, int64_t outH, int64_t outW, int64_t oy, int64_t ox) {
  int64_t h = x.dim(-2), w = x.dim(-1);
  double sy = outH == 1 ? 0 : static_cast<double>(oy) * (h - 1) / (outH - 1);
  double sx = outW == 1 ? 0 : static_cast<double>(ox) * (w - 1) / (outW - 1);
  auto y0 = static_cast<int64_t>(std::floor(sy)), x0 = static_cast<int64_t>(std::floor(sx));
  int64_t y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
  double fy = sy - y0, fx = sx - x0;
  auto at = [&](int64_t yy, int64_t xx) { return static_cast<double>(x.data<float>()[yy * w + xx]); };
  return static_cast<float>((1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) + fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1)));
}

TEST(OpsShapeKernels, ResizeLinearAlignCornersAndNearestMatchReferences) {
  Tensor x = Tensor::fromVector<float>({1, 1, 3, 4}, {0, 5, 1, 7, 3, 2, 9, 4, 8, 6, 0, 1});
  Tensor y = runOp("Resize", {x, Tensor(), Tensor(), i64({1, 1, 5, 7})},
                   {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("align_corners")}})[0];
  ASSERT_EQ(y.shape(), (Shape{1, 1, 5, 7}));
  for (int64_t oy = 0; oy < 5; ++oy)
    for (int64_t ox = 0; ox < 7; ++ox)
      EXPECT_NEAR(y.data<float>()[oy * 7 + ox], bilinearAlignCorners(x, 5, 7, oy, ox), 1e-5) << oy << "," << ox;
  // Nearest, asymmetric + floor, x2 on int8: each source pixel becomes a 2x2 block (exact).
  Tensor q = Tensor::fromVector<int8_t>({1, 2}, {-3, 7});
  Tensor up = runOp("Resize", {q, Tensor(), Tensor::fromVector<float>({2}, {2, 2})},
                    {{"coordinate_transformation_mode", std::string("asymmetric")}, {"nearest_mode", std::string("floor")}})[0];
  EXPECT_EQ(ints(up), (std::vector<int64_t>{-3, -3, 7, 7, -3, -3, 7, 7}));
  // keep_aspect_ratio_policy not_larger: sizes [4, 4] on a 2x4 image keep the aspect ratio -> 2x4 scale 1.
  Tensor k = runOp("Resize", {iota({2, 4}), Tensor(), Tensor(), i64({4, 4})},
                   {{"keep_aspect_ratio_policy", std::string("not_larger")}})[0];
  EXPECT_EQ(k.shape(), (Shape{2, 4}));
}

TEST(OpsShapeKernels, ResizeAntialiasWidensTheLinearFilter) {
  // Opset-18 definition, worked by hand: scale 0.5 stretches the triangle to 4 taps (-0.75..0.75 -> weights
  // 1,3,3,1 / 8) around x_ori = 0.5 and 2.5, with edge clamping: [0.625, 2.375]. Without antialias: [0.5, 2.5].
  Tensor x = Tensor::fromVector<float>({4}, {0, 1, 2, 3});
  Attrs attrs{{"mode", std::string("linear")}, {"antialias", int64_t{1}}};
  EXPECT_EQ(floats(runOp("Resize", {x, Tensor(), Tensor(), i64({2})}, attrs)[0]), (std::vector<float>{0.625f, 2.375f}));
  attrs["antialias"] = int64_t{0};
  EXPECT_EQ(floats(runOp("Resize", {x, Tensor(), Tensor(), i64({2})}, attrs)[0]), (std::vector<float>{0.5f, 2.5f}));
}

// ---------------------------------------------------------------- opset upgrades

void upgrade(Graph& g, Node* n, int64_t opset) {
  UpgradeContext ctx{*n, opset, g};
  ASSERT_TRUE(n->def()->upgradeFn) << n->opType();
  n->def()->upgradeFn(ctx);
}

TEST(OpsShapeUpgrade, LegacyAttributesBecomeInputs) {
  {  // Split-11 `split` attribute
    OneNode n("Split", {iota({5})}, {{"split", std::vector<int64_t>{1, 4}}}, 2);
    upgrade(n.graph, n.node, 11);
    EXPECT_FALSE(n.node->hasAttr("split"));
    auto outs = n.run();
    EXPECT_EQ(floats(outs[1]), (std::vector<float>{1, 2, 3, 4}));
  }
  {  // Unsqueeze-11 `axes` attribute
    OneNode n("Unsqueeze", {iota({3})}, {{"axes", std::vector<int64_t>{0, 2}}}, 1);
    upgrade(n.graph, n.node, 11);
    EXPECT_EQ(n.run()[0].shape(), (Shape{1, 3, 1}));
  }
  {  // Pad-2 `pads`/`value` attributes
    OneNode n("Pad", {iota({2})}, {{"pads", std::vector<int64_t>{1, 0}}, {"value", 7.f}}, 1);
    upgrade(n.graph, n.node, 2);
    EXPECT_EQ(floats(n.run()[0]), (std::vector<float>{7, 0, 1}));
  }
  {  // Slice-1 attributes
    OneNode n("Slice", {iota({2, 4})},
              {{"starts", std::vector<int64_t>{1}}, {"ends", std::vector<int64_t>{3}}, {"axes", std::vector<int64_t>{1}}}, 1);
    upgrade(n.graph, n.node, 9);
    EXPECT_EQ(floats(n.run()[0]), (std::vector<float>{1, 2, 5, 6}));
  }
  {  // Upsample-7 `scales` attribute: nearest (floor) x2 along the last axis
    OneNode n("Upsample", {iota({1, 2})}, {{"scales", std::vector<float>{1, 2}}}, 1);
    upgrade(n.graph, n.node, 7);
    EXPECT_EQ(floats(n.run()[0]), (std::vector<float>{0, 0, 1, 1}));
  }
  {  // Resize-10 (X, scales): scales move to input 2 and coordinates become asymmetric
    OneNode n("Resize", {iota({1, 2}), Tensor::fromVector<float>({2}, {1, 2})}, {}, 1, {false, true});
    upgrade(n.graph, n.node, 10);
    EXPECT_FALSE(n.node->hasInput(1));
    EXPECT_EQ(floats(n.run()[0]), (std::vector<float>{0, 0, 1, 1}));
  }
}

}  // namespace
}  // namespace tessel
