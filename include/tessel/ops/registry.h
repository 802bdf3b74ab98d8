// The operator registry: every operator is defined once (arity, attributes with defaults, opset range,
// type/shape inference, reference kernel, cost, opset upgrade). Passes, the importer, the interpreter and
// the targets ask the registry; nothing else switches on operator names.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "tessel/ir/graph.h"

namespace tessel {

/// Declared attribute of an operator.
struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> defaultValue;  ///< used when the node does not set it
  bool required = false;
};

/// Work of one node, for reports and cost models.
struct Cost {
  double flops = 0;         ///< multiply-adds count as 2
  double bytesRead = 0;     ///< inputs (weights included)
  double bytesWritten = 0;  ///< outputs
};

/// What type/shape inference sees of a node. Values of inputs are known when they are constants or were
/// computed during inference (shape arithmetic: Shape -> Gather -> Concat -> Reshape).
class InferContext {
 public:
  InferContext(Node& node, std::function<const Tensor*(const Value*)> knownValue)
      : node_(node), knownValue_(std::move(knownValue)) {}
  Node& node() { return node_; }
  size_t numInputs() const { return node_.numInputs(); }
  bool hasInput(size_t i) const { return node_.hasInput(i); }
  const TensorType& inputType(size_t i) const;
  /// The input's data if known at compile time, else nullptr.
  const Tensor* inputValue(size_t i) const;
  size_t numOutputs() const { return node_.numOutputs(); }
  bool hasOutput(size_t i) const { return node_.output(i) != nullptr; }
  void setOutputType(size_t i, TensorType t);
  /// Records the output's data when inference could compute it (shape arithmetic).
  void setOutputValue(size_t i, Tensor t);
  std::map<size_t, Tensor>& outputValues() { return outputValues_; }
  /// Throws UserError "node 'x' (Op): <message>".
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    failMessage(fmt::format(f, std::forward<Args>(args)...));
  }
  [[noreturn]] void failMessage(const std::string& message) const;

 private:
  Node& node_;
  std::function<const Tensor*(const Value*)> knownValue_;
  std::map<size_t, Tensor> outputValues_;
};

/// Runs nested graphs on behalf of a kernel (implemented by the interpreter).
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  /// Runs `body` with the given inputs (in body input order); values captured from enclosing scopes are
  /// resolved from the calling node's environment. Returns the body's outputs in order.
  virtual std::vector<Tensor> runSubgraph(const Graph& body, const std::vector<Tensor>& inputs) = 0;
};

/// What a reference kernel sees: the node, its input tensors, and slots for its outputs.
class KernelContext {
 public:
  KernelContext(const Node& node, std::vector<const Tensor*> inputs, SubgraphRunner* runner, std::mt19937_64* rng)
      : node_(node), inputs_(std::move(inputs)), outputs_(node.numOutputs()), runner_(runner), rng_(rng) {}
  const Node& node() const { return node_; }
  size_t numInputs() const { return inputs_.size(); }
  bool hasInput(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  /// Input i (throws a user error naming the node if it is absent).
  const Tensor& input(size_t i) const;
  size_t numOutputs() const { return outputs_.size(); }
  /// False when an optional output is not requested by the graph (its value may be skipped).
  bool outputRequested(size_t i) const { return node_.output(i) != nullptr; }
  /// Allocates output i as a zero-filled tensor and returns it for writing.
  Tensor& allocateOutput(size_t i, DType dtype, Shape shape);
  void setOutput(size_t i, Tensor t);
  std::vector<Tensor>& outputs() { return outputs_; }

  int64_t attrInt(const std::string& n) const { return node_.attrInt(n); }
  float attrFloat(const std::string& n) const { return node_.attrFloat(n); }
  std::string attrString(const std::string& n) const { return node_.attrString(n); }
  std::vector<int64_t> attrInts(const std::string& n) const { return node_.attrInts(n); }
  std::vector<float> attrFloats(const std::string& n) const { return node_.attrFloats(n); }
  std::vector<std::string> attrStrings(const std::string& n) const { return node_.attrStrings(n); }
  const Tensor& attrTensor(const std::string& n) const { return node_.attrTensor(n); }
  const Graph& attrGraph(const std::string& n) const { return node_.attrGraph(n); }
  bool hasAttr(const std::string& n) const { return node_.hasAttr(n); }

  /// Runs a nested graph (If/Loop/Scan bodies).
  std::vector<Tensor> runSubgraph(const Graph& body, const std::vector<Tensor>& inputs);
  /// The interpreter's random generator (seeded by `tessel run --seed`).
  std::mt19937_64& rng();

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    failMessage(fmt::format(f, std::forward<Args>(args)...));
  }
  [[noreturn]] void failMessage(const std::string& message) const;

