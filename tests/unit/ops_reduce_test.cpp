// Tests of the reduction family (Reduce*, CumSum, softmax family, ArgMax/ArgMin, TopK, Einsum, Det,
// normalisations, losses) against naive loops and hand-computed values, plus inference and diagnostics.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ops_test_util.h"

namespace tessel {
namespace {

using testing::constant;
using testing::data;
using testing::SingleNode;

Tensor ints(std::vector<int64_t> v) { return Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v); }

Tensor randomTensor(Shape shape, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(shapeSize(shape));
  for (float& x : v) x = dist(rng);
  return Tensor::fromVector<float>(shape, v);
}

std::vector<float> values(const Tensor& t) {
  std::vector<float> out;
  for (double d : t.toDoubleVector()) out.push_back(static_cast<float>(d));
  return out;
}

void expectNear(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
}

template <class Fn>
void expectUserError(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- reductions

/// Naive reduction of a [A, B, C] tensor over axis 1 with a fold and a finisher.
template <class Fold, class Finish>
std::vector<double> naiveReduceAxis1(const Tensor& x, double init, Fold fold, Finish finish) {
  int64_t a = x.shape()[0], b = x.shape()[1], c = x.shape()[2];
  std::vector<double> v = x.toDoubleVector(), out;
  for (int64_t i = 0; i < a; ++i)
    for (int64_t k = 0; k < c; ++k) {
      double acc = init;
      for (int64_t j = 0; j < b; ++j) acc = fold(acc, v[(i * b + j) * c + k]);
      out.push_back(finish(acc, b));
    }
  return out;
}

TEST(OpsReduce, EveryKindMatchesNaiveLoopOverMiddleAxis) {
  Tensor x = randomTensor({3, 4, 5}, 1, 0.1f, 2.f);  // positive so LogSum is defined
  auto keep = [](double a, int64_t) { return a; };
  struct Case {
    const char* op;
    std::vector<double> want;
  };
  std::vector<double> lse;
  {
    auto sums = naiveReduceAxis1(x, 0, [](double a, double v) { return a + std::exp(v); }, keep);
    for (double s : sums) lse.push_back(std::log(s));
  }
  std::vector<Case> cases = {
      {"ReduceSum", naiveReduceAxis1(x, 0, [](double a, double v) { return a + v; }, keep)},
      {"ReduceMean", naiveReduceAxis1(x, 0, [](double a, double v) { return a + v; }, [](double a, int64_t n) { return a / n; })},
      {"ReduceMax", naiveReduceAxis1(x, -1e30, [](double a, double v) { return std::max(a, v); }, keep)},
      {"ReduceMin", naiveReduceAxis1(x, 1e30, [](double a, double v) { return std::min(a, v); }, keep)},
      {"ReduceProd", naiveReduceAxis1(x, 1, [](double a, double v) { return a * v; }, keep)},
      {"ReduceL1", naiveReduceAxis1(x, 0, [](double a, double v) { return a + std::abs(v); }, keep)},
      {"ReduceL2", naiveReduceAxis1(x, 0, [](double a, double v) { return a + v * v; }, [](double a, int64_t) { return std::sqrt(a); })},
      {"ReduceLogSum", naiveReduceAxis1(x, 0, [](double a, double v) { return a + v; }, [](double a, int64_t) { return std::log(a); })},
      {"ReduceLogSumExp", lse},
      {"ReduceSumSquare", naiveReduceAxis1(x, 0, [](double a, double v) { return a + v * v; }, keep)},
  };
  for (const auto& c : cases) {
    SingleNode n(c.op, {data(x), constant(ints({-2}))}, 1, {{"keepdims", int64_t{0}}});
    auto out = n.run();
    EXPECT_EQ(out[0].shape(), (Shape{3, 5})) << c.op;
    expectNear(values(out[0]), c.want, 1e-5);
  }
}

TEST(OpsReduce, LegacyAxesAttributeBecomesInput) {
  Tensor x = randomTensor({2, 3, 4}, 2);
  SingleNode n("ReduceMax", {data(x)}, 1, {{"axes", std::vector<int64_t>{0, 2}}}, 11);
  ASSERT_EQ(n.node->numInputs(), 2u);
  EXPECT_FALSE(n.node->hasAttr("axes"));
  EXPECT_EQ(n.outputType(0), "f32[1,3,1]");
  auto out = n.run();
  std::vector<double> v = x.toDoubleVector(), want(3, -1e30);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want[j] = std::max(want[j], v[(i * 3 + j) * 4 + k]);
  expectNear(values(out[0]), want);
}

TEST(OpsReduce, EmptyAxesReduceAllOrNothing) {
  Tensor x = Tensor::fromVector<float>({2, 2}, {1, 2, 3, 4});
  SingleNode all("ReduceSum", {data(x)}, 1);
  auto a = all.run();
  EXPECT_EQ(a[0].shape(), (Shape{1, 1}));
  EXPECT_FLOAT_EQ(a[0].data<float>()[0], 10.f);
  SingleNode none("ReduceSum", {data(x), constant(ints({}))}, 1, {{"noop_with_empty_axes", int64_t{1}}});
  auto b = none.run();
  EXPECT_EQ(b[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values(b[0]), (std::vector<float>{1, 2, 3, 4}));
}

TEST(OpsReduce, IntegerSumsStayExactAndHalfComputesInFloat) {
  int64_t big = (int64_t{1} << 53) + 1;  // not representable as a double
  Tensor x = Tensor::fromVector<int64_t>({2}, {big, 2});
  SingleNode n("ReduceSum", {data(x)}, 1, {{"keepdims", int64_t{0}}});
  EXPECT_EQ(n.run()[0].data<int64_t>()[0], big + 2);

  Tensor h = Tensor::fromVector<float16>({3}, {float16(1.5f), float16(2.25f), float16(-0.5f)});
  SingleNode m("ReduceMean", {data(h)}, 1);
  auto out = m.run();
  EXPECT_EQ(out[0].dtype(), DType::Float16);
  // (1.5 + 2.25 - 0.5) / 3, rounded once to half precision.
  EXPECT_EQ(static_cast<float>(out[0].data<float16>()[0]), static_cast<float>(float16(3.25f / 3.f)));
}

TEST(OpsReduce, InferenceKeepsSymbolicDims) {
  Graph g;
  Value* x = g.addInput("x", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("N"), Dim::known(8), Dim::unknown()}));
  Value* axes = g.addConstant("axes", ints({1}));
  Node* keep = g.addNode("ReduceMean", {x, axes}, {"k"}, "keep");
  Node* drop = g.addNode("ReduceMean", {x, axes}, {"d"}, "drop");
  drop->setAttr("keepdims", int64_t{0});
  Value* dynAxes = g.addInput("dyn", TensorType::fromShape(DType::Int64, {1}));
  Node* unknownKeep = g.addNode("ReduceSum", {x, dynAxes}, {"u"}, "unknown_keep");
  Node* unknownDrop = g.addNode("ReduceSum", {x, dynAxes}, {"v"}, "unknown_drop");
  unknownDrop->setAttr("keepdims", int64_t{0});
  for (Node* n : {keep, drop, unknownKeep, unknownDrop}) g.addOutput(n->output(0));
  inferShapes(g);
  EXPECT_EQ(keep->output(0)->type.toString(), "f32[N,1,?]");
  EXPECT_EQ(drop->output(0)->type.toString(), "f32[N,?]");
  EXPECT_EQ(unknownKeep->output(0)->type.toString(), "f32[?,?,?]");
  EXPECT_EQ(unknownDrop->output(0)->type.toString(), "f32[*]");
}

TEST(OpsReduce, BadAxesNameTheNode) {
  Tensor x = randomTensor({2, 3}, 3);
  SingleNode out("ReduceSum", {data(x), constant(ints({2}))}, 1);
  expectUserError([&] { out.run(); }, {"n_ReduceSum", "axis 2", "rank 2"});
  SingleNode twice("ReduceL2", {data(x), constant(ints({1, -1}))}, 1);
  expectUserError([&] { twice.run(); }, {"n_ReduceL2", "twice"});
  SingleNode floatAxes("ReduceSum", {data(x), constant(Tensor::fromVector<float>({1}, {1.f}))}, 1);
  expectUserError([&] { floatAxes.run(); }, {"n_ReduceSum", "int64"});
}

TEST(OpsReduceCumSum, ExclusiveReverseOnHandExample) {
  Tensor x = Tensor::fromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto run = [&](int64_t axis, int64_t exclusive, int64_t reverse) {
    SingleNode n("CumSum", {data(x), constant(Tensor::scalar<int32_t>(static_cast<int32_t>(axis)))}, 1,
                 {{"exclusive", exclusive}, {"reverse", reverse}});
    return values(n.run()[0]);
  };
  EXPECT_EQ(run(1, 0, 0), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(run(1, 1, 0), (std::vector<float>{0, 1, 3, 0, 4, 9}));
  EXPECT_EQ(run(-1, 0, 1), (std::vector<float>{6, 5, 3, 15, 11, 6}));
  EXPECT_EQ(run(0, 1, 1), (std::vector<float>{4, 5, 6, 0, 0, 0}));
  SingleNode bad("CumSum", {data(x), constant(Tensor::scalar<int64_t>(2))}, 1);
  expectUserError([&] { bad.run(); }, {"n_CumSum", "axis 2"});
}

// ---------------------------------------------------------------- softmax family

TEST(OpsReduceSoftmax, LegacyCoercesTo2DAndModernUsesOneAxis) {
  Tensor x = randomTensor({2, 3, 4}, 4);
  std::vector<double> v = x.toDoubleVector();
  // Opset 11, axis 1: each row of the [2, 12] view sums to 1.
  SingleNode legacy("Softmax", {data(x)}, 1, {}, 11);
  auto a = legacy.run()[0].toDoubleVector();
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int i = 0; i < 12; ++i) sum += std::exp(v[r * 12 + i]);
    for (int i = 0; i < 12; ++i) EXPECT_NEAR(a[r * 12 + i], std::exp(v[r * 12 + i]) / sum, 1e-6);
  }
  // Opset 13, axis 1: normalise along the 3-extent axis only.
  SingleNode modern("LogSoftmax", {data(x)}, 1, {{"axis", int64_t{1}}}, 13);
  auto b = modern.run()[0].toDoubleVector();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double sum = 0;
      for (int j = 0; j < 3; ++j) sum += std::exp(v[(i * 3 + j) * 4 + k]);
      for (int j = 0; j < 3; ++j) EXPECT_NEAR(b[(i * 3 + j) * 4 + k], v[(i * 3 + j) * 4 + k] - std::log(sum), 1e-5);
    }
}

