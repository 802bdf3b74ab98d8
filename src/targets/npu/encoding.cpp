// The NPU's 256-bit instruction encoding: one field table per opcode drives both encode and decode.
#include <bit>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "tessel/support/error.h"
#include "tessel/targets/npu/isa.h"

namespace tessel::npu {

namespace {

enum class Field {
  WaitMask, SignalMask, SyncUnit, Outer, Inner, VecLen,
  DstBuf, DstAddr, DstSo, DstSi, ABuf, AAddr, ASo, ASi, BBuf, BAddr, BSo, BSi, CBuf, CAddr,
  DramAddr, DramSo, DramSi, PadTop, PadBottom, PadLeft, PadRight,
  GemmK, GemmN, Accumulate, KeepWeights, SubOp, Imm0, Imm1,
};

struct FieldSpec {
  Field field;
  unsigned bits;
  const char* name;
};

constexpr unsigned kOpcodeBits = 5;

// Operand field groups shared by several layouts.
#define TESSEL_OPERAND(P, name)                                                                      \
  {Field::P##Buf, 2, name ".buffer"}, {Field::P##Addr, kSramAddrBits, name ".addr"},                \
      {Field::P##So, kStrideBits, name ".stride_outer"}, {Field::P##Si, kStrideBits, name ".stride_inner"}
#define TESSEL_HEADER {Field::WaitMask, 4, "wait"}, {Field::SignalMask, 4, "signal"}
#define TESSEL_SHAPE                                                                         \
  {Field::Outer, kCountBits, "outer"}, {Field::Inner, kCountBits, "inner"}, {Field::VecLen, kCountBits, "vec_len"}
#define TESSEL_DRAM                                                                                     \
  {Field::DramAddr, 32, "dram_addr"}, {Field::DramSo, 32, "dram_stride_outer"}, {Field::DramSi, 24, "dram_stride_inner"}

const std::vector<FieldSpec>& layout(Opcode op) {
  static const std::vector<FieldSpec> layouts[kNumOpcodes] = {
      /* Sync */ {TESSEL_HEADER, {Field::SyncUnit, 2, "unit"}},
      /* Load */
      {TESSEL_HEADER, TESSEL_OPERAND(Dst, "dst"), TESSEL_DRAM, TESSEL_SHAPE, {Field::PadTop, kPadBits, "pad_top"},
       {Field::PadBottom, kPadBits, "pad_bottom"}, {Field::PadLeft, kPadBits, "pad_left"},
       {Field::PadRight, kPadBits, "pad_right"}},
      /* Store */ {TESSEL_HEADER, TESSEL_OPERAND(A, "src"), TESSEL_DRAM, TESSEL_SHAPE},
      /* Gemm: operand buffers are implied (inp, wgt, acc) */
      {TESSEL_HEADER, {Field::AAddr, kSramAddrBits, "inp.addr"}, {Field::ASo, kStrideBits, "inp.stride_outer"},
       {Field::ASi, kStrideBits, "inp.stride_inner"}, {Field::BAddr, kSramAddrBits, "wgt.addr"},
       {Field::DstAddr, kSramAddrBits, "acc.addr"}, {Field::DstSo, kStrideBits, "acc.stride_outer"},
       {Field::DstSi, kStrideBits, "acc.stride_inner"}, {Field::Outer, kCountBits, "outer"},
       {Field::Inner, kCountBits, "inner"}, {Field::GemmK, 9, "k"}, {Field::GemmN, 9, "n"},
       {Field::Accumulate, 1, "accumulate"}, {Field::KeepWeights, 1, "keep_weights"}},
      /* VecBinary */
      {TESSEL_HEADER, {Field::SubOp, 6, "op"}, TESSEL_SHAPE, TESSEL_OPERAND(Dst, "dst"), TESSEL_OPERAND(A, "a"),
       TESSEL_OPERAND(B, "b")},
      /* VecUnary */
      {TESSEL_HEADER, {Field::SubOp, 6, "op"}, TESSEL_SHAPE, TESSEL_OPERAND(Dst, "dst"), TESSEL_OPERAND(A, "a"),
       {Field::Imm0, 32, "imm0"}, {Field::Imm1, 32, "imm1"}},
      /* VecAffine */
      {TESSEL_HEADER, {Field::SubOp, 6, "op"}, TESSEL_SHAPE, TESSEL_OPERAND(Dst, "dst"), TESSEL_OPERAND(A, "a"),
       {Field::BBuf, 2, "scale.buffer"}, {Field::BAddr, kSramAddrBits, "scale.addr"}, {Field::CBuf, 2, "bias.buffer"},
       {Field::CAddr, kSramAddrBits, "bias.addr"}},
      /* VecReduce */
      {TESSEL_HEADER, {Field::SubOp, 6, "op"}, TESSEL_SHAPE, {Field::DstBuf, 2, "dst.buffer"},
       {Field::DstAddr, kSramAddrBits, "dst.addr"}, TESSEL_OPERAND(A, "a"), {Field::Accumulate, 1, "accumulate"}},
  };
  return layouts[static_cast<size_t>(op)];
}

uint64_t getField(const Instruction& in, Field f) {
  switch (f) {
    case Field::WaitMask: return in.waitMask;
    case Field::SignalMask: return in.signalMask;
    case Field::SyncUnit: return static_cast<uint64_t>(in.syncUnit);
    case Field::Outer: return in.outer;
    case Field::Inner: return in.inner;
    case Field::VecLen: return in.vecLen;
    case Field::DstBuf: return static_cast<uint64_t>(in.dst.buffer);
    case Field::DstAddr: return in.dst.addr;
    case Field::DstSo: return in.dst.strideOuter;
    case Field::DstSi: return in.dst.strideInner;
    case Field::ABuf: return static_cast<uint64_t>(in.srcA.buffer);
    case Field::AAddr: return in.srcA.addr;
    case Field::ASo: return in.srcA.strideOuter;
    case Field::ASi: return in.srcA.strideInner;
    case Field::BBuf: return static_cast<uint64_t>(in.srcB.buffer);
    case Field::BAddr: return in.srcB.addr;
    case Field::BSo: return in.srcB.strideOuter;
    case Field::BSi: return in.srcB.strideInner;
    case Field::CBuf: return static_cast<uint64_t>(in.srcC.buffer);
    case Field::CAddr: return in.srcC.addr;
    case Field::DramAddr: return in.dramAddr;
    case Field::DramSo: return in.dramStrideOuter;
    case Field::DramSi: return in.dramStrideInner;
    case Field::PadTop: return in.padTop;
    case Field::PadBottom: return in.padBottom;
    case Field::PadLeft: return in.padLeft;
    case Field::PadRight: return in.padRight;
    case Field::GemmK: return in.gemmK;
    case Field::GemmN: return in.gemmN;
    case Field::Accumulate: return in.accumulate;
    case Field::KeepWeights: return in.keepWeights;
    case Field::SubOp: return static_cast<uint64_t>(in.vecOp);
    case Field::Imm0: return std::bit_cast<uint32_t>(in.imm0);
    case Field::Imm1: return std::bit_cast<uint32_t>(in.imm1);
  }
  return 0;
}

void setField(Instruction& in, Field f, uint64_t v) {
  auto u32 = static_cast<uint32_t>(v);
  auto u8 = static_cast<uint8_t>(v);
  switch (f) {
    case Field::WaitMask: in.waitMask = u8; break;
    case Field::SignalMask: in.signalMask = u8; break;
    case Field::SyncUnit: in.syncUnit = static_cast<Unit>(u8); break;
    case Field::Outer: in.outer = u32; break;
    case Field::Inner: in.inner = u32; break;
    case Field::VecLen: in.vecLen = u32; break;
    case Field::DstBuf: in.dst.buffer = static_cast<Buffer>(u8); break;
    case Field::DstAddr: in.dst.addr = u32; break;
    case Field::DstSo: in.dst.strideOuter = u32; break;
    case Field::DstSi: in.dst.strideInner = u32; break;
    case Field::ABuf: in.srcA.buffer = static_cast<Buffer>(u8); break;
    case Field::AAddr: in.srcA.addr = u32; break;
    case Field::ASo: in.srcA.strideOuter = u32; break;
    case Field::ASi: in.srcA.strideInner = u32; break;
    case Field::BBuf: in.srcB.buffer = static_cast<Buffer>(u8); break;
    case Field::BAddr: in.srcB.addr = u32; break;
    case Field::BSo: in.srcB.strideOuter = u32; break;
    case Field::BSi: in.srcB.strideInner = u32; break;
    case Field::CBuf: in.srcC.buffer = static_cast<Buffer>(u8); break;
    case Field::CAddr: in.srcC.addr = u32; break;
    case Field::DramAddr: in.dramAddr = u32; break;
    case Field::DramSo: in.dramStrideOuter = u32; break;
    case Field::DramSi: in.dramStrideInner = u32; break;
    case Field::PadTop: in.padTop = u8; break;
    case Field::PadBottom: in.padBottom = u8; break;
    case Field::PadLeft: in.padLeft = u8; break;
    case Field::PadRight: in.padRight = u8; break;
    case Field::GemmK: in.gemmK = u32; break;
    case Field::GemmN: in.gemmN = u32; break;
    case Field::Accumulate: in.accumulate = v != 0; break;
    case Field::KeepWeights: in.keepWeights = v != 0; break;
    case Field::SubOp: in.vecOp = static_cast<VecOp>(u8); break;
    case Field::Imm0: in.imm0 = std::bit_cast<float>(u32); break;
    case Field::Imm1: in.imm1 = std::bit_cast<float>(u32); break;
  }
}

/// Sequential bit packing into four little-endian 64-bit words.
struct BitCursor {
  unsigned pos = 0;
  void put(EncodedInstruction& w, uint64_t value, unsigned bits) {
    for (unsigned b = 0; b < bits; ++b, ++pos) {
      if ((value >> b) & 1) w[pos / 64] |= uint64_t{1} << (pos % 64);
    }
  }
  uint64_t get(const EncodedInstruction& w, unsigned bits) {
    uint64_t v = 0;
    for (unsigned b = 0; b < bits; ++b, ++pos) v |= ((w[pos / 64] >> (pos % 64)) & 1) << b;
    return v;
  }
};

bool vecOpMatchesOpcode(Opcode op, VecOp sub) {
  auto s = static_cast<unsigned>(sub);
  switch (op) {
    case Opcode::VecBinary: return s <= static_cast<unsigned>(VecOp::MulAcc);
    case Opcode::VecUnary: return isUnaryVecOp(sub);
    case Opcode::VecReduce: return sub == VecOp::ReduceSum || sub == VecOp::ReduceMax;
    case Opcode::VecAffine: return sub == VecOp::Affine;
    default: return true;
  }
}

bool usesSubOp(Opcode op) { return op >= Opcode::VecBinary; }

}  // namespace

EncodedInstruction encode(const Instruction& inst) {
  if (static_cast<unsigned>(inst.opcode) >= kNumOpcodes) throw UserError("encode: unknown opcode");
  if (usesSubOp(inst.opcode) && !vecOpMatchesOpcode(inst.opcode, inst.vecOp)) {
    throw UserError(fmt::format("encode: vector op '{}' does not belong to opcode {}", vecOpName(inst.vecOp),
                                opcodeName(inst.opcode)));
  }
  if (inst.opcode == Opcode::Gemm && (inst.srcA.buffer != Buffer::Input || inst.srcB.buffer != Buffer::Weight ||
                                      inst.dst.buffer != Buffer::Accumulator)) {
    throw UserError("encode: gemm reads inp and wgt and writes acc; its operand buffers cannot be changed");
  }
  EncodedInstruction w{0, 0, 0, 0};
  BitCursor cursor;
  cursor.put(w, static_cast<uint64_t>(inst.opcode), kOpcodeBits);
  for (const FieldSpec& spec : layout(inst.opcode)) {
    uint64_t v = getField(inst, spec.field);
    if (spec.bits < 64 && (v >> spec.bits) != 0) {
      throw UserError(fmt::format("encode: {} field '{}' = {} does not fit in {} bits", opcodeName(inst.opcode),
                                  spec.name, v, spec.bits));
    }
    cursor.put(w, v, spec.bits);
  }
  TESSEL_ASSERT(cursor.pos <= 256, "instruction layout exceeds 256 bits");
  return w;
}

Instruction decode(const EncodedInstruction& bits) {
  BitCursor cursor;
  auto opcode = static_cast<unsigned>(cursor.get(bits, kOpcodeBits));
  if (opcode >= kNumOpcodes) throw UserError(fmt::format("decode: unknown opcode {}", opcode));
  Instruction inst;
  inst.opcode = static_cast<Opcode>(opcode);
  if (inst.opcode == Opcode::Gemm) {
    inst.srcB.buffer = Buffer::Weight;
    inst.dst.buffer = Buffer::Accumulator;
  }
  for (const FieldSpec& spec : layout(inst.opcode)) setField(inst, spec.field, cursor.get(bits, spec.bits));
  if (usesSubOp(inst.opcode) && !vecOpMatchesOpcode(inst.opcode, inst.vecOp)) {
    throw UserError(fmt::format("decode: sub-operation {} is not valid for opcode {}",
                                static_cast<unsigned>(inst.vecOp), opcodeName(inst.opcode)));
  }
  return inst;
}

std::vector<uint8_t> encodeProgram(const Program& program) {
  std::vector<uint8_t> out;
  out.reserve(program.instructions.size() * 32);
  for (const Instruction& inst : program.instructions) {
    EncodedInstruction w = encode(inst);
    for (uint64_t word : w) {
      for (int b = 0; b < 8; ++b) out.push_back(static_cast<uint8_t>(word >> (8 * b)));
    }
  }
  return out;
}

Program decodeProgram(const std::vector<uint8_t>& bytes) {
  if (bytes.size() % 32 != 0) {
    throw UserError(fmt::format("NPU program of {} bytes is not a whole number of 32-byte instructions", bytes.size()));
  }
  Program program;
  for (size_t off = 0; off < bytes.size(); off += 32) {
    EncodedInstruction w{0, 0, 0, 0};
    for (size_t i = 0; i < 32; ++i) w[i / 8] |= uint64_t{bytes[off + i]} << (8 * (i % 8));
    program.instructions.push_back(decode(w));
  }
  return program;
}

}  // namespace tessel::npu
