// Tests of the NPU's vector instructions, weight reuse and token relay against naive loops, and of the
// WAR / WAW hazard checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "tessel/targets/npu/simulator.h"

namespace {

using namespace tessel::npu;
using tessel::hw::NpuConfig;

constexpr uint8_t bit(Unit u) { return static_cast<uint8_t>(1u << static_cast<unsigned>(u)); }

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Instruction dma(Opcode op, Buffer b, uint32_t sramAddr, uint32_t dramAddr, uint32_t words) {
  Instruction in;
  in.opcode = op;
  (op == Opcode::Load ? in.dst : in.srcA) = {b, sramAddr, 0, 0};
  in.dramAddr = dramAddr;
  in.vecLen = words;
  return in;
}

Instruction vec(Opcode op, VecOp sub, SramOperand dst, SramOperand a, SramOperand b, uint32_t outer, uint32_t inner,
                uint32_t len) {
  Instruction in;
  in.opcode = op;
  in.vecOp = sub;
  in.dst = dst, in.srcA = a, in.srcB = b;
  in.outer = outer, in.inner = inner, in.vecLen = len;
  return in;
}

/// Runs: load `x` (n words) into inp[0] and `y` into inp[n], the vector instruction `op`, store out[0..outWords).
std::vector<float> runVector(Instruction op, const std::vector<float>& x, const std::vector<float>& y, uint32_t outWords,
                             SimReport* report = nullptr) {
  Program p;
  auto n = static_cast<uint32_t>(x.size());
  p.instructions.push_back(dma(Opcode::Load, Buffer::Input, 0, 0, n));
  Instruction ly = dma(Opcode::Load, Buffer::Input, n, n, static_cast<uint32_t>(y.size()));
  ly.signalMask = bit(Unit::Vector);
  p.instructions.push_back(ly);
  op.waitMask = bit(Unit::Load);
  op.signalMask = bit(Unit::Store);
  p.instructions.push_back(op);
  Instruction st = dma(Opcode::Store, Buffer::Output, 0, 4096, outWords);
  st.waitMask = bit(Unit::Vector);
  p.instructions.push_back(st);
  Dram dram(8192);
  dram.writeFloats(0, x);
  dram.writeFloats(n, y);
  SimReport r = simulate(p, NpuConfig{}, dram);
  EXPECT_TRUE(r.hazards.empty()) << r.summary();
  if (report) *report = r;
  return dram.readFloats(4096, outWords);
}

TEST(NpuVector, BinaryOpsMatchNaiveLoops) {
  const uint32_t rows = 3, cols = 4, C = 5, n = rows * cols * C;
  std::vector<float> x = randomFloats(n, 1), y = randomFloats(n, 2);
  for (float& v : y) v = std::abs(v) + 0.5f;  // safe divisor
  const VecOp ops[] = {VecOp::Add, VecOp::Sub, VecOp::Mul, VecOp::Div, VecOp::Max, VecOp::Min};
  for (VecOp op : ops) {
    Instruction in = vec(Opcode::VecBinary, op, {Buffer::Output, 0, cols * C, C}, {Buffer::Input, 0, cols * C, C},
                         {Buffer::Input, n, cols * C, C}, rows, cols, C);
    std::vector<float> out = runVector(in, x, y, n);
    for (uint32_t i = 0; i < n; ++i) {
      float ref = op == VecOp::Add ? x[i] + y[i] : op == VecOp::Sub ? x[i] - y[i] : op == VecOp::Mul ? x[i] * y[i]
                : op == VecOp::Div ? x[i] / y[i] : op == VecOp::Max ? std::max(x[i], y[i]) : std::min(x[i], y[i]);
      ASSERT_FLOAT_EQ(out[i], ref) << vecOpName(op) << " " << i;
    }
  }
}

TEST(NpuVector, UnaryOpsWithImmediatesMatchNaiveLoops) {
  const uint32_t n = 40;
  std::vector<float> x = randomFloats(n, 3);
  struct Case { VecOp op; float imm0, imm1; float (*ref)(float, float, float); };
  const Case cases[] = {
      {VecOp::Copy, 0, 0, [](float a, float, float) { return a; }},
      {VecOp::Fill, 7.5f, 0, [](float, float i0, float) { return i0; }},
      {VecOp::Relu, 0, 0, [](float a, float, float) { return a < 0 ? 0.0f : a; }},
      {VecOp::Clip, -0.5f, 0.75f, [](float a, float lo, float hi) { return a < lo ? lo : (a > hi ? hi : a); }},
      {VecOp::LeakyRelu, 0.1f, 0, [](float a, float s, float) { return a < 0 ? a * s : a; }},
      {VecOp::Scale, 3.0f, -1.0f, [](float a, float s, float b) { return a * s + b; }},
      {VecOp::Sigmoid, 0, 0, [](float a, float, float) { return 1.0f / (1.0f + std::exp(-a)); }},
      {VecOp::Tanh, 0, 0, [](float a, float, float) { return std::tanh(a); }},
      {VecOp::Exp, 0, 0, [](float a, float, float) { return std::exp(a); }},
      {VecOp::HardSigmoid, 0.2f, 0.5f, [](float a, float al, float be) { return std::fmin(1.0f, std::fmax(0.0f, a * al + be)); }},
      {VecOp::HardSwish, 1 / 6.0f, 0.5f,
       [](float a, float al, float be) { return a * std::fmin(1.0f, std::fmax(0.0f, a * al + be)); }},
      // 1 / sqrt(a * imm0 + imm1), LayerNormalization's 1 / sqrt(sum / C + epsilon); imm1 keeps the random a's
      // argument positive.
      {VecOp::Rsqrt, 0.25f, 1.5f, [](float a, float s, float b) { return 1.0f / std::sqrt(a * s + b); }},
  };
  for (const Case& c : cases) {
    Instruction in = vec(Opcode::VecUnary, c.op, {Buffer::Output, 0, 0, 0}, {Buffer::Input, 0, 0, 0}, {}, 1, 1, n);
    in.imm0 = c.imm0, in.imm1 = c.imm1;
    std::vector<float> out = runVector(in, x, {0.0f}, n);
    for (uint32_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], c.ref(x[i], c.imm0, c.imm1), 1e-6) << vecOpName(c.op) << " " << i;
  }
}