TEST(OpsReduceSoftmax, HardmaxPicksFirstMaximumAndLargeInputsStayFinite) {
  Tensor x = Tensor::fromVector<float>({2, 3}, {3, 7, 7, -1, -1, -5});
  SingleNode h("Hardmax", {data(x)}, 1);
  EXPECT_EQ(values(h.run()[0]), (std::vector<float>{0, 1, 0, 1, 0, 0}));
  Tensor big = Tensor::fromVector<float>({3}, {10000, 10001, 10002});
  SingleNode s("Softmax", {data(big)}, 1);
  double e0 = std::exp(-2.0), e1 = std::exp(-1.0), total = e0 + e1 + 1;
  expectNear(values(s.run()[0]), {e0 / total, e1 / total, 1 / total}, 1e-6);
  SingleNode badAxis("Softmax", {data(x)}, 1, {{"axis", int64_t{2}}});
  expectUserError([&] { badAxis.run(); }, {"n_Softmax", "axis 2"});
  SingleNode ints("Softmax", {data(Tensor::fromVector<int32_t>({2}, {1, 2}))}, 1);
  expectUserError([&] { ints.run(); }, {"n_Softmax", "floating"});
}

// ---------------------------------------------------------------- ArgMax / ArgMin / TopK

TEST(OpsReduceSort, ArgExtremaHonourTiesAndSelectLastIndex) {
  Tensor x = Tensor::fromVector<int32_t>({2, 4}, {5, 9, 9, 1, 2, 2, 8, 2});
  auto run = [&](const char* op, int64_t axis, int64_t last, int64_t keep) {
    SingleNode n(op, {data(x)}, 1, {{"axis", axis}, {"select_last_index", last}, {"keepdims", keep}});
    auto out = n.run()[0];
    EXPECT_EQ(out.dtype(), DType::Int64);
    return std::make_pair(out.shape(), out.toInt64Vector());
  };
  EXPECT_EQ(run("ArgMax", 1, 0, 1), std::make_pair(Shape{2, 1}, std::vector<int64_t>{1, 2}));
  EXPECT_EQ(run("ArgMax", 1, 1, 0), std::make_pair(Shape{2}, std::vector<int64_t>{2, 2}));
  EXPECT_EQ(run("ArgMin", -1, 0, 0), std::make_pair(Shape{2}, std::vector<int64_t>{3, 0}));
  EXPECT_EQ(run("ArgMin", -1, 1, 0), std::make_pair(Shape{2}, std::vector<int64_t>{3, 3}));
  EXPECT_EQ(run("ArgMin", 0, 0, 1), std::make_pair(Shape{1, 4}, std::vector<int64_t>{1, 1, 1, 0}));
}

