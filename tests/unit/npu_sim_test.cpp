// Tests of the NPU simulator: results of hand-written programs against naive loops, cycle counts against
// the timing model computed by hand, hazard, deadlock and capacity checks, reports and trace.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "tessel/targets/npu/simulator.h"
#include "tessel/targets/npu/timing.h"

namespace {

using namespace tessel::npu;
using tessel::hw::NpuConfig;

constexpr uint8_t bit(Unit u) { return static_cast<uint8_t>(1u << static_cast<unsigned>(u)); }

Instruction load(Buffer b, uint32_t sramAddr, uint32_t dramAddr, uint32_t outer, uint32_t vecLen, uint32_t dramStride) {
  Instruction in;
  in.opcode = Opcode::Load;
  in.dst = {b, sramAddr, vecLen, 0};
  in.dramAddr = dramAddr;
  in.outer = outer;
  in.vecLen = vecLen;
  in.dramStrideOuter = dramStride;
  return in;
}

Instruction store(Buffer b, uint32_t sramAddr, uint32_t sramStride, uint32_t dramAddr, uint32_t outer, uint32_t vecLen,
                  uint32_t dramStride) {
  Instruction in;
  in.opcode = Opcode::Store;
  in.srcA = {b, sramAddr, sramStride, 0};
  in.dramAddr = dramAddr;
  in.outer = outer;
  in.vecLen = vecLen;
  in.dramStrideOuter = dramStride;
  return in;
}

Instruction gemm(SramOperand inp, uint32_t wgtAddr, SramOperand acc, uint32_t rows, uint32_t k, uint32_t n, bool accumulate) {
  Instruction in;
  in.opcode = Opcode::Gemm;
  in.srcA = inp;
  in.srcB = {Buffer::Weight, wgtAddr, 0, 0};
  in.dst = acc;
  in.outer = rows;
  in.gemmK = k;
  in.gemmN = n;
  in.accumulate = accumulate;
  return in;
}

Instruction vecUnary(VecOp op, SramOperand dst, SramOperand a, uint32_t outer, uint32_t inner, uint32_t vecLen) {
  Instruction in;
  in.opcode = Opcode::VecUnary;
  in.vecOp = op;
  in.dst = dst;
  in.srcA = a;
  in.outer = outer;
  in.inner = inner;
  in.vecLen = vecLen;
  return in;
}

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// A tiled matmul C[M,N] = A[M,K] * B[K,N] on a DIM=16 machine: A loaded once, one weight block load
/// per (k, n) block, each signalling the gemm that uses it; the last gemm signals the store.
struct TiledMatmul {
  static constexpr uint32_t M = 8, K = 32, N = 32, D = 16;
  static constexpr uint32_t aAt = 0, bAt = M * K, cAt = M * K + K * N;
  Program program;
  std::vector<size_t> blockLoads, blockGemms;

