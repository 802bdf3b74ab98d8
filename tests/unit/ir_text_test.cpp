// Tests of the textual IR: round trips of hand-built graphs, golden valid/invalid files, side files, the node suite.
#include <cstdlib>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <sstream>
#include <unistd.h>

#include "tessel/frontend/onnx_importer.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- structural comparison (independent of the printer)

bool sameAttr(const AttrValue& a, const AttrValue& b, const std::string& where);
void expectSameGraph(const Graph& a, const Graph& b, const std::string& where);

bool sameFloatBits(float x, float y) { return std::memcmp(&x, &y, 4) == 0; }

bool sameGraphPtr(const std::shared_ptr<Graph>& a, const std::shared_ptr<Graph>& b, const std::string& where) {
  bool before = ::testing::Test::HasFailure();
  expectSameGraph(*a, *b, where);
  return before || !::testing::Test::HasFailure();
}

bool sameAttr(const AttrValue& a, const AttrValue& b, const std::string& where) {
  if (a.index() != b.index()) return false;
  switch (attrKindOf(a)) {
    case AttrKind::Float: return sameFloatBits(std::get<float>(a), std::get<float>(b));
    case AttrKind::Floats: {
      const auto& x = std::get<std::vector<float>>(a);
      const auto& y = std::get<std::vector<float>>(b);
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!sameFloatBits(x[i], y[i])) return false;
      return true;
    }
    case AttrKind::Tensor: return std::get<Tensor>(a).identical(std::get<Tensor>(b));
    case AttrKind::Tensors: {
      const auto& x = std::get<std::vector<Tensor>>(a);
      const auto& y = std::get<std::vector<Tensor>>(b);
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!x[i].identical(y[i])) return false;
      return true;
    }
    case AttrKind::Graph:
      return sameGraphPtr(std::get<std::shared_ptr<Graph>>(a), std::get<std::shared_ptr<Graph>>(b), where);
    case AttrKind::Graphs: {
      const auto& x = std::get<std::vector<std::shared_ptr<Graph>>>(a);
      const auto& y = std::get<std::vector<std::shared_ptr<Graph>>>(b);
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!sameGraphPtr(x[i], y[i], where + "[" + std::to_string(i) + "]")) return false;
      return true;
    }
    case AttrKind::Int: return std::get<int64_t>(a) == std::get<int64_t>(b);
    case AttrKind::String: return std::get<std::string>(a) == std::get<std::string>(b);
    case AttrKind::Ints: return std::get<std::vector<int64_t>>(a) == std::get<std::vector<int64_t>>(b);
    case AttrKind::Strings: return std::get<std::vector<std::string>>(a) == std::get<std::vector<std::string>>(b);
  }
  return false;
}

void expectSameAttrs(const std::map<std::string, AttrValue>& a, const std::map<std::string, AttrValue>& b,
                     const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  for (const auto& [k, v] : a) {
    ASSERT_TRUE(b.count(k)) << where << ": attribute " << k << " missing";
    EXPECT_TRUE(sameAttr(v, b.at(k), where + "." + k)) << where << ": attribute " << k << " differs";
  }
}

std::string nameOf(const Value* v) { return v ? v->name() : std::string("<none>"); }

void expectSameValue(const Value* a, const Value* b, const std::string& where) {
  ASSERT_EQ(a == nullptr, b == nullptr) << where;
  if (!a) return;
  EXPECT_EQ(a->name(), b->name()) << where;
  EXPECT_EQ(a->type, b->type) << where << ": " << a->type.toString() << " vs " << b->type.toString();
  EXPECT_EQ(a->isGraphInput(), b->isGraphInput()) << where;
  EXPECT_EQ(a->isCaptured(), b->isCaptured()) << where;
  ASSERT_EQ(a->isConstant(), b->isConstant()) << where;
  if (a->isConstant()) {
    EXPECT_TRUE(a->constant().identical(b->constant())) << where << ": constant data differs";
  }
}

/// Same names, types, constants, captures, nodes (op, domain, name, edges, attributes, device, meta) and outputs.
void expectSameGraph(const Graph& a, const Graph& b, const std::string& where) {
  std::string w = where + "/@" + a.name();
  EXPECT_EQ(a.name(), b.name()) << w;
  ASSERT_EQ(a.inputs().size(), b.inputs().size()) << w;
  for (size_t i = 0; i < a.inputs().size(); ++i) expectSameValue(a.inputs()[i], b.inputs()[i], w + " input");
  // Every value (constants, captures, node outputs) exists on both sides with the same properties.
  ASSERT_EQ(a.values().size(), b.values().size()) << w;
  for (const Value* v : a.values()) expectSameValue(v, b.findValue(v->name()), w + " value " + v->name());
  ASSERT_EQ(a.numNodes(), b.numNodes()) << w;
  for (size_t i = 0; i < a.numNodes(); ++i) {
    const Node& x = *a.nodes()[i];
    const Node& y = *b.nodes()[i];
    std::string nw = w + " node " + x.name();
    EXPECT_EQ(x.opType(), y.opType()) << nw;
    EXPECT_EQ(x.domain(), y.domain()) << nw;
    EXPECT_EQ(x.name(), y.name()) << nw;
    EXPECT_EQ(x.device, y.device) << nw;
    ASSERT_EQ(x.numInputs(), y.numInputs()) << nw;
    for (size_t k = 0; k < x.numInputs(); ++k) EXPECT_EQ(nameOf(x.input(k)), nameOf(y.input(k))) << nw;
    ASSERT_EQ(x.numOutputs(), y.numOutputs()) << nw;
    for (size_t k = 0; k < x.numOutputs(); ++k) expectSameValue(x.output(k), y.output(k), nw + " output");
    expectSameAttrs(x.attrs(), y.attrs(), nw);
    expectSameAttrs(x.meta, y.meta, nw + " meta");
  }
  ASSERT_EQ(a.outputs().size(), b.outputs().size()) << w;
  for (size_t i = 0; i < a.outputs().size(); ++i) EXPECT_EQ(a.outputs()[i]->name(), b.outputs()[i]->name()) << w;
}

