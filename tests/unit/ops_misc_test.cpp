// Tests of the control-flow, recurrent, signal, random, string and training operators: hand-computed small
// cases and naive loops written here, shape inference with symbolic dims, and user errors naming the node.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <numbers>

#include <fmt/format.h>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/registry.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

using Attrs = std::map<std::string, AttrValue>;

Tensor f32(Shape shape, std::vector<float> v) { return Tensor::fromVector<float>(std::move(shape), v); }
Tensor i64(Shape shape, std::vector<int64_t> v) { return Tensor::fromVector<int64_t>(std::move(shape), v); }
Tensor strs(Shape shape, std::vector<std::string> v) { return Tensor::fromVector<std::string>(std::move(shape), v); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// One-node graph: defined inputs become graph inputs (or constants when `constant[i]`), undefined ones
/// are omitted; outputs y0..yN ("" in `skipOutputs` positions leaves an optional output unrequested).
struct OneNode {
  Graph graph;
  Node* node = nullptr;
  std::map<std::string, Tensor> feeds;

  OneNode(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs, size_t numOutputs,
          const std::string& domain = "", const std::vector<bool>& constant = {}) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string name = fmt::format("x{}", i);
      if (!inputs[i].defined()) {
        ins.push_back(nullptr);
      } else if (i < constant.size() && constant[i]) {
        ins.push_back(graph.addConstant(name, inputs[i]));
      } else {
        ins.push_back(graph.addInput(name, TensorType::fromShape(inputs[i].dtype(), inputs[i].shape())));
        feeds[name] = inputs[i];
      }
    }
    std::vector<std::string> outs;
    for (size_t i = 0; i < numOutputs; ++i) outs.push_back(fmt::format("y{}", i));
    node = graph.addNode(op, ins, outs, "n1", domain);
    for (const auto& [k, v] : attrs) node->setAttr(k, v);
    for (Value* o : node->outputs()) graph.addOutput(o);
  }

  std::vector<Tensor> run(uint64_t seed = 0) {
    auto problems = verifyGraph(graph);
    EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems[0]);
    inferShapes(graph);
    InterpreterOptions opts;
    opts.seed = seed;
    auto outs = Interpreter(graph, opts).run(feeds);
    for (size_t i = 0; i < outs.size(); ++i) {  // static inference must agree with what the kernel made
      const TensorType& t = node->output(i)->type;
      if (t.isStatic()) {
        EXPECT_EQ(t.staticShape(), outs[i].shape()) << "output " << i;
      }
      EXPECT_EQ(t.dtype, outs[i].dtype()) << "output " << i;
    }
    return outs;
  }
};

std::vector<Tensor> runOp(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
                          size_t numOutputs = 1, const std::string& domain = "") {
  OneNode n(op, inputs, attrs, numOutputs, domain);
  return n.run();
}

