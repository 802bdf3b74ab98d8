// The cpu target's lowering (internal): the Lowerer turns a typed graph into runtime kernel calls. One file
// per concern: lowering.cpp (tensors, weights, steps, dispatch, NCHWc8 region edges, the host fallback),
// lower_conv_gemm.cpp (convolutions, GEMMs), lower_pool.cpp, lower_elementwise.cpp (binary, unary,
// activations, BatchNorm, epilogues), lower_fused_elementwise.cpp (a tessel.FusedElementwise chain as one
// generated vector loop) and lower_tensor_ops.cpp (batched MatMul, attention, LayerNorm, Transpose, Split,
// Concat, typed nodes).
#pragma once

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernel_rules.h"
#include "plan.h"
#include "tessel/ops/registry.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/epilogue.h"
#include "tessel/rt/pool.h"

namespace tessel::cpu {

/// Activation fused into a kernel's epilogue.
struct FusedAct {
  rt::Activation kind = rt::Activation::None;
  float alpha = 0, beta = 0;  ///< rt::Epilogue's parameters
};

/// The C++ spelling of an rt::Activation enumerator ("Relu", "HardSigmoid", ...).
const char* activationName(rt::Activation a);
/// The epilogue activation a node computes when it is an activation the registry marks FusibleEpilogue and
/// the runtime has (constant parameters read through constTensor), else nullopt.
std::optional<FusedAct> activationOf(const Node* n);
/// The epilogue of a tessel.FusedConv / FusedGemm (attributes activation, activation_params); nullopt when
/// the runtime has no such activation.
std::optional<FusedAct> fusedEpilogueOf(const Node* n);

/// The value a nested graph's captured value stands for, found in the enclosing scopes (v itself otherwise).
const Value* definitionOf(const Value* v);
bool isConst(const Value* v);
/// Whether the lowering itself handles a node (else the interpreter fallback does): every output and every
/// non-constant input is a static float32 tensor.
bool floatsOnly(const Node* n);
/// Element types compiled code stores (everything but strings and complex numbers).
bool compiledDType(DType t);
/// Every output and non-constant input has a static shape and a compiledDType: the node can at least
/// run through the host fallback.
bool staticTensorsOnly(const Node* n);
/// The values of the enclosing graph that a node's nested graphs (If branches, Loop/Scan bodies, at any
/// depth) read by name, in first-use order.
std::vector<const Value*> capturedValues(const Node* n);
/// The runtime geometry of a MaxPool/AveragePool node on an NCHW input of shape xs, or nullopt when the
/// compiled kernels do not cover it (not 2-D, dilations, the Indices output, storage_order 1).
std::optional<rt::Pool2dShape> loweredPoolShape(const Node* n, const Shape& xs);
/// The initializer of a generated `rt::Pool2dShape` constant.
std::string poolShapeInit(const rt::Pool2dShape& p);

/// A scalar C++ expression over the broadcast operands a, b, c of an element-wise node, and how many operands
/// it reads (Expand's shape input is not one).
struct ElementExpr {
  std::string expr;
  size_t arity = 1;
};
/// The expression the generated broadcast loop computes for n (element_expressions.cpp), or nullopt.
std::optional<ElementExpr> elementExpression(const Node* n);

class Lowerer {
 public:
  Lowerer(const Graph& g, const CompileOptions& options) : graph_(g), options_(options) {}
  Plan run();

 private:
  // ---- tensors and weights
  int tensorOf(const Value* v);
  int weightTensor(const std::string& name, const std::vector<float>& data, const Shape& shape);
  int64_t addWeightData(const std::vector<float>& data);
  int64_t addWeightBytes(const std::string& bytes);
  static std::vector<float> floatsOf(const Value* v);
  /// What a step is for the profiler: node name, op label, runtime function, FLOPs.
  struct StepMeta {
    std::string node, op, kernel;
    double flops = 0;
  };
  void addStep(StepMeta meta, std::string comment, std::string code, std::vector<int> reads, std::vector<int> writes,
               int inplace = -1);
  static std::string ref(int id) { return fmt::format("@{}@", id); }

