// The cost of a node's tiling under the NPU's timing model, used to choose tiles (tiling_choice.cpp) and to
// report per-node work (tessel sched).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../geometry.h"
#include "tessel/hw/hardware_config.h"
#include "tessel/targets/npu/schedule.h"

namespace tessel::npu {

/// Busy cycles per unit (LD, MM, VEC, ST), the regions one tile needs, DRAM traffic and an estimate of the
/// node's cycles: the busiest unit plus one tile's latency when two tiles fit the buffers at once, else the
/// sum of the units (nothing overlaps).
struct MatrixCost {
  std::array<uint64_t, 4> units{};
  uint64_t inpWords = 0, accWords = 0, wgtWords = 0, outWords = 0;
  uint64_t dramBytes = 0;
  uint64_t streamStall = 0;  ///< matrix-unit cycles spent waiting for input regions that could not be prefetched
  bool fits = false, overlaps = false;
  uint64_t cycles = 0;
};

/// What a node's fused epilogue costs per tile: vector ops in place, and tensors loaded to combine with.
struct EpilogueShape {
  bool bias = false;
  int unarySteps = 0;
  int tensorSteps = 0;
  int savedSteps = 0;  ///< binary steps with a copy of the tile kept on chip (one more vector op and tile of `out`)
  /// NodeTiling::residualInAcc: the first step's tensor is loaded into the accumulator (a load per tile, no vector
  /// op, no tile of `out`); not counted in tensorSteps.
  bool accTensor = false;
};

/// Words of the weight buffer a depthwise channel block of `cb` channels needs: the per-tap weight vectors, and
/// with tiles on the matrix unit (`matrix`) the diagonal blocks and bias rows.
int64_t depthwiseWeightWords(int64_t taps, int64_t cb, bool matrix, int64_t dim);
/// Of those, the matrix unit's: per DIM channels a diagonal block per tap and the bias row.
int64_t depthwiseMatrixWords(int64_t taps, int64_t cb, int64_t dim);
/// Whether a depthwise convolution's k-th tile (in the order it computes them) runs on the matrix unit: every
/// `every`-th (NodeTiling::matrixEvery; 0: none).
inline bool depthwiseTileOnMatrix(int64_t k, int64_t every) { return every > 0 && k % every == every - 1; }

/// The units a depthwise convolution's channel block runs tiles on (NodeTiling::matrixEvery: every `every`-th tile on
/// the matrix unit): which parameters it loads.
struct DepthwiseBlockUnits {
  bool vector = false, matrix = false;
};
/// Of channel block `block` of `blocks`, computing `spatialTiles` tiles per block, the blocks one after another
/// (DepthwiseConv::lower) or, with `blocksInner`, every block in each spatial tile (channel chains).
DepthwiseBlockUnits depthwiseBlockUnits(int64_t blocks, int64_t every, int64_t block, int64_t spatialTiles, bool blocksInner);
/// Weight-buffer words of all the channel blocks of `C` channels in blocks of `cb`: each block's weight vectors if one
/// of its tiles runs on the vector unit, its diagonal blocks and bias rows if one runs on the matrix unit.
int64_t depthwiseNodeWeightWords(int64_t C, int64_t taps, int64_t cb, int64_t every, int64_t spatialTiles, bool blocksInner,
                                 int64_t dim);

/// The spatial tiles (images x row tiles x column tiles) of an output of geometry `g` in tiles of `t`.
inline int64_t spatialTiles(const ConvGeometry& g, const NodeTiling& t) {
  return g.N * ceilDiv(g.OH, t.rows) * ceilDiv(g.OW, t.cols);
}

/// Reduction slices (gemms per output block) of one input block of `cb` channels.
int64_t reductionSlicesPerBlock(const ConvGeometry& p, Reduction r, bool phased, int64_t cb, int64_t dim);

/// Words per input channel of the input window a th x tw output tile of tiling `t` loads (matrix/packed/stacked): the
/// whole window, or the stride phases that kernel taps read; stacked: per output row the kernel rows side by side.
/// `largestPhase`: only the largest phase's region (the phases of a block stream through the buffer one by one).
int64_t tileWindowWordsPerChannel(const ConvGeometry& p, const NodeTiling& t, int64_t th, int64_t tw, bool largestPhase = false);

MatrixCost matrixCost(const ConvGeometry& p, const NodeTiling& t, const hw::NpuConfig& cfg, const EpilogueShape& e);

/// The legal tilings of a convolution (or Gemm/MatMul) on the matrix unit that no other beats in both cycles
/// and DRAM bytes, fastest first; then the `alsoFastest` fastest of the others (the estimate is not the
/// simulator: the search tries them).
std::vector<std::pair<NodeTiling, MatrixCost>> matrixTilingOptions(const Node& n, const ConvGeometry& p, const hw::NpuConfig& cfg,
                                                                  const EpilogueShape& e, size_t alsoFastest = 0);

/// Why the buffers cannot hold the convolution `conv` tiled by `t` with its residual convolution `residual`
/// (NodeTiling::residualConv) computed into its accumulator: their input regions (both windows with passes inside the
/// tile) or their resident weights (streamed ones: half the weight buffer) overflow. Empty when they fit.
std::string residualConvOverflow(const Node& conv, const Node& residual, const NodeTiling& t, const hw::NpuConfig& cfg);

/// The option of `options` (matrixTilingOptions, not empty) the compiler takes: the cheapest in cycles, or within 2 %
/// of it the one that moves the fewest DRAM bytes.
size_t pickMatrixTiling(const std::vector<std::pair<NodeTiling, MatrixCost>>& options);
/// The same rule over options priced as (cycles, DRAM bytes), not empty (ties: fewer cycles, then the first): how
/// the instruction scheduler's prices of schedule choices are picked from too.
size_t pickCheapOrLight(const std::vector<std::pair<uint64_t, uint64_t>>& cyclesAndBytes);

}  // namespace tessel::npu