 private:
  const Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor> outputs_;
  SubgraphRunner* runner_;
  std::mt19937_64* rng_;
};

/// Context for converting a node imported at an older opset into the form the definition implements
/// (e.g. Split's `split` attribute became an input in opset 13).
struct UpgradeContext {
  Node& node;
  int64_t opsetVersion;  ///< the model's opset for the node's domain
  Graph& graph;
  /// Adds a constant to the node's graph and returns it (to turn an old attribute into an input).
  Value* addConstant(const std::string& nameHint, Tensor t);
};

/// Properties of an operator that passes and targets ask instead of keeping their own lists of op names
/// (MLIR's op traits). Declared once, in the op's definition: OpDef("Add").traits({OpTrait::Elementwise, ...}).
enum class OpTrait : uint32_t {
  /// Each output element depends only on the same-index elements of the (numpy-broadcast) inputs, so the op
  /// runs on any layout of same-shape operands (Add, Relu, Where, Cast, ...).
  Elementwise = 1u << 0,
  /// op(a, b) == op(b, a) for two inputs (Add, Mul, Max, Equal, ...).
  Commutative = 1u << 1,
  /// Output 0 holds input 0's elements in the same order; only the shape may differ (Reshape, Flatten,
  /// Squeeze, Unsqueeze, Identity): a target can alias the storage.
  View = 1u << 2,
  /// Output 0 equals input 0 whenever the two have the same type (Cast to the same type, Expand to the same
  /// shape, every View): such a node can be removed.
  NoOpOnSameType = 1u << 3,
  /// Reads its input as N, C, spatial... (the channel axis is axis 1): Conv, pools, BatchNormalization, ...
  ChannelsFirst = 1u << 4,
  /// Slides a window over the spatial axes (attributes kernel_shape, strides, dilations, pads): Conv,
  /// ConvTranspose, MaxPool, AveragePool, LpPool.
  SlidingWindow = 1u << 5,
  /// A unary element-wise nonlinearity applied to a layer's output (Relu, Sigmoid, Clip, Gelu, Elu, ...).
  Activation = 1u << 6,
  /// An Activation a fused kernel's epilogue can apply (set by OpDef::fusibleEpilogue, which says how).
  FusibleEpilogue = 1u << 7,
  /// A unary element-wise function that never decreases, whatever its attributes and constant inputs (Relu,
  /// Sigmoid, Tanh, Clip, ...): f(max(a, b)) == max(f(a), f(b)), so it commutes with a max pool
  /// (pool-before-activation). Not LeakyRelu or HardSigmoid, whose alpha may be negative.
  NonDecreasing = 1u << 8,
};

/// Reads a constant input's data, or nullptr when the value is computed at run time (each caller decides
/// what counts as constant: an initializer, a Constant node, an Identity of a constant...).
using ConstantReader = std::function<const Tensor*(const Value*)>;
/// A node's activation_params, or nullopt when the node's form cannot be fused (see EpilogueActivation).
using EpilogueParamsFn = std::function<std::optional<std::vector<float>>(const Node&, const ConstantReader&)>;

/// How a fused kernel's epilogue applies an activation op: tessel.FusedConv / FusedGemm carry the op's name
/// in `activation` and its parameters in `activation_params`.
struct EpilogueActivation {
  size_t paramCount = 0;  ///< entries of activation_params (Clip: min, max; LeakyRelu: alpha; ...)
  /// The activation_params of this node, or nullopt when its form cannot be fused (Clip bounds computed at
  /// run time, Gelu's tanh approximation). Absent: the op has no parameters and always fuses.
  EpilogueParamsFn params;
  /// act(x) in float with those parameters: the fused ops' reference epilogue.
  std::function<float(float, const std::vector<float>&)> apply;
};

using InferFn = std::function<void(InferContext&)>;
using KernelFn = std::function<void(KernelContext&)>;
using CostFn = std::function<Cost(const Node&)>;
using UpgradeFn = std::function<void(UpgradeContext&)>;

constexpr int kVariadic = INT_MAX;

/// The single definition of an operator. Built fluently:
///   OpDef("Relu").inputs(1).outputs(1).infer(inferSameAsInput0).kernel(reluKernel).cost(costPerElement(1));
struct OpDef {
  std::string name;
  std::string domain;  ///< "" = ai.onnx
  int minInputs = 0, maxInputs = 0;
  int minOutputs = 1, maxOutputs = 1;
  std::vector<AttrSpec> attrSpecs;
  int sinceVersion = 1;  ///< oldest opset this definition accepts (after upgrade)
  bool deterministic = true;  ///< false for random ops (never constant-folded)
  std::string doc;            ///< one line: what the op computes
  uint32_t traitBits = 0;     ///< OpTrait flags
  /// x op e == x for this e (and e op x == x when Commutative): Add 0, Mul 1, Sub 0, Div 1.
  std::optional<double> neutralElement;
  std::optional<EpilogueActivation> epilogue;  ///< set with FusibleEpilogue
  InferFn inferFn;
  KernelFn kernelFn;
  CostFn costFn;
  UpgradeFn upgradeFn;

