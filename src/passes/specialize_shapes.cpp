// Pass specialize-shapes: once input shapes are fixed (tessel --input-shape, or the pass option
// "shape.<input>" = "1x3x224x224"), re-infers every shape and replaces Shape/Size of static values by
// constants, so fold-constants can evaluate the shape arithmetic that follows.
#include <algorithm>
#include <fmt/format.h>

#include "rewrite.h"
#include "tessel/ops/shape_inference.h"
#include "tessel/passes/pass.h"

namespace tessel {
namespace {

Shape parseShapeOption(const std::string& key, const std::string& text) {
  Shape dims;
  size_t start = 0;
  while (start <= text.size()) {
    size_t x = text.find('x', start);
    std::string part = text.substr(start, x == std::string::npos ? std::string::npos : x - start);
    try {
      size_t used = 0;
      long long d = std::stoll(part, &used);
      if (used != part.size() || d < 0) throw std::invalid_argument(part);
      dims.push_back(d);
    } catch (const std::exception&) {
      throw UserError(fmt::format("pass option {}={}: expected dimensions like 1x3x224x224", key, text));
    }
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return dims;
}

void applyShapeOptions(Graph& graph, const PassOptions& options) {
  for (const auto& [key, text] : options.values) {
    if (key.rfind("shape.", 0) != 0) continue;
    const std::string name = key.substr(6);
    Value* input = nullptr;
    for (Value* v : graph.inputs())
      if (v->name() == name) input = v;
    if (!input) throw UserError(fmt::format("pass option {}: the graph has no input '{}'", key, name));
    Shape dims = parseShapeOption(key, text);
    if (input->type.hasRank() && input->type.rank() != dims.size())
      throw UserError(fmt::format("pass option {}: input '{}' has rank {}, the option gives {} dimensions", key, name,
                                  input->type.rank(), dims.size()));
    input->type = TensorType::fromShape(input->type.dtype, dims);
  }
}

/// The constant Shape(x) / Size(x) evaluates to, when x's shape is static.
std::optional<Tensor> shapeConstant(const Node& n) {
  if (!n.input(0) || !n.input(0)->type.isStatic()) return std::nullopt;
  Shape s = n.input(0)->type.staticShape();
  if (isOp(n, "Size")) {
    int64_t size = 1;
    for (int64_t d : s) size *= d;
    return Tensor::scalar<int64_t>(size);
  }
  if (!isOp(n, "Shape")) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(s.size());
  auto clampAxis = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  const int64_t start = clampAxis(n.hasAttr("start") ? n.attrInt("start") : 0);
  const int64_t end = clampAxis(n.hasAttr("end") ? n.attrInt("end") : rank);
  std::vector<int64_t> dims(s.begin() + start, s.begin() + std::max(start, end));
  return Tensor::fromVector<int64_t>({static_cast<int64_t>(dims.size())}, dims);
}

class SpecializeShapesPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    Graph& graph = *model.graph;
    applyShapeOptions(graph, options);
    graph.topoSort();
    inferShapes(graph);
    const std::vector<Node*> order = passes::nodeSnapshot(graph);
    bool changed = false;
    for (Node* n : order) {
      auto value = shapeConstant(*n);
      if (!value || passes::isGraphOutput(n->output(0))) continue;
      Value* c = graph.addConstant(graph.uniqueName(n->output(0)->name() + ".static"), *value);
      changed |= passes::replaceValue(graph, n->output(0), c);
    }
    if (changed) graph.removeUnusedValues();
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(specialize_shapes, "specialize-shapes",
                     "fix input shapes (option shape.<input>=1x3x224x224), re-infer, and make Shape/Size constants",
                     [] { return std::make_unique<SpecializeShapesPass>(); });

}  // namespace tessel