/// Runs the op and returns the UserError message ("" when nothing was thrown).
std::string errorOf(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {},
                    size_t numOutputs = 1, const std::string& domain = "") {
  try {
    OneNode n(op, inputs, attrs, numOutputs, domain);
    n.run();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

void expectNear(const Tensor& t, const std::vector<double>& expected, double tol = 1e-5) {
  std::vector<double> got = t.toDoubleVector();
  ASSERT_EQ(got.size(), expected.size()) << t.summary();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

#define EXPECT_ERROR_HAS(msg, text)                                                     \
  do {                                                                                  \
    std::string m_ = (msg);                                                             \
    EXPECT_NE(m_.find("'n1'"), std::string::npos) << "error does not name the node: " << m_; \
    EXPECT_NE(m_.find(text), std::string::npos) << m_;                                  \
  } while (0)

// ====================================================================== recurrent layers

TEST(OpsMiscRnn, SimpleRnnForwardMatchesHandComputation) {
  // hidden 1, input 1: h_t = tanh(0.5 x_t + 0.25 h_{t-1} + 0.1 + 0.2)
  auto out = runOp("RNN", {f32({2, 1, 1}, {1, 2}), f32({1, 1, 1}, {0.5f}), f32({1, 1, 1}, {0.25f}), f32({1, 2}, {0.1f, 0.2f})},
                   {{"hidden_size", int64_t{1}}}, 2);
  double h1 = std::tanh(0.5 + 0.3), h2 = std::tanh(1.0 + 0.25 * h1 + 0.3);
  EXPECT_EQ(out[0].shape(), (Shape{2, 1, 1, 1}));
  expectNear(out[0], {h1, h2});
  expectNear(out[1], {h2});
}

TEST(OpsMiscRnn, BidirectionalRunsReverseOverTimeAndStacksDirections) {
  Tensor w = f32({2, 1, 1}, {0.5f, 0.5f}), r = f32({2, 1, 1}, {0.25f, 0.25f});
  auto out = runOp("RNN", {f32({2, 1, 1}, {1, 2}), w, r}, {{"direction", std::string("bidirectional")}}, 2);
  double f1 = std::tanh(0.5), f2 = std::tanh(1.0 + 0.25 * f1);
  double b1 = std::tanh(1.0), b0 = std::tanh(0.5 + 0.25 * b1);  // reverse: t=1 first
  EXPECT_EQ(out[0].shape(), (Shape{2, 2, 1, 1}));
  expectNear(out[0], {f1, b0, f2, b1});  // [t][dir]
  expectNear(out[1], {f2, b0});
}

TEST(OpsMiscRnn, SequenceLensZeroPadAndBatchFirstLayout) {
  // layout 1: X [batch=2, seq=2, 1]; batch 1 has length 1, so its step-1 output is 0 and Y_h is h after t=0.
  Tensor x = f32({2, 2, 1}, {1, 2, 3, 4});
  auto out = runOp("RNN", {x, f32({1, 1, 1}, {0.5f}), f32({1, 1, 1}, {0.25f}), Tensor(), Tensor::fromVector<int32_t>({2}, {2, 1})},
                   {{"layout", int64_t{1}}}, 2);
  double a1 = std::tanh(0.5), a2 = std::tanh(1.0 + 0.25 * a1), b1 = std::tanh(1.5);
  EXPECT_EQ(out[0].shape(), (Shape{2, 2, 1, 1}));  // [batch, seq, dirs, hidden]
  expectNear(out[0], {a1, a2, b1, 0.0});
  EXPECT_EQ(out[1].shape(), (Shape{2, 1, 1}));  // [batch, dirs, hidden]
  expectNear(out[1], {a2, b1});
}

TEST(OpsMiscRnn, ClipAndParameterisedActivation) {
  // LeakyRelu(alpha 0.5) on a negative pre-activation, then clip 0.1 on a large one.
  auto leaky = runOp("RNN", {f32({1, 1, 1}, {-2}), f32({1, 1, 1}, {1}), f32({1, 1, 1}, {0})},
                     {{"activations", std::vector<std::string>{"LeakyRelu"}}, {"activation_alpha", std::vector<float>{0.5f}}}, 2);
  expectNear(leaky[1], {-1.0});
  auto clipped = runOp("RNN", {f32({1, 1, 1}, {5}), f32({1, 1, 1}, {1}), f32({1, 1, 1}, {0})}, {{"clip", 0.1f}}, 2);
  expectNear(clipped[1], {std::tanh(0.1)});
}

TEST(OpsMiscRnn, GruBothResetPlacements) {
  // W = [z, r, h] = 0.1, 0.2, 0.3; R = 0.4, 0.5, 0.6; only Rb_h = 0.7 is non-zero; h0 = 0.5; x = 1.
  Tensor x = f32({1, 1, 1}, {1}), w = f32({1, 3, 1}, {0.1f, 0.2f, 0.3f}), r = f32({1, 3, 1}, {0.4f, 0.5f, 0.6f});
  Tensor b = f32({1, 6}, {0, 0, 0, 0, 0, 0.7f}), h0 = f32({1, 1, 1}, {0.5f});
  double z = sigmoid(0.1 + 0.4 * 0.5), rg = sigmoid(0.2 + 0.5 * 0.5);
  for (int64_t lbr : {0, 1}) {
    auto out = runOp("GRU", {x, w, r, b, Tensor(), h0}, {{"linear_before_reset", lbr}}, 2);
    double cand = lbr ? std::tanh(0.3 + rg * (0.6 * 0.5 + 0.7)) : std::tanh(0.3 + 0.6 * (rg * 0.5) + 0.7);
    expectNear(out[1], {(1 - z) * cand + z * 0.5}, 1e-6);
  }
}

TEST(OpsMiscRnn, LstmWithPeepholesAndInitialCell) {
  // Gates i, o, f, c; peepholes i, o, f.
  Tensor x = f32({1, 1, 1}, {1}), w = f32({1, 4, 1}, {0.1f, 0.2f, 0.3f, 0.4f}), r = f32({1, 4, 1}, {0.5f, 0.6f, 0.7f, 0.8f});
  Tensor h0 = f32({1, 1, 1}, {0.5f}), c0 = f32({1, 1, 1}, {0.25f}), p = f32({1, 3}, {0.05f, 0.06f, 0.07f});
  auto out = runOp("LSTM", {x, w, r, Tensor(), Tensor(), h0, c0, p}, {}, 3);
  double i = sigmoid(0.1 + 0.5 * 0.5 + 0.05 * 0.25), f = sigmoid(0.3 + 0.7 * 0.5 + 0.07 * 0.25);
  double g = std::tanh(0.4 + 0.8 * 0.5), c = f * 0.25 + i * g, o = sigmoid(0.2 + 0.6 * 0.5 + 0.06 * c);
  expectNear(out[0], {o * std::tanh(c)}, 1e-6);
  expectNear(out[1], {o * std::tanh(c)}, 1e-6);
  expectNear(out[2], {c}, 1e-6);
}

TEST(OpsMiscRnn, DoublePrecisionInputsStayDouble) {
  auto out = runOp("RNN", {Tensor::fromVector<double>({1, 1, 1}, {0.3}), Tensor::fromVector<double>({1, 1, 1}, {2.0}),
                           Tensor::fromVector<double>({1, 1, 1}, {0.0})}, {}, 2);
  EXPECT_EQ(out[1].dtype(), DType::Float64);
  EXPECT_DOUBLE_EQ(out[1].data<double>()[0], std::tanh(0.6));
}

TEST(OpsMiscRnn, InfersSymbolicShapes) {
  Graph g;
  Value* x = g.addInput("x", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("S"), Dim::symbolic("N"), Dim::known(3)}));
  Value* w = g.addConstant("w", Tensor(DType::Float32, {2, 20, 3}));
  Value* r = g.addConstant("r", Tensor(DType::Float32, {2, 20, 5}));
  Node* n = g.addNode("LSTM", {x, w, r}, {"y", "yh", "yc"}, "n1");
  n->setAttr("direction", std::string("bidirectional"));
  inferShapes(g);
  EXPECT_EQ(n->output(0)->type.toString(), "f32[S,2,N,5]");
  EXPECT_EQ(n->output(1)->type.toString(), "f32[2,N,5]");
  EXPECT_EQ(n->output(2)->type.toString(), "f32[2,N,5]");
}

TEST(OpsMiscRnn, RejectsBadAttributesAndShapes) {
  Tensor x = f32({1, 1, 1}, {1}), w = f32({1, 1, 1}, {1}), r = f32({1, 1, 1}, {1});
  EXPECT_ERROR_HAS(errorOf("RNN", {x, w, r}, {{"direction", std::string("sideways")}}, 2), "direction must be");
  EXPECT_ERROR_HAS(errorOf("RNN", {x, w, r}, {{"activations", std::vector<std::string>{"Wobble"}}}, 2), "unknown activation function 'Wobble'");
  EXPECT_ERROR_HAS(errorOf("GRU", {x, w, f32({1, 3, 1}, {1, 1, 1})}, {}, 2), "W has 1 rows, expected 3 gate(s)");
  EXPECT_ERROR_HAS(errorOf("RNN", {f32({2, 2}, {1, 2, 3, 4}), w, r}, {}, 2), "X must have rank 3");
}

// ====================================================================== control flow

/// A body graph owned by a node attribute.
std::shared_ptr<Graph> makeBody(Graph& parent, const std::string& name) {
  auto body = std::make_shared<Graph>(name);
  body->setParent(&parent);
  return body;
}

/// Loop whose body adds the captured x to the carried accumulator and scans the running value; its
/// condition output is the captured `keepGoing`.
struct SumLoop {
  Graph g;
  Node* loop = nullptr;
  std::map<std::string, Tensor> feeds;

  SumLoop(std::optional<int64_t> trips, std::optional<bool> cond, bool keepGoing) {
    Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2}));
    g.addConstant("keep", Tensor::scalar<bool>(keepGoing));
    feeds["x"] = f32({2}, {1, 2});
    auto body = makeBody(g, "body");
    body->addInput("iter", TensorType::fromShape(DType::Int64, {}));
    body->addInput("cond_in", TensorType::fromShape(DType::Bool, {}));
    Value* acc = body->addInput("acc", TensorType::fromShape(DType::Float32, {2}));
    Node* add = body->addNode("Add", {acc, body->addValue("x", TensorType::fromShape(DType::Float32, {2}))}, {"acc_out"});
    Node* keep = body->addNode("Identity", {body->addValue("keep", TensorType::fromShape(DType::Bool, {}))}, {"cond_out"});
    Node* scan = body->addNode("Identity", {add->output(0)}, {"scan_out"});
    body->addOutput(keep->output(0));
    body->addOutput(add->output(0));
    body->addOutput(scan->output(0));
    Value* m = trips ? g.addConstant("m", Tensor::scalar<int64_t>(*trips)) : nullptr;
    Value* c = cond ? g.addConstant("c", Tensor::scalar<bool>(*cond)) : nullptr;
    Value* init = g.addConstant("init", f32({2}, {0, 0}));
    loop = g.addNode("Loop", {m, c, init}, {"final", "scans"}, "n1");
    loop->setAttr("body", body);
    g.addOutput(loop->output(0));
    g.addOutput(loop->output(1));
    (void)x;
  }
  std::vector<Tensor> run() {
    auto problems = verifyGraph(g);
    EXPECT_TRUE(problems.empty()) << (problems.empty() ? "" : problems[0]);
    inferShapes(g);
    return Interpreter(g).run(feeds);
  }
};