/// print -> parse -> print must reproduce the text, and the parsed model must equal the original.
std::unique_ptr<Model> expectRoundTrip(const Model& m, const std::string& label) {
  std::string text = printModelText(m);
  std::unique_ptr<Model> parsed;
  try {
    parsed = parseModelText(text, label + ".tir");
  } catch (const UserError& e) {
    ADD_FAILURE() << label << ": printed text does not parse: " << e.what() << "\n" << text;
    return nullptr;
  }
  EXPECT_EQ(printModelText(*parsed), text) << label;
  EXPECT_EQ(parsed->opsetImports, m.opsetImports);
  EXPECT_EQ(parsed->producerName, m.producerName);
  EXPECT_EQ(parsed->irVersion, m.irVersion);
  expectSameGraph(*m.graph, *parsed->graph, label);
  return parsed;
}

std::string parseError(std::string_view text, std::string_view side = {}) {
  try {
    parseModelText(text, "t.tir", side);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

// ---------------------------------------------------------------- hand-built graphs

float bitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

/// One constant per dtype, with the awkward values (NaN payloads, infinities, -0, denormals, extremes).
void addEveryDTypeConstant(Graph& g) {
  float inf = std::numeric_limits<float>::infinity();
  g.addConstant("f32", Tensor::fromVector<float>({3, 3}, {0.1f, -0.f, std::nanf(""), bitsToFloat(0x7fc00001),
                                                           bitsToFloat(0xffc00000), inf, -inf, 1e-45f, 3.4028235e38f}));
  g.addConstant("f64", Tensor::fromVector<double>({4}, {0.1, -1e-310, std::nan(""), -std::numeric_limits<double>::infinity()}));
  g.addConstant("f16", Tensor::fromVector<float16>({4}, {float16(1.5f), float16(-65504.f), float16::fromBits(0x7e01),
                                                         float16::fromBits(0x0001)}));
  g.addConstant("bf16", Tensor::fromVector<bfloat16>({3}, {bfloat16(3.0f), bfloat16::fromBits(0xffc1), bfloat16(-0.f)}));
  g.addConstant("i8", Tensor::fromVector<int8_t>({2}, {-128, 127}));
  g.addConstant("i16", Tensor::fromVector<int16_t>({2}, {-32768, 32767}));
  g.addConstant("i32", Tensor::fromVector<int32_t>({2}, {std::numeric_limits<int32_t>::min(), 7}));
  g.addConstant("i64", Tensor::fromVector<int64_t>({2}, {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}));
  g.addConstant("u8", Tensor::fromVector<uint8_t>({2}, {0, 255}));
  g.addConstant("u16", Tensor::fromVector<uint16_t>({1}, {65535}));
  g.addConstant("u32", Tensor::fromVector<uint32_t>({1}, {4294967295u}));
  g.addConstant("u64", Tensor::fromVector<uint64_t>({2}, {0, std::numeric_limits<uint64_t>::max()}));
  g.addConstant("bool", Tensor::fromVector<bool>({2, 1}, {true, false}));
  g.addConstant("str", Tensor::fromVector<std::string>({3}, {"plain", "q\"b\\s\n\t\r\x01\x7f", "utf8 é"}));
  g.addConstant("c64", Tensor::fromVector<std::complex<float>>({2}, {{1.5f, -2.f}, {0.f, std::nanf("")}}));
  g.addConstant("c128", Tensor::fromVector<std::complex<double>>({1}, {{0.1, 1e300}}));
  g.addConstant("empty", Tensor(DType::Float32, {0, 3}));
  g.addConstant("scalar", Tensor::scalar<int64_t>(-5));
  g.addConstant("long", Tensor::fromVector<float>({40}, std::vector<float>(40, 2.5f)));
}

std::shared_ptr<Graph> branch(const std::string& name, Graph* parent, const std::string& captured, bool nested) {
  auto g = std::make_shared<Graph>(name);
  g->setParent(parent);
  Value* c = g->addValue(captured, parent->findValue(captured)->type);  // captured from the enclosing graph
  Node* n = g->addNode("Identity", {c}, {name + "_out"});
  n->output(0)->type = c->type;
  if (nested) {
    // A grand-child body that reads the outermost graph's value through two scopes.
    auto inner = std::make_shared<Graph>("inner");
    inner->setParent(g.get());
    Value* ic = inner->addValue(captured, c->type);
    inner->addOutput(inner->addNode("Neg", {ic}, {"neg"})->output(0));
    n->setAttr("body", inner);
  }
  g->addOutput(n->output(0));
  return g;
}

std::unique_ptr<Model> kitchenSinkModel() {
  auto m = std::make_unique<Model>();
  m->opsetImports = {{"", 13}, {"com.microsoft", 1}, {"tessel", 1}};
  m->producerName = "pytorch \"2.0\"\n";
  m->irVersion = 7;
  m->graph = std::make_unique<Graph>("main graph");
  Graph& g = *m->graph;
  Value* x = g.addInput("input", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("N"), Dim::known(3),
                                                                                Dim::unknown(), Dim::symbolic("batch size")}));
  Value* weird = g.addInput("onnx::Conv/weight:0 x", TensorType(DType::Int64, std::nullopt));
  Value* scalar = g.addInput("s", TensorType::fromShape(DType::Float32, {}));
  Value* untyped = g.addInput("untyped", TensorType{});
  Value* partial = g.addInput("partial", TensorType(DType::Undefined, std::vector<Dim>{Dim::known(2)}));
  Value* withDefault = g.addInput("with_default", TensorType::fromShape(DType::Float32, {3}));
  withDefault->setConstant(Tensor::fromVector<float>({3}, {1, 2, 3}));
  Value* dynDefault = g.addInput("dyn_default", TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("K")}));
  dynDefault->setConstant(Tensor::fromVector<float>({2}, {4, 5}));
  dynDefault->type = TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("K")});
  addEveryDTypeConstant(g);
  g.addValue("dangling", TensorType::fromShape(DType::Int32, {1}));  // no producer: printed as a capture line

  Node* conv = g.addNode("Conv", {x, g.findValue("f32"), nullptr}, {"conv.out"});
  conv->output(0)->type = TensorType(DType::Float32, std::vector<Dim>{Dim::symbolic("N"), Dim::known(64)});
  conv->setAttr("group", int64_t{-1});
  conv->setAttr("alpha", 1.0f);
  conv->setAttr("beta", 0.1f);
  conv->setAttr("gamma", std::nanf(""));
  conv->setAttr("delta", -std::numeric_limits<float>::infinity());
  conv->setAttr("big", 1e20f);
  conv->setAttr("auto_pad", std::string("SAME \"upper\"\n"));
  conv->setAttr("pads", std::vector<int64_t>{3, 3, -3, 3});
  conv->setAttr("scales", std::vector<float>{1.0f, 0.5f, bitsToFloat(0x7fc00002)});
  conv->setAttr("names", std::vector<std::string>{"a", "", "c d"});
  conv->setAttr("no_ints", std::vector<int64_t>{});
  conv->setAttr("no_floats", std::vector<float>{});
  conv->setAttr("no_strings", std::vector<std::string>{});
  conv->setAttr("no_tensors", std::vector<Tensor>{});
  conv->setAttr("no_graphs", std::vector<std::shared_ptr<Graph>>{});
  conv->setAttr("value", Tensor::fromVector<int32_t>({2, 2}, {1, 2, 3, 4}));
  conv->setAttr("values", std::vector<Tensor>{Tensor::scalar<float>(1.f), Tensor::fromVector<std::string>({1}, {"s"})});
  conv->setAttr("key with space", int64_t{1});
  conv->device = "npu0";
  conv->meta["tile"] = std::vector<int64_t>{1, 8};
  conv->meta["kernel"] = std::string("sgemm_6x16");
  conv->meta["fusion group"] = int64_t{3};

  Node* split = g.addNode("Split", {conv->output(0), nullptr, weird, nullptr}, {"a", "", "c", ""}, "split node");
  split->output(0)->type = TensorType::fromShape(DType::Float32, {1, 32});
  g.addNode("Subgraph", {split->output(0)}, {"sub"}, "", "tessel");
  g.addNode("Gelu", {scalar}, {"gelu"}, "gelu node", "com.microsoft");
  g.addNode("Op.with.dots", {untyped}, {"odd"}, "", "my domain");
  g.addNode("Print", {partial}, {});  // no outputs
  Node* empty = g.addNode("Identity", {scalar}, {"renamed"});
  empty->setName("");
  Node* iff = g.addNode("If", {g.findValue("bool")}, {"if_out"}, "the if");
  iff->setAttr("then_branch", branch("then", &g, "input", true));
  iff->setAttr("else_branch", branch("else", &g, "s", false));
  iff->setAttr("branches", std::vector<std::shared_ptr<Graph>>{branch("b0", &g, "input", false)});
  g.addOutput(iff->output(0));
  g.addOutput(split->output(2));
  g.addOutput(x);
  g.addOutput(g.findValue("i64"));
  g.addOutput(x);
  return m;
}

