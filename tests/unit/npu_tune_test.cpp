// Tests of the NPU's search space (S1): the compiler's genome derives exactly the compiler's schedule (sites of
// every kind; fused layouts the buffers cannot hold are not options), the tuned record's schedules compile to a program that matches
// the interpreter without hazards and is not slower than the untuned one, and a record is refused for another
// configuration or another model file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <unistd.h>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/passes/pass.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/npu/tuning.h"

#include "npu_test_util.h"

namespace {

using namespace tessel;
using namespace tessel::npu;
namespace fs = std::filesystem;

/// conv3x3 -> relu -> conv3x3 -> relu -> maxpool -> conv1x1 (-> global average pool): a chain the fusion may
/// join, with tiling choices (and a pool its producer's tiles may compute).
std::unique_ptr<Model> chainModel(int64_t channels, bool globalPool = false) {
  auto m = std::make_unique<Model>();
  m->opsetImports[""] = 17;
  m->graph = std::make_unique<Graph>();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 16, 28, 28}));
  auto conv = [&](Value* in, int64_t cin, int64_t cout, int64_t k, uint32_t seed) {
    Value* w = g.addConstant(g.uniqueName("w"), test::randomTensor({cout, cin, k, k}, seed));
    Value* b = g.addConstant(g.uniqueName("b"), test::randomTensor({cout}, seed + 1));
    Node* n = g.addNode("Conv", {in, w, b}, {g.uniqueName("conv")}, g.uniqueName("conv"));
    n->setAttr("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
    n->setAttr("kernel_shape", std::vector<int64_t>{k, k});
    return n->output(0);
  };
  Value* y = g.addNode("Relu", {conv(x, 16, channels, 3, 1)}, {"r1"}, "relu1")->output(0);
  y = g.addNode("Relu", {conv(y, channels, channels, 3, 3)}, {"r2"}, "relu2")->output(0);
  Node* pool = g.addNode("MaxPool", {y}, {"p"}, "pool");
  pool->setAttr("kernel_shape", std::vector<int64_t>{2, 2});
  pool->setAttr("strides", std::vector<int64_t>{2, 2});
  Value* y3 = conv(pool->output(0), channels, 24, 1, 5);
  g.addOutput(globalPool ? g.addNode("GlobalAveragePool", {y3}, {"gap"}, "gap")->output(0) : y3);
  inferShapes(g);
  return m;
}

struct ModelFile {
  std::string path;
  explicit ModelFile(const Model& m, const std::string& tag)
      : path((fs::temp_directory_path() / fmt::format("tessel-npu-tune-{}-{}.tir", getpid(), tag)).string()) {
    writeModelTextFile(m, path);
  }
  ~ModelFile() { fs::remove(path); }
};

/// The compiler's schedule of each subgraph, as `tessel compile --target npu` makes it.
std::map<std::string, NpuSchedule> compilerSchedules(const Model& model, const hw::HardwareConfig& config) {
  std::unique_ptr<Model> copy = model.clone();
  namedPipeline("npu").run(*copy);
  std::map<std::string, NpuSchedule> out;
  ScheduleChooser chooser = [&](const Graph& body, const hw::Device& device, const std::string& name) {
    return out[name] = compilerSchedule(body, device.npu, name);
  };
  compilePreparedForNpu(*copy, config, chooser);
  return out;
}

TEST(NpuTune, TheCompilersGenomeDerivesTheCompilersSchedule) {
  for (const char* cfgName : {"default.json", "tiny.json"}) {
    const hw::HardwareConfig config = test::shippedConfig(cfgName);
    const auto model = chainModel(32, true);
    const ModelFile file(*model, "derive");
    const NpuTuning tuning(*model, file.path, config, 2);
    tune::Genome d;
    for (const tune::Site& s : tuning.problem().sites) d.push_back(s.defaultOption);
    std::map<std::string, NpuSchedule> derived = tuning.derive(d);
    const std::map<std::string, NpuSchedule> want = compilerSchedules(*model, config);
    ASSERT_EQ(derived.size(), want.size()) << cfgName;
    for (auto& [name, s] : derived) {
      EXPECT_GT(s.window, 0) << "the derived schedule fixes the window";
      s.window = want.at(name).window;  // the compiler leaves it to the lowering (0)
      EXPECT_EQ(s.toText(), want.at(name).toText()) << cfgName << " " << name;
    }
    std::set<std::string> kinds;
    for (const tune::Site& s : tuning.problem().sites)
      if (s.options > 1) kinds.insert(s.kind);
    // tiny's buffers hold no fused layout of this chain: its fusion site has one option (not fused). The max pool
    // (after the Relu moved behind it) may be computed from the second conv's accumulator tiles.
    const std::set<std::string> wantKinds = std::string(cfgName) == "default.json"
                                                ? std::set<std::string>{"tiling", "fusion", "max-pool", "pool", "window"}
                                                : std::set<std::string>{"tiling", "max-pool", "pool", "window"};
    EXPECT_EQ(kinds, wantKinds) << cfgName;
  }
}

