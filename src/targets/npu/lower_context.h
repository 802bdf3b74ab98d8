// Internals of the NPU lowering shared by the operator interpreters: the per-subgraph lowering context (DRAM
// layout, constants, the program builder on virtual SRAM regions), instruction builders and the op-family table.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"
#include "tessel/targets/npu/isa.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/npu/schedule.h"
#include "schedule/virtual_program.h"

namespace tessel::npu::lower {

/// A fused activation applied by the vector unit in place (vun).
struct Activation {
  VecOp op = VecOp::Copy;
  float imm0 = 0, imm1 = 0;
};
/// The VEC unit's sub-op computing this element-wise node (its ONNX name in snake case), if it has one.
std::optional<VecOp> vectorOpOf(const Node& node);
/// The activation a node computes, if it is one of the element-wise activations the VEC unit has (a unary
/// sub-op; its immediates are the registry's epilogue parameters).
std::optional<Activation> activationOf(const Node& node);

/// One step of a fused epilogue, applied in place to a tile of a node's result before it is stored: a unary
/// vector op (an activation, or arithmetic with a scalar constant as immediates) or a binary op with a tile of a
/// same-shape tensor read from DRAM (`other`).
struct EpilogueStep {
  bool unary = true;
  Activation op;               ///< unary: the op and its immediates; binary: op.op is the binary VecOp
  const Value* other = nullptr;
  /// Binary: the other operand is the tile itself as it was before step `saved` of the same epilogue, kept on chip
  /// by a copy, not read from DRAM; -1 when it comes from DRAM. (SiLU's x * Sigmoid(x), which used it, is one
  /// `silu` step now; no chain epilogueChain admits produces it any more.)
  int saved = -1;
};
/// The step `user` computes when it is applied in place to `value` (one of its inputs), if it can be.
std::optional<EpilogueStep> epilogueStep(const Node& user, const Value* value);
/// When `mul` is the Mul of SiLU, x * Sigmoid(x) in either operand order with the Sigmoid read by it alone: that
/// Sigmoid (the pair is one `silu` sub-op); else null.
const Node* siluSigmoid(const Node& mul);
/// The epilogue steps of `chain` applied in order to `base` (the values before each step are the chain's own:
/// a binary step reading one of them gets `saved`); nothing when some node cannot be a step.
std::optional<std::vector<EpilogueStep>> epilogueSteps(const Value* base, const std::vector<const Node*>& chain);
/// Whether the first of `steps` adds a tensor read from DRAM (a residual connection), which a matrix-unit
/// convolution can load into its accumulator before the gemms instead (NodeTiling::residualInAcc).
bool residualFirst(const std::vector<EpilogueStep>& steps);
/// Whether `add` is an Add of a non-depthwise matrix-unit node's result, read by it alone, and a same-shape tensor:
/// the Add can be that node's residualInAcc (no vector work).
bool residualAddOfMatrix(const Node& add);

class LowerContext;
/// Emits `steps` (unary only: a pool's or an element-wise node's epilogue) in place on `tile`, an outer x inner x
/// vecLen box of region `region`.
void applyUnarySteps(LowerContext& ctx, const std::vector<EpilogueStep>& steps, int32_t region, SramOperand tile,
                     uint32_t outer, uint32_t inner, uint32_t vecLen);

/// The scales and biases of an input normalisation (NodeTiling::inputNorm) staged in SRAM: two regions of `words`
/// words of buffer `b`, loaded from DRAM addresses `scales` and `biases`.
struct StagedNorm {
  int32_t scale = -1, bias = -1;
};
StagedNorm stageNorm(LowerContext& ctx, Buffer b, uint64_t scales, uint64_t biases, uint64_t words);
/// Normalises a loaded input block in place: `tile` (outer x inner x vecLen of `region`) mapped by the staged
/// vectors from their word `channel` on, then each unary step of `steps`.
void applyNorm(LowerContext& ctx, const StagedNorm& norm, const std::vector<EpilogueStep>& steps, int32_t region,
               SramOperand tile, uint32_t outer, uint32_t inner, uint32_t vecLen, uint64_t channel);

/// A Mul by a per-channel vector applied to a convolution's input blocks as they are loaded (NodeTiling::inputScale).
struct InputScale {
  const Value* full = nullptr;    ///< the tensor scaled (the convolution reads it from DRAM)
  const Value* vector = nullptr;  ///< one factor per channel
};
/// The operands of `mul` when it can scale the first input of `consumer` on the load side: a Mul of a rank-4
/// tensor by a per-channel vector whose result only `consumer`, a Conv that is not depthwise, reads (as its
/// first input), and which is no output of `body`.
std::optional<InputScale> inputScaleOf(const Graph& body, const Node& mul, const Node& consumer);

/// A BatchNormalization and the unary steps after it applied to a convolution's input blocks as they are loaded
/// (NodeTiling::inputNorm).
struct InputNorm {
  const Value* full = nullptr;      ///< the tensor normalised (the convolution reads it from DRAM)
  std::vector<float> scale, bias;   ///< the normalisation as a per-channel affine map
  std::vector<EpilogueStep> steps;  ///< unary steps after it, in order
};
/// Inference BatchNormalization `bn` as a per-channel affine map x * scale + bias.
std::pair<std::vector<float>, std::vector<float>> batchNormAffine(const Node& bn);
/// Whether `n` reads its first input only inside the image, so a map transformed on its loads is all it needs: a
/// Conv that is not depthwise and has no padding (the normalisation of a padded zero would not be zero), or a
/// MaxPool/AveragePool without padding or ceil_mode.
bool unpaddedReader(const Node& n);
/// What `chain` (a BatchNormalization, then unary nodes, each reading the previous one's result) computes when it
/// can be applied to the loaded input blocks of `consumer` (unpaddedReader), reading the chain's last result as its
/// first input, which is the only reader of every result of the chain; none of them is an output of `body`.
std::optional<InputNorm> inputNormOf(const Graph& body, const std::vector<const Node*>& chain, const Node& consumer);

/// Whether `pool` (GlobalAveragePool / GlobalMaxPool of a rank-4 map) can be computed from the output tiles of the
/// Conv `producer` whose result (after its epilogue) is `result` (NodeTiling::globalPool).
bool globalPoolFromTiles(const Node& pool, const Node& producer, const Value* result);

/// Whether `pool` can be computed from the accumulator tiles of the Conv `conv` (NodeTiling::maxPool): a MaxPool the
/// NPU lowers, of a non-depthwise Conv's result, which nothing else reads and which is no output of `body`.
bool maxPoolFromTiles(const Graph& body, const Node& pool, const Node& conv);

/// Whether the Conv `residual` can be computed into the accumulator of the Conv `conv` (NodeTiling::residualConv): a
/// Conv of groups of one with constant weights and bias, whose result, of `conv`'s output shape, only an Add of
/// `conv`'s result reads, and which is no output of `body`.
bool residualConvInto(const Graph& body, const Node& residual, const Node& conv);

/// Where a tensor of the subgraph lives in DRAM and how it is viewed: `pixels` rows of `channels` words
/// (rank 4: N*H*W pixels of C channels, channels-last; otherwise the last axis is the channel axis).
struct TensorLoc {
  uint64_t addr = 0;
  Shape shape;
  bool channelsLast = false;
  int64_t stride = 0;  ///< words from one pixel to the next; 0: channels() (dense). A channel slice of a
                       ///< Concat's output is a view with the output's stride.
  int64_t channels() const;
  int64_t pixels() const;
  int64_t pixelStride() const { return stride ? stride : channels(); }
  int64_t words() const { return shapeSize(shape); }
};

/// State of lowering one subgraph.
class LowerContext {
 public:
  LowerContext(const Graph& body, const hw::NpuConfig& cfg, const NpuSchedule& schedule);
  const hw::NpuConfig& cfg;
  const NpuSchedule& schedule;
  /// Instructions on virtual SRAM regions, tile by tile; scheduled after the whole subgraph is lowered.
  sched::ProgramBuilder builder;
  uint32_t group = 0;  ///< schedule group being lowered

