// Tests of the element-wise engine and the math/logic/activation/cast/constant operators: broadcasting
// against a naive index loop, exact hand-computed cases, symbolic shape inference and user-error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>

#include "../../src/ops/elementwise_engine.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

using Attrs = std::map<std::string, AttrValue>;

/// Builds a one-node graph over the given inputs (nullopt = omitted optional input), infers shapes and
/// runs it with the reference interpreter.
std::vector<Tensor> runOp(const std::string& op, const std::vector<std::optional<Tensor>>& inputs,
                          const Attrs& attrs = {}, size_t numOutputs = 1) {
  Graph g;
  std::vector<Value*> ins;
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      ins.push_back(nullptr);
      continue;
    }
    std::string name = "in" + std::to_string(i);
    ins.push_back(g.addInput(name, TensorType::fromShape(inputs[i]->dtype(), inputs[i]->shape())));
    feeds[name] = *inputs[i];
  }
  std::vector<std::string> outs;
  for (size_t i = 0; i < numOutputs; ++i) outs.push_back("out" + std::to_string(i));
  Node* n = g.addNode(op, ins, outs, "node_under_test");
  for (auto& [k, v] : attrs) n->setAttr(k, v);
  for (Value* v : n->outputs()) g.addOutput(v);
  inferShapes(g);
  return Interpreter(g).run(feeds);
}

Tensor run1(const std::string& op, const std::vector<std::optional<Tensor>>& inputs, const Attrs& attrs = {}) {
  return runOp(op, inputs, attrs)[0];
}

/// The inferred type of output 0 of a one-node graph whose inputs have the given (possibly symbolic) types.
TensorType inferOp(const std::string& op, const std::vector<TensorType>& types, const Attrs& attrs = {}) {
  Graph g;
  std::vector<Value*> ins;
  for (size_t i = 0; i < types.size(); ++i) ins.push_back(g.addInput("in" + std::to_string(i), types[i]));
  Node* n = g.addNode(op, ins, {"out"}, "node_under_test");
  for (auto& [k, v] : attrs) n->setAttr(k, v);
  g.addOutput(n->output(0));
  inferShapes(g);
  return n->output(0)->type;
}

TensorType sym(DType t, std::vector<Dim> dims) { return TensorType(t, std::move(dims)); }
Dim D(int64_t v) { return Dim::known(v); }
Dim S(const char* s) { return Dim::symbolic(s); }

template <class T>
Tensor vec(Shape shape, std::vector<T> v) {
  return Tensor::fromVector<T>(std::move(shape), v);
}

template <class T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

