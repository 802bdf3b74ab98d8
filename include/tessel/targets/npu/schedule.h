// The NPU schedule as data (S0, S1, S2): which nodes are fused into groups, how each node is tiled, the
// order and priority of the tiles, which values stay on chip, buffer depths and the sliding window. The
// lowering consumes an NpuSchedule and never decides these itself; the schedule is printed by `tessel
// sched`, stored in the .tnpu file, verified before lowering, and is what the search mutates.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"

namespace tessel::npu {

/// How one node's work is cut into tiles. Which fields matter depends on `variant`:
/// - "matrix" (Conv, Gemm, MatMul on the matrix unit): output tiles of rows x cols pixels and `channels`
///   output channels (at most DIM per gemm), input channels loaded `inChannels` at a time;
/// - "packed" (a Conv with few input channels): like matrix, with (kernel column, channel) pairs packed into
///   the reduction so the array is not mostly idle;
/// - "stacked" (a Conv with few input channels): like packed, with the kernel rows too: the loads stack each
///   output row's kernel rows side by side so one pixel's (kernel column, kernel row, channel) words are consecutive;
/// - "vector" (depthwise Conv on the vector unit), "pool" (MaxPool/AveragePool): rows x cols x channels;
/// - "elementwise": tiles of `cols` pixels x `channels` channels (rows is 1);
/// - "global-pool": chunks of `cols` pixels x `channels` channels;
/// - "alias" (Flatten/Reshape/Concat handled by addressing): no tiles.
struct NodeTiling {
  std::string node;     ///< node name in the subgraph body
  std::string op;       ///< its op type (for printing)
  std::string variant;  ///< see above
  int64_t rows = 1, cols = 1;   ///< output tile (pixels)
  int64_t channels = 1;         ///< output channels per tile (matrix: per gemm block; others: per tile)
  int64_t inChannels = 0;       ///< matrix/packed: input channels per loaded block
  int64_t coutPerPass = 0;      ///< matrix: output channels computed from one input load (0 = one block)
  bool weightsResident = true;  ///< matrix: a node's weight blocks stay in SRAM for all its tiles
  bool phased = false;          ///< matrix/packed, strided: the input window is held as one region per stride phase
  /// matrix/packed/stacked in a layer-by-layer group: the passes of output channels run inside each tile (tiles
  /// outer), so the tile's input blocks are loaded once and every pass's gemms read them, instead of the input being
  /// loaded again per pass (`coutPerPass` narrower than the output). The tile's whole input window then stays in the
  /// input buffer; resident weights are every pass's (of the convolution group), loaded once, and streamed weights
  /// load per tile and pass. A convolution with one tile per image (a classifier over a small map) then reads its
  /// input and its weights from DRAM exactly once.
  bool inputResident = false;
  int64_t slots = 2;            ///< buffer depth: tiles of this node in flight (2 = double buffering)
  /// "vector" (depthwise): 0 runs every tile on the vector unit; k >= 1 runs every k-th tile on the matrix unit
  /// instead (one block-diagonal gemm per tap and DIM channels, the bias as a one-row gemm), so both units share
  /// the work (1: every tile on the matrix unit).
  int64_t matrixEvery = 0;
  /// matrix/packed/stacked on a grouped convolution: this many consecutive groups are computed as one group whose
  /// weights are block-diagonal (zeros between the original groups), so a gemm block holds several narrow groups
  /// instead of one (RegNet's groups of 8 channels fill a quarter of a 16 x 16 array each). The other fields
  /// (channel blocks, passes) count the packed groups' channels. 1: none.
  int64_t groupPack = 1;
  /// matrix/packed/stacked whose epilogue starts with an Add of a same-shape tensor read from DRAM (a residual
  /// connection): that tensor's tile is loaded into the accumulator before the tile's gemms, which all accumulate
  /// onto it, so the Add takes no vector pass and no output-buffer tile (the bias and later steps follow as usual).
  bool residualInAcc = false;
  /// matrix, the expand or 1x1 stage of a channel chain (GroupSchedule::channelChain): its bias is added on the matrix
  /// unit, as a first gemm of a word holding 1.0 by the bias row (K = 1), instead of a vector add per tile.
  bool biasGemm = false;
  /// matrix/packed/stacked, of a layer-by-layer group or a channel chain's expand or 1x1 stage: the bias is broadcast
  /// into each accumulator tile by the load unit (one load of the bias row whose DRAM strides are 0, priced as the
  /// words it writes) before the gemms, which accumulate onto it: no gemm and no vector pass, for load cycles that
  /// are often idle (chooseBiasLoads, the chains' pricing). Not with biasGemm, residualInAcc, residualConv or
  /// maxPool (biasLoadRefusal).
  bool biasLoad = false;
  /// vector, the depthwise stage of a channel chain with an expand stage: each block's window is kept where the
  /// expand's gemms make it, in the accumulator (the ring of padding zeroed there), and the taps read it from there,
  /// instead of being copied into the input buffer: the input buffer then holds only the tile's input pixels and the
  /// depthwise results, so the tiles can be larger. With matrixEvery the blocks whose taps run on the matrix unit
  /// have their windows copied into the input buffer instead (the copy applies the expand's last step, which the
  /// others apply in place), where the gemms read them: the two units share the taps (matrixEvery 1 is refused).
  bool windowInAcc = false;
  /// Nodes applied in place to each tile before the store, in order (fused epilogue): activations and
  /// element-wise ops whose other operand is a scalar constant or a same-shape tensor read from DRAM.
  std::vector<std::string> epilogue;
  /// matrix/packed/stacked: a Mul node multiplying this node's first input by a per-channel vector (the broadcast
  /// Mul of squeeze-and-excitation) applied on the load side instead: every input block the node loads is
  /// multiplied in place by the matching channels of the vector (one vector instruction, the vector staged in the
  /// output buffer per pass), so the product never goes through DRAM. The Mul is listed in the node's group before
  /// it and is not lowered on its own. Empty: none.
  std::string inputScale;
  /// matrix/packed/stacked (a convolution without padding) or pool/pool-wide (a pool without padding or ceil_mode;
  /// the vectors for all channels staged once in the weight buffer), in a group of row_tiles 1: a BatchNormalization of this
  /// node's input followed by unary nodes (DenseNet's norm -> relu -> conv), applied on the load side instead:
  /// every input block the node loads gets the normalisation's per-channel affine map (one `vaffine`, scale and
  /// bias staged in the output buffer per pass) and then each unary step in place, so the normalised map never
  /// goes through DRAM. The nodes, in compute order, are listed in the node's group before it and are not lowered
  /// on their own. Empty: none.
  std::vector<std::string> inputNorm;
  /// matrix/packed/stacked/vector in a layer-by-layer group (row_tiles 1), or matrix/packed/stacked as the last
  /// stage of a fused group: a GlobalAveragePool or GlobalMaxPool of this node's result (after the epilogue)
  /// computed from the output tiles as they are made: per tile a reduce into a per-channel vector kept on chip
  /// (output buffer) for the image and channel block, scaled and stored after its last tile, so the pool does not
  /// load the result back from DRAM. The pool is listed in the node's group after it and is not lowered on its own.
  /// Empty: none.
  std::string globalPool;
  /// matrix/packed/stacked convolution without an epilogue of its own, in a layer-by-layer group: a MaxPool that
  /// alone reads its result, computed from each accumulator tile before the bias (a max commutes with a per-channel
  /// bias): `rows` x `cols` are then a tile of the pool's output, for which the convolution computes the rows and
  /// columns its windows read (the rows two tiles share computed by both), and the bias and `epilogue` (unary nodes
  /// after the pool) are applied to the pooled tile, which alone is stored. The convolution's result never goes
  /// through DRAM. The pool and its epilogue are listed in the node's group after it and are not lowered on their
  /// own. Empty: none.
  std::string maxPool;
  /// matrix/packed/stacked with residual_in_acc in a layer-by-layer group: the convolution whose result is the
  /// residual Add's other operand (ResNet's downsampling shortcut: a 1x1 strided convolution of the block's input),
  /// computed into each tile's accumulator by its own gemms before this node's, instead of being stored by a group
  /// of its own and loaded back into the accumulator: its result never goes through DRAM. It has this node's output
  /// shape, groups of one, no epilogue, and the Add alone reads it; its tiles are this node's (rows x cols, passes,
  /// passes inside the tile when input_resident), its input blocks `residualInChannels` wide (0: all its channels),
  /// its weights resident or streamed as `residualWeightsResident` says, its input split into stride phases when
  /// strided, and its bias added to this node's. It is listed in the group before this node. Empty: none.
  std::string residualConv;
  int64_t residualInChannels = 0;
  bool residualWeightsResident = true;