  /// The schedule's tiling of a node (internal error when the verified schedule has none).
  const NodeTiling& tiling(const Node& node) const;
  /// Starts tile `index` of `node`: what follows is one unit of the sliding window.
  void beginTile(const Node& node, uint32_t index) {
    builder.beginTile(group, index);
    builder.setNode(node.name());
  }
  /// A new SRAM region of the current tile.
  int32_t region(Buffer b, uint64_t words, bool workspace = false) { return builder.region(b, words, workspace); }
  /// An operand addressing a region.
  SramOperand at(int32_t region, uint64_t offset = 0, uint64_t strideOuter = 0, uint64_t strideInner = 0) const {
    return builder.at(region, offset, strideOuter, strideInner);
  }
  /// Emits an instruction whose operands address the regions given in the order dst, srcA, srcB, srcC.
  void emit(const Instruction& inst, int32_t dst = -1, int32_t srcA = -1, int32_t srcB = -1, int32_t srcC = -1) {
    builder.emit(inst, {dst, srcA, srcB, srcC});
  }

  /// DRAM location of a (non-constant, or constant) value of the body.
  const TensorLoc& loc(const Value* v);
  /// Constant data of a value as float32 (nullptr when not a constant).
  const Tensor* constant(const Value* v) const;
  /// Appends words to the constant region; returns their DRAM word address.
  uint64_t addConstant(const std::vector<float>& words);
  /// Gives a value produced by a node its own DRAM region (regions are not reused, so the scheduler may
  /// overlap any two nodes that do not depend on each other). Nothing happens when it already has a location.
  void allocate(const Value* v);
  /// allocate() for each output of `node` (output 0 as the result after its fused epilogue, resultValue).
  void allocateResults(const Node& node);
  /// Makes `v` a view of `base`'s location from channel `channelOffset` on (same pixels, base's stride).
  void view(const Value* v, const TensorLoc& base, int64_t channelOffset);
  bool hasLoc(const Value* v) const { return locs_.count(v) != 0; }