  TiledMatmul() {
    program.instructions.push_back(load(Buffer::Input, 0, aAt, M, K, K));
    for (uint32_t nb = 0; nb < N / D; ++nb) {
      for (uint32_t kb = 0; kb < K / D; ++kb) {
        uint32_t block = nb * (K / D) + kb;
        Instruction ld = load(Buffer::Weight, block * D * D, bAt + kb * D * N + nb * D, D, D, N);
        ld.signalMask = bit(Unit::Matrix);
        blockLoads.push_back(program.instructions.size());
        program.instructions.push_back(ld);
        Instruction g = gemm({Buffer::Input, kb * D, K, 0}, block * D * D, {Buffer::Accumulator, nb * D, N, 0}, M, D, D, kb > 0);
        g.waitMask = bit(Unit::Load);
        blockGemms.push_back(program.instructions.size());
        program.instructions.push_back(g);
      }
    }
    program.instructions.back().signalMask = bit(Unit::Store);
    Instruction st = store(Buffer::Accumulator, 0, N, cAt, M, N, N);
    st.waitMask = bit(Unit::Matrix);
    program.instructions.push_back(st);
  }
};

TEST(NpuSim, TiledMatmulWithTokensMatchesNaiveLoop) {
  TiledMatmul mm;
  using T = TiledMatmul;
  Dram dram(T::cAt + T::M * T::N);
  std::vector<float> a = randomFloats(T::M * T::K, 1), b = randomFloats(T::K * T::N, 2);
  dram.writeFloats(T::aAt, a);
  dram.writeFloats(T::bAt, b);
  NpuConfig cfg;  // defaults: DIM 16, VTA-sized buffers
  SimReport r = simulate(mm.program, cfg, dram);
  std::vector<float> c = dram.readFloats(T::cAt, T::M * T::N);
  for (uint32_t m = 0; m < T::M; ++m) {
    for (uint32_t n = 0; n < T::N; ++n) {
      float ref = 0;
      for (uint32_t k = 0; k < T::K; ++k) ref += a[m * T::K + k] * b[k * T::N + n];
      EXPECT_NEAR(c[m * T::N + n], ref, 1e-4) << m << "," << n;
    }
  }
  EXPECT_TRUE(r.hazards.empty()) << r.summary();
  EXPECT_EQ(r.uninitialisedReads, 0u);
  EXPECT_EQ(r.macs, uint64_t{T::M} * T::K * T::N);
  EXPECT_NEAR(r.mmUtilization, double(r.macs) / (double(r.totalCycles) * 256), 1e-12);
  EXPECT_EQ(r.dramBytesRead, (T::M * T::K + T::K * T::N) * 4u);
  EXPECT_EQ(r.dramBytesWritten, T::M * T::N * 4u);
  // Any list schedule lies within (units + 1) x the lower bound; cycles can never beat the bound.
  uint64_t lb = r.bounds.bound();
  EXPECT_GE(r.totalCycles, lb);
  EXPECT_LE(r.totalCycles, 5 * lb);
  for (size_t b2 = 0; b2 < kNumBuffers; ++b2) EXPECT_LE(r.peakSramBytes[b2], r.capacityBytes[b2]);
}

TEST(NpuSim, RemovingOneTokenIsFlaggedAsRawHazard) {
  TiledMatmul mm;
  using T = TiledMatmul;
  // Drop the token between the third weight-block load and its gemm (and keep the others balanced).
  mm.program.instructions[mm.blockLoads[2]].signalMask = 0;
  mm.program.instructions[mm.blockGemms[2]].waitMask = 0;
  Dram dram(T::cAt + T::M * T::N);
  SimReport r = simulate(mm.program, NpuConfig{}, dram);
  ASSERT_FALSE(r.hazards.empty()) << r.summary();
  bool found = false;
  for (const Hazard& h : r.hazards) {
    if (h.kind == HazardKind::ReadAfterWrite && h.earlier == mm.blockLoads[2] && h.later == mm.blockGemms[2]) {
      found = true;
      EXPECT_EQ(h.buffer, Buffer::Weight);
      EXPECT_EQ(h.words, 256u);
      EXPECT_NE(h.describe().find("RAW hazard on wgt"), std::string::npos);
    }
  }
  EXPECT_TRUE(found) << r.summary();
}

/// A small machine with round numbers for hand-computed cycle counts.
NpuConfig handConfig() {
  NpuConfig c;
  c.dim = 4;
  c.bufferBytes = {4096, 4096, 4096, 4096};
  c.load = {10, 2, 8};
  c.matrix = {3, 1, 8};
  c.vector = {2, 1, 8};
  c.store = {10, 2, 8};
  c.loadBytesPerCycle = 4;
  c.storeBytesPerCycle = 8;
  c.dmaRowCycles = 1;
  c.vectorLanes = 4;
  c.vectorCyclesPerVector = 1;
  c.vectorCyclesPerVectorComplex = 3;
  return c;
}

TEST(NpuSim, CycleCountsOfLoadGemmStoreMatchHandComputation) {
  NpuConfig cfg = handConfig();
  Program p;
  p.instructions.push_back(load(Buffer::Weight, 0, 0, 4, 4, 4));   // 4x4 weights
  Instruction ldA = load(Buffer::Input, 0, 16, 3, 4, 4);           // 3x4 input rows
  ldA.signalMask = bit(Unit::Matrix);
  p.instructions.push_back(ldA);
  Instruction g = gemm({Buffer::Input, 0, 4, 0}, 0, {Buffer::Accumulator, 0, 4, 0}, 3, 4, 4, false);
  g.waitMask = bit(Unit::Load);
  g.signalMask = bit(Unit::Store);
  p.instructions.push_back(g);
  Instruction st = store(Buffer::Accumulator, 0, 4, 28, 3, 4, 4);
  st.waitMask = bit(Unit::Matrix);
  p.instructions.push_back(st);

  Dram dram(40);
  std::vector<float> w = randomFloats(16, 3), x = randomFloats(12, 4);
  dram.writeFloats(0, w);
  dram.writeFloats(16, x);
  SimReport r = simulate(p, cfg, dram);
  // LD weights: 10 setup + 64 B / 4 B/cycle + 4 bursts * 1 = 30 busy, visible at 30 + 2 = 32.
  EXPECT_EQ(r.timing[0].start, 0u);
  EXPECT_EQ(r.timing[0].end, 30u);
  EXPECT_EQ(r.timing[0].finish, 32u);
  // LD input: starts when LD is free (30): 10 + 48/4 + 3 = 25 -> ends 55, visible 57.
  EXPECT_EQ(r.timing[1].start, 30u);
  EXPECT_EQ(r.timing[1].end, 55u);
  EXPECT_EQ(r.timing[1].finish, 57u);
  // GEMM waits for the token at 57: 3 setup + 3 rows + DIM 4 (new weights) = 10; latency + 2*4-2 + 1 = 17.
  EXPECT_EQ(r.timing[2].start, 57u);
  EXPECT_EQ(r.timing[2].end, 67u);
  EXPECT_EQ(r.timing[2].finish, 74u);
  // ST: 10 + 48/8 + 3 bursts = 19 -> 74..93, visible 95.
  EXPECT_EQ(r.timing[3].start, 74u);
  EXPECT_EQ(r.timing[3].end, 93u);
  EXPECT_EQ(r.totalCycles, 95u);
  EXPECT_EQ(r.units[0].busyCycles, 55u);
  EXPECT_EQ(r.units[1].busyCycles, 10u);
  EXPECT_EQ(r.units[3].busyCycles, 19u);
  EXPECT_EQ(r.units[1].stallCycles, 57u);  // the gemm sat at the MM queue head from 0 to 57
  EXPECT_EQ(r.units[3].stallCycles, 74u);
  EXPECT_EQ(r.units[0].stallCycles, 0u);
  // Lower bounds by hand: RAW chain ldW(32) -> gemm(17) -> st(21) = 70; with LD in order the input
  // load starts at 30: 30 + 27 + 17 + 21 = 95. Occupancy of LD = 55; DRAM = 112 B / 4 = 28; MACs 48 / 16 = 3.
  EXPECT_EQ(r.bounds.criticalPathRaw, 70u);
  EXPECT_EQ(r.bounds.criticalPathUnitOrder, 95u);
  EXPECT_EQ(r.bounds.unitOccupancy[0], 55u);
  EXPECT_EQ(r.bounds.dramCycles, 28u);
  EXPECT_EQ(r.bounds.computeCycles, 3u);
  EXPECT_EQ(r.bounds.bound(), 95u);
  // And the numbers: out[m][n] = sum_k x[m][k] * w[k][n].
  std::vector<float> out = dram.readFloats(28, 12);
  for (int m = 0; m < 3; ++m) {
    for (int n = 0; n < 4; ++n) {
      float ref = 0;
      for (int k = 0; k < 4; ++k) ref += x[m * 4 + k] * w[k * 4 + n];
      EXPECT_NEAR(out[m * 4 + n], ref, 1e-5);
    }
  }
}

TEST(NpuSim, AccumulatingGemmChainBoundsMatchHandComputation) {
  // C[3x4] = A[3x8] * W[8x4] as two k-blocks on DIM 4: the second gemm accumulates, i.e. reads the
  // accumulator at its finish, so it may start while the first is still in the array's pipeline.
  NpuConfig cfg = handConfig();
  Program p;
  p.instructions.push_back(load(Buffer::Weight, 0, 0, 8, 4, 4));  // both 4x4 blocks: wgt[0..32)
  Instruction ldA = load(Buffer::Input, 0, 32, 3, 8, 8);
  ldA.signalMask = bit(Unit::Matrix);
  p.instructions.push_back(ldA);
  Instruction g0 = gemm({Buffer::Input, 0, 8, 0}, 0, {Buffer::Accumulator, 0, 4, 0}, 3, 4, 4, false);
  g0.waitMask = bit(Unit::Load);
  p.instructions.push_back(g0);
  Instruction g1 = gemm({Buffer::Input, 4, 8, 0}, 16, {Buffer::Accumulator, 0, 4, 0}, 3, 4, 4, true);
  g1.signalMask = bit(Unit::Store);
  p.instructions.push_back(g1);
  Instruction st = store(Buffer::Accumulator, 0, 4, 56, 3, 4, 4);
  st.waitMask = bit(Unit::Matrix);
  p.instructions.push_back(st);

  Dram dram(68);
  std::vector<float> w = randomFloats(32, 7), x = randomFloats(24, 8);
  dram.writeFloats(0, w);
  dram.writeFloats(32, x);
  SimReport r = simulate(p, cfg, dram);
  ASSERT_TRUE(r.hazards.empty()) << r.summary();
  // LD W: 10 + 128/4 + 8 = 50, visible 52. LD A: 10 + 96/4 + 3 = 37 from 50 -> 87, visible 89.
  // gemm0: 89..99 (3 + 3 + 4), visible 89 + 17 = 106. gemm1 starts when MM is free (99; its accumulator
  // read is at finish, no interlock), visible 99 + 17 = 116. ST: 10 + 48/8 + 3 = 19 from 116, visible 137.
  EXPECT_EQ(r.timing[3].start, 99u);
  EXPECT_EQ(r.timing[3].finish, 116u);
  EXPECT_EQ(r.totalCycles, 137u);
  // RAW chain: W visible 52 -> gemm0 and gemm1 both 52..69 (gemm1 only needs gemm0's value by its own
  // finish) -> ST 69 + 21 = 90. With in-order issue the bound is this very schedule: 137. Counting the
  // accumulator read as a dependency at start would give 107 and 144 (more than the simulated 137).
  EXPECT_EQ(r.bounds.criticalPathRaw, 90u);
  EXPECT_EQ(r.bounds.criticalPathUnitOrder, 137u);
  EXPECT_EQ(r.bounds.bound(), 137u);
  std::vector<float> out = dram.readFloats(56, 12);
  for (int m = 0; m < 3; ++m) {
    for (int n = 0; n < 4; ++n) {
      float ref = 0;
      for (int k = 0; k < 8; ++k) ref += x[m * 8 + k] * w[k * 4 + n];
      EXPECT_NEAR(out[m * 4 + n], ref, 1e-5);
    }
  }
}

TEST(NpuSim, VectorCostRoundsToLanesAndComplexOpsCostMore) {
  NpuConfig cfg = handConfig();
  Instruction relu = vecUnary(VecOp::Relu, {Buffer::Output, 0, 18, 6}, {Buffer::Input, 0, 18, 6}, 2, 3, 6);
  // 2 x 3 rows of 6 elements on 4 lanes: 2 * 3 * ceil(6/4) = 12 vectors -> 2 setup + 12 = 14, latency +1.
  EXPECT_EQ(instructionCost(relu, cfg).occupancy, 14u);
  EXPECT_EQ(instructionCost(relu, cfg).latency, 15u);
  Instruction sig = relu;
  sig.vecOp = VecOp::Sigmoid;
  EXPECT_EQ(instructionCost(sig, cfg).occupancy, 2u + 12 * 3);
  Instruction g = gemm({Buffer::Input, 0, 4, 0}, 0, {Buffer::Accumulator, 0, 4, 0}, 5, 4, 4, true);
  g.keepWeights = true;  // no DIM cycles to shift weights in
  EXPECT_EQ(instructionCost(g, cfg).occupancy, 3u + 5);
  Instruction strided = load(Buffer::Input, 0, 0, 2, 4, 100);
  strided.inner = 3;
  strided.dramStrideInner = 8;  // not dense: one burst per vector -> 6 bursts, 96 B / 4 = 24
  EXPECT_EQ(instructionCost(strided, cfg).occupancy, 10u + 24 + 6);
}

TEST(NpuSim, ReluProgramMatchesNaiveLoopAndReportsLiveBytes) {
  NpuConfig cfg = handConfig();
  const uint32_t rows = 5, width = 20;  // 20 = 5 vectors of 4 lanes
  Program p;
  Instruction ld = load(Buffer::Input, 0, 0, rows, width, width);
  ld.signalMask = bit(Unit::Vector);
  p.instructions.push_back(ld);
  Instruction relu = vecUnary(VecOp::Relu, {Buffer::Output, 0, width, 0}, {Buffer::Input, 0, width, 0}, rows, 1, width);
  relu.waitMask = bit(Unit::Load);
  relu.signalMask = bit(Unit::Store);
  p.instructions.push_back(relu);
  Instruction st = store(Buffer::Output, 0, width, 100, rows, width, width);
  st.waitMask = bit(Unit::Vector);
  p.instructions.push_back(st);
  Dram dram(200);
  std::vector<float> x = randomFloats(rows * width, 5);
  dram.writeFloats(0, x);
  SimReport r = simulate(p, cfg, dram);
  std::vector<float> y = dram.readFloats(100, rows * width);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f);
  EXPECT_TRUE(r.hazards.empty());
  EXPECT_EQ(r.peakSramBytes[0], rows * width * 4u);
  EXPECT_EQ(r.peakSramBytes[3], rows * width * 4u);
  EXPECT_EQ(r.peakSramBytes[1], 0u);
  EXPECT_EQ(r.footprintBytes[0], rows * width * 4u);
}

