// Tests of the Target interface: the registry (ref, cpu, npu registered once, found by name, extension and
// device), one pipeline per target shared with `tessel opt --pipeline`, the partitioner asking the targets,
// and heterogeneous .tnpu files whose host part is compiled CPU code (cpu-only and conv-only configurations,
// version 2 files still read).
#include <gtest/gtest.h>

#include <filesystem>

#include "tessel/eval/runner.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/target.h"

#include "npu_test_util.h"

namespace tessel {
namespace {

using target::TargetRegistry;

const TargetRegistry& targets() { return TargetRegistry::instance(); }

TEST(Targets, RefCpuAndNpuAreRegisteredOnce) {
  // optir: the example target of docs/adding-a-target.md, linked into the unit tests only.
  EXPECT_EQ(targets().names(), (std::vector<std::string>{"cpu", "npu", "optir", "ref"}));
  EXPECT_EQ(targets().get("cpu").name(), "cpu");
  EXPECT_EQ(targets().find("gpu"), nullptr);
  try {
    targets().get("gpu", "--target ref,gpu");
    ADD_FAILURE() << "no error for an unknown target";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "--target ref,gpu: unknown target 'gpu' (known: cpu, npu, optir, ref)");
  }
  // A second registration of a name is a broken invariant, not a user error.
  struct Twin : target::Target {
    std::string name() const override { return "cpu"; }
    std::string description() const override { return ""; }
    std::string artifactExtension() const override { return ""; }
    Pipeline pipeline(const target::TargetOptions&) const override { return namedPipeline("cleanup"); }
    target::Artifact lower(Model&, const std::string&, std::string, const target::TargetOptions&) const override {
      return {};
    }
    std::unique_ptr<eval::Runner> load(const std::string&, const eval::RunnerOptions&) const override { return {}; }
  };
  TargetRegistry scratch;
  scratch.add(std::make_unique<Twin>());
  EXPECT_THROW(scratch.add(std::make_unique<Twin>()), InternalError);
}

TEST(Targets, FoundByArtifactExtensionAndDeviceKind) {
  EXPECT_EQ(targets().forExtension(".so"), targets().find("cpu"));
  EXPECT_EQ(targets().forExtension(".tnpu"), targets().find("npu"));
  EXPECT_EQ(targets().forExtension(".onnx"), nullptr);
  EXPECT_EQ(targets().forExtension(""), nullptr);  // ref writes no artifact
  EXPECT_EQ(eval::artifactKind("m.so"), "cpu");
  EXPECT_EQ(eval::artifactKind("m.tnpu"), "npu");
  EXPECT_EQ(eval::artifactKind("m.onnx"), "model");
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  for (const hw::Device& d : cfg.devices())
    EXPECT_EQ(&targets().forDevice(d), targets().find(d.kind == hw::DeviceKind::Npu ? "npu" : "cpu")) << d.name;
}

TEST(Targets, PipelineIsTheNamedPipelineOptOffers) {
  // `tessel opt --pipeline NAME` runs namedPipeline(NAME) with its registered options: the pipeline the target
  // compiles with when given no flags.
  for (const std::string name : {"cpu", "npu"}) {
    Pipeline fromTarget = targets().get(name).pipeline({});
    Pipeline named = namedPipeline(name);
    EXPECT_EQ(fromTarget.passes.names(), named.passes.names()) << name;
    EXPECT_EQ(fromTarget.options.values, named.options.values) << name;
    EXPECT_EQ(fromTarget.options.target, named.options.target) << name;
  }
  // A flag reaches the cpu pipeline's options.
  target::TargetOptions nchw;
  nchw.host.layout = "nchw";
  EXPECT_EQ(targets().get("cpu").pipeline(nchw).options.get("select-layout.mode", ""), "nchw");
}

TEST(Targets, PartitionerAsksTheTargetOfEachDevice) {
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::Device& npu0 = *cfg.firstNpu();
  auto model = test::mixedModel();
  partition::LoweringCheck check = target::loweringCheck();
  for (const auto& n : model->graph->nodes()) {
    hw::SupportResult viaRegistry = check(*n, npu0), direct = npu::loweringSupport(*n, npu0);
    EXPECT_EQ(viaRegistry.supported, direct.supported) << n->describe();
    EXPECT_EQ(viaRegistry.reason, direct.reason) << n->describe();
  }
}

std::vector<Tensor> reference(const std::map<std::string, Tensor>& inputs) {
  auto model = test::mixedModel();
  return Interpreter(*model->graph).run(inputs);
}

void expectClose(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape());
    for (int64_t k = 0; k < got[i].numel(); ++k)
      EXPECT_NEAR(got[i].elementAsDouble(k), want[i].elementAsDouble(k), 1e-4) << "element " << k;
  }
}

