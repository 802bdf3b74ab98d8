// Pass fuse-transformer-patterns: the decomposed forms exporters emit for transformer blocks become one
// node each: LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div [, Mul gamma] [, Add beta])
// -> LayerNormalization; Softmax(Q Kt * c) V -> tessel.Attention (GELU: pass fuse-gelu, run before this one). For
// the npu target (PassOptions::target), the LayerNorm only.
// Every intermediate must be read only inside its pattern.
#include <algorithm>
#include <cmath>
#include <optional>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

using passes::isStd;
using passes::near;
using passes::otherOperand;
using passes::producerReadOnlyBy;
using passes::scalarConstant;

// ---- LayerNorm

/// The first normalised axis when `mean` is ReduceMean(keepdims) over trailing axes [a, rank) of a static
/// float input; nullopt otherwise.
std::optional<int64_t> trailingReduceAxis(const Node* mean) {
  if (!isStd(mean, "ReduceMean") || mean->attrInt("keepdims") != 1 || !passes::isStaticF32(mean->input(0))) return std::nullopt;
  std::vector<int64_t> axes;
  if (mean->hasInput(1)) {
    const Tensor* t = passes::constantData(mean->input(1));
    if (!t) return std::nullopt;
    axes = t->toInt64Vector();
  } else if (mean->hasAttr("axes")) {
    axes = mean->attrInts("axes");
  }
  const int64_t rank = static_cast<int64_t>(mean->input(0)->type.rank());
  if (axes.empty()) return std::nullopt;
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size() - i)) return std::nullopt;
  return axes.front();
}

/// A constant that broadcasts into x's normalised dims only (leading 1s), reshaped to those dims.
std::optional<Tensor> normalisedParameter(const Value* v, const Shape& normalised) {
  const Tensor* t = passes::constantData(v);
  if (!t || t->dtype() != DType::Float32) return std::nullopt;
  int64_t count = 1;
  for (int64_t d : normalised) count *= d;
  const Shape& s = t->shape();
  if (t->numel() != count || s.size() < normalised.size()) return std::nullopt;
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t fromEnd = s.size() - i;
    if (fromEnd > normalised.size() ? s[i] != 1 : s[i] != normalised[normalised.size() - fromEnd]) return std::nullopt;
  }
  Tensor out(DType::Float32, normalised);
  std::copy(t->data<float>(), t->data<float>() + count, out.data<float>());
  return out;
}

/// Matches and replaces the LayerNorm whose first node is `mean`; false when it does not match.
bool fuseLayerNorm(Graph& graph, Node* mean) {
  auto axis = trailingReduceAxis(mean);
  if (!axis) return false;
  Value* x = mean->input(0);
  Node* sub = passes::soleUser(mean->output(0));
  if (!isStd(sub, "Sub") || sub->input(0) != x || sub->input(1) != mean->output(0)) return false;
  Value* centred = sub->output(0);
  if (passes::isGraphOutput(centred)) return false;
  Node* square = nullptr;
  Node* div = nullptr;
  // Read by exactly the square (Pow, or Mul reading it twice) and the Div.
  for (const Use& u : centred->uses()) {
    if (u.node == square || u.node == div) continue;
    const bool pow = isStd(u.node, "Pow") && u.node->input(0) == centred && near(scalarConstant(u.node->input(1)), 2.0);
    const bool mul = isStd(u.node, "Mul") && u.node->input(0) == centred && u.node->input(1) == centred;
    const bool isDiv = isStd(u.node, "Div") && u.node->input(0) == centred;
    if ((pow || mul) && !square) square = u.node;
    else if (isDiv && !div) div = u.node;
    else return false;  // a third reader
  }
  if (!square || !div) return false;
  Node* variance = passes::soleUser(square->output(0));
  if (trailingReduceAxis(variance) != axis || variance->input(0) != square->output(0)) return false;
  Node* addEps = passes::soleUser(variance->output(0));
  if (!isStd(addEps, "Add")) return false;
  auto eps = scalarConstant(otherOperand(addEps, variance->output(0)));
  Node* sqrt = passes::soleUser(addEps->output(0));
  if (!eps || !isStd(sqrt, "Sqrt") || passes::soleUser(sqrt->output(0)) != div || div->input(1) != sqrt->output(0))
    return false;
  std::vector<Node*> chain = {mean, sub, square, variance, addEps, sqrt, div};
  const Shape xShape = x->type.staticShape();
  const Shape normalised(xShape.begin() + *axis, xShape.end());
  Tensor gamma(DType::Float32, normalised), beta(DType::Float32, normalised);
  std::fill(gamma.data<float>(), gamma.data<float>() + gamma.numel(), 1.0f);  // beta stays zero
  bool hasBeta = false;
  Node* mul = passes::soleUser(div->output(0));
  if (isStd(mul, "Mul") && mul->output(0)->type == x->type)
    if (auto g = normalisedParameter(otherOperand(mul, div->output(0)), normalised)) {
      gamma = *g;
      chain.push_back(mul);
    }
  Node* add = passes::soleUser(chain.back()->output(0));
  if (isStd(add, "Add") && add->output(0)->type == x->type)
    if (auto b = normalisedParameter(otherOperand(add, chain.back()->output(0)), normalised)) {
      beta = *b;
      hasBeta = true;
      chain.push_back(add);
    }
  const std::string name = graph.uniqueName(mean->name().empty() ? "layer_norm" : mean->name() + ".layer_norm");
  std::vector<Value*> inputs = {x, graph.addConstant(graph.uniqueName(name + ".scale"), gamma)};
  if (hasBeta) inputs.push_back(graph.addConstant(graph.uniqueName(name + ".bias"), beta));
  Node* ln = passes::replaceChain(graph, chain, "LayerNormalization", "", inputs, name);
  ln->setAttr("axis", *axis);
  ln->setAttr("epsilon", *eps);
  return true;
}