TEST(OpsMiscControlFlow, LoopWithTripCountCarriesAndScans) {
  SumLoop l(3, std::nullopt, false);  // no cond input: the body's (false) condition is ignored
  auto out = l.run();
  expectNear(out[0], {3, 6});
  EXPECT_EQ(out[1].shape(), (Shape{3, 2}));
  expectNear(out[1], {1, 2, 2, 4, 3, 6});
  EXPECT_EQ(l.loop->output(1)->type.toString(), "f32[3,2]");
}

TEST(OpsMiscControlFlow, LoopConditionStopsEarlyAndZeroTripsGiveEmptyScans) {
  SumLoop once(10, true, false);  // body says stop after the first iteration
  auto out = once.run();
  expectNear(out[0], {1, 2});
  EXPECT_EQ(out[1].shape(), (Shape{1, 2}));
  EXPECT_EQ(once.loop->output(1)->type.toString(), "f32[?,2]");  // data-dependent trip count
  SumLoop never(std::nullopt, false, true);
  auto none = never.run();
  expectNear(none[0], {0, 0});
  EXPECT_EQ(none[1].shape(), (Shape{0, 2}));
}

/// Loop over M=4 iterations whose body declares no input types and captures x without a type:
/// acc_out = op(acc, x) (Add keeps the shape, Concat grows it), scan = float(i) * x.
struct UntypedLoop {
  Graph g;
  Node* loop = nullptr;
  explicit UntypedLoop(bool growing) {
    g.addInput("x", TensorType::fromShape(DType::Float32, {3}));
    auto body = makeBody(g, "body");
    Value* i = body->addInput("i", TensorType());
    Value* cond = body->addInput("cond", TensorType());
    Value* acc = body->addInput("acc", TensorType());
    Value* x = body->addValue("x");
    Node* step = growing ? body->addNode("Concat", {acc, x}, {"acc_out"}) : body->addNode("Add", {acc, x}, {"acc_out"});
    if (growing) step->setAttr("axis", int64_t{0});
    Node* cast = body->addNode("Cast", {i}, {"fi"});
    cast->setAttr("to", int64_t{1});
    Node* mul = body->addNode("Mul", {cast->output(0), x}, {"scan"});
    Node* keep = body->addNode("Identity", {cond}, {"cond_out"});
    body->addOutput(keep->output(0));
    body->addOutput(step->output(0));
    body->addOutput(mul->output(0));
    loop = g.addNode("Loop", {g.addConstant("m", Tensor::scalar<int64_t>(4)), nullptr, g.addConstant("a0", f32({3}, {0, 0, 0}))},
                     {"a", "s"}, "n1");
    loop->setAttr("body", body);
    g.addOutput(loop->output(0));
    g.addOutput(loop->output(1));
  }
};