TEST(OpsReduceSort, TopKIsStableOnTiesBothDirections) {
  Tensor x = Tensor::fromVector<float>({2, 5}, {3, 1, 3, 2, 3, 0, 0, 4, 0, 4});
  SingleNode largest("TopK", {data(x), constant(ints({3}))}, 2);
  auto l = largest.run();
  EXPECT_EQ(values(l[0]), (std::vector<float>{3, 3, 3, 4, 4, 0}));
  EXPECT_EQ(l[1].toInt64Vector(), (std::vector<int64_t>{0, 2, 4, 2, 4, 0}));
  SingleNode smallest("TopK", {data(x), constant(ints({2}))}, 2, {{"largest", int64_t{0}}, {"axis", int64_t{0}}});
  auto s = smallest.run();
  EXPECT_EQ(s[0].shape(), (Shape{2, 5}));
  // Per column (3,0) (1,0) (3,4) (2,0) (3,4): smallest first.
  EXPECT_EQ(s[1].toInt64Vector(), (std::vector<int64_t>{1, 1, 0, 1, 0, 0, 0, 1, 0, 1}));
  SingleNode smallTies("TopK", {data(x), constant(ints({3}))}, 2, {{"largest", int64_t{0}}});
  auto t = smallTies.run();
  EXPECT_EQ(values(t[0]), (std::vector<float>{1, 2, 3, 0, 0, 0}));
  EXPECT_EQ(t[1].toInt64Vector(), (std::vector<int64_t>{1, 3, 0, 0, 1, 3}));
}