// ---- attention

/// Matches MatMul(Softmax(MatMul(Q, Kt) [* c | / c], last axis), V) ending at `softmax`.
bool fuseAttention(Graph& graph, Node* softmax) {
  Value* scores = softmax->input(0);
  if (!passes::isStaticF32(scores) || scores->type.rank() < 2) return false;
  const int64_t rank = static_cast<int64_t>(scores->type.rank());
  const int64_t axis = softmax->attrInt("axis");
  if (axis != -1 && axis != rank - 1) return false;
  Node* outMatMul = passes::soleUser(softmax->output(0));
  if (!isStd(outMatMul, "MatMul") || outMatMul->input(0) != softmax->output(0)) return false;
  std::vector<Node*> chain;
  float scale = 1.0f;
  Node* scaling = scores->producer();
  if (isStd(scaling, "Mul") || isStd(scaling, "Div")) {
    auto c = scalarConstant(scaling->input(1));
    if (!c || passes::soleUser(scores) != softmax || *c == 0.0f) return false;
    scale = isOp(*scaling, "Mul") ? *c : 1.0f / *c;
    scores = scaling->input(0);
    chain.push_back(scaling);
  }
  Node* qk = producerReadOnlyBy(scores, "MatMul", chain.empty() ? softmax : chain.front());
  if (!qk || qk->input(0)->type.rank() < 2 || qk->input(1)->type.rank() < 2) return false;
  chain.insert(chain.begin(), qk);
  chain.push_back(softmax);
  chain.push_back(outMatMul);
  std::vector<Value*> inputs = {qk->input(0), qk->input(1), outMatMul->input(1)};
  Node* fused = passes::replaceChain(graph, chain, "Attention", "tessel", inputs, graph.uniqueName(softmax->name() + ".attention"));
  fused->setAttr("scale", scale);
  return true;
}

class FuseTransformerPatternsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    Graph& graph = *model.graph;
    // Each rewrite removes nodes, so candidates are collected per pattern and re-checked when reached.
    bool changed = passes::rewriteEach(graph, "ReduceMean", &fuseLayerNorm);
    // The npu target lowers LayerNormalization on its vector unit but has no attention: its MatMuls, Softmax and
    // scaling stay separate nodes there (each placed by the partition on its own).
    if (options.target != "npu") changed |= passes::rewriteEach(graph, "Softmax", &fuseAttention);
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_transformer_patterns, "fuse-transformer-patterns",
                     "decomposed LayerNorm -> LayerNormalization, Softmax(Q Kt c) V -> tessel.Attention",
                     [] { return std::make_unique<FuseTransformerPatternsPass>(); });

}  // namespace tessel
