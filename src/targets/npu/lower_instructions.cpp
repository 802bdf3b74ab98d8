// Instruction builders of the NPU operator interpreters (loads, stores, vector ops) and contiguous loads.
#include <fmt/format.h>

#include "lower_context.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {

namespace {
uint32_t narrow(uint64_t v, const char* what) {
  TESSEL_ASSERT(v < (uint64_t{1} << 32), fmt::format("npu lowering: {} {} does not fit 32 bits", what, v));
  return static_cast<uint32_t>(v);
}
}  // namespace

SramOperand operand(Buffer b, uint64_t addr, uint64_t strideOuter, uint64_t strideInner) {
  return SramOperand{b, narrow(addr, "address"), narrow(strideOuter, "stride"), narrow(strideInner, "stride")};
}

Instruction makeLoad(SramOperand dst, uint64_t dramAddr, uint64_t dramStrideOuter, uint64_t dramStrideInner,
                     uint32_t outer, uint32_t inner, uint32_t vecLen) {
  Instruction i;
  i.opcode = Opcode::Load;
  i.dst = dst;
  i.dramAddr = narrow(dramAddr, "DRAM address");
  i.dramStrideOuter = narrow(dramStrideOuter, "DRAM stride");
  i.dramStrideInner = narrow(dramStrideInner, "DRAM stride");
  i.outer = outer, i.inner = inner, i.vecLen = vecLen;
  return i;
}

Instruction makeStore(SramOperand src, uint64_t dramAddr, uint64_t dramStrideOuter, uint64_t dramStrideInner,
                      uint32_t outer, uint32_t inner, uint32_t vecLen) {
  Instruction i = makeLoad(SramOperand{}, dramAddr, dramStrideOuter, dramStrideInner, outer, inner, vecLen);
  i.opcode = Opcode::Store;
  i.srcA = src;
  return i;
}

Instruction makeVecUnary(VecOp op, SramOperand dst, SramOperand a, uint32_t outer, uint32_t inner, uint32_t vecLen,
                         float imm0, float imm1) {
  Instruction i;
  i.opcode = Opcode::VecUnary;
  i.vecOp = op;
  i.dst = dst, i.srcA = a;
  i.outer = outer, i.inner = inner, i.vecLen = vecLen;
  i.imm0 = imm0, i.imm1 = imm1;
  return i;
}

Instruction makeVecBinary(VecOp op, SramOperand dst, SramOperand a, SramOperand b, uint32_t outer, uint32_t inner,
                          uint32_t vecLen) {
  Instruction i;
  i.opcode = Opcode::VecBinary;
  i.vecOp = op;
  i.dst = dst, i.srcA = a, i.srcB = b;
  i.outer = outer, i.inner = inner, i.vecLen = vecLen;
  return i;
}

Instruction makeVecAffine(SramOperand dst, SramOperand a, SramOperand scale, SramOperand bias, uint32_t outer, uint32_t inner,
                          uint32_t vecLen) {
  Instruction i;
  i.opcode = Opcode::VecAffine;
  i.vecOp = VecOp::Affine;
  i.dst = dst, i.srcA = a, i.srcB = scale, i.srcC = bias;
  i.outer = outer, i.inner = inner, i.vecLen = vecLen;
  return i;
}

void loadContiguous(LowerContext& ctx, int32_t region, uint64_t offset, uint64_t dramAddr, uint64_t words) {
  constexpr uint64_t kMaxVec = (uint64_t{1} << kCountBits) - 1;
  while (words > 0) {
    // Rows of up to kMaxVec words: one instruction of `rows` full rows, then the remainder.
    uint64_t vec = std::min(words, uint64_t{4096});
    uint64_t rows = std::min(words / vec, kMaxVec);
    if (rows == 0) rows = 1, vec = words;
    ctx.emit(makeLoad(ctx.at(region, offset, vec, 0), dramAddr, vec, 0, static_cast<uint32_t>(rows), 1,
                      static_cast<uint32_t>(vec)),
             region);
    offset += rows * vec, dramAddr += rows * vec, words -= rows * vec;
  }
}

hw::SupportResult ok() { return {true, ""}; }
hw::SupportResult refuse(std::string why) { return {false, std::move(why)}; }

}  // namespace tessel::npu::lower