  /// A convolution, Gemm or MatMul on the matrix unit: variant matrix, packed or stacked.
  bool onMatrixUnit() const { return variant == "matrix" || variant == "packed" || variant == "stacked"; }

  bool operator==(const NodeTiling&) const = default;
};

/// A group of nodes scheduled together. With rowTiles == 1 every node runs layer by layer (its own
/// tiles, values through DRAM). With rowTiles > 1 the group is a chain around preset operators split along
/// H into tile subgraphs that each compute the whole chain on their rows (S0.2); `onChip` values stay in
/// SRAM between the chain's nodes.
struct GroupSchedule {
  std::vector<std::string> nodes;   ///< in compute order
  std::vector<NodeTiling> tiling;   ///< one per node that emits instructions
  int64_t rowTiles = 1;             ///< tile subgraphs along H (S0.2)
  std::vector<int64_t> tileOrder;   ///< compute priority of the tiles, highest first (S0.3)
  std::vector<std::string> onChip;  ///< values that never go to DRAM
  /// A channel chain (rowTiles 1): a depthwise convolution ("vector" tiling) and the 1x1 convolution reading its
  /// result ("matrix" tiling), computed tile by tile with the depthwise channel blocks inner: each block's output
  /// tile goes through the depthwise epilogue into the input buffer, where the 1x1 convolution's gemms read it as
  /// one input-channel block of a tile accumulating over all blocks; the depthwise result never goes to DRAM (it
  /// is the only `onChip` value) and no window ever holds all its channels (MobileNet's inverted residuals on a
  /// small input buffer). Both tilings have the same rows x cols; the depthwise tiling's channels are the block.
  bool channelChain = false;

