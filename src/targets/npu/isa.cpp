// NPU instruction helpers: names, the unit of each opcode, equality and the text disassembly.
#include "tessel/targets/npu/isa.h"

#include <bit>

#include <fmt/format.h>

namespace tessel::npu {

bool Instruction::operator==(const Instruction& o) const {
  return opcode == o.opcode && waitMask == o.waitMask && signalMask == o.signalMask && syncUnit == o.syncUnit &&
         outer == o.outer && inner == o.inner && vecLen == o.vecLen && dst == o.dst && srcA == o.srcA &&
         srcB == o.srcB && srcC == o.srcC && dramAddr == o.dramAddr && dramStrideOuter == o.dramStrideOuter &&
         dramStrideInner == o.dramStrideInner && padTop == o.padTop && padBottom == o.padBottom &&
         padLeft == o.padLeft && padRight == o.padRight && gemmK == o.gemmK && gemmN == o.gemmN &&
         accumulate == o.accumulate && keepWeights == o.keepWeights && vecOp == o.vecOp &&
         std::bit_cast<uint32_t>(imm0) == std::bit_cast<uint32_t>(o.imm0) &&
         std::bit_cast<uint32_t>(imm1) == std::bit_cast<uint32_t>(o.imm1);
}

Unit Instruction::unit() const {
  switch (opcode) {
    case Opcode::Sync: return syncUnit;
    case Opcode::Load: return Unit::Load;
    case Opcode::Store: return Unit::Store;
    case Opcode::Gemm: return Unit::Matrix;
    default: return Unit::Vector;
  }
}

std::string_view unitName(Unit u) {
  static constexpr std::string_view names[] = {"LD", "MM", "VEC", "ST"};
  return names[static_cast<size_t>(u) & 3];
}

std::string_view bufferName(Buffer b) {
  static constexpr std::string_view names[] = {"inp", "wgt", "acc", "out"};
  return names[static_cast<size_t>(b) & 3];
}

std::string_view opcodeName(Opcode op) {
  static constexpr std::string_view names[] = {"sync", "load", "store", "gemm", "vbin", "vun", "vaffine", "vred"};
  auto i = static_cast<size_t>(op);
  return i < kNumOpcodes ? names[i] : "?";
}

std::string_view vecOpName(VecOp op) {
  switch (op) {
    case VecOp::Add: return "add";
    case VecOp::Sub: return "sub";
    case VecOp::Mul: return "mul";
    case VecOp::Div: return "div";
    case VecOp::Max: return "max";
    case VecOp::Min: return "min";
    case VecOp::MulAcc: return "mulacc";
    case VecOp::Copy: return "copy";
    case VecOp::Fill: return "fill";
    case VecOp::Relu: return "relu";
    case VecOp::Clip: return "clip";
    case VecOp::LeakyRelu: return "leaky_relu";
    case VecOp::Scale: return "scale";
    case VecOp::Sigmoid: return "sigmoid";
    case VecOp::Tanh: return "tanh";
    case VecOp::Exp: return "exp";
    case VecOp::HardSigmoid: return "hard_sigmoid";
    case VecOp::HardSwish: return "hard_swish";
    case VecOp::Erf: return "erf";
    case VecOp::Gelu: return "gelu";
    case VecOp::GeluTanh: return "gelu_tanh";
    case VecOp::Silu: return "silu";
    case VecOp::Rsqrt: return "rsqrt";
    case VecOp::Sqrt: return "sqrt";
    case VecOp::ReduceSum: return "reduce_sum";
    case VecOp::ReduceMax: return "reduce_max";
    case VecOp::Affine: return "affine";
  }
  return "?";
}

bool isComplexVecOp(VecOp op) {
  return op == VecOp::Div || op == VecOp::Sigmoid || op == VecOp::Tanh || op == VecOp::Exp || op == VecOp::Erf ||
         op == VecOp::Gelu || op == VecOp::GeluTanh || op == VecOp::Silu ||
         op == VecOp::Rsqrt || op == VecOp::Sqrt;
}

std::optional<VecOp> vecOpByName(std::string_view name) {
  for (int i = 0; i < 64; ++i) {
    const VecOp op = static_cast<VecOp>(i);
    if (vecOpName(op) != "?" && vecOpName(op) == name) return op;
  }
  return std::nullopt;
}

bool isUnaryVecOp(VecOp op) { return (static_cast<int>(op) >= 16 && static_cast<int>(op) < 32) || op == VecOp::Sqrt; }

namespace {

std::string operand(const SramOperand& o) {
  return fmt::format("{}[{}; {},{}]", bufferName(o.buffer), o.addr, o.strideOuter, o.strideInner);
}

std::string tokens(const Instruction& in) {
  std::string out;
  auto mask = [&](const char* label, uint8_t m) {
    if (m == 0) return;
    out += fmt::format("  {}=", label);
    bool first = true;
    for (size_t u = 0; u < kNumUnits; ++u) {
      if (m & (1u << u)) {
        out += fmt::format("{}{}", first ? "" : ",", unitName(static_cast<Unit>(u)));
        first = false;
      }
    }
  };
  mask("wait", in.waitMask);
  mask("signal", in.signalMask);
  return out;
}

std::string body(const Instruction& in) {
  std::string shape = fmt::format("shape={}x{}x{}", in.outer, in.inner, in.vecLen);
  std::string dram = fmt::format("dram[{}; {},{}]", in.dramAddr, in.dramStrideOuter, in.dramStrideInner);
  switch (in.opcode) {
    case Opcode::Sync: return fmt::format("unit={}", unitName(in.syncUnit));
    case Opcode::Load:
      return fmt::format("{} <- {} {} pad={},{},{},{}", operand(in.dst), dram, shape, in.padTop, in.padBottom,
                         in.padLeft, in.padRight);
    case Opcode::Store: return fmt::format("{} <- {} {}", dram, operand(in.srcA), shape);
    case Opcode::Gemm:
      return fmt::format("{} {} {} x wgt[{}] rows={}x{} k={} n={}{}", operand(in.dst), in.accumulate ? "+=" : "=",
                         operand(in.srcA), in.srcB.addr, in.outer, in.inner, in.gemmK, in.gemmN,
                         in.keepWeights ? " keep_weights" : "");
    case Opcode::VecBinary:
      return fmt::format("{:<10} {} <- {}, {} {}", vecOpName(in.vecOp), operand(in.dst), operand(in.srcA),
                         operand(in.srcB), shape);
    case Opcode::VecUnary:
      return fmt::format("{:<10} {} <- {} {} imm={},{}", vecOpName(in.vecOp), operand(in.dst), operand(in.srcA), shape,
                         in.imm0, in.imm1);
    case Opcode::VecAffine:
      return fmt::format("{:<10} {} <- {} * {}[{}] + {}[{}] {}", vecOpName(in.vecOp), operand(in.dst),
                         operand(in.srcA), bufferName(in.srcB.buffer), in.srcB.addr, bufferName(in.srcC.buffer),
                         in.srcC.addr, shape);
    case Opcode::VecReduce:
      return fmt::format("{:<10} {}[{}] {} {} {}", vecOpName(in.vecOp), bufferName(in.dst.buffer), in.dst.addr,
                         in.accumulate ? "+=" : "=", operand(in.srcA), shape);
  }
  return "?";
}

}  // namespace

std::string disassemble(const Instruction& inst) {
  return fmt::format("{:<4} {:<7} {}{}", unitName(inst.unit()), opcodeName(inst.opcode), body(inst), tokens(inst));
}

std::string disassemble(const Program& program) {
  std::string out;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    out += fmt::format("{:5}  {}\n", i, disassemble(program.instructions[i]));
  }
  return out;
}

}  // namespace tessel::npu
