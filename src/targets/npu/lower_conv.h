// The convolution machinery the NPU lowerings share: a convolution as numbers plus its DRAM operands and fused
// epilogue, and per-tile emitters for the matrix unit (MatrixConv), the vector unit (DepthwiseConv) and pooling
// windows (PoolWindows) that read their input from DRAM or from a window held on chip (fused groups).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "geometry.h"
#include "lower_context.h"
#include "schedule/tiling_cost.h"

namespace tessel::npu::lower {

/// A 2-D convolution in NHWC DRAM layout with OIHW weights (already scaled) and an optional bias.
struct ConvProblem : ConvGeometry {
  std::vector<float> weights;  ///< [M][C/group][KH][KW]
  std::vector<float> bias;     ///< [M] or empty
  uint64_t inAddr = 0, outAddr = 0;
  int64_t inStride = 1, outStride = 1;  ///< DRAM words from one pixel to the next (channels, or a Concat's)
  std::vector<EpilogueStep> epilogue;
  std::vector<TensorLoc> epilogueLoc;  ///< per step: DRAM location of its tensor operand (binary steps)
  /// NodeTiling::residualInAcc: the first epilogue step's tensor is loaded into each tile's accumulator before its
  /// gemms (MatrixConv), and applyEpilogue starts at the second step.
  bool residualInAcc = false;
  /// NodeTiling::inputScale: DRAM address of the C factors each loaded input block is multiplied by.
  std::optional<uint64_t> inputScale;
  /// NodeTiling::inputNorm: DRAM addresses of the C scales and C biases each loaded input block is mapped by, and
  /// the unary steps applied after them.
  std::optional<std::pair<uint64_t, uint64_t>> inputAffine;
  std::vector<EpilogueStep> inputSteps;
  /// NodeTiling::groupPack not dividing the groups: the last packed group's input (output) channels start this many
  /// channels before its place in the packed geometry (it overlaps the packed group before it).
  int64_t tailShiftIn = 0, tailShiftOut = 0;
  /// NodeTiling::globalPool: DRAM location of the pooled result ([N][M]), and whether it is a max pool.
  std::optional<TensorLoc> globalPool;
  bool globalMax = false;
  bool storeResult = true;  ///< false when the global pool is the result's only reader: the tiles are not stored
  /// NodeTiling::maxPool: the pool's geometry (its input is this convolution's result); the output address, the
  /// epilogue and the tiling's rows x cols are the pool's result's.
  std::optional<PoolGeometry> maxPool;
};

/// The convolution a Conv, Gemm or MatMul node computes (Gemm's alpha/beta folded into weights and bias).
ConvProblem convProblem(LowerContext& ctx, const Node& node);

/// Where a tile's result goes: output pixel `pixel` (n*OH*OW + oy*OW + ox) and channel `channel` on.
struct TileAt {
  int64_t pixel = 0, channel = 0;
  uint64_t in(uint64_t addr, int64_t stride) const { return addr + static_cast<uint64_t>(pixel * stride + channel); }
};

/// Applies the fused epilogue in place to a tile of rows x cols pixels x `channels` channels held in `acc`
/// ([pixel][channels]); binary steps load the matching tile of their other operand from DRAM.
void applyEpilogue(LowerContext& ctx, const ConvProblem& p, int32_t acc, int64_t rows, int64_t cols, int64_t channels,
                   TileAt at);
/// Bias add (when `bias` >= 0), the fused epilogue, and the store of the tile to the result in DRAM; with a
/// global pool (ConvProblem::globalPool), the tile's reduce into `poolSums`, the pooled vector of the tile's image
/// and channels (a new region on the image's first tile, scaled and stored after its last: tiles come in order).
void finishTile(LowerContext& ctx, const ConvProblem& p, int32_t acc, int64_t rows, int64_t cols, int64_t channels,
                int32_t bias, TileAt at, int32_t* poolSums = nullptr);

/// A window of a node's input held on chip (fused groups): input rows [rowLo, rowLo + rows) (rows outside the
/// image are zeros), every column with the node's left and right padding, all channels; layout
/// [row][pL + W + pR][C].
struct OnChipInput {
  int32_t region = -1;
  int64_t rowLo = 0, rows = 0, cols = 0;
};

/// The weights of a 1x1 convolution (no groups) as MatrixConv packs them for its gemms: input channels [c0, c0 + cb)
/// in slices of at most `dim`, per slice output channels [m0, m0 + mk) in blocks of at most `n`, each a k x n block
/// row-major.
std::vector<float> packPointwiseWeights(const ConvProblem& p, int64_t c0, int64_t cb, int64_t m0, int64_t mk, int64_t n, int64_t dim);

/// A convolution on the matrix unit, one output tile at a time.
class MatrixConv {
 public:
  MatrixConv(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& t);
  /// Layer by layer: every pass and tile, each stored to DRAM.
  void lower();
  /// Starts the pass of output channels [m0, m0 + mk) of group g: resident weights and the bias are loaded by the
  /// current tile.
  void beginPass(int64_t g, int64_t m0, int64_t mk);
  /// The gemms of output rows [oy0, oy0 + rows) x columns [ox0, ox0 + cols) of image n for the current pass,
  /// reading the input from DRAM (`window` null) or from an on-chip window; returns the accumulator region
  /// ([pixel][pass channels]).
  int32_t computeTile(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, const OnChipInput* window);
  int32_t bias() const { return bias_; }
  /// Output channel of the pass's first channel, and its width.
  int64_t passChannel() const { return g_ * Mg_ - (g_ == p_.group - 1 ? p_.tailShiftOut : 0) + m0_; }
  /// The tensor's channel where group g's input channels start.
  int64_t inChannel(int64_t g) const { return g * Cg_ - (g == p_.group - 1 ? p_.tailShiftIn : 0); }
  int64_t passWidth() const { return mk_; }