/// Expects `fn` to throw a UserError whose message contains every fragment.
template <class Fn>
void expectUserError(Fn fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

Tensor randomTensor(Shape shape, std::mt19937& rng) {
  Tensor t(DType::Float32, std::move(shape));
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

/// Index into a (broadcast) operand for output multi-index `idx`, computed the obvious way.
int64_t naiveOffset(const Shape& in, const Shape& out, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  size_t lead = out.size() - in.size();
  for (size_t a = 0; a < in.size(); ++a) off = off * in[a] + (in[a] == 1 ? 0 : idx[lead + a]);
  return off;
}

// ------------------------------------------------------------------------------------------ engine

TEST(OpsMathEngine, BroadcastingMatchesNaiveLoopOnOddShapes) {
  std::mt19937 rng(7);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {}},        {{}, {5}},           {{2, 1, 3, 1, 5}, {4, 1, 1, 5}},
      {{1, 7}, {3, 1}},       {{3, 1, 1}, {1, 1, 6}}, {{4, 1, 6}, {4, 5, 1}}, {{1}, {1, 1, 1}},
      {{2, 0, 3}, {3}},       {{1, 64, 7, 7}, {1, 64, 1, 1}}, {{5, 1, 2, 1}, {1, 3, 1, 4}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = randomTensor(sa, rng), b = randomTensor(sb, rng);
    Tensor c = run1("Sub", {a, b});
    Shape out = c.shape();
    // Expected shape: numpy rule, computed independently.
    size_t r = std::max(sa.size(), sb.size());
    Shape expectShape(r);
    for (size_t i = 0; i < r; ++i) {
      int64_t da = i + sa.size() >= r ? sa[i + sa.size() - r] : 1;
      int64_t db = i + sb.size() >= r ? sb[i + sb.size() - r] : 1;
      expectShape[i] = da == 1 ? db : da;
    }
    ASSERT_EQ(out, expectShape) << shapeToString(sa) << " vs " << shapeToString(sb);
    std::vector<int64_t> idx(out.size(), 0);
    for (int64_t flat = 0; flat < c.numel(); ++flat) {
      int64_t rem = flat;
      for (size_t ax = out.size(); ax-- > 0;) {
        idx[ax] = rem % out[ax];
        rem /= out[ax];
      }
      float expect = a.data<float>()[naiveOffset(sa, out, idx)] - b.data<float>()[naiveOffset(sb, out, idx)];
      ASSERT_EQ(c.data<float>()[flat], expect) << shapeToString(sa) << " vs " << shapeToString(sb) << " @" << flat;
    }
  }
}

TEST(OpsMathEngine, LoopCollapsesContiguousAxes) {
  // Same shapes: one row. Channel bias [C,1,1] on [N,C,H,W]: rows of H*W.
  EXPECT_EQ(elementwise::BroadcastLoop({2, 3, 4, 5}, {{2, 3, 4, 5}, {2, 3, 4, 5}}).extents(),
            (std::vector<int64_t>{120}));
  EXPECT_EQ(elementwise::BroadcastLoop({2, 3, 4, 5}, {{2, 3, 4, 5}, {3, 1, 1}}).extents(),
            (std::vector<int64_t>{2, 3, 20}));
  EXPECT_EQ(elementwise::BroadcastLoop({}, {{}, {}}).extents(), (std::vector<int64_t>{1}));
}

TEST(OpsMathEngine, VariadicOpsBroadcastThreeInputsAndPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = vec<float>({2, 1}, {1, 5});
  Tensor b = vec<float>({3}, {4, nan, 0});
  Tensor c = vec<float>({}, {2});
  Tensor mx = run1("Max", {a, b, c});
  ASSERT_EQ(mx.shape(), (Shape{2, 3}));
  std::vector<float> m = values<float>(mx);
  EXPECT_EQ(m[0], 4.f);
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_EQ(m[2], 2.f);
  EXPECT_EQ(m[3], 5.f);
  EXPECT_EQ(m[5], 5.f);
  Tensor mean = run1("Mean", {vec<float>({2}, {1, 2}), vec<float>({2}, {3, 4}), vec<float>({1}, {5})});
  EXPECT_EQ(values<float>(mean), (std::vector<float>{3, 11.f / 3}));
  Tensor sum = run1("Sum", {vec<int32_t>({2}, {1, 2})});  // one input: a copy
  EXPECT_EQ(values<int32_t>(sum), (std::vector<int32_t>{1, 2}));
  Tensor mn = run1("Min", {vec<uint16_t>({3}, {7, 1, 65535}), vec<uint16_t>({1}, {3})});
  EXPECT_EQ(values<uint16_t>(mn), (std::vector<uint16_t>{3, 1, 3}));
}

TEST(OpsMathEngine, ElementwiseAddIsFastOnResNetSizes) {
  // ResNet-50's largest residual add: 1x256x56x56. The interpreter must run the whole model in seconds.
  std::mt19937 rng(1);
  Tensor a = randomTensor({1, 256, 56, 56}, rng), b = randomTensor({1, 256, 56, 56}, rng);
  auto t0 = std::chrono::steady_clock::now();
  Tensor c = run1("Add", {a, b});
  Tensor r = run1("Relu", {c});
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.data<float>()[12345], std::max(0.f, a.data<float>()[12345] + b.data<float>()[12345]));
  EXPECT_LT(ms, 500.0) << "Add+Relu on 800k elements took " << ms << " ms";
}

// ------------------------------------------------------------------------------------------ arithmetic