TEST(OpsMiscControlFlow, BodyTypesAreCompletedFromTheCallingNode) {
  UntypedLoop same(false);
  inferShapes(same.g);
  EXPECT_EQ(same.loop->output(0)->type.toString(), "f32[3]");
  EXPECT_EQ(same.loop->output(1)->type.toString(), "f32[4,3]");
  auto out = Interpreter(same.g).run({{"x", f32({3}, {1, 2, 3})}});
  expectNear(out[0], {4, 8, 12});
  expectNear(out[1], {0, 0, 0, 1, 2, 3, 2, 4, 6, 3, 6, 9});
  // A carried value that grows each iteration is widened to an unknown extent, not fixed to the first.
  UntypedLoop grow(true);
  inferShapes(grow.g);
  EXPECT_EQ(grow.loop->output(0)->type.toString(), "f32[?]");
  EXPECT_EQ(Interpreter(grow.g).run({{"x", f32({3}, {1, 2, 3})}})[0].shape(), (Shape{15}));
}

TEST(OpsMiscControlFlow, IfPicksBranchAndMergesTypes) {
  Graph g;
  g.addInput("c", TensorType::fromShape(DType::Bool, {}));
  auto thenG = makeBody(g, "then");
  thenG->addOutput(thenG->addNode("Identity", {thenG->addConstant("a", f32({3}, {1, 2, 3}))}, {"t"})->output(0));
  auto elseG = makeBody(g, "else");
  elseG->addOutput(elseG->addNode("Identity", {elseG->addConstant("b", f32({2}, {4, 5}))}, {"e"})->output(0));
  Node* n = g.addNode("If", {g.findValue("c")}, {"y"}, "n1");
  n->setAttr("then_branch", thenG);
  n->setAttr("else_branch", elseG);
  g.addOutput(n->output(0));
  inferShapes(g);
  EXPECT_EQ(n->output(0)->type.toString(), "f32[?]");
  expectNear(Interpreter(g).run({{"c", Tensor::scalar<bool>(true)}})[0], {1, 2, 3});
  expectNear(Interpreter(g).run({{"c", Tensor::scalar<bool>(false)}})[0], {4, 5});
  EXPECT_THROW(Interpreter(g).run({{"c", Tensor::fromVector<bool>({2}, {true, false})}}), UserError);
}

