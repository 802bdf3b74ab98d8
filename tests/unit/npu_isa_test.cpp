// Tests of the NPU instruction encoding (round trip over random instructions, field limits) and disassembly.
#include <gtest/gtest.h>

#include <random>

#include "tessel/support/error.h"
#include "tessel/targets/npu/isa.h"

namespace {

using namespace tessel::npu;

/// A random instruction whose used fields (per docs/npu.md, "Encoding") take random in-range values.
class RandomInstructions {
 public:
  explicit RandomInstructions(uint32_t seed) : rng_(seed) {}

  Instruction next() {
    Instruction in;
    in.opcode = static_cast<Opcode>(bits(3) % kNumOpcodes);
    in.waitMask = static_cast<uint8_t>(bits(4));
    in.signalMask = static_cast<uint8_t>(bits(4));
    switch (in.opcode) {
      case Opcode::Sync: in.syncUnit = static_cast<Unit>(bits(2)); break;
      case Opcode::Load:
        operand(in.dst);
        dram(in);
        shape(in);
        in.padTop = bits(4), in.padBottom = bits(4), in.padLeft = bits(4), in.padRight = bits(4);
        break;
      case Opcode::Store:
        operand(in.srcA);
        dram(in);
        shape(in);
        break;
      case Opcode::Gemm:
        operand(in.srcA);
        in.srcA.buffer = Buffer::Input;
        in.srcB.buffer = Buffer::Weight;
        in.srcB.addr = bits(20);
        operand(in.dst);
        in.dst.buffer = Buffer::Accumulator;
        in.outer = bits(16), in.inner = bits(16), in.gemmK = bits(9), in.gemmN = bits(9);
        in.accumulate = bits(1), in.keepWeights = bits(1);
        break;
      case Opcode::VecBinary:
        in.vecOp = static_cast<VecOp>(bits(3) % 7);
        shape(in);
        operand(in.dst), operand(in.srcA), operand(in.srcB);
        break;
      case Opcode::VecUnary:
        in.vecOp = static_cast<VecOp>(16 + bits(4) % 14);  // copy .. gelu_tanh
        shape(in);
        operand(in.dst), operand(in.srcA);
        in.imm0 = std::bit_cast<float>(static_cast<uint32_t>(bits(32)));
        in.imm1 = std::bit_cast<float>(static_cast<uint32_t>(bits(32)));
        break;
      case Opcode::VecAffine:
        in.vecOp = VecOp::Affine;
        shape(in);
        operand(in.dst), operand(in.srcA);
        in.srcB.buffer = static_cast<Buffer>(bits(2)), in.srcB.addr = bits(20);
        in.srcC.buffer = static_cast<Buffer>(bits(2)), in.srcC.addr = bits(20);
        break;
      case Opcode::VecReduce:
        in.vecOp = bits(1) ? VecOp::ReduceSum : VecOp::ReduceMax;
        shape(in);
        in.dst.buffer = static_cast<Buffer>(bits(2)), in.dst.addr = bits(20);
        operand(in.srcA);
        in.accumulate = bits(1);
        break;
    }
    return in;
  }

 private:
  uint32_t bits(unsigned n) { return n == 32 ? static_cast<uint32_t>(rng_()) : static_cast<uint32_t>(rng_() & ((1ull << n) - 1)); }
  void operand(SramOperand& op) {
    op.buffer = static_cast<Buffer>(bits(2));
    op.addr = bits(20), op.strideOuter = bits(20), op.strideInner = bits(20);
  }
  void shape(Instruction& in) { in.outer = bits(16), in.inner = bits(16), in.vecLen = bits(16); }
  void dram(Instruction& in) { in.dramAddr = bits(32), in.dramStrideOuter = bits(32), in.dramStrideInner = bits(24); }

