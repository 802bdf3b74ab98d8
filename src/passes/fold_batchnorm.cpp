// Pass fold-batchnorm: an inference BatchNormalization after a Conv with constant weights is folded into
// the Conv's weights and bias (W' = W s, B' = (B - mean) s + beta, s = scale / sqrt(var + eps)); one after
// a 2-D Gemm/MatMul with a constant right operand is folded into its columns and becomes a Gemm.
#include <cmath>
#include <optional>

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
  if (!isOp(bn, "BatchNormalization") || bn.attrInt("training_mode") != 0) return false;
  for (size_t i = 1; i < bn.numOutputs(); ++i)
    if (bn.output(i)) return false;
  return true;
}

/// The BatchNormalization's per-channel factor s = scale / sqrt(var + eps) and shift t = beta - mean s, so
/// bn(x) = x s + t; empty when its parameters are not constant float vectors of `channels` entries.
struct ChannelAffine {
  std::vector<float> factor, shift;
};
std::optional<ChannelAffine> batchNormAffine(const Node& bn, int64_t channels) {
  std::vector<float> scale = floatVector(bn.input(1), channels), beta = floatVector(bn.input(2), channels);
  std::vector<float> mean = floatVector(bn.input(3), channels), var = floatVector(bn.input(4), channels);
  if (scale.empty() || beta.empty() || mean.empty() || var.empty()) return std::nullopt;
  const float eps = bn.attrFloat("epsilon");
  ChannelAffine a;
  for (int64_t c = 0; c < channels; ++c) {
    a.factor.push_back(scale[c] / std::sqrt(var[c] + eps));
    a.shift.push_back(beta[c] - mean[c] * a.factor.back());
  }
  return a;
}

/// Folds `bn` into the Conv producing its input; false when the pattern does not apply.
bool foldIntoConv(Graph& graph, Node* bn, Node* conv) {
  const Tensor* w = passes::constantData(conv->input(1));
  if (!w || w->dtype() != DType::Float32 || w->rank() < 1) return false;
  const int64_t channels = w->dim(0);
  std::vector<float> bias = conv->hasInput(2) ? floatVector(conv->input(2), channels) : std::vector<float>(channels, 0.0f);
  auto affine = batchNormAffine(*bn, channels);
  if (!affine || bias.empty()) return false;
  Tensor newW = w->clone();
  float* wd = newW.data<float>();
  const int64_t perChannel = w->numel() / channels;
  std::vector<float> newB(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < perChannel; ++i) wd[c * perChannel + i] *= affine->factor[c];
    newB[c] = bias[c] * affine->factor[c] + affine->shift[c];
  }
  Value* wv = graph.addConstant(graph.uniqueName(conv->name() + ".weight_bn"), newW);
  Value* bv = graph.addConstant(graph.uniqueName(conv->name() + ".bias_bn"), Tensor::fromVector<float>({channels}, newB));
  const auto attrs = conv->attrs();
  Node* folded = passes::replaceChain(graph, {conv, bn}, "Conv", "", {conv->input(0), wv, bv}, conv->name());
  for (const auto& [k, v] : attrs) folded->setAttr(k, v);
  return true;
}

/// The per-column bias of a Gemm's C scaled by beta ([N] values), when C is absent, a scalar, [N] or [1,N].
std::optional<std::vector<float>> gemmColumnBias(const Node& gemm, int64_t columns) {
  if (!gemm.hasInput(2)) return std::vector<float>(static_cast<size_t>(columns), 0.0f);
  const Tensor* c = passes::constantData(gemm.input(2));
  if (!c || c->dtype() != DType::Float32) return std::nullopt;
  const Shape& s = c->shape();
  const bool scalar = c->numel() == 1 && s.size() <= 2;
  const bool row = (s.size() == 1 && s[0] == columns) || (s.size() == 2 && s[0] == 1 && s[1] == columns);
  if (!scalar && !row) return std::nullopt;
  const float beta = isOp(gemm, "Gemm") ? gemm.attrFloat("beta") : 1.0f;
  std::vector<float> out(static_cast<size_t>(columns));
  for (int64_t n = 0; n < columns; ++n) out[n] = beta * c->data<float>()[scalar ? 0 : n];
  return out;
}

/// Folds `bn` on a [M, N] result into the Gemm/MatMul producing it: B's column n is scaled by s[n] and C
/// becomes the folded [N] bias (beta 1); a MatMul becomes a Gemm. False when the pattern does not apply.
bool foldIntoGemm(Graph& graph, Node* bn, Node* gemm) {
  const bool isMatMul = isOp(*gemm, "MatMul");
  if (gemm->input(0)->type.rank() != 2 || gemm->output(0)->type.rank() != 2) return false;
  const Tensor* b = passes::constantData(gemm->input(1));
  if (!b || b->dtype() != DType::Float32 || b->rank() != 2) return false;
  const bool transB = !isMatMul && gemm->attrInt("transB") != 0;
  const int64_t columns = transB ? b->dim(0) : b->dim(1);
  auto affine = batchNormAffine(*bn, columns);
  auto bias = gemmColumnBias(*gemm, columns);
  if (!affine || !bias) return false;
  Tensor newB = b->clone();
  float* bd = newB.data<float>();
  for (int64_t r = 0; r < b->dim(0); ++r)
    for (int64_t c = 0; c < b->dim(1); ++c) bd[r * b->dim(1) + c] *= affine->factor[transB ? r : c];
  for (int64_t n = 0; n < columns; ++n) (*bias)[n] = (*bias)[n] * affine->factor[n] + affine->shift[n];
  Value* bv = graph.addConstant(graph.uniqueName(gemm->name() + ".weight_bn"), newB);
  Value* cv = graph.addConstant(graph.uniqueName(gemm->name() + ".bias_bn"), Tensor::fromVector<float>({columns}, *bias));
  const auto attrs = gemm->attrs();
  Node* folded = passes::replaceChain(graph, {gemm, bn}, "Gemm", "", {gemm->input(0), bv, cv}, gemm->name());
  for (const auto& [k, v] : attrs) folded->setAttr(k, v);
  folded->setAttr("beta", 1.0f);
  return true;
}

/// Folds `bn` into its producer when that is a Conv, Gemm or MatMul read only by `bn`.
bool foldBatchNorm(Graph& graph, Node* bn) {
  Node* producer = bn->input(0)->producer();
  if (!producer || passes::soleUser(producer->output(0)) != bn) return false;
  if (isOp(*producer, "Conv")) return foldIntoConv(graph, bn, producer);
  if (isOp(*producer, "Gemm") || isOp(*producer, "MatMul")) return foldIntoGemm(graph, bn, producer);
  return false;
}

class FoldBatchNormPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    std::vector<Node*> bns;
    for (const auto& n : graph.nodes())
      if (isInferenceBatchNorm(*n)) bns.push_back(n.get());
    bool changed = false;
    for (Node* bn : bns) changed |= foldBatchNorm(graph, bn);
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fold_batchnorm, "fold-batchnorm", "fold inference BatchNormalization into the preceding Conv, Gemm or 2-D MatMul",
                     [] { return std::make_unique<FoldBatchNormPass>(); });

}  // namespace tessel
