// The lowering's output before scheduling: instructions whose SRAM operands name virtual buffer regions
// (addresses are offsets inside the region), grouped into tiles, with no tokens. The instruction scheduler
// orders them, gives every region an address and derives the tokens (S2.4-S2.7).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessel/targets/npu/isa.h"

namespace tessel::npu::sched {

/// An SRAM region of one buffer, live from its first access to its last.
struct Region {
  Buffer buffer = Buffer::Input;
  uint64_t words = 0;
  uint32_t tile = 0;  ///< the tile that created it
  /// Working data several consecutive tiles of one node share (NodeTiling::inputResident: a tile's input window read
  /// by every pass, each pass a tile of the window): placed like a tile's own regions, not on the stack of regions
  /// that outlive their tile (a large region released early there would leave a hole the next tile cannot use).
  bool workspace = false;
};

/// A tile: the unit the sliding window admits and retires (S0.6). Tiles are numbered in priority order.
struct TileInfo {
  uint32_t group = 0;  ///< schedule group
  uint32_t index = 0;  ///< tile number within its node (layer by layer) or its group (a fused row tile)
};

/// One instruction with, per SRAM operand (dst, srcA, srcB, srcC), the region it addresses (-1: none).
struct VirtualInstruction {
  Instruction inst;
  std::array<int32_t, 4> region{-1, -1, -1, -1};
  uint32_t tile = 0;
  uint32_t node = 0;  ///< index into VirtualProgram::nodes: whose work it is
};

struct VirtualProgram {
  std::vector<VirtualInstruction> instructions;  ///< in the lowering's order (tiles in priority order)
  std::vector<Region> regions;                   ///< numbered in creation order
  std::vector<TileInfo> tiles;
  std::vector<std::string> nodes;                ///< node names, for reports
};

/// Appends instructions and regions while the operator interpreters lower a subgraph.
class ProgramBuilder {
 public:
  /// Starts a new tile (subsequent regions and instructions belong to it); returns its id.
  uint32_t beginTile(uint32_t group, uint32_t index);
  /// The node subsequent instructions do the work of.
  void setNode(const std::string& node);
  /// A new region of `words` words in `buffer`, owned by the current tile (Region::workspace: shared with the tiles of
  /// the node that follow it).
  int32_t region(Buffer buffer, uint64_t words, bool workspace = false);
  /// An operand addressing `region` at `offset` with the given strides (all in words).
  SramOperand at(int32_t region, uint64_t offset = 0, uint64_t strideOuter = 0, uint64_t strideInner = 0) const;
  /// Emits an instruction; its operands' regions are given in the order dst, srcA, srcB, srcC.
  size_t emit(const Instruction& inst, std::array<int32_t, 4> regions);

  size_t size() const { return program_.instructions.size(); }
  const VirtualProgram& program() const { return program_; }
  VirtualProgram take() { return std::move(program_); }

 private:
  VirtualProgram program_;
  uint32_t currentTile_ = 0, currentNode_ = 0;
};

}  // namespace tessel::npu::sched