TEST(NpuSim, MaxPoolWithMinusInfinityPaddingMatchesNaiveLoop) {
  // 3x3 max pool, stride 2, pad 1 over a 5x5x16 NHWC image -> 3x3x16. VEC fills a 7x7 tile with -inf,
  // LD writes the interior (WAW ordered by a VEC->LD token), then one max step per window tap.
  NpuConfig cfg;  // DIM 16 defaults
  const uint32_t H = 5, C = 16, P = 7, O = 3;
  Program p;
  Instruction fill = vecUnary(VecOp::Fill, {Buffer::Input, 0, P * C, C}, {}, P, P, C);
  fill.imm0 = -INFINITY;
  fill.signalMask = bit(Unit::Load);
  p.instructions.push_back(fill);
  Instruction ld = load(Buffer::Input, (P + 1) * C, 0, H, C, H * C);
  ld.inner = H;
  ld.dramStrideInner = C;
  ld.dst = {Buffer::Input, (P + 1) * C, P * C, C};
  ld.waitMask = bit(Unit::Vector);
  ld.signalMask = bit(Unit::Vector);
  p.instructions.push_back(ld);
  for (uint32_t kh = 0; kh < 3; ++kh) {
    for (uint32_t kw = 0; kw < 3; ++kw) {
      SramOperand window{Buffer::Input, (kh * P + kw) * C, 2 * P * C, 2 * C};
      SramOperand out{Buffer::Output, 0, O * C, C};
      Instruction step;
      if (kh == 0 && kw == 0) {
        step = vecUnary(VecOp::Copy, out, window, O, O, C);
        step.waitMask = bit(Unit::Load);
      } else {
        step.opcode = Opcode::VecBinary;
        step.vecOp = VecOp::Max;
        step.dst = out, step.srcA = window, step.srcB = out;
        step.outer = O, step.inner = O, step.vecLen = C;
      }
      p.instructions.push_back(step);
    }
  }
  p.instructions.back().signalMask = bit(Unit::Store);
  Instruction st = store(Buffer::Output, 0, C, 1000, O * O, C, C);
  st.waitMask = bit(Unit::Vector);
  p.instructions.push_back(st);

  Dram dram(2000);
  std::vector<float> x = randomFloats(H * H * C, 6);
  dram.writeFloats(0, x);
  SimReport r = simulate(p, cfg, dram);
  std::vector<float> y = dram.readFloats(1000, O * O * C);
  for (uint32_t oh = 0; oh < O; ++oh) {
    for (uint32_t ow = 0; ow < O; ++ow) {
      for (uint32_t c = 0; c < C; ++c) {
        float ref = -INFINITY;
        for (int kh = 0; kh < 3; ++kh) {
          for (int kw = 0; kw < 3; ++kw) {
            int ih = int(oh) * 2 - 1 + kh, iw = int(ow) * 2 - 1 + kw;
            if (ih >= 0 && ih < int(H) && iw >= 0 && iw < int(H)) ref = std::max(ref, x[(ih * H + iw) * C + c]);
          }
        }
        EXPECT_EQ(y[(oh * O + ow) * C + c], ref) << oh << "," << ow << "," << c;
      }
    }
  }
  // Back-to-back max steps on the same output are ordered by the vector unit's interlock.
  EXPECT_TRUE(r.hazards.empty()) << r.summary();
  for (size_t i = 3; i + 1 < p.instructions.size(); ++i) EXPECT_GE(r.timing[i].start, r.timing[i - 1].finish);
}