TEST(OpsReduceSort, TopKLegacyAttributeAndErrors) {
  Tensor x = Tensor::fromVector<float>({4}, {1, 4, 2, 3});
  SingleNode legacy("TopK", {data(x)}, 2, {{"k", int64_t{2}}}, 1);
  EXPECT_EQ(legacy.node->numInputs(), 2u);
  EXPECT_EQ(legacy.outputType(0), "f32[2]");
  EXPECT_EQ(values(legacy.run()[0]), (std::vector<float>{4, 3}));
  SingleNode tooMany("TopK", {data(x), constant(ints({5}))}, 2);
  expectUserError([&] { tooMany.run(); }, {"n_TopK", "K = 5", "extent 4"});
  Graph g;
  Value* in = g.addInput("x", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("B"), Dim::known(10)}));
  Value* k = g.addInput("k", TensorType::fromShape(DType::Int64, {1}));
  Node* n = g.addNode("TopK", {in, k}, {"v", "i"});
  g.addOutput(n->output(0));
  inferShapes(g);
  EXPECT_EQ(n->output(0)->type.toString(), "f32[B,?]");
  EXPECT_EQ(n->output(1)->type.toString(), "i64[B,?]");
}

// ---------------------------------------------------------------- Einsum and Det

TEST(OpsReduceEinsum, BatchMatmulMatchesNaiveLoop) {
  Tensor a = randomTensor({2, 3, 4}, 5), b = randomTensor({2, 4, 5}, 6);
  SingleNode n("Einsum", {data(a), data(b)}, 1, {{"equation", std::string("bij, bjk -> bik")}});
  std::vector<double> av = a.toDoubleVector(), bv = b.toDoubleVector(), want(2 * 3 * 5, 0);
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k)
        for (int j = 0; j < 4; ++j) want[(p * 3 + i) * 5 + k] += av[(p * 3 + i) * 4 + j] * bv[(p * 4 + j) * 5 + k];
  auto out = n.run()[0];
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5}));
  expectNear(values(out), want);
}