TEST(IrTextRoundTrip, KitchenSinkModelPrintsParsesAndPrintsIdentically) {
  auto m = kitchenSinkModel();
  auto parsed = expectRoundTrip(*m, "kitchen_sink");
  ASSERT_TRUE(parsed);
  // Spot checks of the parsed structure against what was built (not against printed text).
  const Graph& g = *parsed->graph;
  EXPECT_EQ(g.findNode("split node")->numInputs(), 4u);
  EXPECT_EQ(g.findNode("split node")->input(1), nullptr);
  EXPECT_EQ(g.findNode("split node")->output(1), nullptr);
  EXPECT_EQ(g.findNode("split node")->output(3), nullptr);
  EXPECT_EQ(g.findNode("sub")->domain(), "tessel");
  EXPECT_EQ(g.findNode("odd")->domain(), "my domain");
  EXPECT_EQ(g.findNode("odd")->opType(), "Op.with.dots");
  EXPECT_EQ(g.findNode("")->opType(), "Identity");
  EXPECT_EQ(g.findNode("Print")->numOutputs(), 0u);
  EXPECT_TRUE(g.findValue("dangling")->isCaptured());
  EXPECT_EQ(g.findValue("dyn_default")->type.toString(), "f32[K]");
  EXPECT_EQ(g.findValue("dyn_default")->constant().numel(), 2);
  const Graph& thenG = g.findNode("the if")->attrGraph("then_branch");
  EXPECT_EQ(thenG.parent(), &g);
  EXPECT_TRUE(thenG.findValue("input")->isCaptured());
  const Graph& inner = thenG.nodes()[0]->attrGraph("body");
  EXPECT_TRUE(inner.findValue("input")->isCaptured());
  EXPECT_EQ(inner.lookup("input"), g.findValue("input"));
  const Node* conv = g.findNode("conv.out");
  EXPECT_EQ(conv->device, "npu0");
  EXPECT_EQ(std::get<std::string>(conv->meta.at("kernel")), "sgemm_6x16");
  EXPECT_EQ(conv->attrString("auto_pad"), "SAME \"upper\"\n");
  EXPECT_EQ(conv->attrInts("pads"), (std::vector<int64_t>{3, 3, -3, 3}));
}