TEST(OpsMathArithmetic, IntegerSemantics) {
  EXPECT_EQ(values<int8_t>(run1("Add", {vec<int8_t>({2}, {127, -128}), vec<int8_t>({2}, {1, -1})})),
            (std::vector<int8_t>{-128, 127}));  // wraps like two's complement
  EXPECT_EQ(values<int32_t>(run1("Div", {vec<int32_t>({3}, {7, -7, 6}), vec<int32_t>({3}, {2, 2, -4})})),
            (std::vector<int32_t>{3, -3, -1}));  // truncates toward zero
  expectUserError([] { run1("Div", {vec<int64_t>({2}, {1, 2}), vec<int64_t>({2}, {1, 0})}); },
                  {"node 'node_under_test' (Div)", "division by zero"});
  // Mod: sign of the divisor (fmod=0) vs of the dividend (fmod=1).
  Tensor x = vec<int32_t>({4}, {7, -7, 7, -7}), y = vec<int32_t>({4}, {3, 3, -3, -3});
  EXPECT_EQ(values<int32_t>(run1("Mod", {x, y})), (std::vector<int32_t>{1, 2, -2, -1}));
  EXPECT_EQ(values<int32_t>(run1("Mod", {x, y}, {{"fmod", int64_t{1}}})), (std::vector<int32_t>{1, -1, 1, -1}));
  Tensor fx = vec<double>({2}, {5.5, -5.5}), fy = vec<double>({2}, {2, 2});
  EXPECT_EQ(values<double>(run1("Mod", {fx, fy}, {{"fmod", int64_t{1}}})), (std::vector<double>{1.5, -1.5}));
}

TEST(OpsMathArithmetic, PowIsExactForIntegersAndMixesTypes) {
  int64_t expect = 1;
  for (int i = 0; i < 39; ++i) expect *= 3;
  EXPECT_EQ(values<int64_t>(run1("Pow", {vec<int64_t>({1}, {3}), vec<int64_t>({1}, {39})})),
            (std::vector<int64_t>{expect}));
  EXPECT_EQ(values<float>(run1("Pow", {vec<float>({3}, {2, 4, 9}), vec<int32_t>({1}, {-1})})),
            (std::vector<float>{0.5f, 0.25f, 1.f / 9}));
  EXPECT_EQ(values<int32_t>(run1("Pow", {vec<int32_t>({2}, {4, 9}), vec<float>({1}, {0.5f})})),
            (std::vector<int32_t>{2, 3}));
}

TEST(OpsMathArithmetic, BitShiftEdgeCasesAndBadDirection) {
  Tensor x = vec<uint8_t>({4}, {1, 255, 16, 3});
  Tensor s = vec<uint8_t>({4}, {7, 1, 8, 0});
  EXPECT_EQ(values<uint8_t>(run1("BitShift", {x, s}, {{"direction", std::string("LEFT")}})),
            (std::vector<uint8_t>{128, 254, 0, 3}));
  EXPECT_EQ(values<uint8_t>(run1("BitShift", {x, s}, {{"direction", std::string("RIGHT")}})),
            (std::vector<uint8_t>{0, 127, 0, 3}));
  expectUserError([&] { run1("BitShift", {x, s}, {{"direction", std::string("UP")}}); },
                  {"node 'node_under_test' (BitShift)", "'direction' is 'UP'", "LEFT"});
  expectUserError([] {
    run1("BitShift", {vec<int32_t>({1}, {1}), vec<int32_t>({1}, {1})}, {{"direction", std::string("LEFT")}});
  }, {"(BitShift)", "unsigned"});
}

TEST(OpsMathArithmetic, HalfPrecisionComputesInFloat) {
  Tensor a = Tensor::fromVector<float16>({3}, {float16(1.5f), float16(-2.f), float16(1000.f)});
  Tensor b = Tensor::fromVector<float16>({1}, {float16(0.25f)});
  Tensor c = run1("Mul", {a, b});
  ASSERT_EQ(c.dtype(), DType::Float16);
  EXPECT_EQ(static_cast<float>(c.data<float16>()[0]), 0.375f);
  EXPECT_EQ(static_cast<float>(c.data<float16>()[2]), 250.f);
  Tensor bf = Tensor::fromVector<bfloat16>({2}, {bfloat16(4.f), bfloat16(-9.f)});
  Tensor sq = run1("Abs", {bf});
  EXPECT_EQ(static_cast<float>(sq.data<bfloat16>()[1]), 9.f);
}