TEST(OpsReduceEinsum, ImplicitOutputDiagonalAndEllipsisBroadcast) {
  Tensor m = Tensor::fromVector<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  SingleNode trace("Einsum", {data(m)}, 1, {{"equation", std::string("ii")}});
  auto t = trace.run()[0];
  EXPECT_EQ(t.rank(), 0u);
  EXPECT_FLOAT_EQ(t.data<float>()[0], 15.f);
  SingleNode diag("Einsum", {data(m)}, 1, {{"equation", std::string("ii->i")}});
  EXPECT_EQ(values(diag.run()[0]), (std::vector<float>{1, 5, 9}));
  // Implicit mode orders the free labels alphabetically: "ji" -> "ij" output is the transpose.
  SingleNode transpose("Einsum", {data(m)}, 1, {{"equation", std::string("ji")}});
  EXPECT_EQ(values(transpose.run()[0]), (std::vector<float>{1, 4, 7, 2, 5, 8, 3, 6, 9}));
  // "...ij,...jk": a [1, 2, 2] batch broadcasts against [3, 2, 2].
  Tensor x = Tensor::fromVector<float>({1, 2, 2}, {1, 0, 0, 2});
  Tensor y = randomTensor({3, 2, 2}, 7);
  SingleNode bc("Einsum", {data(x), data(y)}, 1, {{"equation", std::string("...ij,...jk->...ik")}});
  auto out = bc.run()[0];
  EXPECT_EQ(out.shape(), (Shape{3, 2, 2}));
  std::vector<double> yv = y.toDoubleVector(), want;
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k) want.push_back((i == 0 ? 1 : 2) * yv[(p * 2 + i) * 2 + k]);
  expectNear(values(out), want);
  SingleNode wrongRank("Einsum", {data(m)}, 1, {{"equation", std::string("ijk->i")}});
  expectUserError([&] { wrongRank.run(); }, {"n_Einsum", "rank 2"});
  SingleNode badOut("Einsum", {data(m)}, 1, {{"equation", std::string("ij->iz")}});
  expectUserError([&] { badOut.run(); }, {"n_Einsum", "'z'"});
}

TEST(OpsReduceLinalg, DeterminantsOfHandExamples) {
  // det [[2,0,1],[1,3,2],[1,1,1]] = 2*(3-2) - 0 + 1*(1-3) = 0; second: a permutation matrix (det -1).
  Tensor x = Tensor::fromVector<float>({2, 3, 3}, {2, 0, 1, 1, 3, 2, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1});
  SingleNode n("Det", {data(x)}, 1);
  auto out = n.run()[0];
  EXPECT_EQ(out.shape(), (Shape{2}));
  expectNear(values(out), {0, -1}, 1e-6);
  Tensor y = Tensor::fromVector<double>({2, 2}, {4, 7, 2, 6});
  SingleNode d("Det", {data(y)}, 1);
  EXPECT_DOUBLE_EQ(d.run()[0].data<double>()[0], 10.0);
  SingleNode bad("Det", {data(randomTensor({2, 3}, 8))}, 1);
  expectUserError([&] { bad.run(); }, {"square"});
}