TEST(IrTextRoundTrip, PrintingIsDeterministicAcrossClones) {
  auto m = kitchenSinkModel();
  auto c = m->clone();
  EXPECT_EQ(printModelText(*m), printModelText(*c));
  EXPECT_EQ(printGraphText(*m->graph), printGraphText(*c->graph));
}

TEST(IrTextRoundTrip, PrinterSpellsTheDocumentedSyntax) {
  // Expected fragments written from docs/ir.md, independently of the printer's output.
  std::string text = printModelText(*kitchenSinkModel());
  for (const char* fragment : {
           "tessel.model opset{\"\": 13, \"com.microsoft\": 1, \"tessel\": 1} producer \"pytorch \\\"2.0\\\"\\n\" ir_version 7\n",
           "graph @\"main graph\"(%input: f32[N,3,?,\"batch size\"], %\"onnx::Conv/weight:0 x\": i64[*], %s: f32[], "
           "%untyped: ?, %partial: ?[2], %with_default: f32[3] = [1, 2, 3], "
           "%dyn_default: f32[K] = tensor f32[2] [4, 5])",
           "const %f32: f32[3,3] = [0.100000001, -0, nan, nan(0x7fc00001), nan(0xffc00000), inf, -inf, 1.40129846e-45, "
           "3.40282347e+38]",
           "const %f16: f16[4] = [1.5, -65504, nan(0x7e01), 5.96046448e-08]",
           "const %bf16: bf16[3] = [3, nan(0xffc1), -0]",
           "const %i64: i64[2] = [-9223372036854775808, 9223372036854775807]",
           "const %u64: u64[2] = [0, 18446744073709551615]",
           "const %bool: bool[2,1] = [true, false]",
           "const %str: str[3] = [\"plain\", \"q\\\"b\\\\s\\n\\t\\r\\x01\\x7f\", \"utf8 é\"]",
           "const %c64: c64[2] = [(1.5, -2), (0, nan)]",
           "const %empty: f32[0,3] = []",
           "const %scalar: i64[] = -5",
           "capture %dangling: i32[1]",
           "%conv.out = Conv(", "= Conv(%input, %f32, _) {", "alpha=1.0,", "beta=0.100000001,", "gamma=nan,", "delta=-inf,",
           "big=1.00000002e+20,", "auto_pad=\"SAME \\\"upper\\\"\\n\"", "no_ints=ints[]", "no_graphs=graphs[]",
           "\"key with space\"=1", "value=tensor i32[2,2] [1, 2, 3, 4]", "values=[tensor f32[] 1, tensor str[1] [\"s\"]]",
           "scales=[1.0, 0.5, nan(0x7fc00002)]", "} : f32[N,64]  @npu0  meta{\"fusion group\"=3, kernel=\"sgemm_6x16\", tile=[1, 8]}\n",
           "%a, _, %c, _ = Split(%conv.out, _, %\"onnx::Conv/weight:0 x\", _) : f32[1,32], ?  name \"split node\"\n",
           "%sub = tessel.Subgraph(%a) : ?\n", "%gelu = com.microsoft.Gelu(%s) : ?  name \"gelu node\"\n",
           "%odd = \"my domain\":\"Op.with.dots\"(%untyped) : ?\n", "  Print(%partial)\n",
           "%renamed = Identity(%s) : ?  name \"\"\n", "then_branch=graph @then() -> (%then_out: f32[N,3,?,\"batch size\"]) {\n",
           "    capture %input: f32[N,3,?,\"batch size\"]\n",
           ") -> (%if_out: ?, %c: ?, %input: f32[N,3,?,\"batch size\"], %i64: i64[2], %input: f32[N,3,?,\"batch size\"]) {"}) {
    EXPECT_NE(text.find(fragment), std::string::npos) << "missing: " << fragment << "\n---\n" << text;
  }
}

