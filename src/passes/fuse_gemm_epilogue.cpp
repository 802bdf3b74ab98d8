// Pass fuse-gemm-epilogue: float Gemm, and MatMul of two 2-D operands, become tessel.FusedGemm, absorbing
// a following bias Add (per column), a residual Add of the output's shape and an activation.
#include "rewrite.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

/// A MatMul that is a plain GEMM: float, both operands 2-D (batched or vector MatMuls stay as they are).
bool isMatrixMatMul(const Node& n) {
  return n.opType() == "MatMul" && n.domain().empty() && passes::isStaticF32(n.output(0)) && n.input(0)->type.rank() == 2 &&
         n.input(1)->type.rank() == 2 && n.input(1)->type.dtype == DType::Float32;
}

class FuseGemmEpiloguePass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    Graph& graph = *model.graph;
    std::vector<Node*> gemms;
    for (const auto& n : graph.nodes())
      if ((n->opType() == "Gemm" && n->domain().empty() && passes::isStaticF32(n->output(0))) || isMatrixMatMul(*n))
        gemms.push_back(n.get());
    for (Node* gemm : gemms) {
      const bool hadC = gemm->hasInput(2);
      // A bias Add may only merge into C when C is not scaled by beta (a MatMul has no C).
      const bool allowBias = !hadC || gemm->attrFloat("beta") == 1.0f;
      passes::EpilogueMatch m = passes::matchEpilogue(graph, gemm, hadC ? gemm->input(2) : nullptr, 1, allowBias);
      Node* fused = passes::emitFused(graph, m, "FusedGemm");
      if (!hadC && fused->hasInput(2)) fused->setAttr("beta", 1.0f);
    }
    return !gemms.empty();
  }
};

}  // namespace

TESSEL_REGISTER_PASS(fuse_gemm_epilogue, "fuse-gemm-epilogue",
                     "turn Gemm and 2-D MatMul into tessel.FusedGemm with bias, residual Add and activation in the epilogue",
                     [] { return std::make_unique<FuseGemmEpiloguePass>(); });

}  // namespace tessel