/// Scan summing the rows of X (scanned along axis 0) into a state, emitting the running sum.
struct RowSumScan {
  Graph g;
  Node* scan = nullptr;
  explicit RowSumScan(const Attrs& attrs, TensorType xType = TensorType::fromShape(DType::Float32, {3, 2})) {
    g.addInput("s0", TensorType::fromShape(DType::Float32, {2}));
    g.addInput("x", xType);
    auto body = makeBody(g, "body");
    Value* s = body->addInput("s", TensorType::fromShape(DType::Float32, {2}));
    Value* row = body->addInput("row", TensorType::fromShape(DType::Float32, {2}));
    Node* add = body->addNode("Add", {s, row}, {"s_out"});
    Node* id = body->addNode("Identity", {add->output(0)}, {"y"});
    body->addOutput(add->output(0));
    body->addOutput(id->output(0));
    scan = g.addNode("Scan", {g.findValue("s0"), g.findValue("x")}, {"final", "ys"}, "n1");
    scan->setAttr("body", body);
    scan->setAttr("num_scan_inputs", int64_t{1});
    for (const auto& [k, v] : attrs) scan->setAttr(k, v);
    g.addOutput(scan->output(0));
    g.addOutput(scan->output(1));
  }
  std::vector<Tensor> run() {
    inferShapes(g);
    return Interpreter(g).run({{"s0", f32({2}, {0, 0})}, {"x", f32({3, 2}, {1, 2, 3, 4, 5, 6})}});
  }
};

TEST(OpsMiscControlFlow, ScanReverseInputAndOutputAxis) {
  // Reverse input: rows 2, 1, 0 -> running sums [5,6], [8,10], [9,12]; stacked along axis 1.
  RowSumScan s({{"scan_input_directions", std::vector<int64_t>{1}}, {"scan_output_axes", std::vector<int64_t>{1}}});
  auto out = s.run();
  expectNear(out[0], {9, 12});
  EXPECT_EQ(out[1].shape(), (Shape{2, 3}));
  expectNear(out[1], {5, 8, 9, 6, 10, 12});
  EXPECT_EQ(s.scan->output(1)->type.toString(), "f32[2,3]");
  // Reverse output direction: the last iteration's value comes first.
  RowSumScan r({{"scan_output_directions", std::vector<int64_t>{1}}});
  auto rev = r.run();
  expectNear(rev[1], {9, 12, 4, 6, 1, 2});
}

TEST(OpsMiscControlFlow, Opset8ScanHasBatchAxisAndSequenceLens) {
  // Opset 8 form: (sequence_lens, state [B, 2], x [B, 3, 2]); batch 1 stops after one step.
  Graph g;
  Value* lens = g.addConstant("lens", Tensor::fromVector<int32_t>({2}, {3, 1}));
  Value* s0 = g.addInput("s0", TensorType::fromShape(DType::Float32, {2, 2}));
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2, 3, 2}));
  auto body = makeBody(g, "body");
  Value* s = body->addInput("s", TensorType::fromShape(DType::Float32, {2}));
  Value* row = body->addInput("row", TensorType::fromShape(DType::Float32, {2}));
  Node* add = body->addNode("Add", {s, row}, {"s_out"});
  Node* id = body->addNode("Identity", {add->output(0)}, {"y"});
  body->addOutput(add->output(0));
  body->addOutput(id->output(0));
  Node* scan = g.addNode("Scan", {lens, s0, x}, {"final", "ys"}, "n1");
  scan->setAttr("body", body);
  scan->setAttr("num_scan_inputs", int64_t{1});
  g.addOutput(scan->output(0));
  g.addOutput(scan->output(1));
  ASSERT_TRUE(verifyGraph(g).empty());
  inferShapes(g);
  EXPECT_EQ(scan->output(1)->type.toString(), "f32[2,3,2]");
  auto out = Interpreter(g).run({{"s0", f32({2, 2}, {0, 0, 10, 10})}, {"x", f32({2, 3, 2}, {1, 2, 3, 4, 5, 6, 1, 1, 2, 2, 3, 3})}});
  expectNear(out[0], {9, 12, 11, 11});
  expectNear(out[1], {1, 2, 4, 6, 9, 12, 11, 11, 0, 0, 0, 0});
}

TEST(OpsMiscControlFlow, ScanInfersSymbolicSequenceLengthAndChecksAttributes) {
  RowSumScan s({}, TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("T"), Dim::known(2)}));
  inferShapes(s.g);
  EXPECT_EQ(s.scan->output(1)->type.toString(), "f32[T,2]");
  RowSumScan bad({{"scan_input_axes", std::vector<int64_t>{0, 1}}});
  try {
    inferShapes(bad.g);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_ERROR_HAS(e.what(), "'scan_input_axes' has 2 value(s), expected 1");
  }
}

// ====================================================================== signal processing

/// Naive DFT written independently of the kernel (std::polar twiddles).
std::vector<std::complex<double>> naiveDft(const std::vector<double>& x, size_t n) {
  std::vector<std::complex<double>> y(n);
  for (size_t k = 0; k < n; ++k)
    for (size_t j = 0; j < std::min(n, x.size()); ++j)
      y[k] += x[j] * std::polar(1.0, -2.0 * std::numbers::pi * static_cast<double>(j * k) / static_cast<double>(n));
  return y;
}

std::vector<double> interleave(const std::vector<std::complex<double>>& v, size_t count) {
  std::vector<double> out;
  for (size_t i = 0; i < count; ++i) {
    out.push_back(v[i].real());
    out.push_back(v[i].imag());
  }
  return out;
}

