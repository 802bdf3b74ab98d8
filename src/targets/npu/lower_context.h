// Internals of the NPU lowering shared by the operator interpreters: the dependency-tracking instruction
// emitter, the per-subgraph lowering context (DRAM layout, constants, SRAM slots) and the op-family table.
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

namespace tessel::npu::lower {

/// Appends instructions in program order and adds the dependency tokens they need (S2.2): for every SRAM
/// and DRAM word range an instruction reads or writes, the last writer (RAW) and, for writes, the readers
/// and writer since (WAR, WAW) on *other* units become waits; the producer gets the matching signal bit
/// after the fact. Same-unit order is kept by the hardware (in-order issue and completion, interlock).
/// Ranges are the bounding word intervals of the accessed boxes, which is conservative and therefore safe.
class Emitter {
 public:
  /// Emits one instruction; returns its index in the program.
  size_t emit(Instruction inst);
  const Program& program() const { return program_; }
  Program take() { return std::move(program_); }
  size_t size() const { return program_.instructions.size(); }

 private:
  struct Segment {
    uint64_t hi = 0;      ///< last word (inclusive); the map key is the first
    int64_t writer = -1;  ///< program index of the last write
    std::array<int64_t, kNumUnits> readers{-1, -1, -1, -1};  ///< latest reader per unit since that write
  };
  using SegmentMap = std::map<uint64_t, Segment>;
  void track(SegmentMap& map, uint64_t lo, uint64_t hi, bool write, int64_t index, Unit unit,
             std::array<int64_t, kNumUnits>& need);
  static void splitAt(SegmentMap& map, uint64_t at);

  Program program_;
  std::array<SegmentMap, kNumBuffers> sram_;
  SegmentMap dram_;
  /// covered_[from][to]: program index of the producer whose token `to` consumed last from `from`.
  std::array<std::array<int64_t, kNumUnits>, kNumUnits> covered_{{{-1, -1, -1, -1}, {-1, -1, -1, -1},
                                                                   {-1, -1, -1, -1}, {-1, -1, -1, -1}}};
};

/// A fused activation applied by the vector unit in place (vun).
struct Activation {
  VecOp op = VecOp::Copy;
  float imm0 = 0, imm1 = 0;
};
/// The activation a node computes, if it is one of the element-wise activations the VEC unit has.
std::optional<Activation> activationOf(const Node& node);

/// Where a tensor of the subgraph lives in DRAM and how it is viewed: `pixels` rows of `channels` words
/// (rank 4: N*H*W pixels of C channels, channels-last; otherwise the last axis is the channel axis).
struct TensorLoc {
  uint64_t addr = 0;
  Shape shape;
  bool channelsLast = false;
  int64_t channels() const;
  int64_t pixels() const;
  int64_t words() const { return shapeSize(shape); }
};

/// State of lowering one subgraph.
class LowerContext {
 public:
  LowerContext(const Graph& body, const hw::NpuConfig& cfg, const NpuSchedule& schedule);
  const hw::NpuConfig& cfg;
  const NpuSchedule& schedule;
  Emitter emitter;

  /// The schedule's tiling of a node (internal error when the verified schedule has none).
  const NodeTiling& tiling(const Node& node) const;

  /// DRAM location of a (non-constant, or constant) value of the body.
  const TensorLoc& loc(const Value* v);
  /// Constant data of a value as float32 (nullptr when not a constant).
  const Tensor* constant(const Value* v) const;
  /// Appends words to the constant region; returns their DRAM word address.
  uint64_t addConstant(const std::vector<float>& words);
  /// Allocates the DRAM region of a value produced by a node (released when its last use is lowered).
  void allocate(const Value* v);
  /// Frees the regions of values whose last use is `node` (not subgraph outputs).
  void releaseAfter(const Node& node);

  /// Capacity in words of one of the two slots each buffer is split into (double buffering).
  uint64_t slotWords(Buffer b) const { return cfg.bufferWords(static_cast<size_t>(b)) / 2; }
  /// Word address of slot `i % 2` of a buffer.
  uint32_t slot(Buffer b, uint64_t i) const { return static_cast<uint32_t>((i % 2) * slotWords(b)); }

  /// Activations the schedule fuses into a Conv/Gemm/MatMul (applied in place, the activation node is
  /// skipped): fusedInto[activation node] = producer.
  std::map<const Node*, const Node*> fusedInto;
  /// The value a node's result must be stored to (the activation's output when fused).
  const Value* resultValue(const Node& node) const;
  /// The activation fused into `node`, if any.
  std::optional<Activation> fusedActivation(const Node& node) const;

  std::vector<float> constants;
  uint64_t activationBase = 0;  ///< first word after the constants (fixed once lowering starts)
  uint64_t dramWords = 0;       ///< high-water mark

 private:
  std::map<const Value*, TensorLoc> locs_;
  std::map<const Value*, size_t> lastUse_;        // value -> index of the last node reading it
  std::map<const Node*, size_t> nodeIndex_;
  std::vector<std::pair<uint64_t, uint64_t>> free_;  // (addr, words) free DRAM blocks above activationBase
  const Graph& body_;
};

/// One op family's operator interpreter (S2.1).
struct OpLowering {
  std::function<hw::SupportResult(const Node&)> check;  ///< can this node be lowered?
  std::function<void(const Node&, LowerContext&)> lower;
};
/// The table of op-family lowerings, by ONNX op type.
std::map<std::string, OpLowering>& opLowerings();
struct RegisterOpLowering {
  RegisterOpLowering(std::initializer_list<const char*> ops, OpLowering l) {
    for (const char* op : ops) opLowerings()[op] = l;
  }
};

/// Helpers for the interpreters.
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
SramOperand operand(Buffer b, uint64_t addr, uint64_t strideOuter = 0, uint64_t strideInner = 0);
/// Moves `words` contiguous words (any count) between DRAM and SRAM in boxes the encoding accepts.
void loadContiguous(Emitter& e, Buffer b, uint64_t sramAddr, uint64_t dramAddr, uint64_t words);

}  // namespace tessel::npu::lower
