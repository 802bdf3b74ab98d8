// The graph IR: values (SSA edges with static types), nodes (operator instances with attributes) and graphs.
//
// A Graph owns its nodes and values. Nodes are kept in a topological order (topoSort() restores it after
// edits). Nested graphs (bodies of If/Loop/Scan) hang off graph-valued attributes; a value used in a
// nested graph but defined in an enclosing one appears in the nested graph as a *captured* value (no
// producer, not an input, not a constant) with the same name, resolved by name through the scopes.
// Later stages attach data to nodes without changing semantics: `device` (placement by the partitioner)
// and `meta` (schedule data such as tiling factors, kernel choices), both printed in the text IR.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessel/ir/attribute.h"
#include "tessel/ir/type.h"

namespace tessel {

class Graph;
class Node;
struct OpDef;

/// One use of a value: input `index` of `node`.
struct Use {
  Node* node;
  size_t index;
};

/// An SSA value: produced by one node output, or a graph input, or a constant (initializer), or captured
/// from an enclosing graph.
class Value {
 public:
  const std::string& name() const { return name_; }
  Graph* graph() const { return graph_; }
  TensorType type;

  Node* producer() const { return producer_; }
  size_t producerOutput() const { return producerOutput_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }

  bool isConstant() const { return constant_ != nullptr; }
  const Tensor& constant() const;
  /// Makes this value a constant with the given data (its type is set from the tensor).
  void setConstant(Tensor t);
  bool isGraphInput() const { return isInput_; }
  /// Defined in an enclosing graph and referenced here by name.
  bool isCaptured() const { return !producer_ && !constant_ && !isInput_; }

 private:
  friend class Graph;
  friend class Node;
  std::string name_;
  Graph* graph_ = nullptr;
  Node* producer_ = nullptr;
  size_t producerOutput_ = 0;
  std::vector<Use> uses_;
  std::shared_ptr<const Tensor> constant_;
  bool isInput_ = false;
};

/// An operator instance.
class Node {
 public:
  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  const std::string& opType() const { return opType_; }
  /// Operator domain: "" for the standard ONNX domain, "tessel" for Tessel's own operators.
  const std::string& domain() const { return domain_; }
  /// The registry entry (nullptr if the operator is unknown; the verifier reports that).
  const OpDef* def() const { return def_; }
  Graph* graph() const { return graph_; }

  size_t numInputs() const { return inputs_.size(); }
  /// Input i, or nullptr when an optional input is omitted.
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  bool hasInput(size_t i) const { return input(i) != nullptr; }
  const std::vector<Value*>& inputs() const { return inputs_; }
  void setInput(size_t i, Value* v);
  void addInput(Value* v);
  /// Drops trailing omitted inputs (keeps the count minimal, as ONNX does).
  void trimInputs();

  size_t numOutputs() const { return outputs_.size(); }
  /// Output i, or nullptr when an optional output is not requested.
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  const std::vector<Value*>& outputs() const { return outputs_; }

  // Attributes. Getters without a default fall back to the registry's default for the attribute and
  // throw UserError (naming the node) when the attribute is required and absent or of another kind.
  const std::map<std::string, AttrValue>& attrs() const { return attrs_; }
  bool hasAttr(const std::string& n) const { return attrs_.count(n) != 0; }
  const AttrValue* findAttr(const std::string& n) const;
  void setAttr(const std::string& n, AttrValue v) { attrs_[n] = std::move(v); }
  void removeAttr(const std::string& n) { attrs_.erase(n); }
  int64_t attrInt(const std::string& n) const;
  float attrFloat(const std::string& n) const;
  std::string attrString(const std::string& n) const;
  std::vector<int64_t> attrInts(const std::string& n) const;
  std::vector<float> attrFloats(const std::string& n) const;
  std::vector<std::string> attrStrings(const std::string& n) const;
  const Tensor& attrTensor(const std::string& n) const;
  const Graph& attrGraph(const std::string& n) const;
  /// Every nested graph of this node (graph and graphs attributes).
  std::vector<Graph*> subgraphs() const;