// ---------------------------------------------------------------- parsing hand-written text

TEST(IrTextParse, ReadsHandWrittenTextWithCommentsForwardRefsAndImplicitCaptures) {
  const char* text = R"(# a comment line
tessel.model opset{"": 13} producer "me" ir_version 8
graph @main(%x: f32[2], %cond: bool[]) -> (%z: f32[2]) {
  %z = Add(%y, %w)          # %y is defined below: forward references are allowed
  %y = Relu(%x) : f32[2]
  const %w: f32[2] = [0.5, -inf]
  %unused = If(%cond) {then_branch=graph @t() -> (%x: f32[2]) {}, else_branch=graph @e() -> (%o: f32[2]) {
    %o = Neg(%x)             # %x comes from the enclosing graph: captured implicitly
  }}
}
)";
  auto m = parseModelText(text, "hand.tir");
  const Graph& g = *m->graph;
  ASSERT_EQ(g.numNodes(), 3u);
  EXPECT_EQ(g.nodes()[0]->input(0), g.findValue("y"));
  EXPECT_EQ(g.nodes()[0]->input(1), g.findValue("w"));
  EXPECT_EQ(g.findValue("z")->type.toString(), "f32[2]") << "untyped definition, typed by the output list";
  EXPECT_EQ(g.findValue("unused")->type, TensorType{}) << "no type clause: unknown type";
  const Tensor& w = g.findValue("w")->constant();
  EXPECT_EQ(w.data<float>()[0], 0.5f);
  EXPECT_TRUE(std::isinf(w.data<float>()[1]) && w.data<float>()[1] < 0);
  const Node& iff = *g.nodes()[2];
  const Graph& thenG = iff.attrGraph("then_branch");
  EXPECT_TRUE(thenG.findValue("x")->isCaptured());
  EXPECT_EQ(thenG.outputs()[0], thenG.findValue("x"));
  EXPECT_EQ(iff.attrGraph("else_branch").findValue("x")->type.toString(), "f32[2]");
  EXPECT_EQ(g.outputs()[0], g.findValue("z"));
}