  explicit OpDef(std::string n, std::string d = "") : name(std::move(n)), domain(std::move(d)) {}
  OpDef& inputs(int min, int max = -1) { minInputs = min; maxInputs = max < 0 ? min : max; return *this; }
  OpDef& outputs(int min, int max = -1) { minOutputs = min; maxOutputs = max < 0 ? min : max; return *this; }
  OpDef& attr(std::string n, AttrKind k, AttrValue dflt) {
    attrSpecs.push_back({std::move(n), k, std::move(dflt), false});
    return *this;
  }
  /// An optional attribute with no default (its absence means something, e.g. Clip's bounds).
  OpDef& optionalAttr(std::string n, AttrKind k) { attrSpecs.push_back({std::move(n), k, std::nullopt, false}); return *this; }
  OpDef& requiredAttr(std::string n, AttrKind k) { attrSpecs.push_back({std::move(n), k, std::nullopt, true}); return *this; }
  OpDef& since(int v) { sinceVersion = v; return *this; }
  OpDef& nondeterministic() { deterministic = false; return *this; }
  OpDef& describe(std::string d) { doc = std::move(d); return *this; }
  OpDef& traits(std::initializer_list<OpTrait> ts) {
    for (OpTrait t : ts) traitBits |= static_cast<uint32_t>(t);
    return *this;
  }
  OpDef& neutral(double e) { neutralElement = e; return *this; }
  /// Marks an Activation a fused epilogue can apply and says how (sets FusibleEpilogue).
  OpDef& fusibleEpilogue(EpilogueActivation e) {
    epilogue = std::move(e);
    return traits({OpTrait::Activation, OpTrait::FusibleEpilogue});
  }
  bool has(OpTrait t) const { return (traitBits & static_cast<uint32_t>(t)) != 0; }
  OpDef& infer(InferFn f) { inferFn = std::move(f); return *this; }
  OpDef& kernel(KernelFn f) { kernelFn = std::move(f); return *this; }
  OpDef& cost(CostFn f) { costFn = std::move(f); return *this; }
  OpDef& upgrade(UpgradeFn f) { upgradeFn = std::move(f); return *this; }
  const AttrSpec* findAttr(std::string_view n) const;
};

/// All operator definitions, keyed by (domain, name).
class OpRegistry {
 public:
  static OpRegistry& instance();
  /// Registers a definition; a duplicate is an internal error.
  void add(OpDef def);
  const OpDef* find(std::string_view domain, std::string_view name) const;
  std::vector<const OpDef*> all() const;

 private:
  std::map<std::pair<std::string, std::string>, std::unique_ptr<OpDef>, std::less<>> defs_;
};

/// True when `node` is the operator `opType` of `domain` ("" = ai.onnx): for a rewrite of one specific op
/// (the Conv a pass fuses); classes of ops (activations, element-wise ops) are asked with hasTrait.
bool isOp(const Node& node, std::string_view opType, std::string_view domain = "");
/// True when node's operator definition declares `trait` (false for an operator the registry does not know).
bool hasTrait(const Node& node, OpTrait trait);
/// The activation_params a fused epilogue would apply for `node`, or nullopt when node is not an activation
/// an epilogue can fuse in this form (see EpilogueActivation).
std::optional<std::vector<float>> epilogueParams(const Node& node, const ConstantReader& constant);
/// Every registered operator with `trait`, by name (standard domain first).
std::vector<const OpDef*> opsWithTrait(OpTrait trait);

}  // namespace tessel

/// Defines and registers an operator from a function body returning its OpDef:
///   TESSEL_REGISTER_OP(Relu) { return OpDef("Relu").inputs(1)...; }
/// `ident` must be unique in the program (use the op name, prefixed by domain for non-standard ones).
#define TESSEL_REGISTER_OP(ident)                                                                   \
  static ::tessel::OpDef tesselMakeOp_##ident();                                                    \
  [[maybe_unused]] static const bool tesselOpRegistered_##ident =                                   \
      (::tessel::OpRegistry::instance().add(tesselMakeOp_##ident()), true);                         \
  static ::tessel::OpDef tesselMakeOp_##ident()
