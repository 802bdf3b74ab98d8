// Pass infer-shapes: re-runs type and shape inference over the whole graph.
#include "tessel/ops/shape_inference.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {
class InferShapesPass : public Pass {
 public:
  bool run(Model& model, const PassOptions&) override {
    model.graph->topoSort();
    inferShapes(*model.graph);
    return false;
  }
};
}  // namespace

TESSEL_REGISTER_PASS(infer_shapes, "infer-shapes", "infer every value's element type and shape",
                     [] { return std::make_unique<InferShapesPass>(); });

}  // namespace tessel