TEST(Targets, TheExampleTargetCompilesAndRunsThroughTheRegistry) {
  // What `tessel compile m.onnx --target optir` and `tessel run m.optir` would do with it linked in.
  const std::string path = ::testing::TempDir() + "mixed.optir";
  target::Artifact a = target::compile(targets().get("optir"), *test::mixedModel(), "mixed.onnx", path, {});
  EXPECT_EQ(a.report["target"], "optir");
  EXPECT_EQ(eval::artifactKind(path), "optir");
  std::map<std::string, Tensor> in{{"x", test::randomTensor({1, 8, 10, 10}, 5)}};
  std::unique_ptr<eval::Runner> runner = eval::openArtifact(path, {});
  EXPECT_EQ(runner->target(), "optir");
  expectClose(runner->run(in), reference(in));
}

/// Compiles the mixed model through the registry's npu target for a shipped configuration.
std::string compileMixed(const std::string& config, const std::string& file, bool compileHost = true) {
  const std::string path = ::testing::TempDir() + file;
  target::TargetOptions options;
  options.hw = std::string(TESSEL_SOURCE_DIR) + "/configs/" + config;
  options.compileHost = compileHost;
  target::compile(targets().get("npu"), *test::mixedModel(), "mixed.onnx", path, options);
  return path;
}

TEST(HeterogeneousArtifact, CpuOnlyConfigurationIsAllCompiledHostCode) {
  const std::string path = compileMixed("cpu-only.json", "cpu-only.tnpu");
  npu::CompiledNpuModel m = npu::readNpuModel(path);
  EXPECT_TRUE(m.subgraphs.empty());
  ASSERT_FALSE(m.host.library.empty());
  EXPECT_FALSE(m.host.hash.empty());
  std::map<std::string, Tensor> in{{"x", test::randomTensor({1, 8, 10, 10}, 7)}};
  std::unique_ptr<eval::Runner> runner = eval::openArtifact(path, {});
  expectClose(runner->run(in), reference(in));
  EXPECT_NE(runner->lastRunSummary().find("host part: compiled code"), std::string::npos) << runner->lastRunSummary();
  npu::NpuModelRun again = npu::runNpuModel(m, in);
  EXPECT_TRUE(again.subgraphs.empty());
  EXPECT_NE(m.host.loaded, nullptr);  // loaded once, kept for the next runs
  const cpu::CompiledModel* first = m.host.loaded.get();
  npu::runNpuModel(m, in);
  EXPECT_EQ(m.host.loaded.get(), first);
}

TEST(HeterogeneousArtifact, ConvOnlyConfigurationRunsConvsOnTheNpuAndTheRestAsHostCode) {
  const std::string path = compileMixed("conv-only.json", "conv-only.tnpu");
  npu::CompiledNpuModel m = npu::readNpuModel(path);
  ASSERT_FALSE(m.host.library.empty());
  size_t convs = 0;
  for (const auto& s : m.subgraphs)
    for (const auto& op : s.ops) {
      EXPECT_EQ(op.opType, "Conv") << op.node;
      ++convs;
    }
  EXPECT_EQ(convs, 2u);
  std::map<std::string, Tensor> in{{"x", test::randomTensor({1, 8, 10, 10}, 8)}};
  npu::NpuModelRun run = npu::runNpuModel(m, in);
  EXPECT_EQ(run.subgraphs.size(), m.subgraphs.size());  // each NPU call reached the simulator from the host code
  expectClose(run.outputs, reference(in));
}

TEST(HeterogeneousArtifact, VersionTwoFilesRunOnTheInterpreter) {
  const std::string path = compileMixed("default.json", "v2.tnpu", /*compileHost=*/false);
  npu::CompiledNpuModel m = npu::readNpuModel(path);
  EXPECT_TRUE(m.host.library.empty());
  // The same file as version 2 wrote it: no HOST section, version field 2.
  std::vector<uint8_t> bytes = npu::serializeNpuModel(m);
  bytes[8] = 2;
  npu::CompiledNpuModel v2 = npu::parseNpuModel(bytes, "v2.tnpu");
  std::map<std::string, Tensor> in{{"x", test::randomTensor({1, 8, 10, 10}, 9)}};
  expectClose(npu::runNpuModel(v2, in).outputs, reference(in));
  // Version 1 is refused with a message saying what to do.
  bytes[8] = 1;
  try {
    npu::parseNpuModel(bytes, "v1.tnpu");
    ADD_FAILURE() << "version 1 accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("version 1 is not supported"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("recompile"), std::string::npos) << e.what();
  }
}

TEST(HeterogeneousArtifact, AHostSectionIsRefusedInAVersionTwoFile) {
  const std::string path = compileMixed("default.json", "with-host.tnpu");
  npu::CompiledNpuModel m = npu::readNpuModel(path);
  ASSERT_FALSE(m.host.library.empty());
  std::vector<uint8_t> bytes = npu::serializeNpuModel(m);
  bytes[8] = 2;
  try {
    npu::parseNpuModel(bytes, "bad.tnpu");
    ADD_FAILURE() << "a version 2 file with a HOST section was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown section tag"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessel
