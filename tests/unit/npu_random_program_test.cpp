// Property test of the NPU simulator: random fully-serialised programs (every instruction ordered after
// the previous one by a token or by its unit's queue) must run without hazards or deadlock, within the
// capacity, and between the lower bound and (units + 1) x the bound.
#include <gtest/gtest.h>

#include <random>

#include "tessel/targets/npu/simulator.h"

namespace {

using namespace tessel::npu;

Instruction randomInstruction(std::mt19937& rng, uint32_t dim) {
  auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  auto buffer = [&] { return static_cast<Buffer>(pick(0, 3)); };
  Instruction in;
  in.outer = pick(1, 4), in.inner = pick(1, 3), in.vecLen = pick(1, 20);
  auto dense = [&](Buffer b) { return SramOperand{b, pick(0, 200), in.inner * in.vecLen, in.vecLen}; };
  switch (pick(0, 3)) {
    case 0:
      in.opcode = Opcode::Load;
      in.dst = dense(buffer());
      in.dst.strideOuter = (in.inner + 2) * in.vecLen;  // room for left/right padding
      in.padLeft = static_cast<uint8_t>(pick(0, 1)), in.padRight = static_cast<uint8_t>(pick(0, 1));
      in.dramAddr = pick(0, 500), in.dramStrideOuter = in.inner * in.vecLen, in.dramStrideInner = in.vecLen;
      break;
    case 1:
      in.opcode = Opcode::Store;
      in.srcA = dense(buffer());
      in.dramAddr = pick(0, 500), in.dramStrideOuter = in.inner * in.vecLen, in.dramStrideInner = in.vecLen;
      break;
    case 2:
      in.opcode = Opcode::Gemm;
      in.gemmK = pick(1, dim), in.gemmN = pick(1, dim);
      in.srcA = {Buffer::Input, pick(0, 200), in.inner * in.gemmK, in.gemmK};
      in.srcB = {Buffer::Weight, pick(0, 200), 0, 0};
      in.dst = {Buffer::Accumulator, pick(0, 200), in.inner * in.gemmN, in.gemmN};
      in.accumulate = pick(0, 1);
      in.vecLen = 1;
      break;
    default:
      in.opcode = Opcode::VecBinary;
      in.vecOp = static_cast<VecOp>(pick(0, 6));
      in.dst = dense(buffer()), in.srcA = dense(buffer()), in.srcB = dense(buffer());
      break;
  }
  return in;
}

TEST(NpuRandomProgram, SerialisedProgramsHaveNoHazardsAndRespectBounds) {
  std::mt19937 rng(1234);
  tessel::hw::NpuConfig cfg;
  cfg.dim = 8;
  cfg.bufferBytes = {4096, 4096, 4096, 4096};
  for (int trial = 0; trial < 200; ++trial) {
    Program p;
    const int n = 1 + trial % 30;
    for (int i = 0; i < n; ++i) {
      Instruction in = randomInstruction(rng, cfg.dim);
      if (i > 0) {
        Instruction& prev = p.instructions.back();
        if (prev.unit() != in.unit()) {
          prev.signalMask |= static_cast<uint8_t>(1u << static_cast<unsigned>(in.unit()));
          in.waitMask |= static_cast<uint8_t>(1u << static_cast<unsigned>(prev.unit()));
        }
      }
      p.instructions.push_back(in);
    }
    tessel::npu::Dram dram(1024);
    for (uint64_t w = 0; w < 1024; ++w) dram.write(w, float(w % 17) - 8);
    SimReport r = simulate(p, cfg, dram);
    ASSERT_TRUE(r.hazards.empty()) << "trial " << trial << "\n" << disassemble(p) << r.summary();
    uint64_t lb = r.bounds.bound();
    ASSERT_GE(r.totalCycles, lb) << "trial " << trial;
    ASSERT_LE(r.totalCycles, 5 * lb) << "trial " << trial;
    for (size_t b = 0; b < kNumBuffers; ++b) ASSERT_LE(r.peakSramBytes[b], r.capacityBytes[b]);
  }
}

}  // namespace