  std::mt19937_64 rng_;
};

TEST(NpuIsa, EncodeDecodeRoundTripsRandomInstructions) {
  RandomInstructions gen(42);
  std::array<int, kNumOpcodes> perOpcode{};
  for (int n = 0; n < 20000; ++n) {
    Instruction in = gen.next();
    perOpcode[static_cast<size_t>(in.opcode)]++;
    EncodedInstruction bits = encode(in);
    Instruction back = decode(bits);
    ASSERT_EQ(back, in) << "instruction " << n << ": " << disassemble(in) << "\n decoded: " << disassemble(back);
    ASSERT_EQ(encode(back), bits);
  }
  for (int count : perOpcode) EXPECT_GT(count, 1000);
}

TEST(NpuIsa, ProgramBytesRoundTrip) {
  RandomInstructions gen(7);
  Program p;
  for (int i = 0; i < 100; ++i) p.instructions.push_back(gen.next());
  std::vector<uint8_t> bytes = encodeProgram(p);
  EXPECT_EQ(bytes.size(), 100u * 32);
  Program back = decodeProgram(bytes);
  ASSERT_EQ(back.instructions.size(), p.instructions.size());
  for (size_t i = 0; i < p.instructions.size(); ++i) EXPECT_EQ(back.instructions[i], p.instructions[i]);
  bytes.pop_back();
  EXPECT_THROW(decodeProgram(bytes), tessel::UserError);
}

TEST(NpuIsa, FieldsThatDoNotFitAreRefusedByName) {
  Instruction in;
  in.opcode = Opcode::Load;
  in.outer = 1u << 16;
  try {
    encode(in);
    FAIL() << "expected UserError";
  } catch (const tessel::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'outer'"), std::string::npos) << e.what();
  }
  in.outer = 1;
  in.padLeft = 16;
  EXPECT_THROW(encode(in), tessel::UserError);
  Instruction g;
  g.opcode = Opcode::Gemm;  // operand buffers left at the default (inp): not encodable for gemm
  EXPECT_THROW(encode(g), tessel::UserError);
  Instruction v;
  v.opcode = Opcode::VecUnary;
  v.vecOp = VecOp::Add;  // a binary op under the unary opcode
  EXPECT_THROW(encode(v), tessel::UserError);
}

TEST(NpuIsa, DecodeRejectsUnknownOpcodes) {
  EncodedInstruction bits{31, 0, 0, 0};  // opcode field = 31
  EXPECT_THROW(decode(bits), tessel::UserError);
  // The unary sub-ops are 16 (copy) to 31 (rsqrt) and 34 (sqrt): 32 (reduce_sum) does not belong to vun.
  Instruction v;
  v.opcode = Opcode::VecUnary;
  v.vecOp = VecOp::Silu;
  EncodedInstruction ok = encode(v);
  EXPECT_EQ(decode(ok).vecOp, VecOp::Silu);
  EXPECT_EQ(disassemble(v).find("silu") != std::string::npos, true) << disassemble(v);
  v.vecOp = VecOp::Rsqrt;
  EXPECT_EQ(decode(encode(v)).vecOp, VecOp::Rsqrt);
  EXPECT_EQ(disassemble(v).find("rsqrt") != std::string::npos, true) << disassemble(v);
  v.vecOp = static_cast<VecOp>(32);
  EXPECT_THROW(encode(v), tessel::UserError);
  v.vecOp = static_cast<VecOp>(33);
  EXPECT_THROW(encode(v), tessel::UserError);
  // sqrt (34) is unary again, after the two reductions; 35 is nothing.
  v.vecOp = VecOp::Sqrt;
  EXPECT_EQ(decode(encode(v)).vecOp, VecOp::Sqrt);
  EXPECT_NE(disassemble(v).find("sqrt"), std::string::npos) << disassemble(v);
  v.vecOp = static_cast<VecOp>(35);
  EXPECT_THROW(encode(v), tessel::UserError);
}

TEST(NpuIsa, DisassemblyIsOneReadableLinePerInstruction) {
  Instruction g;
  g.opcode = Opcode::Gemm;
  g.srcA = {Buffer::Input, 32, 64, 0};
  g.srcB = {Buffer::Weight, 256, 0, 0};
  g.dst = {Buffer::Accumulator, 16, 32, 0};
  g.outer = 8;
  g.gemmK = g.gemmN = 16;
  g.accumulate = true;
  g.waitMask = 1u << static_cast<int>(Unit::Load);
  g.signalMask = 1u << static_cast<int>(Unit::Store);
  std::string line = disassemble(g);
  EXPECT_EQ(line, "MM   gemm    acc[16; 32,0] += inp[32; 64,0] x wgt[256] rows=8x1 k=16 n=16  wait=LD  signal=ST");
  Instruction r;
  r.opcode = Opcode::VecUnary;
  r.vecOp = VecOp::Relu;
  r.dst.buffer = Buffer::Output;
  Program p{{g, r}};
  std::string text = disassemble(p);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_NE(text.find("    1  VEC  vun     relu       out[0; 0,0] <- inp[0; 0,0]"), std::string::npos) << text;
}

}  // namespace
