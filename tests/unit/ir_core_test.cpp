// Tests of the graph IR core, the verifier, shape inference and the interpreter driver, using test-only ops.
#include <gtest/gtest.h>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/helpers.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

// test.AddOne: y = x + 1 (f32), with an attribute "times" repeating the increment.
TESSEL_REGISTER_OP(test_AddOne) {
  return OpDef("AddOne", "test")
      .inputs(1)
      .outputs(1)
      .attr("times", AttrKind::Int, int64_t{1})
      .infer(inferSameAsInput0)
      .kernel([](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
        for (int64_t i = 0; i < x.numel(); ++i)
          y.data<float>()[i] = x.data<float>()[i] + static_cast<float>(ctx.attrInt("times"));
      });
}

// test.Call: runs its "body" graph attribute on its input.
TESSEL_REGISTER_OP(test_Call) {
  return OpDef("Call", "test")
      .inputs(1)
      .outputs(1)
      .requiredAttr("body", AttrKind::Graph)
      .infer(inferSameAsInput0)
      .kernel([](KernelContext& ctx) { ctx.setOutput(0, ctx.runSubgraph(ctx.attrGraph("body"), {ctx.input(0)})[0]); });
}

Tensor vec(std::vector<float> v) { return Tensor::fromVector<float>({static_cast<int64_t>(v.size())}, v); }

TEST(IrCore, BuildsRunsAndReleases) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {3}));
  Node* a = g.addNode("AddOne", {x}, {"a"}, "", "test");
  Node* b = g.addNode("AddOne", {a->output(0)}, {"b"}, "", "test");
  b->setAttr("times", int64_t{5});
  g.addOutput(b->output(0));
  EXPECT_TRUE(verifyGraph(g).empty());
  inferShapes(g);
  EXPECT_EQ(b->output(0)->type.toString(), "f32[3]");
  Interpreter interp(g);
  auto out = interp.run({{"x", vec({1, 2, 3})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 7.f);
  EXPECT_FLOAT_EQ(out[0].data<float>()[2], 9.f);
}

TEST(IrCore, TopoSortRestoresOrderAndDetectsCycles) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1}));
  Node* a = g.addNode("AddOne", {x}, {"a"}, "first", "test");
  Node* b = g.addNode("AddOne", {a->output(0)}, {"b"}, "second", "test");
  g.addOutput(b->output(0));
  // Make 'first' read 'second': a cycle.
  a->setInput(0, b->output(0));
  try {
    g.topoSort();
    FAIL() << "expected a cycle error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'first'"), std::string::npos);
  }
  a->setInput(0, x);
  g.topoSort();
  EXPECT_EQ(g.nodes()[0]->name(), "first");
}

TEST(IrCore, VerifierListsEveryProblem) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1}));
  Node* n1 = g.addNode("Frobnicate", {x}, {"y"}, "f1");
  Node* n2 = g.addNode("Frobnicate", {n1->output(0)}, {"z"}, "f2");
  Node* n3 = g.addNode("Wibble", {n2->output(0)}, {"w"}, "w1");
  Node* n4 = g.addNode("AddOne", {n3->output(0)}, {"v"}, "bad", "test");
  n4->setAttr("times", 1.5f);
  n4->setAttr("colour", std::string("red"));
  g.addOutput(n4->output(0));
  auto unsupported = unsupportedOperators(g);
  ASSERT_EQ(unsupported.size(), 2u);
  EXPECT_EQ(unsupported[0], "Frobnicate (nodes 'f1', 'f2')");
  EXPECT_EQ(unsupported[1], "Wibble (node 'w1')");
  auto problems = verifyGraph(g);
  std::string all;
  for (auto& p : problems) all += p + "\n";
  EXPECT_NE(all.find("attribute 'times' should be of kind int, found float"), std::string::npos) << all;
  EXPECT_NE(all.find("unknown attribute 'colour'"), std::string::npos) << all;
}

TEST(IrCore, NestedGraphReadsCapturedValues) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {2}));
  Node* outerNode = g.addNode("AddOne", {x}, {"outer"}, "", "test");
  auto body = std::make_shared<Graph>("body");
  body->setParent(&g);
  Value* bodyIn = body->addInput("bin", TensorType::fromShape(DType::Float32, {2}));
  (void)bodyIn;
  Value* captured = body->addValue("outer");  // refers to the enclosing graph's 'outer'
  Node* inner = body->addNode("AddOne", {captured}, {"bout"}, "", "test");
  body->addOutput(inner->output(0));
  Node* call = g.addNode("Call", {x}, {"y"}, "call", "test");
  call->setAttr("body", body);
  g.addOutput(call->output(0));
  ASSERT_TRUE(verifyGraph(g).empty());
  (void)outerNode;
  auto out = Interpreter(g).run({{"x", vec({10, 20})}});
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 12.f);  // (10 + 1) + 1
  auto copy = g.clone();
  auto out2 = Interpreter(*copy).run({{"x", vec({10, 20})}});
  EXPECT_FLOAT_EQ(out2[0].data<float>()[1], 22.f);
}

TEST(IrCore, InterpreterRejectsWrongInputs) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {3}));
  Node* a = g.addNode("AddOne", {x}, {"a"}, "", "test");
  g.addOutput(a->output(0));
  Interpreter interp(g);
  EXPECT_THROW(interp.run({}), UserError);
  EXPECT_THROW(interp.run({{"x", vec({1, 2})}}), UserError);
  EXPECT_THROW(interp.run({{"x", Tensor::fromVector<int64_t>({3}, {1, 2, 3})}}), UserError);
  EXPECT_THROW(interp.run({{"nope", vec({1, 2, 3})}}), UserError);
}

TEST(IrCore, HalfPrecisionRoundTrips) {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(static_cast<float>(float16(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(static_cast<float>(float16(70000.f))));
  EXPECT_EQ(static_cast<float>(bfloat16(1.5f)), 1.5f);
  Tensor t = Tensor::fromVector<float>({3}, {1.5f, -2.f, 300.7f});
  Tensor i = t.castTo(DType::Int32);
  EXPECT_EQ(i.data<int32_t>()[2], 300);
  Tensor s = t.castTo(DType::String);
  EXPECT_EQ(s.data<std::string>()[0], "1.5");
}

}  // namespace
}  // namespace tessel
