// ProgramBuilder: collects the operator interpreters' instructions on virtual regions, tile by tile.
#include "virtual_program.h"

#include <algorithm>
#include <fmt/format.h>

#include "tessel/support/error.h"

namespace tessel::npu::sched {

uint32_t ProgramBuilder::beginTile(uint32_t group, uint32_t index) {
  program_.tiles.push_back(TileInfo{group, index});
  currentTile_ = static_cast<uint32_t>(program_.tiles.size() - 1);
  return currentTile_;
}

void ProgramBuilder::setNode(const std::string& node) {
  auto it = std::find(program_.nodes.begin(), program_.nodes.end(), node);
  if (it == program_.nodes.end()) it = program_.nodes.insert(program_.nodes.end(), node);
  currentNode_ = static_cast<uint32_t>(it - program_.nodes.begin());
}

int32_t ProgramBuilder::region(Buffer buffer, uint64_t words, bool workspace) {
  TESSEL_ASSERT(!program_.tiles.empty(), "npu lowering: region created outside a tile");
  TESSEL_ASSERT(words > 0, "npu lowering: empty region");
  program_.regions.push_back(Region{buffer, words, currentTile_, workspace});
  return static_cast<int32_t>(program_.regions.size() - 1);
}

SramOperand ProgramBuilder::at(int32_t region, uint64_t offset, uint64_t strideOuter, uint64_t strideInner) const {
  const Region& r = program_.regions.at(static_cast<size_t>(region));
  auto narrow = [](uint64_t v) {
    TESSEL_ASSERT(v < (uint64_t{1} << 32), fmt::format("npu lowering: operand value {} does not fit 32 bits", v));
    return static_cast<uint32_t>(v);
  };
  return SramOperand{r.buffer, narrow(offset), narrow(strideOuter), narrow(strideInner)};
}

size_t ProgramBuilder::emit(const Instruction& inst, std::array<int32_t, 4> regions) {
  TESSEL_ASSERT(!program_.tiles.empty(), "npu lowering: instruction emitted outside a tile");
  program_.instructions.push_back(VirtualInstruction{inst, regions, currentTile_, currentNode_});
  return program_.instructions.size() - 1;
}

}  // namespace tessel::npu::sched
