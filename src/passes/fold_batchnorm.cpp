// Pass fold-batchnorm: an inference BatchNormalization after a Conv with constant weights is folded into
// the Conv's weights and bias (W' = W s, B' = (B - mean) s + beta, s = scale / sqrt(var + eps)).
#include <cmath>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// The constant float32 vector of `v` with `n` entries, or empty.
std::vector<float> floatVector(const Value* v, int64_t n) {
  const Tensor* t = passes::constantData(v);
  if (!t || t->dtype() != DType::Float32 || t->numel() != n) return {};
  return std::vector<float>(t->data<float>(), t->data<float>() + n);
}

bool isInferenceBatchNorm(const Node& bn) {
  if (bn.opType() != "BatchNormalization" || !bn.domain().empty() || bn.attrInt("training_mode") != 0) return false;
  for (size_t i = 1; i < bn.numOutputs(); ++i)
    if (bn.output(i)) return false;
  return true;
}

/// Folds `bn` into the Conv producing its input; false when the pattern does not apply.
bool foldIntoConv(Graph& graph, Node* bn) {
  Node* conv = bn->input(0)->producer();
  if (!conv || conv->opType() != "Conv" || !conv->domain().empty() || passes::soleUser(conv->output(0)) != bn)
    return false;
  const Tensor* w = passes::constantData(conv->input(1));
  if (!w || w->dtype() != DType::Float32 || w->rank() < 1) return false;
  const int64_t channels = w->dim(0);
  std::vector<float> scale = floatVector(bn->input(1), channels), beta = floatVector(bn->input(2), channels);
  std::vector<float> mean = floatVector(bn->input(3), channels), var = floatVector(bn->input(4), channels);
  std::vector<float> bias = conv->hasInput(2) ? floatVector(conv->input(2), channels) : std::vector<float>(channels, 0.0f);
  if (scale.empty() || beta.empty() || mean.empty() || var.empty() || bias.empty()) return false;
  const float eps = bn->attrFloat("epsilon");
  Tensor newW = w->clone();
  float* wd = newW.data<float>();
  const int64_t perChannel = w->numel() / channels;
  std::vector<float> newB(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const float s = scale[c] / std::sqrt(var[c] + eps);
    for (int64_t i = 0; i < perChannel; ++i) wd[c * perChannel + i] *= s;
    newB[c] = (bias[c] - mean[c]) * s + beta[c];
  }
  Value* wv = graph.addConstant(graph.uniqueName(conv->name() + ".weight_bn"), newW);
  Value* bv = graph.addConstant(graph.uniqueName(conv->name() + ".bias_bn"), Tensor::fromVector<float>({channels}, newB));
  const auto attrs = conv->attrs();
  Node* folded = passes::replaceChain(graph, {conv, bn}, "Conv", "", {conv->input(0), wv, bv}, conv->name());
  for (const auto& [k, v] : attrs) folded->setAttr(k, v);
  return true;
}

class FoldBatchNormPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    std::vector<Node*> bns;
    for (const auto& n : graph.nodes())
      if (isInferenceBatchNorm(*n)) bns.push_back(n.get());
    bool changed = false;
    for (Node* bn : bns) changed |= foldIntoConv(graph, bn);
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fold_batchnorm, "fold-batchnorm", "fold inference BatchNormalization into the preceding Conv",
                     [] { return std::make_unique<FoldBatchNormPass>(); });

}  // namespace tessel