  /// Epilogue nodes the schedule fuses into their producer (applied in place, not lowered on their own):
  /// fusedInto[epilogue node] = producer.
  std::map<const Node*, const Node*> fusedInto;
  /// The value a node's result must be stored to (the last epilogue node's output when fused).
  const Value* resultValue(const Node& node) const;
  /// The epilogue steps fused into `node`, in order.
  std::vector<EpilogueStep> epilogue(const Node& node) const;
  /// The Mul the schedule applies to `node`'s loaded input blocks (NodeTiling::inputScale), if any.
  std::optional<InputScale> inputScale(const Node& node) const;
  /// The normalisation the schedule applies to `node`'s loaded input blocks (NodeTiling::inputNorm), if any.
  std::optional<InputNorm> inputNorm(const Node& node) const;
  /// The global pool the schedule computes from `node`'s output tiles (NodeTiling::globalPool), or nullptr.
  const Node* globalPool(const Node& node) const;
  /// The MaxPool the schedule computes from `node`'s accumulator tiles (NodeTiling::maxPool), or nullptr.
  const Node* maxPool(const Node& node) const;
  /// The convolution the schedule computes into `node`'s accumulator tiles (NodeTiling::residualConv), or nullptr.
  const Node* residualConv(const Node& node) const;

  const Graph& body() const { return body_; }
  bool isBodyOutput(const Value* v) const;

  std::vector<float> constants;
  uint64_t activationBase = 0;  ///< first word after the constants (fixed once lowering starts)
  uint64_t dramWords = 0;       ///< high-water mark

