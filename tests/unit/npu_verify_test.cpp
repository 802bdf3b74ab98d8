// The static verifier of lowered NPU programs: clean on real lowerings, and each kind of broken program
// (unwritten SRAM read, DRAM load of nothing, unstored output, unbalanced tokens, out-of-range DRAM) is named.
#include <gtest/gtest.h>

#include "tessel/ops/shape_inference.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/verify.h"

#include "npu_test_util.h"

namespace {

using namespace tessel;

/// conv 3x3 -> relu -> max pool, lowered for the default configuration.
npu::LoweredSubgraph lowered(const hw::HardwareConfig& cfg) {
  Graph g;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 8, 12, 11}));
  Node* c = g.addNode("Conv", {x, g.addConstant("w", test::randomTensor({20, 8, 3, 3}, 1))}, {"c"});
  c->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
  Node* r = g.addNode("Relu", {c->output(0)}, {"r"});
  Node* p = g.addNode("MaxPool", {r->output(0)}, {"p"});
  p->setAttr("kernel_shape", std::vector<int64_t>{2, 2});
  p->setAttr("strides", std::vector<int64_t>{2, 2});
  g.addOutput(p->output(0));
  inferShapes(g);
  return npu::lowerSubgraph(g, *cfg.firstNpu(), "test");
}

bool mentions(const std::vector<std::string>& problems, const std::string& what) {
  for (const std::string& p : problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

size_t firstOf(const npu::LoweredSubgraph& s, npu::Opcode op) {
  for (size_t i = 0; i < s.program.instructions.size(); ++i)
    if (s.program.instructions[i].opcode == op) return i;
  throw std::runtime_error("no such instruction");
}

TEST(NpuVerify, RealLoweringsAreClean) {
  for (const char* name : {"default.json", "tiny.json", "edge.json"}) {
    hw::HardwareConfig cfg = test::shippedConfig(name);
    EXPECT_TRUE(npu::programProblems(lowered(cfg), cfg.firstNpu()->npu).empty()) << name;
  }
}

TEST(NpuVerify, CatchesEachKindOfBrokenProgram) {
  hw::HardwareConfig cfg = test::shippedConfig("default.json");
  const hw::NpuConfig& npu = cfg.firstNpu()->npu;
  const npu::LoweredSubgraph good = lowered(cfg);
  {  // the first gemm reads input words no one wrote
    npu::LoweredSubgraph s = good;
    npu::Instruction& gm = s.program.instructions[firstOf(s, npu::Opcode::Gemm)];
    gm.srcA.addr = static_cast<uint32_t>(npu.bufferWords(static_cast<size_t>(npu::Buffer::Input)) - 4 * gm.gemmK);
    gm.outer = gm.inner = 1;
    auto problems = npu::programProblems(s, npu);
    EXPECT_TRUE(mentions(problems, "reads inp word")) << ::testing::PrintToString(problems);
    EXPECT_TRUE(mentions(problems, "of node 'c'")) << ::testing::PrintToString(problems);
  }
  {  // a load from beyond everything written (but inside the DRAM image)
    npu::LoweredSubgraph s = good;
    s.dramWords += 1000;
    npu::Instruction& ld = s.program.instructions[firstOf(s, npu::Opcode::Load)];
    ld.dramAddr = s.dramWords - 1000;
    ld.outer = ld.inner = ld.vecLen = 1;
    ld.padTop = ld.padBottom = ld.padLeft = ld.padRight = 0;
    EXPECT_TRUE(mentions(npu::programProblems(s, npu), "which is no constant or input and no earlier store writes"));
  }
  {  // the last store goes elsewhere: part of the output is never stored
    npu::LoweredSubgraph s = good;
    size_t last = 0;
    for (size_t i = 0; i < s.program.instructions.size(); ++i)
      if (s.program.instructions[i].opcode == npu::Opcode::Store) last = i;
    s.program.instructions[last].dramAddr = 0;
    EXPECT_TRUE(mentions(npu::programProblems(s, npu), "is never stored"));
  }
  {  // one signal more than waits
    npu::LoweredSubgraph s = good;
    s.program.instructions[firstOf(s, npu::Opcode::Load)].signalMask ^= 1u << static_cast<unsigned>(npu::Unit::Store);
    EXPECT_TRUE(mentions(npu::programProblems(s, npu), "unbalanced"));
  }
  {  // a load past the DRAM image
    npu::LoweredSubgraph s = good;
    s.program.instructions[firstOf(s, npu::Opcode::Load)].dramAddr = static_cast<uint32_t>(s.dramWords);
    EXPECT_TRUE(mentions(npu::programProblems(s, npu), "beyond the DRAM image"));
  }
}

}  // namespace
