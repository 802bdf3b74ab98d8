// The static verifier of a lowered NPU program (run when a program is compiled and when a .tnpu is loaded):
// validateProgram's field and bounds checks, then, in program order, every SRAM word an instruction reads
// written by an earlier instruction, every DRAM word a load reads a constant, an input or stored earlier, and the
// tokens between each pair of units balanced. Program order is the order the units take their instructions in,
// so a read whose write comes later (or never) is a bug whatever the timing.
#include "tessel/targets/npu/verify.h"

#include <array>
#include <fmt/format.h>
#include <optional>

#include "tessel/support/error.h"
#include "tessel/targets/npu/access.h"

namespace tessel::npu {
namespace {

/// Which words have been written: one bit per word, ranges set and tested 64 bits at a time.
class WrittenWords {
 public:
  explicit WrittenWords(uint64_t words) : bits_((words + 63) / 64, 0), words_(words) {}
  void set(uint64_t first, uint64_t count) {
    forRange(first, count, [&](uint64_t w, uint64_t mask) {
      bits_[w] |= mask;
      return true;
    });
  }
  /// The first word of [first, first + count) not written, or none.
  std::optional<uint64_t> firstUnset(uint64_t first, uint64_t count) const {
    std::optional<uint64_t> found;
    forRange(first, count, [&](uint64_t w, uint64_t mask) {
      if ((bits_[w] & mask) == mask) return true;
      found = w * 64 + static_cast<uint64_t>(__builtin_ctzll(~bits_[w] & mask));
      return false;
    });
    return found;
  }

 private:
  template <class F>
  void forRange(uint64_t first, uint64_t count, F&& f) const {
    const uint64_t end = std::min(first + count, words_);
    for (uint64_t a = first; a < end;) {
      const uint64_t w = a / 64, lo = a % 64, hi = std::min<uint64_t>(64, lo + (end - a));
      const uint64_t mask = (hi - lo == 64 ? ~uint64_t{0} : ((uint64_t{1} << (hi - lo)) - 1)) << lo;
      if (!f(w, mask)) return;
      a += hi - lo;
    }
  }
  std::vector<uint64_t> bits_;
  uint64_t words_;
};

/// Calls `fn(first word, count)` for each contiguous run of a strided box (one run per (outer, inner) row).
template <class F>
bool forEachRun(uint64_t addr, uint64_t strideOuter, uint64_t strideInner, uint32_t outer, uint32_t inner, uint32_t len, F&& fn) {
  for (uint32_t o = 0; o < outer; ++o)
    for (uint32_t i = 0; i < inner; ++i)
      if (!fn(addr + uint64_t{o} * strideOuter + uint64_t{i} * strideInner, uint64_t{len})) return false;
  return true;
}

}  // namespace

std::vector<std::string> programProblems(const LoweredSubgraph& s, const hw::NpuConfig& cfg) {
  std::vector<std::string> problems;
  try {
    validateProgram(s.program, cfg, s.dramWords);
  } catch (const UserError& e) {
    problems.push_back(e.what());
    return problems;  // out-of-range boxes: the word checks below would read past the buffers
  }
  auto where = [&](size_t idx) {
    const Instruction& in = s.program.instructions[idx];
    const std::string node =
        idx < s.instructionOp.size() && s.instructionOp[idx] < s.ops.size() ? s.ops[s.instructionOp[idx]].node : std::string("?");
    return fmt::format("instruction {} ({}) of node '{}'", idx, opcodeName(in.opcode), node);
  };
  std::vector<WrittenWords> sram;
  for (size_t b = 0; b < kNumBuffers; ++b) sram.emplace_back(cfg.bufferWords(b));
  WrittenWords dram(s.dramWords);
  dram.set(0, s.constants.size());
  for (const DramTensor& t : s.inputs) dram.set(t.addr, t.words);
  std::array<std::array<int64_t, kNumUnits>, kNumUnits> tokens{};  // [from][to]: signals minus waits
  const size_t limit = 20;
  for (size_t idx = 0; idx < s.program.instructions.size() && problems.size() < limit; ++idx) {
    const Instruction& in = s.program.instructions[idx];
    const auto unit = static_cast<size_t>(in.unit());
    for (size_t u = 0; u < kNumUnits; ++u) {
      if ((in.signalMask >> u) & 1) ++tokens[unit][u];
      if ((in.waitMask >> u) & 1) --tokens[u][unit];
    }
    const std::vector<OperandAccess> accesses = sramAccesses(in);
    for (const OperandAccess& a : accesses) {
      if (a.kind == AccessKind::WriteAtFinish) continue;
      const WrittenWords& buf = sram[static_cast<size_t>(a.operand.buffer)];
      forEachRun(a.operand.addr, a.operand.strideOuter, a.operand.strideInner, a.outer, a.inner, a.vecLen,
                 [&](uint64_t first, uint64_t count) {
                   if (auto w = buf.firstUnset(first, count)) {
                     problems.push_back(fmt::format("{}: reads {} word {}, which no earlier instruction writes", where(idx),
                                                    bufferName(a.operand.buffer), *w));
                     return false;
                   }
                   return true;
                 });
    }
    if (in.opcode == Opcode::Load)
      forEachRun(in.dramAddr, in.dramStrideOuter, in.dramStrideInner, in.outer, in.inner, in.vecLen, [&](uint64_t first, uint64_t count) {
        if (auto w = dram.firstUnset(first, count)) {
          problems.push_back(fmt::format("{}: loads DRAM word {}, which is no constant or input and no earlier store writes", where(idx), *w));
          return false;
        }
        return true;
      });
    for (const OperandAccess& a : accesses)
      if (a.kind == AccessKind::WriteAtFinish)
        forEachRun(a.operand.addr, a.operand.strideOuter, a.operand.strideInner, a.outer, a.inner, a.vecLen,
                   [&](uint64_t first, uint64_t count) {
                     sram[static_cast<size_t>(a.operand.buffer)].set(first, count);
                     return true;
                   });
    if (in.opcode == Opcode::Store)
      forEachRun(in.dramAddr, in.dramStrideOuter, in.dramStrideInner, in.outer, in.inner, in.vecLen, [&](uint64_t first, uint64_t count) {
        dram.set(first, count);
        return true;
      });
  }
  for (size_t from = 0; from < kNumUnits; ++from)
    for (size_t to = 0; to < kNumUnits; ++to)
      if (tokens[from][to] != 0)
        problems.push_back(fmt::format("tokens from {} to {} unbalanced: {} more signals than waits", unitName(static_cast<Unit>(from)),
                                       unitName(static_cast<Unit>(to)), tokens[from][to]));
  for (const DramTensor& t : s.outputs)
    if (auto w = dram.firstUnset(t.addr, t.words))
      problems.push_back(fmt::format("output '{}': DRAM word {} is never stored", t.name, *w));
  return problems;
}

void verifyProgram(const LoweredSubgraph& s, const hw::NpuConfig& cfg) {
  const std::vector<std::string> problems = programProblems(s, cfg);
  if (problems.empty()) return;
  std::string msg = fmt::format("npu lowering produced an invalid program for subgraph '{}':", s.name);
  for (const std::string& p : problems) msg += "\n  " + p;
  throw InternalError(msg);
}

}  // namespace tessel::npu