TEST(OpsMiscSignal, DftOfSmallRealSignal) {
  auto out = runOp("DFT", {f32({1, 4, 1}, {1, 2, 3, 4})});
  EXPECT_EQ(out[0].shape(), (Shape{1, 4, 2}));
  expectNear(out[0], {10, 0, -2, 2, -2, 0, -2, -2});
  auto half = runOp("DFT", {f32({1, 4, 1}, {1, 2, 3, 4})}, {{"onesided", int64_t{1}}});
  expectNear(half[0], {10, 0, -2, 2, -2, 0});
}

TEST(OpsMiscSignal, DftLengthPadsAndTruncates) {
  std::vector<double> x{1, -1, 0.5, 2};
  OneNode pad("DFT", {f32({1, 4, 1}, {1, -1, 0.5f, 2}), i64({}, {6})}, {}, 1, "", {false, true});
  auto padded = pad.run();
  EXPECT_EQ(padded[0].shape(), (Shape{1, 6, 2}));
  expectNear(padded[0], interleave(naiveDft(x, 6), 6));
  OneNode cut("DFT", {f32({1, 4, 1}, {1, -1, 0.5f, 2}), i64({}, {3})}, {}, 1, "", {false, true});
  expectNear(cut.run()[0], interleave(naiveDft({1, -1, 0.5}, 3), 3));
}

TEST(OpsMiscSignal, DftAlongInnerAxisAndInverseRoundTrip) {
  // [batch 1, 2 rows, 3 columns, real]: axis 2 transforms each row.
  auto rows = runOp("DFT", {f32({1, 2, 3, 1}, {1, 2, 3, 4, 5, 6})}, {{"axis", int64_t{2}}});
  std::vector<double> expected = interleave(naiveDft({1, 2, 3}, 3), 3);
  auto second = interleave(naiveDft({4, 5, 6}, 3), 3);
  expected.insert(expected.end(), second.begin(), second.end());
  expectNear(rows[0], expected);
  auto back = runOp("DFT", {rows[0]}, {{"axis", int64_t{2}}, {"inverse", int64_t{1}}});
  expectNear(back[0], {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0});
}

TEST(OpsMiscSignal, StftFramesMatchNaiveDft) {
  std::vector<float> sig{0, 1, 4, 9, 16, 25, 36, 49};
  OneNode n("STFT", {f32({1, 8, 1}, sig), i64({}, {2}), Tensor(), i64({}, {4})}, {}, 1, "", {false, true, false, true});
  auto out = n.run();
  ASSERT_EQ(out[0].shape(), (Shape{1, 3, 3, 2}));  // frames (8-4)/2+1, onesided 4/2+1 bins
  std::vector<double> expected;
  for (int f = 0; f < 3; ++f) {
    auto bins = interleave(naiveDft({sig[2 * f], sig[2 * f + 1], sig[2 * f + 2], sig[2 * f + 3]}, 4), 3);
    expected.insert(expected.end(), bins.begin(), bins.end());
  }
  expectNear(out[0], expected, 1e-4);
}

TEST(OpsMiscSignal, WindowsPeriodicSymmetricAndDtype) {
  OneNode hann("HannWindow", {Tensor::scalar<int64_t>(4)}, {}, 1, "", {true});
  expectNear(hann.run()[0], {0, 0.5, 1, 0.5}, 1e-6);
  EXPECT_EQ(hann.node->output(0)->type.toString(), "f32[4]");
  expectNear(runOp("HannWindow", {Tensor::scalar<int32_t>(3)}, {{"periodic", int64_t{0}}})[0], {0, 1, 0}, 1e-6);
  auto ham = runOp("HammingWindow", {Tensor::scalar<int64_t>(2)}, {{"output_datatype", int64_t{11}}});
  EXPECT_EQ(ham[0].dtype(), DType::Float64);
  expectNear(ham[0], {25.0 / 46 - 21.0 / 46, 25.0 / 46 + 21.0 / 46}, 1e-12);
  expectNear(runOp("BlackmanWindow", {Tensor::scalar<int64_t>(3)}, {{"periodic", int64_t{0}}})[0], {0, 1, 0}, 1e-6);
}

TEST(OpsMiscSignal, MelWeightMatrixShapeAndErrors) {
  auto out = runOp("MelWeightMatrix", {Tensor::scalar<int32_t>(4), Tensor::scalar<int32_t>(32), Tensor::scalar<int32_t>(16000),
                                       Tensor::scalar<float>(0), Tensor::scalar<float>(8000)});
  ASSERT_EQ(out[0].shape(), (Shape{17, 4}));
  for (int64_t m = 0; m < 4; ++m) {  // each triangular filter peaks at exactly 1
    double peak = 0;
    for (int64_t k = 0; k < 17; ++k) peak = std::max(peak, out[0].elementAsDouble(k * 4 + m));
    EXPECT_DOUBLE_EQ(peak, 1.0) << "filter " << m;
  }
  EXPECT_ERROR_HAS(errorOf("MelWeightMatrix", {Tensor::scalar<int32_t>(4), Tensor::scalar<int32_t>(32), Tensor::scalar<int32_t>(16000),
                                               Tensor::scalar<float>(500), Tensor::scalar<float>(100)}),
                   "lower_edge_hertz");
  EXPECT_ERROR_HAS(errorOf("DFT", {f32({1, 4, 3}, std::vector<float>(12, 0))}), "1 (real) or 2 (complex)");
}

