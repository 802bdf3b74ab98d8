// Pass fuse-gemm-epilogue: float Gemm, and MatMul of two 2-D operands, become tessel.FusedGemm, absorbing
// a following bias Add (per column), a residual Add of the output's shape and an activation. A MatMul of a
// batched [..., M, K] operand and a 2-D [K, N] weight (a transformer's Linear) with an epilogue becomes
// Reshape to [P, K] -> FusedGemm -> Reshape back (the reshapes are views), so its bias and activation fuse too.
#include <algorithm>

#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// A MatMul that is a plain GEMM: float, both operands 2-D (batched or vector MatMuls stay as they are).
bool isMatrixMatMul(const Node& n) {
  return isOp(n, "MatMul") && passes::isStaticF32(n.output(0)) && n.input(0)->type.rank() == 2 &&
         n.input(1)->type.rank() == 2 && n.input(1)->type.dtype == DType::Float32;
}

/// MatMul(A [..., M, K], B [K, N]) with static float shapes, A of rank >= 3.
bool isBatchedByMatrixMatMul(const Node& n) {
  return isOp(n, "MatMul") && passes::isStaticF32(n.output(0)) && passes::isStaticF32(n.input(0)) &&
         n.input(0)->type.rank() >= 3 && passes::isStaticF32(n.input(1)) && n.input(1)->type.rank() == 2;
}

/// A Reshape of `v` to `shape` placed before `before`.
Value* reshapeBefore(Graph& graph, Node* before, Value* v, const Shape& shape, const std::string& base) {
  Value* target = graph.addConstant(graph.uniqueName(base + "_shape"),
                                    Tensor::fromVector<int64_t>({static_cast<int64_t>(shape.size())}, shape));
  Node* reshape = graph.insertNodeBefore(before, "Reshape", {v, target}, {graph.uniqueName(base)}, graph.uniqueName(base));
  reshape->output(0)->type = TensorType::fromShape(DType::Float32, shape);
  return reshape->output(0);
}

/// Fuses a batched MatMul's epilogue as Reshape -> FusedGemm -> Reshape; false (nothing changed) when
/// nothing follows the MatMul that the epilogue could absorb.
bool fuseBatchedMatMul(Graph& graph, Node* matmul) {
  const Shape outShape = matmul->output(0)->type.staticShape();
  const int64_t k = matmul->input(0)->type.staticShape().back(), n = outShape.back();
  const int64_t rows = matmul->output(0)->type.staticSize() / std::max<int64_t>(n, 1);
  passes::EpilogueMatch m = passes::matchEpilogue(graph, matmul, nullptr, outShape.size() - 1, true);
  if (m.chain.size() == 1) return false;
  const std::string name = matmul->name();
  Node* last = m.chain.back();
  Value* a = reshapeBefore(graph, last, matmul->input(0), {rows, k}, name + ".rows");
  Value* residual = m.residual ? reshapeBefore(graph, last, m.residual, {rows, n}, name + ".residual_rows") : nullptr;
  Node* gemm = graph.insertNodeBefore(last, "FusedGemm", {a, matmul->input(1), m.bias, residual},
                                      {graph.uniqueName(name + ".gemm")}, graph.uniqueName(name + ".gemm"), "tessel");
  gemm->trimInputs();
  gemm->output(0)->type = TensorType::fromShape(DType::Float32, {rows, n});
  if (m.activation) passes::setActivation(*gemm, *m.activation);
  Value* target = graph.addConstant(graph.uniqueName(name + ".output_shape"),
                                    Tensor::fromVector<int64_t>({static_cast<int64_t>(outShape.size())}, outShape));
  passes::replaceChain(graph, m.chain, "Reshape", "", {gemm->output(0), target}, name);
  return true;
}

class FuseGemmEpiloguePass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    std::vector<Node*> gemms;
    for (const auto& n : graph.nodes())
      if ((isOp(*n, "Gemm") && passes::isStaticF32(n->output(0))) || isMatrixMatMul(*n))
        gemms.push_back(n.get());
    for (Node* gemm : gemms) {
      const bool hadC = gemm->hasInput(2);
      // A bias Add may only merge into C when C is not scaled by beta (a MatMul has no C).
      const bool allowBias = !hadC || gemm->attrFloat("beta") == 1.0f;
      passes::EpilogueMatch m = passes::matchEpilogue(graph, gemm, hadC ? gemm->input(2) : nullptr, 1, allowBias);
      Node* fused = passes::emitFused(graph, m, "FusedGemm");
      if (!hadC && fused->hasInput(2)) fused->setAttr("beta", 1.0f);
    }
    bool changed = !gemms.empty();
    std::vector<Node*> batched;
    for (const auto& n : graph.nodes())
      if (isBatchedByMatrixMatMul(*n)) batched.push_back(n.get());
    for (Node* matmul : batched) changed |= fuseBatchedMatMul(graph, matmul);
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_gemm_epilogue, "fuse-gemm-epilogue",
                     "turn Gemm and 2-D MatMul into tessel.FusedGemm with bias, residual Add and activation in the epilogue",
                     [] { return std::make_unique<FuseGemmEpiloguePass>(); });

}  // namespace tessel