TEST(NpuSim, DeadlockOnAMissingTokenIsReported) {
  NpuConfig cfg = handConfig();
  Program p;
  p.instructions.push_back(load(Buffer::Input, 0, 0, 1, 4, 4));  // never signals
  Instruction relu = vecUnary(VecOp::Relu, {Buffer::Output, 0, 0, 0}, {Buffer::Input, 0, 0, 0}, 1, 1, 4);
  relu.waitMask = bit(Unit::Load);
  p.instructions.push_back(relu);
  Dram dram(8);
  try {
    simulate(p, cfg, dram);
    FAIL() << "expected SimulationError";
  } catch (const SimulationError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("NPU deadlock"), std::string::npos) << msg;
    EXPECT_NE(msg.find("VEC: head #1 (vun) waits for a token from LD"), std::string::npos) << msg;
  }
}

TEST(NpuSim, DeadlockOnAFullQueueBlockingDispatchIsReported) {
  NpuConfig cfg = handConfig();
  cfg.vector.queueDepth = 1;
  Program p;
  Instruction waits = vecUnary(VecOp::Relu, {Buffer::Output, 0, 0, 0}, {Buffer::Input, 0, 0, 0}, 1, 1, 4);
  waits.waitMask = bit(Unit::Store);  // waits for the store below
  p.instructions.push_back(waits);
  p.instructions.push_back(vecUnary(VecOp::Copy, {Buffer::Output, 8, 0, 0}, {Buffer::Input, 0, 0, 0}, 1, 1, 4));
  Instruction st = store(Buffer::Input, 0, 4, 0, 1, 4, 4);
  st.signalMask = bit(Unit::Vector);
  p.instructions.push_back(st);  // never dispatched: the VEC queue is full behind the blocked head
  Dram dram(8);
  try {
    simulate(p, cfg, dram);
    FAIL() << "expected SimulationError";
  } catch (const SimulationError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("dispatcher: instruction #1 (vun) waits for room in the full VEC queue"), std::string::npos) << msg;
  }
}

