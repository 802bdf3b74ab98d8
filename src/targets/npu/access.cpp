// SRAM access sets of NPU instructions and the static program validator (capacity, field ranges, tokens).
#include "tessel/targets/npu/access.h"

#include <fmt/format.h>

#include "tessel/support/error.h"

namespace tessel::npu {

void OperandAccess::forEachWord(const std::function<void(uint64_t)>& fn) const {
  for (uint32_t o = 0; o < outer; ++o) {
    for (uint32_t i = 0; i < inner; ++i) {
      uint64_t base = operand.addr + uint64_t{o} * operand.strideOuter + uint64_t{i} * operand.strideInner;
      for (uint32_t c = 0; c < vecLen; ++c) fn(base + c);
    }
  }
}

std::vector<OperandAccess> sramAccesses(const Instruction& in) {
  std::vector<OperandAccess> out;
  auto add = [&](uint8_t slot, SramOperand op, uint32_t outer, uint32_t inner, uint32_t vec, AccessKind kind) {
    out.push_back(OperandAccess{op, outer, inner, vec, kind, slot});
  };
  auto perChannel = [](SramOperand op) { return SramOperand{op.buffer, op.addr, 0, 0}; };
  const auto R = AccessKind::ReadAtStart, W = AccessKind::WriteAtFinish;
  switch (in.opcode) {
    case Opcode::Sync: break;
    case Opcode::Load:
      add(0, in.dst, in.padTop + in.outer + in.padBottom, in.padLeft + in.inner + in.padRight, in.vecLen, W);
      break;
    case Opcode::Store: add(1, in.srcA, in.outer, in.inner, in.vecLen, R); break;
    case Opcode::Gemm:
      add(1, in.srcA, in.outer, in.inner, in.gemmK, R);
      if (!in.keepWeights) add(2, SramOperand{Buffer::Weight, in.srcB.addr, in.gemmN, 0}, in.gemmK, 1, in.gemmN, R);
      if (in.accumulate) add(0, in.dst, in.outer, in.inner, in.gemmN, AccessKind::ReadAtFinish);
      add(0, in.dst, in.outer, in.inner, in.gemmN, W);
      break;
    case Opcode::VecBinary:
      add(1, in.srcA, in.outer, in.inner, in.vecLen, R);
      add(2, in.srcB, in.outer, in.inner, in.vecLen, R);
      if (in.vecOp == VecOp::MulAcc) add(0, in.dst, in.outer, in.inner, in.vecLen, R);
      add(0, in.dst, in.outer, in.inner, in.vecLen, W);
      break;
    case Opcode::VecUnary:
      if (in.vecOp != VecOp::Fill) add(1, in.srcA, in.outer, in.inner, in.vecLen, R);
      add(0, in.dst, in.outer, in.inner, in.vecLen, W);
      break;
    case Opcode::VecAffine:
      add(1, in.srcA, in.outer, in.inner, in.vecLen, R);
      add(2, perChannel(in.srcB), 1, 1, in.vecLen, R);
      add(3, perChannel(in.srcC), 1, 1, in.vecLen, R);
      add(0, in.dst, in.outer, in.inner, in.vecLen, W);
      break;
    case Opcode::VecReduce:
      add(1, in.srcA, in.outer, in.inner, in.vecLen, R);
      if (in.accumulate) add(0, perChannel(in.dst), 1, 1, in.vecLen, R);
      add(0, perChannel(in.dst), 1, 1, in.vecLen, W);
      break;
  }
  return out;
}

uint64_t lastDramWord(const Instruction& in) {
  return in.dramAddr + uint64_t{in.outer - 1} * in.dramStrideOuter + uint64_t{in.inner - 1} * in.dramStrideInner +
         in.vecLen - 1;
}

namespace {

void checkFields(const Instruction& in, const hw::NpuConfig& cfg, std::vector<std::string>& errors) {
  auto err = [&](const std::string& what) { errors.push_back(what); };
  if (in.opcode != Opcode::Sync && (in.outer == 0 || in.inner == 0 || in.vecLen == 0)) {
    err(fmt::format("empty shape {}x{}x{} (every count must be >= 1)", in.outer, in.inner, in.vecLen));
  }
  auto own = static_cast<unsigned>(in.unit());
  if (((in.waitMask | in.signalMask) >> own) & 1) err(fmt::format("waits for or signals its own unit {}", unitName(in.unit())));
  if ((in.waitMask | in.signalMask) >> kNumUnits) err("token mask names a unit beyond the 4 units");
  if (in.opcode == Opcode::Gemm) {
    if (in.gemmK == 0 || in.gemmK > cfg.dim || in.gemmN == 0 || in.gemmN > cfg.dim) {
      err(fmt::format("gemm k={} n={} outside [1, DIM={}]", in.gemmK, in.gemmN, cfg.dim));
    }
    if (in.srcA.buffer != Buffer::Input || in.srcB.buffer != Buffer::Weight || in.dst.buffer != Buffer::Accumulator) {
      err("gemm must read inp and wgt and write acc");
    }
  }
}

}  // namespace

void validateProgram(const Program& program, const hw::NpuConfig& cfg, uint64_t dramWords) {
  std::vector<std::string> errors;
  for (size_t idx = 0; idx < program.instructions.size(); ++idx) {
    const Instruction& in = program.instructions[idx];
    std::vector<std::string> mine;
    checkFields(in, cfg, mine);
    if (mine.empty()) {
      for (const OperandAccess& a : sramAccesses(in)) {
        uint64_t capacity = cfg.bufferWords(static_cast<size_t>(a.operand.buffer));
        if (a.lastWord() >= capacity) {
          mine.push_back(fmt::format("{} access to {} words [{}, {}] exceeds its capacity of {} words ({} bytes)",
                                     a.kind == AccessKind::WriteAtFinish ? "write" : "read", bufferName(a.operand.buffer),
                                     a.operand.addr, a.lastWord(), capacity, capacity * 4));
        }
      }
      if ((in.opcode == Opcode::Load || in.opcode == Opcode::Store) && lastDramWord(in) >= dramWords) {
        mine.push_back(fmt::format("DRAM access up to word {} beyond the DRAM image of {} words", lastDramWord(in), dramWords));
      }
    }
    for (const std::string& m : mine) errors.push_back(fmt::format("instruction {} ({}): {}", idx, opcodeName(in.opcode), m));
  }
  if (errors.empty()) return;
  std::string msg = fmt::format("NPU program refused: {} problem(s)", errors.size());
  for (size_t i = 0; i < errors.size() && i < 20; ++i) msg += "\n  " + errors[i];
  throw UserError(msg);
}

}  // namespace tessel::npu