TEST(IrTextParse, NumbersOfEveryKindParseToTheExactValues) {
  auto m = parseModelText(R"(tessel.model graph @g() -> () {
  const %a: f32[4] = [1, -0.25, 0x1p-3, 1e-45]
  const %b: f16[2] = [65504, 0.333]
  const %c: u8[] = 255
  const %d: i8[2] = [+7, -128]
  const %e: c128[1] = [(1e300, -2)]
  X() {i=-9223372036854775808, f=2, fl=[1, 2.5], g=inf}
})", "n.tir");
  const Graph& g = *m->graph;
  const float* a = g.findValue("a")->constant().data<float>();
  EXPECT_EQ(a[0], 1.f);
  EXPECT_EQ(a[1], -0.25f);
  EXPECT_EQ(a[2], 0.125f);
  EXPECT_EQ(a[3], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(static_cast<float>(g.findValue("b")->constant().data<float16>()[0]), 65504.f);
  EXPECT_EQ(g.findValue("b")->constant().data<float16>()[1].bits, float16(0.333f).bits);
  EXPECT_EQ(g.findValue("c")->constant().data<uint8_t>()[0], 255);
  EXPECT_EQ(g.findValue("d")->constant().data<int8_t>()[0], 7);
  EXPECT_EQ(g.findValue("e")->constant().data<std::complex<double>>()[0], std::complex<double>(1e300, -2));
  const Node& x = *g.nodes()[0];
  EXPECT_EQ(x.attrInt("i"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(attrKindOf(x.attrs().at("f")), AttrKind::Int) << "'2' is an int attribute";
  EXPECT_EQ(x.attrFloats("fl"), (std::vector<float>{1.f, 2.5f})) << "a list with one float is a floats list";
  EXPECT_TRUE(std::isinf(x.attrFloat("g")));
  EXPECT_EQ(m->irVersion, 8) << "defaults when the header omits clauses";
}

TEST(IrTextParse, ParsedGoldenMlpComputesWhatItsTextSays) {
  // The weights below are copied from tests/unit/data/tir/valid/mlp.tir; the expected output is a naive loop.
  auto m = readModelTextFile(std::string(TESSEL_SOURCE_DIR) + "/tests/unit/data/tir/valid/mlp.tir");
  const float w1[4][2] = {{0.5f, -0.5f}, {0.25f, 0.125f}, {1, 2}, {-1, 0}};
  const float b1[2] = {0, 0.5f};
  const float w2[2][3] = {{1, 0, -1}, {0.5f, 0.5f, 0.5f}};
  std::vector<float> x = {1, 2, 3, 4, -1, 0.5f, 0, 2};
  Interpreter interp(*m->graph);
  auto out = interp.run({{"x", Tensor::fromVector<float>({2, 4}, x)}});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (Shape{2, 3}));
  for (int n = 0; n < 2; ++n) {
    float h[2], logits[3], sum = 0;
    for (int j = 0; j < 2; ++j) {
      h[j] = b1[j];
      for (int k = 0; k < 4; ++k) h[j] += x[n * 4 + k] * w1[k][j];
      h[j] = std::max(h[j], 0.f);
    }
    for (int j = 0; j < 3; ++j) {
      logits[j] = h[0] * w2[0][j] + h[1] * w2[1][j];
      sum += std::exp(logits[j]);
    }
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(out[0].data<float>()[n * 3 + j], std::exp(logits[j]) / sum, 1e-6f);
  }
}

// ---------------------------------------------------------------- errors

struct ErrorCase {
  const char* text;
  const char* message;  ///< expected substring, starting with "t.tir:LINE:COL: "
};

TEST(IrTextErrors, MessagesNameFileLineColumnAndWhatWasExpected) {
  const ErrorCase cases[] = {
      {"", "t.tir:1:1: expected 'tessel.model' (the first word of a .tir file), found end of input"},
      {"tessel.model graph @g() -> () {\n  %y = Relu(%x)\n}", "t.tir:2:13: undefined value %x"},
      {"tessel.model graph @g(%x: f32[1]) -> () {\n  %x = Relu(%x)\n}",
       "t.tir:2:3: duplicate definition of '%x' (first defined at 1:23)"},
      {"tessel.model graph @g(%x: f33[1]) -> () {}", "t.tir:1:27: expected a type like f32[1,3]"},
      {"tessel.model graph @g(%x: f32[1) -> () {}", "t.tir:1:32: expected ',' or ']', found ')'"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[3] = [1, 2]\n}", "t.tir:2:27: expected 3 elements for f32[3], found 2"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[1] = [1, 2]\n}", "t.tir:2:26: expected ']' after 1 elements of f32[1], found '2'"},
      {"tessel.model graph @g() -> () {\n  const %c: u8[1] = [256]\n}", "t.tir:2:22: expected a u8 integer in [0, 255], found 256"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[1] = [abc]\n}", "t.tir:2:23: expected a f32 number, found 'abc'"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[N] = [1]\n}",
       "t.tir:2:22: expected 'tensor <type> <data>' (the declared type f32[N] is not static), found '['"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[4] = @side(offset=0, bytes=16)\n}", "t.tir:2:22: side file"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[4] = @side(offset=0, bytes=15)\n}",
       "t.tir:2:44: expected bytes=16 for f32[4], found 15"},
      {"tessel.model graph @g() -> (%y: f32[2]) {\n  %y = Relu() : f32[3]\n}",
       "t.tir:1:29: expected output %y to have its defined type f32[3], found f32[2]"},
      {"tessel.model graph @g() -> () {\n  X() {a=1, a=2}\n}", "t.tir:2:13: duplicate attribute 'a'"},
      {"tessel.model graph @g() -> () {\n  X() {a=[]}\n}", "t.tir:2:11: expected a list element (write an empty list"},
      {"tessel.model graph @g() -> () {\n  X() {s=\"abc\n}", "t.tir:2:10: expected a closing '\"' for this string"},
      {"tessel.model graph @g() -> () {\n  X() {s=\"\\q\"}\n}", "t.tir:2:11: expected an escape (\\\" \\\\ \\n \\t \\r \\xHH), found '\\q'"},
      {"tessel.model graph @g() -> () {\n  %a, %b = X() : f32[1]\n}",
       "t.tir:2:16: expected 2 output type(s), one per output that is not '_', found 1"},
      {"tessel.model graph @g() -> () {\n  %a = X() $\n}", "t.tir:2:12: expected a token, found '$'"},
      {"tessel.model graph @g() -> () {\n  %a = X()\n", "t.tir:3:1: expected a statement ('const', 'capture', '%y = Op(...)') or '}', found end of input"},
      {"tessel.model graph @g() -> () {} extra", "t.tir:1:34: expected end of input after the main graph, found 'extra'"},
      {"tessel.model graph @g(%x: f32[-1]) -> () {}", "t.tir:1:31: expected a dimension >= 0, found -1"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[99999999999] = [1]\n}", "more than this file can hold"},
      {"tessel.model graph @g() -> () {\n  const %c: f32[4611686018427387904,4] = [1]\n}",
       "t.tir:2:42: expected a tensor size that fits in 64 bits"},
      {"tessel.model opset{\"\": 1, \"\": 2} graph @g() -> () {}", "t.tir:1:27: duplicate opset domain"},
  };
  for (const ErrorCase& c : cases) {
    std::string got = parseError(c.text);
    EXPECT_NE(got.find(c.message), std::string::npos) << "input:\n" << c.text << "\nexpected: " << c.message
                                                       << "\ngot:      " << got;
  }
}

TEST(IrTextErrors, DeeplyNestedGraphsAreRejectedNotOverflowed) {
  std::string text = "tessel.model graph @g() -> () {\n";
  for (int i = 0; i < 200; ++i) text += "X() {b=graph @g() -> () {\n";
  std::string got = parseError(text);
  EXPECT_NE(got.find("graphs nested deeper than 64 levels"), std::string::npos) << got;
}