TEST(NpuSim, OutOfCapacityAccessesAreRefusedBeforeRunning) {
  NpuConfig cfg = handConfig();  // 4096-byte buffers = 1024 words
  Program p;
  p.instructions.push_back(load(Buffer::Input, 1020, 0, 2, 4, 4));  // words 1020..1027
  Dram dram(64);
  try {
    simulate(p, cfg, dram);
    FAIL() << "expected UserError";
  } catch (const tessel::UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("instruction 0 (load): write access to inp words [1020, 1027] exceeds its capacity of 1024 words"),
              std::string::npos) << msg;
  }
  Program g;
  g.instructions.push_back(gemm({Buffer::Input, 0, 8, 0}, 0, {Buffer::Accumulator, 0, 8, 0}, 1, 8, 4, false));
  EXPECT_THROW(simulate(g, cfg, dram), tessel::UserError);  // k = 8 > DIM = 4
  Program d;
  d.instructions.push_back(load(Buffer::Input, 0, 60, 1, 8, 8));  // DRAM words 60..67 of 64
  EXPECT_THROW(simulate(d, cfg, dram), tessel::UserError);
  Program self;
  Instruction selfWait = load(Buffer::Input, 0, 0, 1, 4, 4);
  selfWait.waitMask = bit(Unit::Load);
  self.instructions.push_back(selfWait);
  EXPECT_THROW(simulate(self, cfg, dram), tessel::UserError);
}

