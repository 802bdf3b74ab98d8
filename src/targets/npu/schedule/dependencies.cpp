// The dependency tracker's helpers: word runs of an instruction's accesses, and its interval map.
#include "tessel/targets/npu/dependencies.h"

namespace tessel::npu {

const char* depKindName(DepKind k) {
  switch (k) {
    case DepKind::ReadAfterWrite: return "RAW";
    case DepKind::WriteAfterRead: return "WAR";
    case DepKind::WriteAfterWrite: return "WAW";
  }
  return "?";
}

namespace {

/// Appends the runs of an outer x inner x vec box starting at `addr` with the given strides, merging a run
/// into the previous one when it starts inside or right after it.
void boxRuns(uint32_t space, uint64_t addr, uint64_t strideOuter, uint64_t strideInner, uint32_t outer, uint32_t inner,
             uint32_t vec, AccessKind kind, std::vector<WordRun>& out) {
  // Dense boxes (the common case) are one run.
  if ((inner == 1 || strideInner == vec) && (outer == 1 || strideOuter == uint64_t{inner} * vec)) {
    out.push_back(WordRun{space, addr, uint64_t{outer} * inner * vec, kind});
    return;
  }
  // The open run as two scalars (a WordRun whose address push_back takes would live on the stack, and copying it
  // from there after its fields were written stalled store forwarding: a sixth of ResNet-50's compile time).
  bool open = false;
  uint64_t first = 0, count = 0;
  auto extend = [&](uint64_t start, uint64_t len) {
    if (open && start >= first && start <= first + count) {
      count = std::max(count, start + len - first);
      return;
    }
    if (open) out.emplace_back(WordRun{space, first, count, kind});
    first = start, count = len, open = true;
  };
  if (inner > 0 && strideInner <= vec) {
    // Each outer step's inner elements overlap or touch (a row of pixels, or one vector broadcast along it): one run
    // of (inner - 1) * strideInner + vec words, merged as its first element would be (the same runs as below).
    const uint64_t row = uint64_t{inner - 1} * strideInner + vec;
    for (uint32_t o = 0; o < outer; ++o) extend(addr + uint64_t{o} * strideOuter, row);
  } else {
    for (uint32_t o = 0; o < outer; ++o)
      for (uint32_t i = 0; i < inner; ++i) extend(addr + uint64_t{o} * strideOuter + uint64_t{i} * strideInner, vec);
  }
  if (open) out.emplace_back(WordRun{space, first, count, kind});
}

}  // namespace

void instructionRuns(const Instruction& inst, std::vector<WordRun>& out, bool dram, const std::array<int32_t, 4>* regions) {
  for (const OperandAccess& a : sramAccesses(inst)) {
    const int32_t r = regions ? (*regions)[a.slot] : -1;
    const uint32_t space = r >= 0 ? kFirstRegionSpace + static_cast<uint32_t>(r) : static_cast<uint32_t>(a.operand.buffer);
    boxRuns(space, a.operand.addr, a.operand.strideOuter, a.operand.strideInner, a.outer,
            a.inner, a.vecLen, a.kind, out);
  }
  if (!dram) return;
  if (inst.opcode == Opcode::Load)
    boxRuns(kDramSpace, inst.dramAddr, inst.dramStrideOuter, inst.dramStrideInner, inst.outer, inst.inner, inst.vecLen,
            AccessKind::ReadAtStart, out);
  if (inst.opcode == Opcode::Store)
    boxRuns(kDramSpace, inst.dramAddr, inst.dramStrideOuter, inst.dramStrideInner, inst.outer, inst.inner, inst.vecLen,
            AccessKind::WriteAtFinish, out);
}

DependencyTracker::Map::iterator DependencyTracker::cover(Map& m, uint64_t lo, uint64_t hi) {
  // One lookup, then a walk: the runs of a strided box are short and close together, so the segments met are
  // few, and every insertion is hinted (this function was two thirds of ResNet-50's compile time with a lookup
  // per split).
  auto it = m.upper_bound(lo);  // the first segment starting after lo; the one before may hold lo
  if (it != m.begin()) {
    auto before = std::prev(it);
    if (before->first == lo) {
      it = before;
    } else if (before->second.end > lo) {  // starts before lo and reaches past it: split at lo
      Segment upper = before->second;
      before->second.end = lo;
      it = m.emplace_hint(it, lo, upper);
    }
  }
  auto first = m.end();
  for (uint64_t cursor = lo; cursor < hi; ++it) {
    if (it == m.end() || it->first > cursor) {  // a gap: a never-written segment up to the next one or hi
      Segment gap;
      gap.end = (it == m.end() || it->first > hi) ? hi : it->first;
      it = m.emplace_hint(it, cursor, gap);
    } else if (it->second.end > hi) {  // the last segment reaches past hi: split at hi
      Segment upper = it->second;
      it->second.end = hi;
      m.emplace_hint(std::next(it), hi, upper);
    }
    if (first == m.end()) first = it;
    cursor = it->second.end;
  }
  return first;
}

}  // namespace tessel::npu