  // ---- ops
  using LowerFn = bool (Lowerer::*)(const Node*);
  /// The lowering of each op that has a kernel family of its own, by (domain, op); views and element-wise
  /// ops are found through the registry's traits instead.
  static const std::map<std::pair<std::string, std::string>, LowerFn>& loweringByOp();
  bool lowerNode(const Node* n);
  /// Every node of g in order (the main graph, or a nested graph inside its control-flow step).
  void lowerNodes(const Graph& g);
  // lower_control_flow.cpp: If, Loop and Scan as C++ control flow around their bodies' steps.
  bool lowerControlFlow(const Node* n);
  bool lowerIf(const Node* n);
  bool lowerLoop(const Node* n);
  bool lowerScan(const Node* n);
  /// Lowers a nested graph's nodes in place; returns the index of its first step.
  size_t lowerBody(const Graph& body);
  /// Copies tensor `from` into `to` (same size) as one step; nothing when they are the same tensor.
  void copyStep(const Node* n, int from, int to, const std::string& what);
  /// Adds to step `close` a read of every tensor steps [open, close) read but did not write (storage a loop
  /// reads stays live until it ends: the next iteration reads it again), and to step `open` a write of every
  /// tensor `close` writes (it keeps its storage through the whole loop).
  void keepLiveThrough(size_t open, size_t close);
  /// The end of an iteration: each body result `next[i]` copied into the body input `state[i]` (the
  /// copies' code; temporaries when two of them share storage), with the reads and writes it adds.
  std::string carryBack(const Node* n, const std::vector<int>& next, const std::vector<int>& state,
                        std::vector<int>& reads, std::vector<int>& writes);
  int controlCounter_ = 0;
  bool lowerFallback(const Node* n);
  /// Why no compiled code path took n (the host step's reason in the report).
  static std::string hostReason(const Node* n);
  // Each returns false, with nothing emitted, for a node it cannot express (the host fallback runs it).
  bool lowerConv(const Node* conv);
  /// An inverted residual block (pointwise -> depthwise -> pointwise conv) on a large map as one banded step
  /// (rt::conv_chain_nchw); false when the pattern does not hold (lowerConv then lowers the conv alone).
  bool lowerConvChain(const Node* expand);
  /// A namespace-scope `static const rt::Conv2dShape kShape<k>` of s; returns its name.
  std::string convShapeConstant(const rt::Conv2dShape& s);
  /// Reserves kernel k's packed weights of s in P and packs tensor `weights` there at load; returns the offset.
  int64_t packConvWeights(const rt::Conv2dKernel& k, const std::string& shapeName, const rt::Conv2dShape& s,
                          int weights);
  bool lowerGemm(const Node* n);
  // lower_elementwise.cpp
  /// An element-wise node through the runtime's activation, unary or binary kernels.
  bool lowerElementwise(const Node* n);
  bool lowerBinary(const Node* n);
  bool lowerBatchNorm(const Node* n);
  bool lowerPool(const Node* n);
  /// Pooling the 2-D kernels do not cover, of any numeric type, through rt::pool_nd.
  bool lowerPoolNd(const Node* n);
  // lower_nn_ops.cpp
  bool lowerDropout(const Node* n);
  /// Resize/Upsample with constant scales, sizes and roi: taps planned here, rt::resize_taps applies them.
  bool lowerResize(const Node* n);
  /// ConvTranspose of any rank through rt::conv_transpose_nd.
  bool lowerConvTranspose(const Node* n);
  /// GridSample (4-D) and NonMaxSuppression (its selection count checked against the planned output shape).
  bool lowerGridSample(const Node* n);
  bool lowerNonMaxSuppression(const Node* n);
  /// QuantizeLinear, DequantizeLinear (uint8/int8, per tensor or per axis) and DynamicQuantizeLinear.
  bool lowerQuantize(const Node* n);
  /// InstanceNormalization, LRN and the Hann/Hamming/Blackman windows (rt/norm_ops.h, generated loops).
  bool lowerNormOp(const Node* n);
  bool lowerReverseSequence(const Node* n);
  /// lower_index_ops.cpp: Scatter*, GatherND, OneHot, Compress, TopK, EyeLike through rt/index_ops.h.
  bool lowerIndexOp(const Node* n);
  /// TfIdfVectorizer over integer tokens (the n-gram pool as constant arrays, rt/text_ops.h).
  bool lowerTfIdf(const Node* n);
  // lower_tensor_ops.cpp
  bool lowerMatMulBatched(const Node* n);
  bool lowerAttention(const Node* n);
  bool lowerLayerNorm(const Node* n);
  bool lowerTranspose(const Node* n);
  bool lowerSplit(const Node* n);
  bool lowerConcat(const Node* n);
  /// Squeeze-and-excitation's Mul(x, s[1, C, 1, 1]) before a pointwise conv that is its only user: no step; the
  /// conv reads x and scales its weights by s each run (lower_conv_gemm.cpp).
  bool foldChannelScaleIntoConv(const Node* n);
  /// A channel Concat whose only user is a channel shuffle (Reshape, Transpose): one gather of planes.
  bool lowerShuffledConcat(const Node* n);
  /// The channel shuffle after a Concat that lowerShuffledConcat takes: its Reshape and Transpose, groups G and
  /// channels per group K (concat channel g K + j is output channel j G + g).
  struct ShuffleOfConcat {
    const Node* reshape;
    const Node* transpose;
    int64_t groups, perGroup;
  };
  std::optional<ShuffleOfConcat> shuffleOfConcat(const Node* n) const;
  /// Where a pointwise conv writes a Concat input straight into the shuffled tensor (lower_conv_gemm.cpp): the
  /// tensor, the plane of its channel 0 and the planes between its channels.
  struct ShuffledPlanes {
    int tensor;
    int64_t plane0, stride;
  };
  std::optional<ShuffledPlanes> shuffledPlanesOf(const Value* out, const rt::Conv2dShape& s);
  bool lowerSoftmax(const Node* n);
  /// Nodes of any element type: aliases (Reshape, ...), Gather, Slice, Cast, comparisons, logic, Where, Expand.
  bool lowerTypedNode(const Node* n);
  /// lower_recurrent.cpp: RNN, GRU and LSTM through rt::recurrent.
  bool lowerRecurrent(const Node* n);
  /// lower_reduce.cpp: Reduce* over axes known at compile time.
  bool lowerReduce(const Node* n);
  /// lower_axis_ops.cpp: ArgMax/ArgMin, Softmax family on any axis, CumSum, Trilu, GatherElements, Shape, Size.
  bool lowerAxisOp(const Node* n);
  bool lowerLayerNormRows(const Node* n);
  bool lowerClassLoss(const Node* n);
  /// lower_shape_checks.cpp: a check step for a run-time shape operand of n; false when n has one that no
  /// check covers (n then runs on the host).
  bool checkRunTimeShape(const Node* n);
  bool lowerSliceAtRunTime(const Node* n);
  bool lowerRange(const Node* n);
  bool lowerConstantOfShape(const Node* n);
  bool lowerTile(const Node* n);
  bool lowerGather(const Node* n);
  bool lowerSlice(const Node* n);
  bool lowerCast(const Node* n);
  bool lowerBroadcastOp(const Node* n);
  // lower_fused_elementwise.cpp
  /// A tessel.FusedElementwise as one vector loop, or else its body node by node.
  bool lowerFusedElementwise(const Node* n);
  bool lowerFusedLoop(const Node* n);
  bool lowerBodyNodes(const Node* n);
  /// A namespace-scope `static const int64_t kNAME<k>[]` holding `values`; returns its name.
  std::string int64Array(const char* prefix, const std::vector<int64_t>& values);
  // ---- NCHWc8 regions (select-layout)
  /// Input i of a blocked node is an activation in the node's layout (not a weight, bias or scalar).
  static bool blockedOperand(const Node* n, size_t i);
  /// v's tensor reordered to NCHWc8 (toBlocked) or back to NCHW: one reorder step per value and direction.
  int reordered(const Value* v, bool toBlocked);
  std::string epilogueExpr(int bias, int residual, const FusedAct& act, bool perColumn = false) const;
  const Node* singleUser(const Value* v) const;
  bool isGraphOutput(const Value* v) const;

  const Graph& graph_;
  const CompileOptions& options_;
  Plan plan_;
  std::map<const Value*, int> ids_;
  std::set<const Node*> absorbed_;
  /// Concat inputs a conv wrote straight into their planes after the channel shuffle (lowerConv).
  std::set<const Value*> inPlaceShuffleInputs_;
  /// Convs whose input is x * s folded by foldChannelScaleIntoConv: conv -> (x, s).
  std::map<const Node*, std::pair<const Value*, const Value*>> scaledConvInput_;
  std::vector<std::string> unsupported_;
  std::set<int> producedBySteps_;  ///< tensors some step writes (may become in-place Concat slices)
  int shapeCounter_ = 0;
  /// A fused chain is emitted where its last node was (its residual may be computed after the conv).
  const Node* emitAt_ = nullptr;
  std::map<const Node*, std::vector<PlanStep>> deferred_;
  std::set<const Value*> blocked_;                     ///< values produced in NCHWc8
  std::map<const Value*, int> blockedCopies_, nchwCopies_;  ///< reorders made so far
  std::map<const Value*, int> operandOverride_;        ///< while lowering a node: its operands' reordered tensors
};

}  // namespace tessel::cpu