 private:
  std::map<const Value*, TensorLoc> locs_;
  const Graph& body_;
};

/// One op family's operator interpreter (S2.1).
/// The op families; a node's family decides its tiling variant and how its work is counted.
enum class OpFamily { Matrix, Elementwise, Pool, GlobalPool, Alias };
struct OpLowering {
  OpFamily family = OpFamily::Elementwise;
  std::function<hw::SupportResult(const Node&)> check;  ///< can this node be lowered?
  std::function<void(const Node&, LowerContext&)> lower;
  /// Optional: can this node be lowered on this configuration (an operator whose tile must fit the buffers whole)?
  std::function<hw::SupportResult(const Node&, const hw::NpuConfig&)> fits = nullptr;
  /// Optional: adds the node's schedule-independent work to `w` in place of its family's default count (an operator
  /// whose work is not its family's: a LayerNorm's passes, a MatMul of computed operands on the matrix unit).
  std::function<void(const Node&, const hw::NpuConfig&, SubgraphWork& w)> work = nullptr;
};
/// Which operand of a binary element-wise node holds one value per row of the other, which has the output's shape
/// ([..., C] op [..., 1]; a map op [N, 1, H, W]), when one does (lower_norm.cpp).
std::optional<size_t> perRowOperand(const Node& n);
/// Lowers such a node: per tile of whole rows, each row's value loaded into 16 lanes and applied by the vector unit.
void lowerRowBroadcast(const Node& n, LowerContext& ctx);
/// Whether a row of such a node's output fits this configuration's buffers.
hw::SupportResult rowBroadcastFits(const Node& n, const hw::NpuConfig& cfg);
/// Before lowering: every Concat input that its producer can write straight into its slice of the output gets
/// that slice as its DRAM location (a view with the output's pixel stride).
void placeConcatInputs(const Graph& body, LowerContext& ctx);
/// What groups `groups` of the schedule cost when lowered on their own (their inputs as if already in DRAM):
/// the cycles the instruction scheduler models and the DRAM bytes the instructions move. Prices one choice of
/// the schedule against another.
struct ModelledCost {
  uint64_t cycles = 0, dramBytes = 0;
};
ModelledCost modelledCost(const Graph& body, const hw::NpuConfig& cfg, const NpuSchedule& schedule,
                          const std::vector<size_t>& groups);
/// The same, or nothing when the buffers cannot hold the groups: verifySchedule refuses the schedule, or the list
/// scheduler cannot place it (its internal error).
std::optional<ModelledCost> modelledCostIfItFits(const Graph& body, const hw::NpuConfig& cfg, const NpuSchedule& schedule,
                                                 const std::vector<size_t>& groups);
/// The family of a node the NPU can lower (nullopt for other nodes).
std::optional<OpFamily> opFamily(const Node& node);
/// The table of op-family lowerings, by ONNX op type.
std::map<std::string, OpLowering>& opLowerings();
/// The key under which the lowering of every unary VEC sub-op (activationOf) is registered.
inline constexpr const char* kVectorUnaryLowering = "vector unary";
/// The key of the lowering of a MatMul whose right operand is computed, not a constant (lower_matmul.cpp).
inline constexpr const char* kComputedMatMulLowering = "MatMul with a computed B";
/// How a node is lowered: by its op type (a MatMul of a computed B: kComputedMatMulLowering), else the vector-unary
/// lowering for an activation; nullptr for neither.
const OpLowering* findLowering(const Node& node);
struct RegisterOpLowering {
  RegisterOpLowering(std::initializer_list<const char*> ops, OpLowering l) {
    for (const char* op : ops) opLowerings()[op] = l;
  }
};

/// Helpers for the interpreters.
/// The channel axis of a rank-`rank` tensor as the NPU stores it, which is also its contiguous axis: 1 for rank 4
/// (channels-last), the last axis otherwise.
inline int64_t channelAxis(size_t rank) { return rank == 4 ? 1 : static_cast<int64_t>(rank) - 1; }
/// The largest count an instruction's outer, inner or vec_len field holds.
inline constexpr int64_t kMaxInstructionCount = (int64_t{1} << kCountBits) - 1;
/// Words of buffer `b` in the configuration.
inline int64_t bufferWords(const hw::NpuConfig& cfg, Buffer b) {
  return static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(b)));
}
hw::SupportResult ok();
hw::SupportResult refuse(std::string why);
/// Static f32 shapes on every input and output (refusal names the first that is not).
hw::SupportResult checkStaticF32(const Node& node);
/// Float values of a constant (any real dtype).
std::vector<float> constantFloats(const Tensor& t);