TEST(IrTextErrors, GraphDumpElisionIsNotParseable) {
  auto m = std::make_unique<Model>();
  m->graph = std::make_unique<Graph>("g");
  m->graph->addConstant("w", Tensor(DType::Float32, {100}));
  std::string dump = printGraphText(*m->graph);
  EXPECT_NE(dump.find("const %w: f32[100] = <400 bytes>"), std::string::npos) << dump;
  std::string got = parseError("tessel.model " + dump);
  EXPECT_NE(got.find("found '<'"), std::string::npos) << got;
}

// ---------------------------------------------------------------- side file

std::unique_ptr<Model> largeConstantModel() {
  auto m = std::make_unique<Model>();
  m->opsetImports = {{"", 13}};
  m->graph = std::make_unique<Graph>("main");
  Graph& g = *m->graph;
  std::vector<float> w(1000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i)) * 1e-3f;
  std::vector<int64_t> idx(33);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i * i) - 100;
  std::vector<bool> mask(17, true);
  mask[3] = false;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1000}));
  Value* big = g.addConstant("w", Tensor::fromVector<float>({10, 100}, w));
  Value* ix = g.addConstant("idx", Tensor::fromVector<int64_t>({33}, idx));
  g.addConstant("mask", Tensor::fromVector<bool>({17}, mask));
  g.addConstant("names", Tensor::fromVector<std::string>({20}, std::vector<std::string>(20, "n")));  // strings stay inline
  g.addConstant("small", Tensor::fromVector<float>({2}, {1, 2}));
  Node* n = g.addNode("Foo", {x, big, ix}, {"y"});
  n->setAttr("value", Tensor::fromVector<float>({50}, std::vector<float>(50, 0.5f)));  // attribute tensors too
  g.addOutput(n->output(0));
  return m;
}

fs::path freshTempDir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("tessel_ir_text_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(IrTextSideFile, LargeConstantsGoToAnAlignedSideFileAndReadBack) {
  fs::path dir = freshTempDir("side");
  auto m = largeConstantModel();
  std::string path = (dir / "model.tir").string();
  writeModelTextFile(*m, path);
  ASSERT_TRUE(fs::exists(path + ".bin"));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  // Offsets computed by hand: 4000 bytes of f32 at 0, i64 at the next multiple of 64 (4032), bools after
  // that (4032 + 264 = 4296 -> 4352), then the attribute tensor (4352 + 17 -> 4416).
  EXPECT_NE(text.find("side_file \"model.tir.bin\""), std::string::npos) << text;
  EXPECT_NE(text.find("const %w: f32[10,100] = @side(offset=0, bytes=4000)"), std::string::npos) << text;
  EXPECT_NE(text.find("const %idx: i64[33] = @side(offset=4032, bytes=264)"), std::string::npos) << text;
  EXPECT_NE(text.find("const %mask: bool[17] = @side(offset=4352, bytes=17)"), std::string::npos) << text;
  EXPECT_NE(text.find("value=tensor f32[50] @side(offset=4416, bytes=200)"), std::string::npos) << text;
  EXPECT_NE(text.find("const %small: f32[2] = [1, 2]"), std::string::npos) << text;
  EXPECT_NE(text.find("const %names: str[20] = ["), std::string::npos) << text;
  EXPECT_EQ(fs::file_size(path + ".bin"), 4416u + 200u);
  auto back = readModelTextFile(path);
  expectSameGraph(*m->graph, *back->graph, "side");
  EXPECT_EQ(back->graph->findValue("w")->constant().data<float>()[999], std::sin(999.f) * 1e-3f);

  // A renamed pair still reads (PATH.bin is the fallback when the header's name is gone).
  fs::rename(path, dir / "renamed.tir");
  fs::rename(path + ".bin", dir / "renamed.tir.bin");
  EXPECT_NO_THROW(readModelTextFile((dir / "renamed.tir").string()));
  fs::remove(dir / "renamed.tir.bin");
  try {
    readModelTextFile((dir / "renamed.tir").string());
    ADD_FAILURE() << "missing side file not reported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("renamed.tir:3:27: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("side file 'model.tir.bin' not found"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(IrTextSideFile, SmallModelsWriteNoSideFileAndRemoveAStaleOne) {
  fs::path dir = freshTempDir("noside");
  std::string path = (dir / "small.tir").string();
  std::ofstream(path + ".bin") << "stale";
  auto m = largeConstantModel();
  TextPrintOptions inlineAll;
  inlineAll.inlineLimit = 1 << 20;
  writeModelTextFile(*m, path, inlineAll);
  EXPECT_FALSE(fs::exists(path + ".bin"));
  auto back = readModelTextFile(path);
  expectSameGraph(*m->graph, *back->graph, "inline");
  EXPECT_THROW(writeModelTextFile(*m, (dir / "no_such_dir" / "x.tir").string()), UserError);
  EXPECT_THROW(readModelTextFile((dir / "absent.tir").string()), UserError);
  fs::remove_all(dir);
}

TEST(IrTextSideFile, InMemorySideDataRoundTripsAndRangesAreChecked) {
  auto m = largeConstantModel();
  std::string side;
  std::string text = printModelText(*m, {}, &side, "m.bin");
  auto back = parseModelText(text, "m.tir", side);
  expectSameGraph(*m->graph, *back->graph, "memory");
  EXPECT_EQ(printModelText(*back, {}, nullptr), printModelText(*m, {}, nullptr));
  std::string truncated = parseError(text, std::string_view(side).substr(0, 4100));
  EXPECT_NE(truncated.find("side-file range [4032, 4032+264) is out of range: the side file has 4100 bytes"),
            std::string::npos)
      << truncated;
  std::string badBool = side;
  badBool[4352 + 1] = 7;
  std::string got = parseError(text, badBool);
  EXPECT_NE(got.find("expected bool bytes 0 or 1 in the side file, found 7 at offset 4353"), std::string::npos) << got;
}

// ---------------------------------------------------------------- golden files

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(IrTextGolden, ValidFilesParseAndRoundTrip) {
  fs::path dir = fs::path(TESSEL_SOURCE_DIR) / "tests/unit/data/tir/valid";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".tir") continue;
    ++count;
    SCOPED_TRACE(entry.path().filename().string());
    std::unique_ptr<Model> m;
    ASSERT_NO_THROW(m = readModelTextFile(entry.path().string()));
    expectRoundTrip(*m, entry.path().stem().string());
  }
  EXPECT_GE(count, 4);
}

/// Each invalid file starts with "# error: <message>" where <message> follows "FILE:" in the diagnostic.
TEST(IrTextGolden, InvalidFilesFailWithTheMessageTheyDeclare) {
  fs::path dir = fs::path(TESSEL_SOURCE_DIR) / "tests/unit/data/tir/invalid";
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".tir") continue;
    ++count;
    std::string text = readFile(entry.path());
    const std::string marker = "# error: ";
    ASSERT_EQ(text.rfind(marker, 0), 0u) << entry.path() << " lacks a '# error:' first line";
    std::string want = entry.path().string() + ":" + text.substr(marker.size(), text.find('\n') - marker.size());
    try {
      readModelTextFile(entry.path().string());
      ADD_FAILURE() << entry.path() << " parsed but should fail with: " << want;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << "want: " << want << "\ngot:  " << e.what();
    }
  }
  EXPECT_GE(count, 8);
}

