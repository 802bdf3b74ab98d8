// Graph-rewriting helpers shared by the passes: use queries, chain replacement that keeps value names,
// and matching of activation functions for epilogue fusion.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"
#include "tessel/ops/registry.h"

namespace tessel::passes {

/// The graph's nodes in their current order, as a list a pass can walk while it removes or adds nodes.
std::vector<Node*> nodeSnapshot(const Graph& graph);
/// The names of the single-output nodes' results, in node order: a pass whose rewrites remove nodes (the chains
/// it replaces) finds each candidate again by name.
std::vector<std::string> singleResultNames(const Graph& graph);
/// True when `v` is one of its graph's outputs.
bool isGraphOutput(const Value* v);
/// The only node reading `v`, or nullptr when v has several uses, none, or is a graph output.
Node* soleUser(const Value* v);
/// True when `v` has a static float32 type.
bool isStaticF32(const Value* v);
/// The constant data of `v`, or nullptr.
const Tensor* constantData(const Value* v);

/// Replaces `chain` (nodes computing one result: the last node's output 0; every other output of the chain
/// must be read only inside the chain) by one new node. The new node takes the result's name (so graph
/// outputs keep their names), sits where the last chain node was, and the removed nodes' names are free.
Node* replaceChain(Graph& graph, const std::vector<Node*>& chain, const std::string& opType,
                   const std::string& domain, const std::vector<Value*>& inputs, std::string nodeName);

/// Rewrites pool(op(x, rest...)) as op(pool(x), rest...), where `op` is a single-result node whose result only
/// `pool` reads: a new pool (same attributes, result type `pooledType`) reads x, and `op` (same type, attributes,
/// name and other inputs) moves into the pool's place, taking its result's name. Returns the moved node.
Node* movePoolBefore(Graph& graph, Node* op, Node* pool, const TensorType& pooledType);

/// True when `n` is the standard-domain op `op` (null: false).
inline bool isStd(const Node* n, const char* op) { return n && isOp(*n, op); }
/// The producer of `v` when it is the standard op `op` and `v` is read only by `reader`.
Node* producerReadOnlyBy(const Value* v, const char* op, const Node* reader);
/// The value of a one-element float constant.
std::optional<float> scalarConstant(const Value* v);
/// Whether `v` is within 1e-4 (relative) of `expected`.
inline bool near(std::optional<float> v, double expected) { return v && std::abs(*v - expected) <= 1e-4 * std::abs(expected); }
/// For a binary node with `x` as one operand: the other operand.
Value* otherOperand(const Node* n, const Value* x);
/// The ints attribute `name` of `n`, or `fallback` when it is absent (a Conv's or pool's strides, pads, dilations).
std::vector<int64_t> intsOr(const Node& n, const char* name, std::vector<int64_t> fallback);
/// Calls `fuse(graph, node)` on every standard `op` node, found again by its result's name when reached (each
/// rewrite removes nodes); true when any call changed the graph. The pattern passes' driver.
bool rewriteEach(Graph& graph, const char* op, bool (*fuse)(Graph&, Node*));

/// Replaces every use of `oldValue` by `replacement` and removes `oldValue`'s producer when it becomes
/// dead; when `oldValue` is a graph output the replacement cannot take its name, so nothing is done and
/// false is returned.
bool replaceValue(Graph& graph, Value* oldValue, Value* replacement);

/// An activation an epilogue can absorb, as the fused ops spell it.
struct MatchedActivation {
  std::string name;               ///< "Relu", "Clip", ... (the `activation` attribute)
  std::vector<float> params;      ///< the `activation_params` attribute
  std::vector<Node*> nodes;       ///< the nodes it replaces (Sigmoid+Mul for SiLU), last computes the result
};

/// Matches an activation reading `x` (its only reader(s)), or nothing.
std::optional<MatchedActivation> matchActivation(const Value* x);

/// Applies an epilogue's activation attributes to a fused node.
void setActivation(Node& node, const MatchedActivation& act);

}  // namespace tessel::passes

namespace tessel::passes {

/// What follows a Conv/Gemm that its epilogue can absorb: a constant per-channel bias Add, a residual Add
/// (same shape as the output) and an activation, in that order.
struct EpilogueMatch {
  std::vector<Node*> chain;           ///< base node first, then the absorbed nodes
  Value* bias = nullptr;              ///< the combined bias (a new constant when an Add was absorbed)
  Value* residual = nullptr;
  std::optional<MatchedActivation> activation;
};

/// Collects the epilogue of `base` whose output has `channels` channels on axis `channelAxis` (1 for
/// Conv's NCHW output, the last axis for Gemm's [M, N]); `bias` is the base's current bias input.
EpilogueMatch matchEpilogue(Graph& graph, Node* base, Value* bias, size_t channelAxis, bool allowBiasAdd = true);

/// Replaces the epilogue chain by one fused node `tessel.<opType>(in0, in1, bias, residual)` with the
/// base's attributes and the activation.
Node* emitFused(Graph& graph, const EpilogueMatch& m, const std::string& opType);

}  // namespace tessel::passes