 private:
  /// Every pass, image and tile of an OH x OW output (the convolution's, or its pool's with NodeTiling::maxPool) in
  /// order: the tile begun, the pass begun on its first tile, then `tile(n, oy0, rows, ox0, cols)`. With
  /// NodeTiling::inputResident the images and tiles are outer and the passes inner, each pass a tile of the window.
  void forEachTile(int64_t OH, int64_t OW, const std::function<void(int64_t, int64_t, int64_t, int64_t, int64_t)>& tile);
  /// NodeTiling::maxPool: every pass and pooled tile, the convolution's tile pooled in the accumulator.
  void lowerPooled();
  std::vector<int64_t> phaseCols(int64_t th, int64_t tw) const;
  void computeBlock(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0, int64_t block,
                    int32_t acc, const OnChipInput* window);
  /// Applies the load-side work to a loaded input region of outer x inner pixels of `cb` channels (from channel c0
  /// of the group) in place: the pass's input scale (NodeTiling::inputScale) or normalisation and its unary steps
  /// (NodeTiling::inputNorm).
  void prepareInput(int32_t region, uint64_t offset, int64_t outer, int64_t inner, int64_t c0, int64_t cb);
  /// NodeTiling::inputResident: the region holding the whole input window of a rows x cols output tile (every input
  /// block and stride phase at its own offset), loaded by the tile's first pass and read by all its passes. One
  /// region, so it never waits for space left in pieces.
  void layoutTileInput(int64_t rows, int64_t cols);
  /// A new group of tiles (inputResident: the passes' weights and biases loaded again) or a new tile (its input window
  /// laid out again), for this convolution and its residual one.
  void startGroup();
  void startTile();
  /// NodeTiling::residualConv: this (residual) convolution's gemms of the current pass for a tile, starting the
  /// accumulator region `acc` of the convolution it is computed into.
  void accumulateTile(int32_t acc, int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols);