// A stem (3 -> 24, 3x3 stride 2, then a 3x3 stride-2 max pool): the compiler pools the convolution's accumulator tiles,
// a group holding the same nodes as the fusion site of the two. That group was taken for the compiler's fusion, and
// the compiler's genome derived a fused group of one row tile (the whole image), which the modelling rejected: the
// search then never had the compiler's schedule in its population (SqueezeNet, MobileNetV2, ShuffleNet v2).
TEST(NpuTune, TheCompilersGenomeOfAConvPoolingItsTilesIsTheCompilersScheduleAndFits) {
  auto m = std::make_unique<Model>();
  m->opsetImports[""] = 17;
  m->graph = std::make_unique<Graph>();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 3, 112, 112}));
  Value* w = g.addConstant("w", test::randomTensor({24, 3, 3, 3}, 3));
  Value* b = g.addConstant("b", test::randomTensor({24}, 4));
  Node* c = g.addNode("Conv", {x, w, b}, {"c"}, "conv");
  c->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
  c->setAttr("strides", std::vector<int64_t>{2, 2});
  c->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
  Value* r = g.addNode("Relu", {c->output(0)}, {"r"}, "relu")->output(0);
  Node* pool = g.addNode("MaxPool", {r}, {"p"}, "pool");
  pool->setAttr("kernel_shape", std::vector<int64_t>{3, 3});
  pool->setAttr("strides", std::vector<int64_t>{2, 2});
  pool->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
  g.addOutput(pool->output(0));
  inferShapes(g);
  const hw::HardwareConfig config = test::shippedConfig("default.json");
  const std::map<std::string, NpuSchedule> want = compilerSchedules(*m, config);
  bool pooled = false;
  for (const auto& [name, s] : want)
    for (const GroupSchedule& grp : s.groups)
      for (const NodeTiling& t : grp.tiling) pooled = pooled || !t.maxPool.empty();
  ASSERT_TRUE(pooled) << "the compiler pools the stem's accumulator tiles";
  const ModelFile file(*m, "stem");
  const NpuTuning tuning(*m, file.path, config, 2);
  std::set<std::string> kinds;
  tune::Genome d;
  for (const tune::Site& s : tuning.problem().sites) d.push_back(s.defaultOption), kinds.insert(s.kind);
  EXPECT_TRUE(kinds.count("fusion") && kinds.count("max-pool")) << "a fusion site and a max-pool site over the same nodes";
  std::map<std::string, NpuSchedule> derived = tuning.derive(d);
  for (auto& [name, s] : derived) {
    s.window = want.at(name).window;
    EXPECT_EQ(s.toText(), want.at(name).toText()) << name;
  }
  const std::vector<uint64_t> fitness = tuning.problem().evaluate({d});
  ASSERT_EQ(fitness.size(), 1u);
  EXPECT_NE(fitness[0], tune::kRejected) << "the compiler's genome is rejected";
}

