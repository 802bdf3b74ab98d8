// Op traits of the registry checked against the ops' own reference kernels: epilogue formulas, views,
// neutral elements and commutativity, so a trait declared wrongly fails here rather than in a pass.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "ops_test_util.h"

namespace tessel {
namespace {

using testing::constant;
using testing::data;
using testing::SingleNode;

/// A one-node graph: `inputs` are fed at run time, `constants` become initializers after them.
SingleNode oneNode(const std::string& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& constants = {}) {
  std::vector<std::pair<Tensor, bool>> all;
  for (const Tensor& t : inputs) all.push_back(data(t));
  for (const Tensor& t : constants) all.push_back(constant(t));
  return SingleNode(op, all, 1);
}

const Tensor* initializerOf(const Value* v) { return v && v->isConstant() ? &v->constant() : nullptr; }

Tensor samples() {
  std::vector<float> v;
  for (int i = -24; i <= 24; ++i) v.push_back(0.25f * static_cast<float>(i) + 0.01f * static_cast<float>(i % 3));
  return Tensor::fromVector<float>({static_cast<int64_t>(v.size())}, v);
}

TEST(OpTraits, EpilogueFormulasMatchTheReferenceKernels) {
  const auto ops = opsWithTrait(OpTrait::FusibleEpilogue);
  ASSERT_GE(ops.size(), 8u);
  for (const OpDef* def : ops) {
    EXPECT_TRUE(def->has(OpTrait::Activation) && def->has(OpTrait::Elementwise)) << def->name;
    std::vector<Tensor> bounds;
    if (def->maxInputs == 3) bounds = {Tensor::scalar(-0.75f), Tensor::scalar(1.5f)};  // Clip's min and max
    SingleNode m = oneNode(def->name, {samples()}, bounds);
    auto params = epilogueParams(*m.node, initializerOf);
    ASSERT_TRUE(params.has_value()) << def->name;
    EXPECT_EQ(params->size(), def->epilogue->paramCount) << def->name;
    const Tensor x = samples(), y = m.run().at(0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float expected = y.data<float>()[i], got = def->epilogue->apply(x.data<float>()[i], *params);
      EXPECT_NEAR(got, expected, 1e-6f * std::max(1.0f, std::fabs(expected))) << def->name << " at x = " << x.data<float>()[i];
    }
  }
}

TEST(OpTraits, EpilogueParamsRefuseFormsTheEpilogueCannotApply) {
  SingleNode tanhGelu = oneNode("Gelu", {samples()});
  tanhGelu.node->setAttr("approximate", std::string("tanh"));
  EXPECT_FALSE(epilogueParams(*tanhGelu.node, initializerOf));
  SingleNode computedBound = oneNode("Clip", {samples(), Tensor::scalar(0.0f)});  // min is a graph input
  EXPECT_FALSE(epilogueParams(*computedBound.node, initializerOf));
  SingleNode elu = oneNode("Elu", {samples()});  // an activation without an epilogue form
  EXPECT_TRUE(hasTrait(*elu.node, OpTrait::Activation));
  EXPECT_FALSE(epilogueParams(*elu.node, initializerOf));
  SingleNode leaky = oneNode("LeakyRelu", {samples()});
  leaky.node->setAttr("alpha", 0.3f);
  EXPECT_EQ(*epilogueParams(*leaky.node, initializerOf), std::vector<float>{0.3f});
}

TEST(OpTraits, ViewsKeepTheElementOrder) {
  const Tensor x = Tensor::fromVector<float>({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const std::map<std::string, std::vector<Tensor>> constants = {
      {"Identity", {}},
      {"Flatten", {}},
      {"Reshape", {Tensor::fromVector<int64_t>({2}, {3, 2})}},
      {"Squeeze", {Tensor::fromVector<int64_t>({1}, {0})}},
      {"Unsqueeze", {Tensor::fromVector<int64_t>({1}, {3})}}};
  for (const OpDef* def : opsWithTrait(OpTrait::View)) {
    ASSERT_TRUE(constants.count(def->name)) << def->name << " is a View: add a case here";
    EXPECT_TRUE(def->has(OpTrait::NoOpOnSameType)) << def->name;
    Tensor y = oneNode(def->name, {x}, constants.at(def->name)).run().at(0);
    ASSERT_EQ(y.numel(), x.numel()) << def->name;
    EXPECT_EQ(std::memcmp(y.rawData(), x.rawData(), x.nbytes()), 0) << def->name;
  }
}

/// a op b through the reference kernel, in float32 or (for logic ops) bool.
Tensor apply(const std::string& op, const Tensor& a, const Tensor& b) { return oneNode(op, {a, b}).run().at(0); }

TEST(OpTraits, NeutralElementsAndCommutativityHold) {
  const Tensor x = samples();
  int neutral = 0;
  for (const OpDef* def : OpRegistry::instance().all()) {
    if (!def->neutralElement) continue;
    ++neutral;
    Tensor e = Tensor::fromVector<float>({1}, {static_cast<float>(*def->neutralElement)});
    Tensor right = apply(def->name, x, e);
    EXPECT_EQ(std::memcmp(right.rawData(), x.rawData(), x.nbytes()), 0) << def->name << "(x, e)";
    if (!def->has(OpTrait::Commutative)) continue;
    Tensor left = apply(def->name, e, x);
    EXPECT_EQ(std::memcmp(left.rawData(), x.rawData(), x.nbytes()), 0) << def->name << "(e, x)";
  }
  EXPECT_GE(neutral, 4);
  const Tensor a = samples();
  std::vector<float> reversed(a.data<float>(), a.data<float>() + a.numel());
  std::reverse(reversed.begin(), reversed.end());
  const Tensor b = Tensor::fromVector<float>(a.shape(), reversed);
  const Tensor p = Tensor::fromVector<bool>({4}, {true, true, false, false}), q = Tensor::fromVector<bool>({4}, {true, false, true, false});
  for (const OpDef* def : opsWithTrait(OpTrait::Commutative)) {
    const bool logic = def->name == "And" || def->name == "Or" || def->name == "Xor";
    Tensor ab = logic ? apply(def->name, p, q) : apply(def->name, a, b);
    Tensor ba = logic ? apply(def->name, q, p) : apply(def->name, b, a);
    ASSERT_EQ(ab.nbytes(), ba.nbytes()) << def->name;
    EXPECT_EQ(std::memcmp(ab.rawData(), ba.rawData(), ab.nbytes()), 0) << def->name;
  }
}

TEST(OpTraits, IsOpAndHasTraitAskTheDefinition) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {4}));
  Node* relu = g.addNode("Relu", {x}, {"r"});
  Node* unknown = g.addNode("NoSuchOp", {x}, {"u"}, "", "example.domain");
  EXPECT_TRUE(isOp(*relu, "Relu"));
  EXPECT_FALSE(isOp(*relu, "Relu", "tessel"));
  EXPECT_FALSE(isOp(*relu, "Sigmoid"));
  EXPECT_TRUE(hasTrait(*relu, OpTrait::Elementwise));
  EXPECT_FALSE(hasTrait(*relu, OpTrait::View));
  EXPECT_FALSE(hasTrait(*unknown, OpTrait::Elementwise));
  EXPECT_FALSE(epilogueParams(*unknown, initializerOf));
}

}  // namespace
}  // namespace tessel