  LowerContext& ctx_;
  const Node& node_;
  const ConvProblem& p_;
  const NodeTiling& t_;
  const int64_t DIM_, Cg_, Mg_;
  Reduction red_ = Reduction::PerTap;
  int64_t cb_ = 1, pass_ = 1, gemmN_ = 1;
  int64_t ph_ = 1, pw_ = 1;  ///< stride phases the input window is split into (1 x 1: not phased)
  uint32_t tileIndex_ = 0;
  int64_t g_ = 0, m0_ = 0, mk_ = 0;  ///< current pass
  int32_t resident_ = -1, bias_ = -1, scale_ = -1;
  /// NodeTiling::biasLoad: the bias row in DRAM, broadcast into each accumulator tile by a load (bias_ stays -1).
  std::optional<uint64_t> biasDram_;
  StagedNorm norm_;  ///< NodeTiling::inputNorm's vectors, staged per pass
  /// Per pass (its first output channel): per input block, its weights' offset in the resident region.
  std::map<int64_t, std::vector<uint64_t>> residentOffsets_;
  /// (pass, block, first slice) -> DRAM, words
  std::map<std::tuple<int64_t, int64_t, size_t>, std::pair<uint64_t, uint64_t>> streamed_;
  std::vector<bool> started_;  ///< per gemm block of the tile: accumulating already
  std::map<int64_t, int32_t> poolSums_;  ///< NodeTiling::globalPool: per pass, the current image's pooled vector
  /// NodeTiling::inputResident: the passes of the current group begun by its first tile, and their bias regions.
  std::map<int64_t, int32_t> passBias_;
  int32_t tileRegion_ = -1;  ///< inputResident: the current tile's input window (layoutTileInput), loaded by pass 0
  std::map<std::pair<int64_t, int64_t>, uint64_t> tileOffset_;  ///< (block, phase) -> offset in tileRegion_
  /// NodeTiling::residualConv: the residual convolution's problem, tiling and emitter.
  struct Residual;
  std::shared_ptr<Residual> residual_;
};

/// A depthwise convolution on the vector unit (one multiply-accumulate per tap with a per-channel weight
/// vector), one output tile of one channel block at a time; with the tiling's matrixEvery some tiles run on the
/// matrix unit as block-diagonal gemms instead.
class DepthwiseConv {
 public:
  DepthwiseConv(LowerContext& ctx, const Node& node, const ConvProblem& p, const NodeTiling& t);
  void lower();
  /// The units channel block c0 runs tiles on (depthwiseBlockUnits) when the node computes `spatialTiles` tiles per
  /// block, the blocks one after another (lower()) or, with `blocksInner`, every block in each spatial tile.
  DepthwiseBlockUnits unitsOf(int64_t c0, int64_t spatialTiles, bool blocksInner) const {
    return depthwiseBlockUnits(ceilDiv(p_.C, t_.channels), t_.matrixEvery, c0 / t_.channels, spatialTiles, blocksInner);
  }
  /// Loads the parameters of channel block c0 (in the current tile) that `units` use and makes it the current block:
  /// the vector unit's weight vectors and bias, the matrix unit's diagonal blocks (16x its weights), bias rows and
  /// the word 1.0. A block with no tile on the matrix unit does not load its diagonal blocks.
  void beginBlock(int64_t c0, DepthwiseBlockUnits units = {true, true});
  /// Makes the already loaded channel block c0 the current one.
  void useBlock(int64_t c0);
  /// Output tile of the current channel block; bias included, epilogue not. Returns the accumulator region. The input
  /// comes from the on-chip `window` (all channels), else from the region `loaded` (loadWindow's, of this block),
  /// else it is loaded from DRAM.
  int32_t computeTile(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, const OnChipInput* window,
                      int32_t loaded = -1);
  /// Loads from DRAM the input window of an output tile for channel block c0; returns its region (for computeTile).
  /// A caller loading the next block's window before it computes the current one keeps the load unit ahead.
  int32_t loadWindow(int64_t n, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0);
  /// Whether the next tile computeTile makes runs on the matrix unit (NodeTiling::matrixEvery): a channel chain
  /// places that tile's window where the matrix unit reads it (the input buffer).
  bool nextTileOnMatrix() const { return depthwiseTileOnMatrix(tilesComputed_, t_.matrixEvery); }
  int64_t blockChannel() const { return c0_; }
  int64_t blockWidth() const { return cbk_; }