// ---------------------------------------------------------------- real models

/// Imports, prints (large constants to an in-memory side file), parses, prints and compares.
struct RoundTripResult {
  bool imported = false;
  std::string problem;  ///< "" when the round trip is exact
  size_t textBytes = 0, textLines = 0, sideBytes = 0;
};

RoundTripResult roundTripOnnxFile(const std::string& path) {
  RoundTripResult r;
  std::unique_ptr<Model> m;
  try {
    ImportOptions options;
    options.inference = InferenceMode::Lenient;
    m = importOnnxFile(path, options);
  } catch (const UserError& e) {
    r.problem = std::string("import failed: ") + e.what();
    return r;
  }
  r.imported = true;
  std::string side;
  std::string text = printModelText(*m, {}, &side, "model.tir.bin");
  r.textBytes = text.size();
  r.textLines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  r.sideBytes = side.size();
  try {
    auto back = parseModelText(text, path + ".tir", side);
    std::string side2;
    if (printModelText(*back, {}, &side2, "model.tir.bin") != text || side2 != side) r.problem = "text differs";
    else expectSameGraph(*m->graph, *back->graph, path);
  } catch (const UserError& e) {
    r.problem = e.what();
  }
  return r;
}

/// A test-data folder: the environment variable when set (scripts/test.sh sets it), else under build/.
fs::path testDataDir(const char* envVar, const char* fallbackUnderSource) {
  if (const char* v = std::getenv(envVar); v && *v) return v;
  return fs::path(TESSEL_SOURCE_DIR) / fallbackUnderSource;
}

TEST(IrTextSuite, OnnxNodeSuiteRoundTrips) {
  fs::path root = testDataDir("TESSEL_NODE_SUITE_DIR", "build/onnx-suite/node");
  if (!fs::is_directory(root)) GTEST_SKIP() << root << " missing (scripts/gen-node-suite.sh makes it)";
  int models = 0, imported = 0, failures = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    fs::path model = entry.path() / "model.onnx";
    if (!fs::exists(model)) continue;
    ++models;
    RoundTripResult r = roundTripOnnxFile(model.string());
    imported += r.imported;
    if (r.imported && !r.problem.empty()) {
      ++failures;
      ADD_FAILURE() << model << ": " << r.problem;
    }
  }
  std::printf("[IrTextSuite] node suite: %d models, %d imported, %d round-trip failures\n", models, imported, failures);
  EXPECT_GT(imported, 0);
}

TEST(IrTextSuite, TorchvisionModelsRoundTrip) {
  int found = 0;
  for (const char* name : {"resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1"}) {
    fs::path model = testDataDir("TESSEL_MODELS_DIR", "build/models") / (std::string(name) + ".onnx");
    if (!fs::exists(model)) continue;
    ++found;
    RoundTripResult r = roundTripOnnxFile(model.string());
    EXPECT_TRUE(r.imported && r.problem.empty()) << model << ": " << r.problem;
    std::printf("[IrTextSuite] %s: %zu lines, %zu bytes of text, %zu bytes of side file\n", name, r.textLines,
                r.textBytes, r.sideBytes);
  }
  if (found == 0) GTEST_SKIP() << "no exported models (scripts/export-models.py makes them; set TESSEL_MODELS_DIR)";
}

}  // namespace
}  // namespace tessel