// ---------------------------------------------------------------- normalisation

TEST(OpsReduceNorm, LayerNormOutputsMatchNaiveStatistics) {
  Tensor x = randomTensor({2, 3, 4}, 9), scale = randomTensor({4}, 10), bias = randomTensor({4}, 11);
  SingleNode n("LayerNormalization", {data(x), data(scale), data(bias)}, 3,
               {{"axis", int64_t{-1}}, {"epsilon", 1e-3f}});
  EXPECT_EQ(n.outputType(1), "f32[2,3,1]");
  auto out = n.run();
  std::vector<double> v = x.toDoubleVector(), s = scale.toDoubleVector(), b = bias.toDoubleVector(), y, mean, inv;
  for (int r = 0; r < 6; ++r) {
    double m = 0, var = 0;
    for (int i = 0; i < 4; ++i) m += v[r * 4 + i] / 4;
    for (int i = 0; i < 4; ++i) var += (v[r * 4 + i] - m) * (v[r * 4 + i] - m) / 4;
    mean.push_back(m);
    inv.push_back(1 / std::sqrt(var + 1e-3));
    for (int i = 0; i < 4; ++i) y.push_back((v[r * 4 + i] - m) * inv.back() * s[i] + b[i]);
  }
  expectNear(values(out[0]), y);
  expectNear(values(out[1]), mean);
  expectNear(values(out[2]), inv);
}

TEST(OpsReduceNorm, LayerNormWithoutBiasAndOptionalOutputsAbsent) {
  Tensor x = Tensor::fromVector<float>({1, 2, 2}, {1, 3, 5, 7});
  Tensor scale = Tensor::fromVector<float>({2, 2}, {1, 1, 1, 2});
  SingleNode n("LayerNormalization", {data(x), data(scale)}, 1, {{"axis", int64_t{1}}, {"epsilon", 0.f}});
  // mean 4, variance (9+1+1+9)/4 = 5.
  double r = 1 / std::sqrt(5.0);
  expectNear(values(n.run()[0]), {-3 * r, -1 * r, 1 * r, 2 * 3 * r});
  Tensor badScale = Tensor::fromVector<float>({3}, {1, 1, 1});
  SingleNode bad("LayerNormalization", {data(x), data(badScale)}, 1);
  expectUserError([&] { bad.run(); }, {"n_LayerNormalization", "Scale"});
}

TEST(OpsReduceNorm, MeanVarianceAndGroupNormalizationMatchNaive) {
  Tensor x = randomTensor({2, 4, 3}, 12);
  std::vector<double> v = x.toDoubleVector();
  // MVN over axes {0, 2}: statistics per channel (axis 1).
  SingleNode mvn("MeanVarianceNormalization", {data(x)}, 1, {{"axes", std::vector<int64_t>{0, 2}}});
  std::vector<double> want(v.size());
  for (int c = 0; c < 4; ++c) {
    double s = 0, sq = 0;
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 3; ++k) {
        double e = v[(n * 4 + c) * 3 + k];
        s += e;
        sq += e * e;
      }
    double mean = s / 6, sd = std::sqrt(sq / 6 - mean * mean);
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 3; ++k) want[(n * 4 + c) * 3 + k] = (v[(n * 4 + c) * 3 + k] - mean) / (sd + 1e-9);
  }
  expectNear(values(mvn.run()[0]), want, 1e-4);
  // GroupNorm, 2 groups of 2 channels: statistics per (sample, group) over 6 elements.
  Tensor scale = Tensor::fromVector<float>({2}, {2, 0.5}), bias = Tensor::fromVector<float>({2}, {1, -1});
  SingleNode gn("GroupNormalization", {data(x), data(scale), data(bias)}, 1,
                {{"num_groups", int64_t{2}}, {"epsilon", 0.f}});
  for (int s = 0; s < 4; ++s) {
    double mean = 0, var = 0;
    for (int i = 0; i < 6; ++i) mean += v[s * 6 + i] / 6;
    for (int i = 0; i < 6; ++i) var += (v[s * 6 + i] - mean) * (v[s * 6 + i] - mean) / 6;
    for (int i = 0; i < 6; ++i)
      want[s * 6 + i] = (v[s * 6 + i] - mean) / std::sqrt(var) * (s % 2 ? 0.5 : 2) + (s % 2 ? -1 : 1);
  }
  expectNear(values(gn.run()[0]), want, 1e-4);
}