 private:
  LowerContext& ctx_;
  const Node& node_;
  const ConvProblem& p_;
  const NodeTiling& t_;
  /// The regions of a loaded channel block: per-tap weight vectors and the bias (vector unit); block-diagonal
  /// weight blocks, bias rows and a word holding 1.0 (matrix unit, when some tiles run there).
  struct Block {
    int32_t wgt = -1, bias = -1, mmWgt = -1, one = -1;
  };
  /// Loads the current block's parameters for the vector unit (per-tap weight vectors, bias) or for the matrix unit
  /// (diagonal blocks, bias rows, the word 1.0).
  void vectorParameters();
  void matrixParameters();
  /// One tile on the matrix unit: per DIM channels the bias as a gemm of a 1.0 by the bias row, then one
  /// accumulating gemm per tap with a diagonal weight block.
  void matrixTaps(int32_t acc, int32_t in, int64_t base, int64_t winCols, int64_t winChannels, int64_t rows, int64_t cols);

  int64_t c0_ = 0, cbk_ = 0;
  Block cur_;
  std::map<int64_t, Block> blocks_;  ///< loaded blocks by first channel
  uint32_t tileIndex_ = 0;
  int64_t tilesComputed_ = 0;  ///< tiles of this node so far (which unit computes the next, matrixEvery)
  int32_t poolSums_ = -1;      ///< NodeTiling::globalPool: the current image and block's pooled vector
};

/// A MaxPool / AveragePool output tile of channels [c0, c0 + ck) read from an on-chip window (its padding already
/// filled with the pool's identity); returns the accumulator region ([pixel][ck]).
int32_t poolTileOnChip(LowerContext& ctx, const Node& node, int64_t oy0, int64_t rows, int64_t ox0, int64_t cols, int64_t c0,
                       int64_t ck, const OnChipInput& window);

/// Lowers a fused group (S0.2): its nodes computed tile by tile along H, each tile the whole chain on its rows,
/// intermediates kept on chip in per-tile windows (halo rows written into the next tile's window as well).
void lowerFusedGroup(LowerContext& ctx, const GroupSchedule& group, uint32_t groupIndex);

/// Why the depthwise convolution `dw` with the unary epilogue `dwEpilogue` and the convolution `conv` cannot run as
/// a channel chain (GroupSchedule::channelChain): `conv` is no 1x1 convolution (stride 1, no padding or groups)
/// reading the depthwise result alone, or that result is an output of `body`. Empty when they can.
std::string channelChainRefusal(const Graph& body, const Node& dw, const std::vector<const Node*>& dwEpilogue, const Node& conv);
/// Why the convolution `expand` with the unary epilogue `epilogue` cannot be a channel chain's first stage before the
/// depthwise convolution `dw`: no 1x1 convolution (stride 1, no padding or groups) whose result `dw` alone reads, or
/// that result is an output of `body`. Empty when it can.
std::string expandChainRefusal(const Graph& body, const Node& expand, const std::vector<const Node*>& epilogue, const Node& dw);
/// Lowers a channel chain: per output tile, per depthwise channel block, the block's tile through the depthwise
/// epilogue into the input buffer and the 1x1 convolution's gemms of that block accumulating into the tile.
void lowerChannelChain(LowerContext& ctx, const GroupSchedule& group);

}  // namespace tessel::npu::lower