// ------------------------------------------------------------------------------------------ unary / activations

TEST(OpsMathUnary, RoundHalvesToEvenAndSignKeepsNaN) {
  Tensor x = vec<float>({7}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f});
  EXPECT_EQ(values<float>(run1("Round", {x})), (std::vector<float>{0, 2, 2, -0.f, -2, 2, -3}));
  Tensor s = run1("Sign", {vec<float>({4}, {-3, 0, 2, std::numeric_limits<float>::quiet_NaN()})});
  EXPECT_EQ(s.data<float>()[0], -1.f);
  EXPECT_EQ(s.data<float>()[1], 0.f);
  EXPECT_EQ(s.data<float>()[2], 1.f);
  EXPECT_TRUE(std::isnan(s.data<float>()[3]));
  EXPECT_EQ(values<int8_t>(run1("Sign", {vec<int8_t>({3}, {-5, 0, 9})})), (std::vector<int8_t>{-1, 0, 1}));
}

TEST(OpsMathUnary, ActivationsMatchTheirFormulas) {
  std::vector<float> xs = {-30.f, -3.f, -0.5f, 0.f, 0.5f, 3.f, 30.f};
  Tensor x = vec<float>({7}, xs);
  auto check = [&](const char* op, const Attrs& attrs, auto formula) {
    Tensor y = run1(op, {x}, attrs);
    for (size_t i = 0; i < xs.size(); ++i) {
      double expect = formula(static_cast<double>(xs[i]));
      EXPECT_NEAR(y.data<float>()[i], expect, 1e-6 * std::max(1.0, std::abs(expect))) << op << " at " << xs[i];
    }
  };
  check("Sigmoid", {}, [](double v) { return 1 / (1 + std::exp(-v)); });
  check("Softplus", {}, [](double v) { return std::log(1 + std::exp(v)); });
  check("Softsign", {}, [](double v) { return v / (1 + std::abs(v)); });
  check("Elu", {{"alpha", 2.f}}, [](double v) { return v >= 0 ? v : 2 * (std::exp(v) - 1); });
  check("Celu", {{"alpha", 2.f}}, [](double v) { return std::max(0.0, v) + std::min(0.0, 2 * (std::exp(v / 2) - 1)); });
  check("HardSigmoid", {}, [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); });
  check("HardSwish", {}, [](double v) { return v * std::clamp(v / 6 + 0.5, 0.0, 1.0); });
  check("Mish", {}, [](double v) { return v * std::tanh(std::log(1 + std::exp(v))); });
  check("Gelu", {}, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
  check("LeakyRelu", {}, [](double v) { return v >= 0 ? v : 0.01 * v; });
  check("ThresholdedRelu", {{"alpha", 0.5f}}, [](double v) { return v > 0.5 ? v : 0.0; });
  check("Shrink", {{"bias", 1.f}, {"lambd", 0.5f}}, [](double v) { return v < -0.5 ? v + 1 : v > 0.5 ? v - 1 : 0; });
  check("Selu", {}, [](double v) {
    return 1.05070102214813232421875 * (v > 0 ? v : 1.67326319217681884765625 * (std::exp(v) - 1));
  });
  Tensor inf = run1("IsInf", {vec<double>({3}, {-INFINITY, 1, INFINITY})}, {{"detect_negative", int64_t{0}}});
  EXPECT_EQ(values<bool>(inf), (std::vector<bool>{false, false, true}));
}