// ---------------------------------------------------------------- losses

TEST(OpsReduceLoss, NllWithWeightsAndIgnoreIndex) {
  // scores [N=2, C=3], targets {2, 1}; weight {1, 2, 3}.
  Tensor scores = Tensor::fromVector<float>({2, 3}, {-1, -2, -3, -4, -5, -6});
  Tensor target = Tensor::fromVector<int64_t>({2}, {2, 1});
  Tensor weight = Tensor::fromVector<float>({3}, {1, 2, 3});
  auto run = [&](const std::string& reduction, std::optional<int64_t> ignore) {
    std::map<std::string, AttrValue> attrs{{"reduction", reduction}};
    if (ignore) attrs["ignore_index"] = *ignore;
    SingleNode n("NegativeLogLikelihoodLoss", {data(scores), data(target), data(weight)}, 1, attrs);
    return values(n.run()[0]);
  };
  EXPECT_EQ(run("none", std::nullopt), (std::vector<float>{9, 10}));    // 3*3, 5*2
  EXPECT_EQ(run("sum", std::nullopt), (std::vector<float>{19}));
  EXPECT_FLOAT_EQ(run("mean", std::nullopt)[0], 19.f / 5.f);             // divided by 3 + 2
  EXPECT_FLOAT_EQ(run("mean", int64_t{1})[0], 9.f / 3.f);                // sample 1 ignored
  EXPECT_EQ(run("none", int64_t{2}), (std::vector<float>{0, 10}));
  expectUserError([&] { run("average", std::nullopt); }, {"NegativeLogLikelihoodLoss", "'average'"});
  Tensor outOfRange = Tensor::fromVector<int64_t>({2}, {3, 0});
  SingleNode bad("NegativeLogLikelihoodLoss", {data(scores), data(outOfRange)}, 1);
  expectUserError([&] { bad.run(); }, {"target value 3"});
}

TEST(OpsReduceLoss, SoftmaxCrossEntropyMatchesNaiveWithLogProb) {
  Tensor scores = randomTensor({3, 4, 2}, 13);
  Tensor labels = Tensor::fromVector<int32_t>({3, 2}, {0, 3, 2, -1, 1, 1});
  SingleNode n("SoftmaxCrossEntropyLoss", {data(scores), data(labels)}, 2, {{"ignore_index", int64_t{-1}}});
  EXPECT_EQ(n.outputType(0), "f32[]");
  EXPECT_EQ(n.outputType(1), "f32[3,4,2]");
  auto out = n.run();
  std::vector<double> v = scores.toDoubleVector(), logp(v.size());
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 2; ++d) {
      double sum = 0;
      for (int c = 0; c < 4; ++c) sum += std::exp(v[(i * 4 + c) * 2 + d]);
      for (int c = 0; c < 4; ++c) logp[(i * 4 + c) * 2 + d] = v[(i * 4 + c) * 2 + d] - std::log(sum);
    }
  std::vector<int64_t> l = labels.toInt64Vector();
  double total = 0;
  int counted = 0;
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < 2; ++d)
      if (l[i * 2 + d] != -1) {
        total -= logp[(i * 4 + l[i * 2 + d]) * 2 + d];
        ++counted;
      }
  expectNear(values(out[0]), {total / counted});
  expectNear(values(out[1]), logp);
}

}  // namespace
}  // namespace tessel
