// Tests of the subgraph engine: placement reasons, acyclic maximal merging, overrides, the no-grouped-conv
// configuration, text IR round trip, and that a partitioned graph computes what the original did.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "tessel/hw/hardware_config.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/partition/partitioner.h"
#include "tessel/support/error.h"

#include "npu_test_util.h"

namespace {

using namespace tessel;
using json = nlohmann::json;

json configJson(const std::string& name) {
  std::ifstream in(std::string(TESSEL_SOURCE_DIR) + "/configs/" + name);
  return json::parse(in);
}
hw::HardwareConfig config(const std::string& name) { return test::shippedConfig(name); }
using test::randomTensor;


const partition::Placement& placementOf(const partition::PartitionResult& r, const std::string& node) {
  for (const auto& p : r.placements)
    if (p.node == node) return p;
  throw std::runtime_error("no placement for " + node);
}

size_t countSubgraphNodes(const Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += partition::isSubgraphNode(*node);
  return n;
}

/// x -> a=Relu -> c=Neg (CPU only) -> d=Add(a, c): merging a and d would make a cycle through c.
std::unique_ptr<Graph> diamond() {
  auto g = std::make_unique<Graph>();
  Value* x = g->addInput("x", TensorType::fromShape(DType::Float32, {2, 3}));
  Node* a = g->addNode("Relu", {x}, {"a"}, "a");
  Node* c = g->addNode("Neg", {a->output(0)}, {"c"}, "c");
  Node* d = g->addNode("Add", {a->output(0), c->output(0)}, {"d"}, "d");
  g->addOutput(d->output(0));
  inferShapes(*g);
  return g;
}

TEST(Partition, DiamondWithCpuMiddleIsNotMergedAcross) {
  auto g = diamond();
  auto original = g->clone();
  auto r = partition::partitionGraph(*g, config("default.json"));
  EXPECT_EQ(placementOf(r, "a").device, "npu0");
  EXPECT_EQ(placementOf(r, "c").device, "cpu");
  EXPECT_NE(placementOf(r, "c").reason.find("Neg"), std::string::npos) << placementOf(r, "c").reason;
  EXPECT_EQ(placementOf(r, "d").device, "npu0");
  EXPECT_NE(placementOf(r, "a").subgraph, placementOf(r, "d").subgraph);
  EXPECT_EQ(r.subgraphNodes.size(), 2u);
  EXPECT_EQ(countSubgraphNodes(*g), 2u);
  EXPECT_NO_THROW(g->topoSort());
  Tensor x = randomTensor({2, 3}, 1);
  Tensor want = Interpreter(*original).run({{"x", x}})[0];
  Tensor got = Interpreter(*g).run({{"x", x}})[0];
  EXPECT_TRUE(got.identical(want));
  EXPECT_EQ(g->outputs()[0]->name(), "d");  // output names survive outlining
}

TEST(Partition, IndependentBranchesOfOneDeviceAreMerged) {
  // x -> Relu -> Neg(cpu) ; x -> Sigmoid : Relu and Sigmoid have no path between them, so one subgraph.
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {4}));
  Node* a = g.addNode("Relu", {x}, {"a"}, "a");
  Node* b = g.addNode("Neg", {a->output(0)}, {"b"}, "b");
  Node* c = g.addNode("Sigmoid", {x}, {"c"}, "c");
  g.addOutput(b->output(0));
  g.addOutput(c->output(0));
  inferShapes(g);
  auto r = partition::partitionGraph(g, config("default.json"));
  EXPECT_EQ(r.subgraphNodes.size(), 1u);
  EXPECT_EQ(placementOf(r, "a").subgraph, placementOf(r, "c").subgraph);
  EXPECT_EQ(g.numNodes(), 2u);  // the subgraph and Neg
}

/// Conv group 1, a depthwise conv (group = channels) and a grouped conv (group 2) in a chain.
std::unique_ptr<Graph> convChain() {
  auto g = std::make_unique<Graph>();
  Value* x = g->addInput("x", TensorType::fromShape(DType::Float32, {1, 4, 8, 8}));
  auto conv = [&](Value* in, const std::string& name, int64_t cin, int64_t out, int64_t group) {
    Value* w = g->addConstant(name + "_w", randomTensor({out, cin / group, 3, 3}, static_cast<uint32_t>(out + group)));
    Node* n = g->addNode("Conv", {in, w}, {name + "_y"}, name);
    n->setAttr("group", group);
    n->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
    return n->output(0);
  };
  Value* y = conv(x, "plain", 4, 8, 1);
  y = g->addNode("Relu", {y}, {"r1"}, "relu1")->output(0);
  y = conv(y, "depthwise", 8, 8, 8);
  y = g->addNode("Relu", {y}, {"r2"}, "relu2")->output(0);
  y = conv(y, "grouped", 8, 8, 2);
  g->addOutput(y);
  inferShapes(*g);
  return g;
}