TEST(NpuTune, ATunedRecordCompilesToAProgramThatMatchesTheInterpreter) {
  const hw::HardwareConfig config = test::shippedConfig("tiny.json");
  const auto model = chainModel(32);
  const ModelFile file(*model, "record");
  const NpuTuning tuning(*model, file.path, config, 2);
  tune::SearchOptions o;
  o.generations = 3, o.population = 8, o.seed = 5;
  const std::string recordPath = file.path + ".json";
  nlohmann::json record = tune::runSearch(tuning.problem(), o, recordPath);
  size_t valid = 0;
  for (const auto& e : record["evaluations"]) valid += !e["fitness"].is_null();
  EXPECT_GT(valid, 1u) << "the search found genomes that fit";
  record["result"] = tuning.finish(record);
  tune::writeRecord(recordPath, record);
  EXPECT_LE(record["result"]["tuned"].get<uint64_t>(), record["result"]["untuned"].get<uint64_t>());
  // Compile with the record's schedules and run against the interpreter.
  const std::map<std::string, NpuSchedule> tuned = tunedSchedules(recordPath, file.path, config);
  ScheduleChooser chooser = [&](const Graph&, const hw::Device&, const std::string& name) { return tuned.at(name); };
  std::unique_ptr<Model> copy = model->clone();
  namedPipeline("npu").run(*copy);
  const CompiledNpuModel compiled = compilePreparedForNpu(*copy, config, chooser);
  const std::map<std::string, Tensor> inputs{{"x", test::randomTensor({1, 16, 28, 28}, 11)}};
  const NpuModelRun run = runNpuModel(compiled, inputs);
  const Tensor want = Interpreter(*model->graph).run(inputs).at(0);
  uint64_t cycles = 0;
  for (const auto& s : run.subgraphs) {
    EXPECT_TRUE(s.report.hazards.empty()) << s.name;
    cycles += s.report.totalCycles;
  }
  EXPECT_EQ(cycles, record["result"]["tuned"].get<uint64_t>()) << "the record's figure is the simulated one";
  const float *a = run.outputs.at(0).data<float>(), *b = want.data<float>();
  float diff = 0, scale = 1;
  for (int64_t i = 0; i < want.numel(); ++i) diff = std::max(diff, std::abs(a[i] - b[i])), scale = std::max(scale, std::abs(b[i]));
  EXPECT_LE(diff, 1e-6f * scale) << "largest output " << scale;
  // Another configuration, another model file: refused.
  EXPECT_THROW(tunedSchedules(recordPath, file.path, test::shippedConfig("default.json")), UserError);
  const auto other = chainModel(16);
  const ModelFile otherFile(*other, "other");
  EXPECT_THROW(tunedSchedules(recordPath, otherFile.path, config), UserError);
  fs::remove(recordPath);
}

// The DRAM budget (tessel tune --dram-budget): a genome moving more modelled DRAM bytes than the limit is rejected,
// the limit being the budget times the compulsory bytes or the compiler's genome's traffic when that is more (so
// the compiler's genome always counts); budget 0 takes every genome that fits; the budget is part of the record's
// identity, so a record is resumed only with the same one.
TEST(NpuTune, GenomesBeyondTheDramBudgetAreRejected) {
  const hw::HardwareConfig config = test::shippedConfig("default.json");
  const auto model = chainModel(32, true);
  const ModelFile file(*model, "dram");
  const NpuTuning unlimited(*model, file.path, config, 2, 0.0), tight(*model, file.path, config, 2, 1e-9);
  ASSERT_EQ(unlimited.problem().sites.size(), tight.problem().sites.size());
  EXPECT_EQ(tight.problem().identity["dram_budget"], 1e-9);
  EXPECT_NE(unlimited.problem().identity, tight.problem().identity);
  // The compiler's genome and every single-site change of it (each option of each site).
  const tune::Genome d = tune::defaultGenome(tight.problem().sites);
  std::vector<tune::Genome> batch{d};
  for (size_t i = 0; i < d.size(); ++i)
    for (uint32_t o = 0; o < tight.problem().sites[i].options; ++o)
      if (o != d[i]) {
        batch.push_back(d);
        batch.back()[i] = o;
      }
  const auto modelled = tight.modelGenomes(batch);
  const std::vector<uint64_t> tightFitness = tight.problem().evaluate(batch);
  const std::vector<uint64_t> freeFitness = unlimited.problem().evaluate(batch);
  ASSERT_EQ(modelled.size(), batch.size());
  const uint64_t limit = modelled[0].second;  // the compiler's genome's traffic: the tight budget's limit
  size_t over = 0, under = 0;
  for (size_t k = 0; k < batch.size(); ++k) {
    EXPECT_EQ(freeFitness[k], modelled[k].first) << "genome " << k;
    if (modelled[k].first == tune::kRejected) continue;
    if (modelled[k].second > limit) {
      ++over;
      EXPECT_EQ(tightFitness[k], tune::kRejected) << "genome " << k << " moves " << modelled[k].second << " > " << limit;
    } else {
      ++under;
      EXPECT_EQ(tightFitness[k], modelled[k].first) << "genome " << k;
    }
  }
  EXPECT_NE(tightFitness[0], tune::kRejected) << "the compiler's genome is within any budget";
  EXPECT_GT(over, 0u) << "some single change moves more DRAM bytes than the compiler's schedule";
  EXPECT_GT(under, 1u);
  // A record of one budget is not resumed with another.
  tune::SearchOptions o;
  o.generations = 1, o.population = 4, o.seed = 1;
  const std::string recordPath = file.path + ".dram.json";
  tune::runSearch(tight.problem(), o, recordPath);
  EXPECT_THROW(tune::runSearch(unlimited.problem(), o, recordPath), UserError);
  fs::remove(recordPath);
}