TEST(OpsMathUnary, ClipBoundsOptionalIntegerAndLegacyUpgrade) {
  Tensor x = vec<int8_t>({4}, {-100, -1, 5, 100});
  EXPECT_EQ(values<int8_t>(run1("Clip", {x, std::nullopt, vec<int8_t>({}, {10})})),
            (std::vector<int8_t>{-100, -1, 5, 10}));
  EXPECT_EQ(values<int8_t>(run1("Clip", {x, vec<int8_t>({}, {7}), vec<int8_t>({}, {3})})),
            (std::vector<int8_t>{3, 3, 3, 3}));  // min > max: everything becomes max, like numpy.clip
  // Clip-6: bounds as attributes -> constant inputs.
  Graph g;
  Value* in = g.addInput("x", TensorType::fromShape(DType::Float32, {3}));
  Node* n = g.addNode("Clip", {in}, {"y"}, "legacy_clip");
  n->setAttr("max", 1.f);
  g.addOutput(n->output(0));
  UpgradeContext uctx{*n, 6, g};
  n->def()->upgradeFn(uctx);
  EXPECT_FALSE(n->hasAttr("max"));
  ASSERT_EQ(n->numInputs(), 3u);
  EXPECT_EQ(n->input(1), nullptr);
  ASSERT_TRUE(n->input(2) && n->input(2)->isConstant());
  inferShapes(g);
  Tensor y = Interpreter(g).run({{"x", vec<float>({3}, {-5, 0.5f, 5})}})[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{-5, 0.5f, 1}));
}

TEST(OpsMathUnary, PReluBroadcastsSlopeOnlyTowardsX) {
  Tensor x = vec<float>({2, 2}, {-1, 2, -3, 4});
  EXPECT_EQ(values<float>(run1("PRelu", {x, vec<float>({2}, {0.5f, 0.25f})})), (std::vector<float>{-0.5f, 2, -1.5f, 4}));
  expectUserError([&] { run1("PRelu", {x, vec<float>({3, 2, 2}, std::vector<float>(12, 1))}); },
                  {"(PRelu)", "slope", "broadcast"});
}

// ------------------------------------------------------------------------------------------ logic

TEST(OpsMathLogic, WhereSelectsStringsWithBroadcasting) {
  Tensor cond = vec<bool>({2, 1}, {true, false});
  Tensor a = vec<std::string>({2}, {"a0", "a1"});
  Tensor b = vec<std::string>({}, {"b"});
  Tensor y = run1("Where", {cond, a, b});
  ASSERT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<std::string>(y), (std::vector<std::string>{"a0", "a1", "b", "b"}));
  Tensor eq = run1("Equal", {a, vec<std::string>({1}, {"a1"})});
  EXPECT_EQ(values<bool>(eq), (std::vector<bool>{false, true}));
  Tensor ge = run1("GreaterOrEqual", {vec<int64_t>({3}, {1, 2, 3}), vec<int64_t>({1}, {2})});
  EXPECT_EQ(values<bool>(ge), (std::vector<bool>{false, true, true}));
  Tensor x = run1("Xor", {vec<bool>({2, 2}, {true, true, false, false}), vec<bool>({2}, {true, false})});
  EXPECT_EQ(values<bool>(x), (std::vector<bool>{false, true, true, false}));
}

TEST(OpsMathLogic, KernelsRejectMismatchedAndUnsupportedTypes) {
  expectUserError([] { run1("Where", {vec<bool>({1}, {true}), vec<float>({1}, {1}), vec<double>({1}, {2})}); },
                  {"node 'node_under_test' (Where)", "f32", "f64", "must match"});
  expectUserError([] { run1("Less", {vec<std::string>({1}, {"a"}), vec<std::string>({1}, {"b"})}); },
                  {"(Less)", "str", "numeric"});
  expectUserError([] { run1("Not", {vec<int32_t>({1}, {1})}); }, {"(Not)", "i32", "bool"});
  expectUserError([] { run1("Mod", {vec<uint8_t>({2}, {5, 6}), vec<uint8_t>({1}, {0})}); },
                  {"(Mod)", "division by zero"});
  expectUserError([] { run1("ConstantOfShape", {vec<int64_t>({2}, {2, -1})}); }, {"(ConstantOfShape)", "negative"});
  expectUserError([] { run1("Clip", {vec<float>({2}, {1, 2}), vec<float>({2}, {0, 0})}); },
                  {"(Clip)", "min", "scalar"});
  expectUserError([] { run1("Max", {vec<float>({2}, {1, 2}), vec<float>({3}, {1, 2, 3})}); },
                  {"(Max)", "cannot be broadcast"});
}