TEST(Partition, NoGroupedConvConfigMovesExactlyTheGroupedConvs) {
  auto g = convChain();
  auto original = g->clone();
  auto r = partition::partitionGraph(*g, config("no-grouped-conv.json"));
  for (const auto& p : r.placements) {
    bool grouped = p.node == "depthwise" || p.node == "grouped";
    EXPECT_EQ(p.device, grouped ? "cpu" : "npu0") << p.node << ": " << p.reason;
    if (grouped) {
      EXPECT_NE(p.reason.find("group"), std::string::npos) << p.reason;
    }
  }
  EXPECT_NE(placementOf(r, "depthwise").reason.find("depthwise"), std::string::npos);
  Tensor x = randomTensor({1, 4, 8, 8}, 7);
  Tensor want = Interpreter(*original).run({{"x", x}})[0];
  Tensor got = Interpreter(*g).run({{"x", x}})[0];
  EXPECT_TRUE(got.identical(want));
  // With the default configuration everything goes to the NPU, in one subgraph.
  auto g2 = convChain();
  auto r2 = partition::partitionGraph(*g2, config("default.json"));
  EXPECT_EQ(r2.subgraphNodes.size(), 1u);
  for (const auto& p : r2.placements) EXPECT_EQ(p.device, "npu0") << p.node;
}

TEST(Partition, OverridePinsANodeAndIsExplained) {
  json doc = configJson("default.json");
  doc["overrides"] = {{"relu1", "cpu"}};
  auto cfg = hw::HardwareConfig::fromJson(doc, "override.json");
  auto g = convChain();
  auto r = partition::partitionGraph(*g, cfg);
  EXPECT_EQ(placementOf(r, "relu1").device, "cpu");
  EXPECT_NE(placementOf(r, "relu1").reason.find("override"), std::string::npos);
  EXPECT_EQ(r.subgraphNodes.size(), 2u);  // split around the pinned node
  std::string table = partition::placementTable(r);
  for (const auto& p : r.placements) EXPECT_NE(table.find(p.node), std::string::npos);
}

TEST(Partition, OverrideToADeviceThatCannotRunTheNodeIsAUserError) {
  json doc = configJson("default.json");
  doc["overrides"] = {{"c", "npu0"}};  // Neg is not an NPU op
  auto cfg = hw::HardwareConfig::fromJson(doc, "bad-override.json");
  auto g = diamond();
  try {
    partition::partitionGraph(*g, cfg);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'c'"), std::string::npos) << e.what();
  }
}

TEST(Partition, LoweringCheckRefusalIsReported) {
  auto g = convChain();
  partition::PartitionOptions opts;
  opts.canLower = [](const Node& n, const hw::Device&) -> hw::SupportResult {
    if (n.name() == "relu2") return {false, "test refusal"};
    return {true, ""};
  };
  auto r = partition::partitionGraph(*g, config("default.json"), opts);
  EXPECT_EQ(placementOf(r, "relu2").device, "cpu");
  EXPECT_NE(placementOf(r, "relu2").reason.find("test refusal"), std::string::npos);
}

TEST(Partition, PartitionedGraphRoundTripsThroughTextIrAndDot) {
  Model m;
  m.graph = convChain();
  m.opsetImports[""] = 17;
  auto original = m.graph->clone();
  partition::partitionGraph(*m.graph, config("no-grouped-conv.json"));
  std::string text = printModelText(m);
  auto parsed = parseModelText(text, "partitioned.tir");
  EXPECT_EQ(printModelText(*parsed), text);
  EXPECT_NE(text.find("tessel.Subgraph"), std::string::npos);
  Tensor x = randomTensor({1, 4, 8, 8}, 3);
  EXPECT_TRUE(Interpreter(*parsed->graph).run({{"x", x}})[0].identical(Interpreter(*original).run({{"x", x}})[0]));
  std::string dot = partition::partitionDot(*m.graph);
  EXPECT_NE(dot.find("subgraph cluster_0"), std::string::npos);
  EXPECT_NE(dot.find("\"grouped\""), std::string::npos);
  // Node labels break lines with Graphviz's \n escape (one backslash), not a literal backslash-n (two).
  EXPECT_NE(dot.find("\\nConv\""), std::string::npos) << dot;
  EXPECT_EQ(dot.find("\\\\n"), std::string::npos) << dot;
  EXPECT_NE(dot.find("subgraph cluster_legend"), std::string::npos) << dot;
}

}  // namespace