TEST(NpuSim, JsonReportAndTraceCarryTheMeasurements) {
  TiledMatmul mm;
  Dram dram(TiledMatmul::cAt + TiledMatmul::M * TiledMatmul::N);
  SimReport r = simulate(mm.program, NpuConfig{}, dram);
  nlohmann::json j = r.toJson();
  EXPECT_EQ(j["cycles"].get<uint64_t>(), r.totalCycles);
  EXPECT_EQ(j["dram_bytes"]["read"].get<uint64_t>(), r.dramBytesRead);
  EXPECT_EQ(j["peak_sram_bytes"]["wgt"].get<uint64_t>(), r.peakSramBytes[1]);
  EXPECT_EQ(j["sram_capacity_bytes"]["acc"].get<uint64_t>(), 131072u);
  EXPECT_DOUBLE_EQ(j["mm_utilization"].get<double>(), r.mmUtilization);
  std::ostringstream trace;
  writeChromeTrace(mm.program, r, trace);
  nlohmann::json t = nlohmann::json::parse(trace.str());
  size_t slices = 0, counters = 0;
  for (const auto& e : t["traceEvents"]) {
    slices += e["ph"] == "X";
    counters += e["ph"] == "C";
  }
  EXPECT_EQ(slices, mm.program.instructions.size());
  EXPECT_GT(counters, 0u);
  EXPECT_NE(r.summary().find("hazards: 0"), std::string::npos);
}

}  // namespace
