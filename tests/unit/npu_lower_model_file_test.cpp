// Tests of the .tnpu compiled model file: compile a model with an NPU part and a CPU part, write, read back,
// run (simulator + interpreter) against the reference; refuse another configuration and corrupt files.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "tessel/hw/hardware_config.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/npu/run_trace.h"

#include "npu_test_util.h"

namespace {

using namespace tessel;

hw::HardwareConfig config(const std::string& name) { return test::shippedConfig(name); }
using test::randomTensor;


using test::mixedModel;

std::string tempPath(const std::string& name) { return ::testing::TempDir() + name; }

TEST(NpuLowerModelFile, CompileWriteReadRunMatchesInterpreter) {
  auto model = mixedModel();
  auto reference = model->clone();
  hw::HardwareConfig cfg = config("default.json");
  npu::CompiledNpuModel compiled = npu::compileForNpu(*model, cfg);
  EXPECT_EQ(compiled.subgraphs.size(), 2u);  // split by Neg; Flatten is data movement the NPU does
  const std::string path = tempPath("mixed.tnpu");
  npu::writeNpuModel(compiled, path);
  npu::CompiledNpuModel loaded = npu::readNpuModel(path, &cfg);
  ASSERT_EQ(loaded.subgraphs.size(), compiled.subgraphs.size());
  for (size_t i = 0; i < loaded.subgraphs.size(); ++i) {
    EXPECT_EQ(loaded.subgraphs[i].program.instructions, compiled.subgraphs[i].program.instructions);
    EXPECT_EQ(loaded.subgraphs[i].constants, compiled.subgraphs[i].constants);
  }
  size_t calls = 0;
  for (const auto& n : loaded.cpuPart->graph->nodes()) calls += n->opType() == "NpuCall";
  EXPECT_EQ(calls, 2u);
  ASSERT_EQ(loaded.inputs.size(), 1u);
  EXPECT_EQ(loaded.inputs[0].shape, (Shape{1, 8, 10, 10}));

  Tensor x = randomTensor({1, 8, 10, 10}, 42);
  npu::NpuModelRun run = npu::runNpuModel(loaded, {{"x", x}});
  Tensor want = Interpreter(*reference->graph).run({{"x", x}})[0];
  ASSERT_EQ(run.outputs.size(), 1u);
  float scale = 0;
  const float diff = test::maxAbsDiff(run.outputs[0], want, &scale);
  EXPECT_LE(diff, 1e-4f * scale);
  EXPECT_EQ(run.subgraphs.size(), 2u);
  EXPECT_GT(run.transferBytes, 0u);
  nlohmann::json summary = npu::runSummaryJson(loaded, run);
  EXPECT_EQ(summary["hazards"].get<uint64_t>(), 0u);
  for (const char* key : {"cycles", "dram_bytes", "peak_sram_bytes", "sram_capacity_bytes", "mm_utilization"})
    EXPECT_TRUE(summary.contains(key)) << key;
  EXPECT_GT(summary["cycles"].get<uint64_t>(), 0u);
  std::remove(path.c_str());
}

// `tessel sim --profile`: the per-node figures add up to the simulator's own (every instruction counted once, each
// unit's busy cycles, the gemms' rows and overhead make the matrix unit's busy cycles), over both NPU calls, and the
// nodes come in the order they started.
TEST(NpuLowerModelFile, RunProfileAddsUpToTheSimulatorsCounts) {
  auto model = mixedModel();
  hw::HardwareConfig cfg = config("default.json");
  npu::CompiledNpuModel compiled = npu::compileForNpu(*model, cfg);
  npu::NpuModelRun run = npu::runNpuModel(compiled, {{"x", randomTensor({1, 8, 10, 10}, 7)}});
  ASSERT_EQ(run.subgraphs.size(), 2u);
  const nlohmann::json p = npu::runProfileJson(compiled, run);
  uint64_t instructions = 0, ops = 0;
  std::array<uint64_t, npu::kNumUnits> busy{};
  for (const auto& s : run.subgraphs)
    for (size_t u = 0; u < npu::kNumUnits; ++u) busy[u] += s.report.units[u].busyCycles;
  for (const auto& l : compiled.subgraphs) {
    instructions += l.program.instructions.size();
    for (const auto& op : l.ops) ops += op.instructions > 0;  // a node lowered to addressing alone has no row
  }
  const nlohmann::json& t = p["totals"];
  EXPECT_EQ(t["instructions"].get<uint64_t>(), instructions);
  // Per unit, the idle cycles before its instructions and their occupancy fill its time up to its last instruction's end.
  std::array<uint64_t, npu::kNumUnits> lastEnd{};
  for (size_t k = 0; k < run.subgraphs.size(); ++k) {
    const auto lowered = std::find_if(compiled.subgraphs.begin(), compiled.subgraphs.end(),
                                      [&](const auto& l) { return l.name == run.subgraphs[k].name; });
    ASSERT_NE(lowered, compiled.subgraphs.end());
    const auto& program = lowered->program.instructions;
    std::array<uint64_t, npu::kNumUnits> end{};
    for (size_t i = 0; i < program.size(); ++i) {
      const auto u = static_cast<size_t>(program[i].unit());
      end[u] = std::max(end[u], run.subgraphs[k].report.timing.at(i).end);
    }
    for (size_t u = 0; u < npu::kNumUnits; ++u) lastEnd[u] += end[u];
  }
  for (size_t u = 0; u < npu::kNumUnits; ++u) {
    const std::string name(npu::unitName(static_cast<npu::Unit>(u)));
    EXPECT_EQ(t["busy"][name].get<uint64_t>(), busy[u]) << name;
    EXPECT_EQ(t["busy"][name].get<uint64_t>() + t["idle_before"][name].get<uint64_t>(), lastEnd[u]) << name;
  }
  EXPECT_GT(t["gemms"].get<uint64_t>(), 0u);
  EXPECT_EQ(t["gemm_rows"].get<uint64_t>() + t["gemm_overhead"].get<uint64_t>(), t["busy"]["MM"].get<uint64_t>());
  EXPECT_LE(t["bias_gemm_cycles"].get<uint64_t>(), t["busy"]["MM"].get<uint64_t>());
  ASSERT_EQ(p["nodes"].size(), ops);
  uint64_t previous = 0, sum = 0;
  std::set<std::string> subgraphs;
  for (const auto& n : p["nodes"]) {
    EXPECT_FALSE(n["node"].get<std::string>().empty());
    EXPECT_GE(n["start"].get<uint64_t>(), previous);
    EXPECT_GT(n["finish"].get<uint64_t>(), n["start"].get<uint64_t>());
    previous = n["start"].get<uint64_t>();
    sum += n["instructions"].get<uint64_t>();
    subgraphs.insert(n["subgraph"].get<std::string>());
  }
  EXPECT_EQ(sum, instructions);
  EXPECT_EQ(subgraphs.size(), 2u);
}

TEST(NpuLowerModelFile, RefusesAnotherConfiguration) {
  auto model = mixedModel();
  hw::HardwareConfig cfg = config("default.json"), tiny = config("tiny.json");
  const std::string path = tempPath("other.tnpu");
  npu::writeNpuModel(npu::compileForNpu(*model, cfg), path);
  try {
    npu::readNpuModel(path, &tiny);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("compiled for configuration 'default'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(tiny.hashHex()), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

std::string loadError(const std::vector<uint8_t>& bytes) {
  try {
    npu::parseNpuModel(bytes, "bad.tnpu");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(NpuLowerModelFile, RefusesCorruptFiles) {
  auto model = mixedModel();
  std::vector<uint8_t> bytes = npu::serializeNpuModel(npu::compileForNpu(*model, config("default.json")));
  EXPECT_EQ(loadError(bytes), "");
  std::vector<uint8_t> flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x40;
  EXPECT_NE(loadError(flipped).find("checksum"), std::string::npos) << loadError(flipped);
  std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 3));
  EXPECT_NE(loadError(truncated).find("corrupt"), std::string::npos) << loadError(truncated);
  std::vector<uint8_t> magic = bytes;
  magic[0] = 'X';
  EXPECT_NE(loadError(magic).find("bad magic"), std::string::npos);
  std::vector<uint8_t> version = bytes;
  version[8] = 99;
  EXPECT_NE(loadError(version).find("version 99"), std::string::npos);
  std::vector<uint8_t> hash = bytes;
  hash[12] ^= 1;  // header hash no longer matches the embedded configuration
  EXPECT_NE(loadError(hash).find("hash"), std::string::npos) << loadError(hash);
}

}  // namespace