// sqrt (sub-op 34, after the reductions): exact square roots of 0 and positive values, NaN below 0, and at the complex
// rate like rsqrt.
TEST(NpuVector, SqrtOfEachElement) {
  const std::vector<float> x{0.0f, 1e-20f, 0.25f, 2.0f, 9.0f, 1e30f, 3.5f, -1.0f};
  const auto n = static_cast<uint32_t>(x.size());
  Instruction in = vec(Opcode::VecUnary, VecOp::Sqrt, {Buffer::Output, 0, 0, 0}, {Buffer::Input, 0, 0, 0}, {}, 1, 1, n);
  std::vector<float> out = runVector(in, x, {0.0f}, n);
  for (uint32_t i = 0; i + 1 < n; ++i) EXPECT_EQ(out[i], std::sqrt(x[i])) << i;
  EXPECT_TRUE(std::isnan(out[n - 1]));
  EXPECT_TRUE(isComplexVecOp(VecOp::Sqrt));
  EXPECT_TRUE(isUnaryVecOp(VecOp::Sqrt));
}

// The vector unit's erf, gelu (erf form), gelu_tanh and silu against double-precision references over a sweep of
// [-12, 12] in steps of 1/1024 and some far values: erf within 5e-7, gelu within 3e-7 * max(1, |x|) of
// x * Phi(x) (std::erf), gelu_tanh within 2e-7 and silu within 3e-7 * max(1, |x|) of their formulas (bounds: docs/npu.md).
TEST(NpuVector, ErfAndGeluWithinTheirBounds) {
  std::vector<float> xs;
  for (int i = -12 * 1024; i <= 12 * 1024; ++i) xs.push_back(static_cast<float>(i) / 1024.0f);
  for (float far : {1e-30f, 1e-6f, 30.0f, 1e3f, 1e6f, 3e12f}) xs.push_back(far), xs.push_back(-far);
  auto erfRef = [](double x) { return std::erf(x); };
  auto geluRef = [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); };
  auto tanhRef = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  auto siluRef = [](double x) { return x / (1 + std::exp(-x)); };
  struct Case {
    VecOp op;
    double (*ref)(double);
    double absolute, perUnit;  // bound: absolute + perUnit * max(1, |x|)
  };
  const Case cases[] = {{VecOp::Erf, +erfRef, 5e-7, 0}, {VecOp::Gelu, +geluRef, 0, 3e-7}, {VecOp::GeluTanh, +tanhRef, 0, 2e-7},
                        {VecOp::Silu, +siluRef, 0, 3e-7}};
  for (const Case& c : cases) {
    EXPECT_TRUE(isComplexVecOp(c.op)) << vecOpName(c.op);
    double worst = 0;
    for (size_t first = 0; first < xs.size(); first += 1024) {
      const std::vector<float> x(xs.begin() + static_cast<std::ptrdiff_t>(first),
                                 xs.begin() + static_cast<std::ptrdiff_t>(std::min(xs.size(), first + 1024)));
      const auto n = static_cast<uint32_t>(x.size());
      Instruction in = vec(Opcode::VecUnary, c.op, {Buffer::Output, 0, 0, 0}, {Buffer::Input, 0, 0, 0}, {}, 1, 1, n);
      std::vector<float> out = runVector(in, x, {0.0f}, n);
      for (uint32_t i = 0; i < n; ++i) {
        const double want = c.ref(x[i]), err = std::abs(static_cast<double>(out[i]) - want);
        const double bound = c.absolute + c.perUnit * std::max(1.0, std::abs(static_cast<double>(x[i])));
        ASSERT_LE(err, bound) << vecOpName(c.op) << "(" << x[i] << ") = " << out[i] << ", want " << want;
        worst = std::max(worst, err / bound);
      }
    }
    std::cout << vecOpName(c.op) << ": worst error " << worst << " of the bound\n";
  }
}