TEST(OpsMathArithmetic, FloatModFollowsTheRequestedSign) {
  Tensor a = Tensor::fromVector<float16>({4}, {float16(-4.f), float16(7.f), float16(5.f), float16(-7.5f)});
  Tensor b = Tensor::fromVector<float16>({4}, {float16(3.f), float16(-3.f), float16(2.5f), float16(2.f)});
  Tensor c = run1("Mod", {a, b}, {{"fmod", int64_t{1}}});
  std::vector<float> got;
  for (int64_t i = 0; i < 4; ++i) got.push_back(c.data<float16>()[i]);
  EXPECT_EQ(got, (std::vector<float>{-1, 1, 0, -1.5f}));  // C fmod: sign of the dividend
  Tensor d = run1("Mod", {vec<double>({2}, {-4, 7}), vec<double>({2}, {3, -3})});
  EXPECT_EQ(values<double>(d), (std::vector<double>{2, -2}));  // fmod=0: sign of the divisor
}

// ------------------------------------------------------------------------------------------ inference

TEST(OpsMathInference, SymbolicBroadcastingAndResultTypes) {
  EXPECT_EQ(inferOp("Add", {sym(DType::Float32, {S("N"), D(1), D(3)}), sym(DType::Float32, {D(4), D(1)})}).toString(),
            "f32[N,4,3]");
  EXPECT_EQ(inferOp("Less", {sym(DType::Int64, {S("N")}), sym(DType::Int64, {})}).toString(), "bool[N]");
  EXPECT_EQ(inferOp("Where", {sym(DType::Bool, {S("B"), D(1)}), sym(DType::Float16, {D(5)}),
                              sym(DType::Float16, {D(1)})})
                .toString(),
            "f16[B,5]");
  EXPECT_EQ(inferOp("Max", {sym(DType::Float32, {S("N"), D(1)}), sym(DType::Float32, {D(1), S("M")}),
                            sym(DType::Float32, {})})
                .toString(),
            "f32[N,M]");
  EXPECT_EQ(inferOp("Cast", {sym(DType::Float32, {S("N"), D(2)})}, {{"to", int64_t{7}}}).toString(), "i64[N,2]");
  EXPECT_EQ(inferOp("CastLike", {sym(DType::Float32, {S("N")}), sym(DType::Float16, {D(1)})}).toString(), "f16[N]");
  EXPECT_EQ(inferOp("IsNaN", {TensorType(DType::Float64, std::nullopt)}).toString(), "bool[*]");
  EXPECT_EQ(inferOp("ConstantOfShape", {sym(DType::Int64, {D(3)})}).toString(), "f32[?,?,?]");
  EXPECT_EQ(inferOp("EyeLike", {sym(DType::Int32, {S("R"), S("C")})}, {{"dtype", int64_t{1}}}).toString(),
            "f32[R,C]");
}

TEST(OpsMathInference, ErrorsNameTheNodeAndTheProblem) {
  expectUserError([] { inferOp("Add", {sym(DType::Float32, {D(3)}), sym(DType::Float32, {D(4)})}); },
                  {"node 'node_under_test' (Add)", "3", "4", "broadcast"});
  expectUserError([] { inferOp("Mul", {sym(DType::Float32, {D(3)}), sym(DType::Int64, {D(3)})}); },
                  {"(Mul)", "i64", "f32", "must match"});
  expectUserError([] { inferOp("Sqrt", {sym(DType::Int32, {D(3)})}); }, {"(Sqrt)", "i32", "floating-point"});
  expectUserError([] { inferOp("And", {sym(DType::Float32, {D(1)}), sym(DType::Float32, {D(1)})}); },
                  {"(And)", "bool"});
  expectUserError([] { inferOp("Cast", {sym(DType::Float32, {D(1)})}, {{"to", int64_t{42}}}); },
                  {"(Cast)", "'to' is 42"});
  expectUserError([] { inferOp("EyeLike", {sym(DType::Float32, {D(1), D(2), D(3)})}); }, {"(EyeLike)", "2-D"});
  expectUserError([] { inferOp("Clip", {sym(DType::Float32, {D(3)}), sym(DType::Float32, {D(1), D(2)})}); },
                  {"(Clip)", "min", "scalar"});
}