  bool operator==(const GroupSchedule&) const = default;
};

/// The window sizes the lowering tries when a schedule leaves the window to it (window 0).
inline constexpr uint32_t kWindowChoices[] = {1, 2, 3, 4, 6, 8};

/// The schedule of one NPU subgraph.
struct NpuSchedule {
  std::string subgraph;
  /// "window": list scheduling of the instruction dependency graph with a sliding window of `window` tiles;
  /// "greedy": the same without a window; "sequential": every instruction waits for the previous one.
  std::string strategy = "window";
  /// "window": tiles admitted at once; 0 lets the lowering try 1, 2, 3, 4, 6, 8 and keep the fastest (ties: the
  /// smallest), and the lowered schedule records the choice. "greedy": 0 uncapped, else the most tiles in flight.
  int64_t window = 2;
  std::vector<GroupSchedule> groups;

  bool operator==(const NpuSchedule&) const = default;

  /// The tiling of a node, or nullptr when the schedule has none (fused activations, aliases).
  const NodeTiling* tilingOf(const std::string& node) const;
  NodeTiling* tilingOf(const std::string& node) {
    return const_cast<NodeTiling*>(static_cast<const NpuSchedule*>(this)->tilingOf(node));
  }
  /// Readable multi-line form (what `tessel sched` prints).
  std::string toText() const;
  nlohmann::json toJson() const;
  /// Parses toJson()'s form; throws UserError naming `origin` and the field on anything malformed.
  static NpuSchedule fromJson(const nlohmann::json& j, const std::string& origin);
};

/// The historical choices of the layer-by-layer lowering: one group per node (an activation that is a
/// Conv/Gemm/MatMul's only consumer fused into it), tiles sized so the accumulator tile and the input window
/// each fit half a buffer, cout-block-outer loops, two slots per buffer.
NpuSchedule defaultSchedule(const Graph& body, const hw::NpuConfig& cfg, const std::string& subgraph);

/// The compiler's choice: defaultSchedule's groups with every convolution, Gemm and MatMul tiled for the cheapest
/// cost under the timing model (tiles sized to the buffers, output channels per input load, packed reductions
/// for few input channels, weights resident or streamed), scheduled by the sliding window.
/// With `fusion` false no group is fused (the layer-by-layer baseline of `tessel sched --compare`).
NpuSchedule compilerSchedule(const Graph& body, const hw::NpuConfig& cfg, const std::string& subgraph, bool fusion = true);

/// The first half of compilerSchedule: every node tiled, squeeze-and-excitation Muls on their convolutions'
/// loads; nothing fused, no pool computed from its producer's tiles (the search's starting point).
NpuSchedule tiledSchedule(const Graph& body, const hw::NpuConfig& cfg, const std::string& subgraph);

/// Computes the global pool `pool` from the output tiles of convolution `conv` (NodeTiling::globalPool) when the
/// pair is a globalPoolCandidates one (the pool a group of its own, the convolution a layer-by-layer group or the
/// last stage of a fused one); false otherwise.
bool foldGlobalPool(NpuSchedule& schedule, const Graph& body, const std::string& pool, const std::string& conv);

/// The MaxPool groups (with a unary epilogue) whose input is the result of a matrix-unit convolution without epilogue
/// in a layer-by-layer group of its own, read by nothing else, which could pool its accumulator tiles
/// (NodeTiling::maxPool). Returns (pool group, convolution group) index pairs.
std::vector<std::pair<size_t, size_t>> maxPoolCandidates(const NpuSchedule& schedule, const Graph& body);
/// The convolution's tiling options for pooling candidate (gp, gc) of `schedule`: pooled tiles as wide as the
/// current convolution tile allows, half and a quarter as wide, per width the current pass width and half of it, each
/// with the most rows whose tiles fit half the accumulator, maxPool set and the pool's epilogue as the tiling's epilogue.
/// `overlapping`: also, per width and pass, the most rows whose input region fits the input buffer twice (the next
/// tile's region loads while this one's gemms run); offered to `tessel tune`, not taken by the compiler (on the
/// networks measured they traded DRAM bytes for under 1 % of the cycles: GoogLeNet on `edge` +4.2 MB for -0.14 %).
std::vector<NodeTiling> maxPoolTilings(const NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg, size_t gp,
                                       size_t gc, bool overlapping = false);
/// `schedule` with the pool group gp done by the convolution of group gc with `tiling` (one of maxPoolTilings).
NpuSchedule withMaxPool(const NpuSchedule& schedule, size_t gp, size_t gc, const NodeTiling& tiling);
/// Moves each candidate MaxPool into its convolution's tiles (the option priced cheapest that the instruction
/// scheduler models no slower than the two groups apart, both with the pricing window and with 8 tiles in flight):
/// row-tile fusion of a convolution and the pool reading it (S0), the map never stored. Run with fusion, after
/// chooseFusion.
void chooseMaxPools(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// The tiling a convolution's residual convolution (NodeTiling::residualConv) runs with: the convolution's tiles and
/// passes, its own input blocks, weights and stride phases, nothing absorbed.
NodeTiling residualConvTiling(const NodeTiling& conv, const Node& residual);
/// The layer-by-layer groups of one matrix-unit convolution alone (no epilogue, nothing absorbed, groups of one) whose
/// result only the residual Add of a later convolution's accumulator (NodeTiling::residualInAcc, a layer-by-layer
/// group) reads, of the same shape: candidates for NodeTiling::residualConv. Returns (its group, the reader's group).
std::vector<std::pair<size_t, size_t>> residualConvCandidates(const NpuSchedule& schedule, const Graph& body);
/// The options for candidate (gr, gc): the convolution's current tiling and its next three options (tilingOptions),
/// each with the residual convolution's input blocks of all its channels, its current block width or DIM, and its
/// weights resident or streamed; those whose input regions and weights the buffers hold (residualConvOverflow).
std::vector<NodeTiling> residualConvTilings(const NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg, size_t gr,
                                            size_t gc);
/// `schedule` with the convolution of group gr computed into the accumulator of group gc's convolution (whose tiling
/// becomes `tiling`, one of residualConvTilings), group gr removed.
NpuSchedule withResidualConv(const NpuSchedule& schedule, size_t gr, size_t gc, const NodeTiling& tiling);
/// Moves each candidate's convolution into its reader's accumulator (residualConvCandidates) when, of the two groups
/// apart and every merged option priced by the instruction scheduler, pickMatrixTiling's rule picks a merged one (the
/// cheapest in cycles, or within 2 % of it the fewest DRAM bytes) and that one also wins with 8 tiles in flight (a
/// fusion of two convolutions at the accumulator: the shortcut's result never stored). Run with fusion.
void chooseResidualConvs(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// Groups of a schedule that can run as one fused group (S0.2): joined by values every use of which is the
/// first input of another member (convolutions, depthwise convolutions, pools), containing a preset operator of
/// the configuration (default Conv).
std::vector<std::vector<size_t>> fusionCandidates(const NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// Replaces candidate groups by fused groups where that takes no more cycles (modelled by the instruction
/// scheduler) than running them layer by layer, with the number of row tiles that does best among those whose
/// windows fit the input buffer.
void chooseFusion(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// Cycles and DRAM bytes of a group or groups as the instruction scheduler models them (chooseFusion's prices).
struct PricedOption {
  uint64_t cycles = 0, dramBytes = 0;
};
/// Whether chooseFusion takes a fused option priced `fused` over its members layer by layer (`layered`, both in the
/// same context; `traffic`: the context's DRAM bytes beyond its constants): when it is not slower, or at most 3 %
/// slower and it saves a fifth of that traffic, or a tenth and at least the bytes the load unit moves in the extra
/// cycles (at full bandwidth: traffic that would cost more cycles than the option adds, were the loads the
/// bottleneck).
bool fusionPaysOff(const PricedOption& layered, const PricedOption& fused, uint64_t traffic, const hw::NpuConfig& cfg);

/// Replaces groups by fused groups: each entry's group takes the place of its last member, the other members go.
void replaceByFusedGroups(NpuSchedule& schedule, const std::vector<std::pair<std::vector<size_t>, GroupSchedule>>& fused);

/// How a fusion candidate runs as one group: its row tiles, and whether the intermediates stay on chip
/// (else they go through DRAM with the nodes' tiles interleaved).
struct FusionLayout {
  int64_t rowTiles = 1;
  bool onChip = true;
  bool operator==(const FusionLayout&) const = default;
};

/// The layouts a fusion candidate (members: group indices of `schedule`, as fusionCandidates gives them) may
/// take: on chip from the fewest row tiles whose windows fit the input buffer to a few more, and through DRAM
/// with 4, 8 or 16 output rows per tile. The search's options; chooseFusion prices a subset.
std::vector<FusionLayout> fusionLayouts(const NpuSchedule& schedule, const std::vector<size_t>& members, const Graph& body,
                                        const hw::NpuConfig& cfg);

/// The fused group of a candidate in `layout`, its stages tiled from the members' tilings.
GroupSchedule fuseGroup(const NpuSchedule& schedule, const std::vector<size_t>& members, const Graph& body,
                        const hw::NpuConfig& cfg, const FusionLayout& layout);

/// Pairs of adjacent layer-by-layer groups (depthwise convolution, 1x1 convolution reading its result alone) that
/// can run as a channel chain (GroupSchedule::channelChain). Returns (depthwise group, convolution group) indices.
std::vector<std::pair<size_t, size_t>> channelChainCandidates(const NpuSchedule& schedule, const Graph& body);

/// Up to `count` channel chains of a candidate pair: the depthwise tilings the node would take alone (cheapest
/// first), their tiles cut down until two tiles of the chain fit the buffers, the 1x1 convolution on the same tiles
/// with all its output channels per tile and its weights resident when they fit half the weight buffer.
std::vector<GroupSchedule> channelChainOptions(const NpuSchedule& schedule, size_t dwGroup, size_t convGroup, const Graph& body,
                                               const hw::NpuConfig& cfg, size_t count);

/// Channel chains (two tilings) whose previous group is a layer-by-layer 1x1 convolution that alone makes the
/// depthwise input (lower::expandChainRefusal): that convolution may become the chain's first stage (an expand
/// stage: the depthwise windows computed block by block from the tile's input pixels). Returns the chains' indices.
std::vector<size_t> expandChainCandidates(const NpuSchedule& schedule, const Graph& body);

/// Up to `count` chains of the expand group before `chainGroup` and the chain, tiled as channelChainOptions does with
/// the expand stage's working set counted.
std::vector<GroupSchedule> expandChainOptions(const NpuSchedule& schedule, size_t chainGroup, const Graph& body,
                                              const hw::NpuConfig& cfg, size_t count);

/// Replaces candidate pairs by the channel chain of fewest modelled cycles (the instruction scheduler, the groups
/// around in context) where that is fewer than the two groups'; then, the same way, the expand convolutions before
/// the chains taken (expandChainCandidates) and before the pairs left apart (the three groups against a chain with
/// an expand stage: the pair may lose alone and win with the expanded tensor kept off DRAM). Run after chooseFusion,
/// on the pairs it left.
void chooseChannelChains(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// The tilings the search may give node `n` instead of `current` (which comes first): a convolution's Pareto
/// front of matrix tilings (cycles vs DRAM bytes), then those of them whose passes can run inside each tile for fewer DRAM
/// bytes (NodeTiling::inputResident; last, so the front's order is kept), a depthwise convolution's best tiling per channel block and
/// matrix-unit share, a pool's windows in `inp` or in the accumulator. Other nodes: only `current`. Every option
/// keeps `current`'s epilogue and its work on loads and stores (inputScale, inputNorm, globalPool).
std::vector<NodeTiling> tilingOptions(const Node& n, const NodeTiling& current, const Graph& body, const hw::NpuConfig& cfg);

/// The broadcast Muls by a per-channel vector (squeeze-and-excitation) whose only reader is a convolution on the
/// matrix unit (a group of its own) that could apply them to its loaded input blocks (NodeTiling::inputScale).
/// Returns (Mul group, convolution group) index pairs.
std::vector<std::pair<size_t, size_t>> inputScaleCandidates(const NpuSchedule& schedule, const Graph& body);

/// The BatchNormalization groups (with a unary epilogue such as ReLU) whose result only a convolution on the matrix
/// unit or a pool reads, without padding and in a group of its own, which could apply them to its loaded input
/// blocks (NodeTiling::inputNorm). Returns (normalisation group, reader group) index pairs.
std::vector<std::pair<size_t, size_t>> inputNormCandidates(const NpuSchedule& schedule, const Graph& body);

/// Moves each candidate normalisation into its reader's input loads where that takes no more modelled cycles than
/// its own pass through DRAM.
void chooseInputNorms(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// The global pools (of a whole map: the squeeze of squeeze-and-excitation, a classifier's pool) whose input is the
/// result of a convolution in a layer-by-layer group of its own or of the matrix-unit convolution ending a fused
/// group, which could compute them from its output tiles (NodeTiling::globalPool). Returns (pool group,
/// convolution group) index pairs.
std::vector<std::pair<size_t, size_t>> globalPoolCandidates(const NpuSchedule& schedule, const Graph& body);

/// Moves each candidate pool into its convolution's output tiles where that takes fewer modelled cycles than
/// the pool's own pass over the map. Run after chooseFusion (a fused group ending in the convolution may take it).
void chooseGlobalPoolEpilogues(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// Why tiling `t` of group `g` cannot take NodeTiling::biasLoad ("" when it can): it needs a matrix-unit tiling of a
/// Conv or Gemm with a bias, in a layer-by-layer group or a channel chain, whose accumulator tiles start empty (no
/// residual or shortcut convolution there) and are not pooled before the bias.
std::string biasLoadRefusal(const GroupSchedule& g, const NodeTiling& t, const Graph& body);
/// The layer-by-layer groups whose tiling could take NodeTiling::biasLoad and does not, where the vector unit's passes
/// per output vector (the bias and the epilogue's steps, a complex one as four) exceed half the reduction slices.
std::vector<size_t> biasLoadCandidates(const NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);
/// Sets NodeTiling::biasLoad on each candidate where the instruction scheduler, pricing the group in context (the
/// group before and after, windows 2 and 8), says it takes fewer cycles than the vector unit's bias pass.
void chooseBiasLoads(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// Moves each candidate Mul into its convolution's input loads where that takes fewer modelled cycles (the
/// instruction scheduler, the two groups in context) than the Mul's own pass through DRAM.
void chooseInputScaling(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

/// Checks a schedule against the body and the machine: every node scheduled once and in topological order,
/// tile sizes legal for their node, each tile's working set within the buffers. Throws UserError listing
/// every problem.
void verifySchedule(const NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg);

}  // namespace tessel::npu