TEST(NpuVector, AffineReduceAndMulAccUsePerChannelVectors) {
  const uint32_t pixels = 6, C = 8, n = pixels * C;
  std::vector<float> x = randomFloats(n, 4), sb = randomFloats(2 * C, 5);  // scale then bias
  Instruction aff;
  aff.opcode = Opcode::VecAffine;
  aff.vecOp = VecOp::Affine;
  aff.dst = {Buffer::Output, 0, C, 0};
  aff.srcA = {Buffer::Input, 0, C, 0};
  aff.srcB = {Buffer::Input, n, 0, 0};
  aff.srcC = {Buffer::Input, n + C, 0, 0};
  aff.outer = pixels, aff.vecLen = C;
  std::vector<float> out = runVector(aff, x, sb, n);
  for (uint32_t p = 0; p < pixels; ++p) {
    for (uint32_t c = 0; c < C; ++c) ASSERT_NEAR(out[p * C + c], x[p * C + c] * sb[c] + sb[C + c], 1e-6);  // FMA may fuse
  }
  for (VecOp op : {VecOp::ReduceSum, VecOp::ReduceMax}) {
    Instruction red = vec(Opcode::VecReduce, op, {Buffer::Output, 0, 0, 0}, {Buffer::Input, 0, 3 * C, C}, {}, 2, 3, C);
    std::vector<float> r = runVector(red, x, {0.0f}, C);
    for (uint32_t c = 0; c < C; ++c) {
      float ref = op == VecOp::ReduceSum ? 0.0f : -INFINITY;
      for (uint32_t p = 0; p < pixels; ++p) ref = op == VecOp::ReduceSum ? ref + x[p * C + c] : std::max(ref, x[p * C + c]);
      ASSERT_NEAR(r[c], ref, 1e-5);
    }
  }
  // mulacc: out starts as written by nobody (zeros), so out = x * w[c] with w broadcast by stride 0.
  Instruction mac = vec(Opcode::VecBinary, VecOp::MulAcc, {Buffer::Output, 0, C, 0}, {Buffer::Input, 0, C, 0},
                        {Buffer::Input, n, 0, 0}, pixels, 1, C);
  SimReport rep;
  std::vector<float> m = runVector(mac, x, sb, n, &rep);
  for (uint32_t p = 0; p < pixels; ++p) {
    for (uint32_t c = 0; c < C; ++c) ASSERT_FLOAT_EQ(m[p * C + c], x[p * C + c] * sb[c]);
  }
  EXPECT_EQ(rep.uninitialisedReads, n);  // mulacc read the never-written destination
}