  /// Placement chosen by the partitioner ("" = not placed yet; "cpu", "npu0", ...).
  std::string device;
  /// Schedule and lowering data attached by later stages (tiling, kernel choice, fusion group...).
  std::map<std::string, AttrValue> meta;

  /// "node 'conv1' (Conv)" for diagnostics.
  std::string describe() const;

 private:
  friend class Graph;
  std::string name_, opType_, domain_;
  const OpDef* def_ = nullptr;
  Graph* graph_ = nullptr;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::map<std::string, AttrValue> attrs_;
};

/// A computation graph (the main graph of a model or a nested body).
class Graph {
 public:
  explicit Graph(std::string name = "main");
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  /// The enclosing graph of a nested body (nullptr for a model's main graph).
  Graph* parent() const { return parent_; }
  void setParent(Graph* p) { parent_ = p; }

  // ---- values
  /// Creates a value; an empty or taken name is made unique.
  Value* addValue(const std::string& name, TensorType type = {});
  Value* addInput(const std::string& name, TensorType type);
  Value* addConstant(const std::string& name, Tensor data);
  void addOutput(Value* v) { outputs_.push_back(v); }
  void setOutput(size_t i, Value* v) { outputs_.at(i) = v; }
  void removeInput(Value* v);
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  /// All values owned by this graph, in creation order.
  std::vector<Value*> values() const;
  /// Constants (initializers), in creation order.
  std::vector<Value*> constants() const;
  Value* findValue(const std::string& name) const;
  /// Looks a name up here and then in the enclosing graphs.
  Value* lookup(const std::string& name) const;
  /// Deletes values with no producer use and no uses that are not inputs/outputs (dead constants too).
  void removeUnusedValues();
  /// A name not used by any value of this graph.
  std::string uniqueName(const std::string& base) const;

  // ---- nodes
  /// Appends a node; outputs are new values created here with the given names (empty string: an omitted
  /// optional output, nullptr output slot).
  Node* addNode(const std::string& opType, const std::vector<Value*>& inputs,
                const std::vector<std::string>& outputNames, const std::string& name = "",
                const std::string& domain = "");
  /// Like addNode but placed right before `before` in the node order.
  Node* insertNodeBefore(Node* before, const std::string& opType, const std::vector<Value*>& inputs,
                         const std::vector<std::string>& outputNames, const std::string& name = "",
                         const std::string& domain = "");
  /// Removes a node whose outputs have no uses (its output values are deleted too).
  void removeNode(Node* node);
  /// Redirects every use of `from` (node inputs, graph outputs) to `to`.
  void replaceAllUsesWith(Value* from, Value* to);
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t numNodes() const { return nodes_.size(); }
  Node* findNode(const std::string& name) const;
  /// Reorders nodes topologically (stable: keeps the current order where legal). Throws UserError
  /// naming the nodes involved when the graph has a cycle.
  void topoSort();

  /// Deep copy (nested graphs included). The copy has no parent.
  std::unique_ptr<Graph> clone() const;

 private:
  friend class Node;
  Node* createNode(const std::string& opType, const std::vector<Value*>& inputs,
                   const std::vector<std::string>& outputNames, const std::string& name,
                   const std::string& domain);
  std::string name_;
  Graph* parent_ = nullptr;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::map<std::string, Value*> valueByName_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
};

/// A whole model: the main graph plus model-level metadata.
struct Model {
  std::unique_ptr<Graph> graph;
  /// Operator set versions by domain ("" = ai.onnx), as imported.
  std::map<std::string, int64_t> opsetImports;
  std::string producerName;
  int64_t irVersion = 8;
  std::unique_ptr<Model> clone() const;
};

}  // namespace tessel