// A ResNet block with a strided 1x1 shortcut: the compiler computes the shortcut into the accumulator of the second
// convolution (NodeTiling::residualConv); the search has a site for it whose default is the compiler's choice.
TEST(NpuTune, TheCompilersGenomeOfAShortcutInTheAccumulatorIsTheCompilersSchedule) {
  auto m = std::make_unique<Model>();
  m->opsetImports[""] = 17;
  m->graph = std::make_unique<Graph>();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 64, 28, 28}));
  const auto conv = [&](Value* in, int64_t cin, int64_t cout, int64_t k, int64_t stride, uint32_t seed, const std::string& name) {
    Value* w = g.addConstant(name + "_w", test::randomTensor({cout, cin, k, k}, seed));
    Value* b = g.addConstant(name + "_b", test::randomTensor({cout}, seed + 1));
    Node* c = g.addNode("Conv", {in, w, b}, {name + "_y"}, name);
    const int64_t pad = k / 2;
    c->setAttr("pads", std::vector<int64_t>{pad, pad, pad, pad});
    c->setAttr("strides", std::vector<int64_t>{stride, stride});
    c->setAttr("kernel_shape", std::vector<int64_t>{k, k});
    return c->output(0);
  };
  Value* a = g.addNode("Relu", {conv(x, 64, 128, 3, 2, 5, "conv1")}, {"a"}, "relu1")->output(0);
  Value* b = conv(a, 128, 128, 3, 1, 7, "conv2");
  Value* d = conv(x, 64, 128, 1, 2, 9, "downsample");
  Value* sum = g.addNode("Add", {b, d}, {"sum"}, "add")->output(0);
  g.addOutput(g.addNode("Relu", {sum}, {"out"}, "relu2")->output(0));
  inferShapes(g);
  const hw::HardwareConfig config = test::shippedConfig("default.json");
  const std::map<std::string, NpuSchedule> want = compilerSchedules(*m, config);
  bool merged = false;
  for (const auto& [name, s] : want)
    for (const GroupSchedule& grp : s.groups)
      for (const NodeTiling& t : grp.tiling) merged = merged || t.residualConv == "downsample";
  ASSERT_TRUE(merged) << "the compiler computes the shortcut into conv2's accumulator";
  const ModelFile file(*m, "shortcut");
  const NpuTuning tuning(*m, file.path, config, 2);
  std::set<std::string> kinds;
  tune::Genome d0;
  for (const tune::Site& s : tuning.problem().sites) d0.push_back(s.defaultOption), kinds.insert(s.kind);
  EXPECT_TRUE(kinds.count("residual-conv")) << "a residual-conv site";
  std::map<std::string, NpuSchedule> derived = tuning.derive(d0);
  for (auto& [name, s] : derived) {
    s.window = want.at(name).window;
    EXPECT_EQ(s.toText(), want.at(name).toText()) << name;
  }
  const std::vector<uint64_t> fitness = tuning.problem().evaluate({d0});
  ASSERT_EQ(fitness.size(), 1u);
  EXPECT_NE(fitness[0], tune::kRejected) << "the compiler's genome is rejected";
}

}  // namespace