// ====================================================================== random

TEST(OpsMiscRandom, SeededUniformIsReproducibleAndInRange) {
  Attrs a{{"shape", std::vector<int64_t>{2000}}, {"low", 2.0f}, {"high", 3.0f}, {"seed", 1.0f}};
  auto first = runOp("RandomUniform", {}, a), second = runOp("RandomUniform", {}, a);
  EXPECT_TRUE(first[0].identical(second[0]));
  std::vector<double> v = first[0].toDoubleVector();
  double sum = 0;
  for (double x : v) {
    EXPECT_GE(x, 2.0);
    EXPECT_LT(x, 3.0);
    sum += x;
  }
  EXPECT_NEAR(sum / static_cast<double>(v.size()), 2.5, 0.03);
  a["seed"] = 2.0f;
  EXPECT_FALSE(runOp("RandomUniform", {}, a)[0].identical(first[0]));
}

TEST(OpsMiscRandom, NormalLikeStatisticsAndInterpreterSeed) {
  Tensor like(DType::Float64, {4000});
  OneNode n("RandomNormalLike", {like}, {{"mean", 5.0f}, {"scale", 2.0f}}, 1);
  auto out = n.run(7);
  EXPECT_EQ(out[0].dtype(), DType::Float64);
  std::vector<double> v = out[0].toDoubleVector();
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 5.0, 0.1);
  EXPECT_NEAR(std::sqrt(var / static_cast<double>(v.size())), 2.0, 0.1);
  EXPECT_TRUE(n.run(7)[0].identical(out[0]));   // same interpreter seed, same draw
  EXPECT_FALSE(n.run(8)[0].identical(out[0]));
}

TEST(OpsMiscRandom, BernoulliExtremesAndMultinomialDominantClass) {
  auto b = runOp("Bernoulli", {f32({4}, {0, 1, 0, 1})}, {{"dtype", int64_t{9}}});
  EXPECT_EQ(b[0].dtype(), DType::Bool);
  expectNear(b[0], {0, 1, 0, 1});
  auto m = runOp("Multinomial", {f32({2, 3}, {-100, 0, -100, 0, -100, -100})}, {{"sample_size", int64_t{5}}});
  EXPECT_EQ(m[0].dtype(), DType::Int32);
  expectNear(m[0], {1, 1, 1, 1, 1, 0, 0, 0, 0, 0});
  EXPECT_ERROR_HAS(errorOf("Bernoulli", {f32({1}, {1.5f})}), "outside [0, 1]");
  EXPECT_ERROR_HAS(errorOf("RandomUniform", {}, {{"shape", std::vector<int64_t>{2}}, {"dtype", int64_t{6}}}),
                   "floating-point");
}

// ====================================================================== strings

TEST(OpsMiscString, StringNormalizerCaseInsensitiveStopwordsAndEmptyResult) {
  auto out = runOp("StringNormalizer", {strs({4}, {"The", "cat", "THE", "Dog"})},
                   {{"stopwords", std::vector<std::string>{"the"}}, {"case_change_action", std::string("LOWER")}});
  EXPECT_EQ(out[0].shape(), (Shape{2}));
  EXPECT_EQ(out[0].data<std::string>()[0], "cat");
  EXPECT_EQ(out[0].data<std::string>()[1], "dog");
  auto empty = runOp("StringNormalizer", {strs({1, 2}, {"a", "A"})},
                     {{"stopwords", std::vector<std::string>{"a"}}});
  EXPECT_EQ(empty[0].shape(), (Shape{1, 1}));
  EXPECT_EQ(empty[0].data<std::string>()[0], "");
  EXPECT_ERROR_HAS(errorOf("StringNormalizer", {strs({1}, {"x"})}, {{"case_change_action", std::string("TITLE")}}),
                   "case_change_action");
}

Attrs tfidfAttrs(const std::string& mode) {
  // Unigrams a, b, c -> columns 0..2; bigram (a, b) -> column 3.
  return {{"pool_strings", std::vector<std::string>{"a", "b", "c", "a", "b"}},
          {"ngram_counts", std::vector<int64_t>{0, 3}},
          {"ngram_indexes", std::vector<int64_t>{0, 1, 2, 3}},
          {"min_gram_length", int64_t{1}},
          {"max_gram_length", int64_t{2}},
          {"max_skip_count", int64_t{1}},
          {"mode", mode},
          {"weights", std::vector<float>{1, 2, 3, 0.5f}}};
}