TEST(NpuVector, KeepWeightsReusesTheResidentBlockAndSyncRelaysTokens) {
  NpuConfig cfg;
  cfg.dim = 4;
  Program p;
  Instruction lw = dma(Opcode::Load, Buffer::Weight, 0, 0, 16);
  Instruction lx = dma(Opcode::Load, Buffer::Input, 0, 16, 8);
  lx.signalMask = bit(Unit::Vector);
  p.instructions = {lw, lx};
  Instruction relay;  // VEC sync turns the LD token into one for MM
  relay.opcode = Opcode::Sync;
  relay.syncUnit = Unit::Vector;
  relay.waitMask = bit(Unit::Load);
  relay.signalMask = bit(Unit::Matrix);
  p.instructions.push_back(relay);
  for (uint32_t r = 0; r < 2; ++r) {
    Instruction g;
    g.opcode = Opcode::Gemm;
    g.srcA = {Buffer::Input, r * 4, 0, 0};
    g.srcB = {Buffer::Weight, 0, 0, 0};
    g.dst = {Buffer::Accumulator, r * 4, 0, 0};
    g.gemmK = g.gemmN = 4;
    g.keepWeights = r == 1;
    g.waitMask = r == 0 ? bit(Unit::Vector) : 0;
    g.signalMask = r == 1 ? bit(Unit::Store) : 0;
    p.instructions.push_back(g);
  }
  Instruction st = dma(Opcode::Store, Buffer::Accumulator, 0, 100, 8);
  st.waitMask = bit(Unit::Matrix);
  p.instructions.push_back(st);
  Dram dram(128);
  std::vector<float> w = randomFloats(16, 6), x = randomFloats(8, 7);
  dram.writeFloats(0, w);
  dram.writeFloats(16, x);
  SimReport r = simulate(p, cfg, dram);
  std::vector<float> out = dram.readFloats(100, 8);
  for (int row = 0; row < 2; ++row) {
    for (int n = 0; n < 4; ++n) {
      float ref = 0;
      for (int k = 0; k < 4; ++k) ref += x[row * 4 + k] * w[k * 4 + n];
      EXPECT_NEAR(out[row * 4 + n], ref, 1e-5);
    }
  }
  EXPECT_TRUE(r.hazards.empty()) << r.summary();
  EXPECT_EQ(r.timing[2].start, r.timing[1].finish);  // the relay ran as soon as the LD token arrived
  EXPECT_EQ(r.timing[3].start, r.timing[2].finish);
  // The second gemm skips the DIM weight-shift cycles: occupancy = setup + 1 row.
  EXPECT_EQ(r.timing[4].end - r.timing[4].start, cfg.matrix.setupCycles + 1u);
}

TEST(NpuVector, KeepWeightsWithoutAResidentBlockFails) {
  NpuConfig cfg;
  Program p;
  Instruction g;
  g.opcode = Opcode::Gemm;
  g.srcB.buffer = Buffer::Weight;
  g.dst.buffer = Buffer::Accumulator;
  g.gemmK = g.gemmN = 4;
  g.keepWeights = true;
  p.instructions.push_back(g);
  Dram dram(4);
  EXPECT_THROW(simulate(p, cfg, dram), SimulationError);
}

TEST(NpuVector, MissingTokensBeforeOverwritesAreWarAndWawHazards) {
  NpuConfig cfg;
  Program p;
  // #0 VEC writes out[0..64); #1 a slow load; #2 ST stores out after both (tokens VEC, LD), so it reads
  // late. #3 VEC overwrites out without waiting for the store: its write lands before the read (WAR).
  // #4 LD writes out (slow, behind #1); #5 VEC overwrites it without a token and lands first (WAW).
  Instruction fill = vec(Opcode::VecUnary, VecOp::Fill, {Buffer::Output, 0, 0, 0}, {}, {}, 1, 1, 64);
  fill.imm0 = 1;
  fill.signalMask = bit(Unit::Store);
  p.instructions.push_back(fill);
  Instruction slow = dma(Opcode::Load, Buffer::Input, 0, 0, 1024);
  slow.signalMask = bit(Unit::Store);
  p.instructions.push_back(slow);
  Instruction st = dma(Opcode::Store, Buffer::Output, 0, 2048, 64);
  st.waitMask = bit(Unit::Vector) | bit(Unit::Load);
  p.instructions.push_back(st);
  Instruction again = fill;
  again.imm0 = 2;
  again.signalMask = 0;
  p.instructions.push_back(again);
  p.instructions.push_back(dma(Opcode::Load, Buffer::Output, 0, 1024, 64));
  p.instructions.push_back(again);
  Dram dram(4096);
  SimReport r = simulate(p, cfg, dram);
  bool war = false, waw = false;
  for (const Hazard& h : r.hazards) {
    war |= h.kind == HazardKind::WriteAfterRead && h.earlier == 2 && h.later == 3 && h.words == 64;
    waw |= h.kind == HazardKind::WriteAfterWrite && h.earlier == 4 && h.later == 5 && h.words == 64;
  }
  EXPECT_TRUE(war) << r.summary();
  EXPECT_TRUE(waw) << r.summary();
  // The store saw the second fill's value: exactly the wrong answer the hazard warns about.
  EXPECT_EQ(dram.read(2048), 2.0f);
}

}  // namespace