/// Load (DRAM -> SRAM) of a 3-D box; DRAM strides in words.
Instruction makeLoad(SramOperand dst, uint64_t dramAddr, uint64_t dramStrideOuter, uint64_t dramStrideInner,
                     uint32_t outer, uint32_t inner, uint32_t vecLen);
/// Store (SRAM -> DRAM) of a 3-D box.
Instruction makeStore(SramOperand src, uint64_t dramAddr, uint64_t dramStrideOuter, uint64_t dramStrideInner,
                      uint32_t outer, uint32_t inner, uint32_t vecLen);
Instruction makeVecUnary(VecOp op, SramOperand dst, SramOperand a, uint32_t outer, uint32_t inner, uint32_t vecLen,
                         float imm0 = 0, float imm1 = 0);
Instruction makeVecBinary(VecOp op, SramOperand dst, SramOperand a, SramOperand b, uint32_t outer, uint32_t inner,
                          uint32_t vecLen);
/// dst = a * scale[c] + bias[c] (per-channel vectors: operands with stride 0).
Instruction makeVecAffine(SramOperand dst, SramOperand a, SramOperand scale, SramOperand bias, uint32_t outer, uint32_t inner,
                          uint32_t vecLen);
SramOperand operand(Buffer b, uint64_t addr, uint64_t strideOuter = 0, uint64_t strideInner = 0);
/// Loads `words` contiguous DRAM words (any count) into `region` at `offset`, in boxes the encoding accepts.
void loadContiguous(LowerContext& ctx, int32_t region, uint64_t offset, uint64_t dramAddr, uint64_t words);

/// Copies between DRAM tensors by DMA (lower_copy.cpp): a box of elements with, per axis, its size and the words
/// between consecutive indices in the source and in the destination.
struct CopyBox {
  std::vector<int64_t> size, src, dst;
  uint64_t srcAddr = 0, dstAddr = 0;
};
/// Words between consecutive indices of each logical axis of a tensor as the NPU stores it (rank 4 channels-last,
/// other ranks row-major with the pixel stride between rows of the last axis).
std::vector<int64_t> storageStrides(const TensorLoc& l);
/// storageStrides of a dense tensor of shape `s`.
std::vector<int64_t> denseStrides(const Shape& s);
/// The box copying the elements of `x` (strides `xs`) to `y` (strides `ys`) in row-major (ONNX) order: a Reshape
/// that changes the NPU's layout. Each axis of the box is a part of an axis of each shape (their common
/// refinement); nullopt when there is none ([4, 6] -> [6, 4]) or the element counts differ. Addresses are 0.
std::optional<CopyBox> reshapeBox(const Shape& x, const std::vector<int64_t>& xs, const Shape& y,
                                  const std::vector<int64_t>& ys);
/// Lowers `box` as tiles of `node` numbered from `tile` on (returns the next number): rows of the destination's
/// contiguous axis within the node's alias slot, each tile one load into `inp` (whole rows when the source's stride
/// along them is 1, else one word per element) and one store.
uint32_t copyBox(LowerContext& ctx, const Node& node, const CopyBox& box, uint32_t tile);
/// Tensors of this many elements or more are not copied by DMA (the inner DRAM stride field holds 24 bits).
inline constexpr int64_t kMaxCopyElements = int64_t{1} << 24;
/// Refuses a tensor of kMaxCopyElements or more (a copy steps by strides up to its size).
hw::SupportResult checkCopySize(const Shape& s);

}  // namespace tessel::npu::lower