TEST(OpsMiscString, TfIdfCountsSkipGramsAndWeights) {
  // "a b a c b": unigrams a2 b2 c1; bigram (a,b) adjacent once and with one skip (a _ b) once.
  Tensor x = strs({5}, {"a", "b", "a", "c", "b"});
  expectNear(runOp("TfIdfVectorizer", {x}, tfidfAttrs("TF"))[0], {2, 2, 1, 2});
  expectNear(runOp("TfIdfVectorizer", {x}, tfidfAttrs("TFIDF"))[0], {2, 4, 3, 1});
  expectNear(runOp("TfIdfVectorizer", {x}, tfidfAttrs("IDF"))[0], {1, 2, 3, 0.5});
  // Integer tokens, two rows, bigrams only without skips.
  Attrs ints{{"pool_int64s", std::vector<int64_t>{7, 8, 8, 9}}, {"ngram_counts", std::vector<int64_t>{0, 0}},
             {"ngram_indexes", std::vector<int64_t>{1, 0}}, {"min_gram_length", int64_t{2}}, {"max_gram_length", int64_t{2}},
             {"max_skip_count", int64_t{0}}, {"mode", std::string("TF")}};
  auto rows = runOp("TfIdfVectorizer", {i64({2, 3}, {7, 8, 9, 8, 9, 8})}, ints);
  EXPECT_EQ(rows[0].shape(), (Shape{2, 2}));
  expectNear(rows[0], {1, 1, 1, 0});
  Attrs bad = tfidfAttrs("BM25");
  EXPECT_ERROR_HAS(errorOf("TfIdfVectorizer", {x}, bad), "mode must be TF, IDF or TFIDF");
}

// ====================================================================== training

const char* const kTraining = "ai.onnx.preview.training";

TEST(OpsMiscTraining, AdagradFollowsTheUpdateRule) {
  auto out = runOp("Adagrad", {Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(1), f32({2}, {1, -2}), f32({2}, {-1, 0.5f}),
                               f32({2}, {2, 0})},
                   {{"decay_factor", 0.5f}, {"norm_coefficient", 0.01f}, {"epsilon", 1e-6f}}, 2, kTraining);
  double rate = 0.1 / 1.5;
  std::vector<double> xs{1, -2}, gs{-1, 0.5}, hs{2, 0}, xNew, hNew;
  for (size_t i = 0; i < 2; ++i) {
    double g = 0.01 * xs[i] + gs[i], h = hs[i] + g * g;
    hNew.push_back(h);
    xNew.push_back(xs[i] - rate * g / (std::sqrt(h) + 1e-6));
  }
  expectNear(out[0], xNew, 1e-6);
  expectNear(out[1], hNew, 1e-6);
}

TEST(OpsMiscTraining, AdamBiasCorrectionAndMomentumModes) {
  auto adam = runOp("Adam", {Tensor::scalar<double>(0.1), Tensor::scalar<int64_t>(2), Tensor::fromVector<double>({1}, {1}),
                             Tensor::fromVector<double>({1}, {-1}), Tensor::fromVector<double>({1}, {2}),
                             Tensor::fromVector<double>({1}, {0.5})},
                    {{"alpha", 0.9f}, {"beta", 0.8f}}, 3, kTraining);
  double a = 0.9f, b = 0.8f, eps = 1e-6f;  // attributes are float32
  double v = a * 2 + (1 - a) * -1, h = b * 0.5 + (1 - b) * 1, rate = 0.1 * std::sqrt(1 - b * b) / (1 - a * a);
  expectNear(adam[0], {1 - rate * v / (std::sqrt(h) + eps)}, 1e-9);
  expectNear(adam[1], {v}, 1e-9);
  expectNear(adam[2], {h}, 1e-9);
  for (const char* mode : {"standard", "nesterov"}) {
    for (int64_t t : {0, 3}) {
      auto m = runOp("Momentum", {Tensor::scalar<float>(0.5f), Tensor::scalar<int64_t>(t), f32({1}, {2}), f32({1}, {1}), f32({1}, {3})},
                     {{"alpha", 0.5f}, {"beta", 0.25f}, {"mode", std::string(mode)}, {"norm_coefficient", 0.0f}}, 2, kTraining);
      double vNew = 0.5 * 3 + (t > 0 ? 0.25 : 1.0) * 1;
      double xNew = std::string(mode) == "nesterov" ? 2 - 0.5 * (1 + 0.5 * vNew) : 2 - 0.5 * vNew;
      expectNear(m[0], {xNew}, 1e-6);
      expectNear(m[1], {vNew}, 1e-6);
    }
  }
}

TEST(OpsMiscTraining, RejectsMismatchedShapesAndModes) {
  std::vector<Tensor> in{Tensor::scalar<float>(0.1f), Tensor::scalar<int64_t>(0), f32({2}, {1, 2}), f32({1}, {1}), f32({2}, {0, 0})};
  EXPECT_ERROR_HAS(errorOf("Adagrad", in, {}, 2, kTraining), "has shape [1] but the tensor it updates");
  in[3] = f32({2}, {1, 1});
  EXPECT_ERROR_HAS(errorOf("Momentum", in, {{"alpha", 0.5f}, {"beta", 0.5f}, {"mode", std::string("heavy")}, {"norm_coefficient", 0.0f}}, 2, kTraining),
                   "mode must be 'standard' or 'nesterov'");
}

}  // namespace
}  // namespace tessel
