// The NPU lowering's instruction emitter: tracks the last writer and readers of every SRAM and DRAM word
// range and turns cross-unit dependencies into wait/signal tokens (S2.2, S2.3); plus instruction builders.
#include <fmt/format.h>

#include "lower_context.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/access.h"

namespace tessel::npu::lower {

void Emitter::splitAt(SegmentMap& map, uint64_t at) {
  auto it = map.upper_bound(at);
  if (it == map.begin()) return;
  --it;
  if (it->first < at && it->second.hi >= at) {
    Segment upper = it->second;
    it->second.hi = at - 1;
    map.emplace(at, upper);
  }
}

void Emitter::track(SegmentMap& map, uint64_t lo, uint64_t hi, bool write, int64_t index, Unit unit,
                    std::array<int64_t, kNumUnits>& need) {
  splitAt(map, lo);
  splitAt(map, hi + 1);
  // Fill gaps so [lo, hi] is covered by segments.
  uint64_t cursor = lo;
  auto it = map.lower_bound(lo);
  while (cursor <= hi) {
    if (it == map.end() || it->first > cursor) {
      uint64_t gapEnd = (it == map.end() || it->first > hi) ? hi : it->first - 1;
      it = map.emplace_hint(it, cursor, Segment{gapEnd});
    }
    cursor = it->second.hi + 1;
    ++it;
    if (cursor == 0) break;  // wrapped past the last word
  }
  auto need_ = [&](int64_t producer) {
    if (producer < 0 || producer >= index) return;  // the instruction itself (read and write of one range)
    Unit pu = program_.instructions[producer].unit();
    if (pu == unit) return;
    int64_t& slot = need[static_cast<size_t>(pu)];
    slot = std::max(slot, producer);
  };
  auto first = map.lower_bound(lo);
  auto last = map.upper_bound(hi);
  for (auto s = first; s != last; ++s) {
    need_(s->second.writer);
    if (write)
      for (int64_t r : s->second.readers) need_(r);
    else
      s->second.readers[static_cast<size_t>(unit)] = index;
  }
  if (write) {
    // After a write the whole range has one state: merge it into one segment.
    map.erase(first, last);
    Segment merged{hi};
    merged.writer = index;
    map.emplace(lo, merged);
  }
}

size_t Emitter::emit(Instruction inst) {
  const int64_t index = static_cast<int64_t>(program_.instructions.size());
  const Unit unit = inst.unit();
  std::array<int64_t, kNumUnits> need{-1, -1, -1, -1};
  for (const OperandAccess& a : sramAccesses(inst))
    track(sram_[static_cast<size_t>(a.operand.buffer)], a.operand.addr, a.lastWord(),
          a.kind == AccessKind::WriteAtFinish, index, unit, need);
  if (inst.opcode == Opcode::Load) track(dram_, inst.dramAddr, lastDramWord(inst), false, index, unit, need);
  if (inst.opcode == Opcode::Store) track(dram_, inst.dramAddr, lastDramWord(inst), true, index, unit, need);
  const size_t u = static_cast<size_t>(unit);
  for (size_t from = 0; from < kNumUnits; ++from) {
    if (from == u || need[from] <= covered_[from][u]) continue;
    // Tokens on a channel are consumed in order and every earlier one is already consumed, so a token
    // from this producer is the next one this unit will take.
    program_.instructions[need[from]].signalMask |= static_cast<uint8_t>(1u << u);
    inst.waitMask |= static_cast<uint8_t>(1u << from);
    covered_[from][u] = need[from];
  }
  program_.instructions.push_back(inst);
  return static_cast<size_t>(index);
}

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

void loadContiguous(Emitter& e, Buffer b, uint64_t sramAddr, uint64_t dramAddr, uint64_t words) {
  constexpr uint64_t kMaxVec = (uint64_t{1} << kCountBits) - 1;
  while (words > 0) {
    // Rows of up to kMaxVec words: one instruction of `rows` full rows, then the remainder.
    uint64_t vec = std::min(words, uint64_t{4096});
    uint64_t rows = std::min(words / vec, kMaxVec);
    if (rows == 0) rows = 1, vec = words;
    e.emit(makeLoad(operand(b, sramAddr, vec, 0), dramAddr, vec, 0, static_cast<uint32_t>(rows), 1,
                    static_cast<uint32_t>(vec)));
    sramAddr += rows * vec, dramAddr += rows * vec, words -= rows * vec;
  }
}

hw::SupportResult ok() { return {true, ""}; }
hw::SupportResult refuse(std::string why) { return {false, std::move(why)}; }

}  // namespace tessel::npu::lower
