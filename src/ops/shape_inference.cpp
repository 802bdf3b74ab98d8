// Whole-graph type and shape inference, with compile-time evaluation of small shape computations.
#include "tessel/ops/shape_inference.h"

#include <unordered_map>

#include "tessel/ops/registry.h"

namespace tessel {
namespace {

/// Largest input (in elements) that inference will evaluate to learn a value; shape tensors are tiny.
constexpr int64_t kMaxEvaluatedElements = 4096;

class ShapeInference {
 public:
  void run(Graph& graph) {
    for (const auto& nodePtr : graph.nodes()) inferNode(*nodePtr);
  }

 private:
  const Tensor* known(const Value* v) const {
    if (v->isConstant()) return &v->constant();
    auto it = values_.find(v);
    return it == values_.end() ? nullptr : &it->second;
  }

  void inferNode(Node& node) {
    const OpDef* def = node.def();
    if (!def) throw UserError(fmt::format("{}: unsupported operator '{}'", node.describe(), node.opType()));
    if (!def->inferFn)
      throw InternalError(fmt::format("operator '{}' has no type inference rule", node.opType()));
    // If, Loop and Scan type their bodies' inputs and captured values from the node, then infer the bodies
    // (control_flow.cpp, refineBody); a nested graph of any other op is inferred on its own first.
    const bool typesItsBodies = node.domain().empty() && (node.opType() == "If" || node.opType() == "Loop" ||
                                                          node.opType() == "Scan");
    if (!typesItsBodies)
      for (Graph* sub : node.subgraphs()) ShapeInference().run(*sub);
    InferContext ctx(node, [this](const Value* v) { return known(v); });
    def->inferFn(ctx);
    for (auto& [i, t] : ctx.outputValues()) values_[node.output(i)] = std::move(t);
    tryEvaluate(node);
  }

  void tryEvaluate(Node& node) {
    const OpDef* def = node.def();
    if (!def->deterministic || !def->kernelFn || !node.subgraphs().empty()) return;
    std::vector<const Tensor*> inputs;
    for (Value* v : node.inputs()) {
      if (!v) {
        inputs.push_back(nullptr);
        continue;
      }
      const Tensor* t = known(v);
      if (!t || t->numel() > kMaxEvaluatedElements) return;
      inputs.push_back(t);
    }
    for (Value* out : node.outputs()) {
      if (out && values_.count(out)) return;  // the rule already gave the value
      if (out && out->type.staticSize() > kMaxEvaluatedElements) return;  // e.g. ConstantOfShape of a large shape
    }
    KernelContext kctx(node, inputs, nullptr, nullptr);
    try {
      def->kernelFn(kctx);
    } catch (const UserError&) {
      return;  // leave it to run time, where the error will name the actual inputs
    }
    for (size_t i = 0; i < node.numOutputs(); ++i) {
      Value* out = node.output(i);
      if (!out || !kctx.outputs()[i].defined()) continue;
      if (kctx.outputs()[i].numel() > kMaxEvaluatedElements) continue;
      out->type = TensorType::fromShape(kctx.outputs()[i].dtype(), kctx.outputs()[i].shape());
      values_[out] = kctx.outputs()[i];
    }
  }

  std::unordered_map<const Value*, Tensor> values_;
};

}  // namespace

void inferShapes(Graph& graph) { ShapeInference().run(graph); }

}  // namespace tessel