// ------------------------------------------------------------------------------------------ cast / constants

TEST(OpsMathCast, StringsHalfAndBFloat16) {
  Tensor s = run1("Cast", {vec<std::string>({4}, {"1.5", "-INF", "NaN", "+INF"})}, {{"to", int64_t{1}}});
  EXPECT_EQ(s.data<float>()[0], 1.5f);
  EXPECT_TRUE(std::isinf(s.data<float>()[1]) && s.data<float>()[1] < 0);
  EXPECT_TRUE(std::isnan(s.data<float>()[2]));
  EXPECT_TRUE(std::isinf(s.data<float>()[3]) && s.data<float>()[3] > 0);
  Tensor str = run1("Cast", {vec<float>({2}, {0.25f, -3.f})}, {{"to", int64_t{8}}});
  EXPECT_EQ(values<std::string>(str), (std::vector<std::string>{"0.25", "-3"}));
  expectUserError([] { run1("Cast", {vec<std::string>({1}, {"abc"})}, {{"to", int64_t{1}}}); },
                  {"(Cast)", "'abc'"});
  // f32 -> bf16 keeps the upper 16 bits (the ONNX 1.12 reference data truncates).
  float f = 0.48033667f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  Tensor bf = run1("Cast", {vec<float>({1}, {f})}, {{"to", int64_t{16}}});
  EXPECT_EQ(bf.data<bfloat16>()[0].bits, static_cast<uint16_t>(bits >> 16));
  Tensor h = run1("CastLike", {vec<double>({1}, {65504.0}), Tensor::fromVector<float16>({1}, {float16(0.f)})});
  EXPECT_EQ(static_cast<float>(h.data<float16>()[0]), 65504.f);
}

TEST(OpsMathConstant, ValueAttributesShapesEyeAndRange) {
  EXPECT_EQ(values<int64_t>(runOp("Constant", {}, {{"value_ints", std::vector<int64_t>{4, 5}}})[0]),
            (std::vector<int64_t>{4, 5}));
  Tensor scalar = runOp("Constant", {}, {{"value_float", 2.5f}})[0];
  EXPECT_EQ(scalar.rank(), 0u);
  EXPECT_EQ(scalar.data<float>()[0], 2.5f);
  expectUserError([] { runOp("Constant", {}, {{"value_float", 1.f}, {"value_int", int64_t{1}}}); },
                  {"(Constant)", "exactly one", "value_float, value_int"});
  Tensor filled = run1("ConstantOfShape", {vec<int64_t>({2}, {2, 3})}, {{"value", Tensor::fromVector<int32_t>({1}, {7})}});
  EXPECT_EQ(filled.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int32_t>(filled), std::vector<int32_t>(6, 7));
  Tensor eye = run1("EyeLike", {Tensor(DType::Int32, {3, 4})}, {{"k", int64_t{1}}});
  EXPECT_EQ(values<int32_t>(eye), (std::vector<int32_t>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  Tensor eyeNeg = run1("EyeLike", {Tensor(DType::Float32, {3, 2})}, {{"k", int64_t{-1}}, {"dtype", int64_t{9}}});
  EXPECT_EQ(values<bool>(eyeNeg), (std::vector<bool>{false, false, true, false, false, true}));
  auto i32 = [](int32_t v) { return Tensor::scalar<int32_t>(v); };
  EXPECT_EQ(values<int32_t>(run1("Range", {i32(1), i32(10), i32(3)})), (std::vector<int32_t>{1, 4, 7}));
  EXPECT_EQ(values<int32_t>(run1("Range", {i32(10), i32(4), i32(-3)})), (std::vector<int32_t>{10, 7}));
  EXPECT_EQ(run1("Range", {i32(5), i32(1), i32(2)}).numel(), 0);
  expectUserError([&] { run1("Range", {i32(0), i32(1), i32(0)}); }, {"(Range)", "delta"});
}

}  // namespace
}  // namespace tessel
