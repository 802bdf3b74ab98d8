// Helpers shared by the NPU, partitioning and target tests: shipped hardware configurations, seeded inputs, a
// model with an NPU part and a CPU part.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"
#include "tessel/ir/tensor.h"
#include "tessel/ops/shape_inference.h"

namespace tessel::test {

/// One of the configurations shipped in configs/ (e.g. "tiny.json").
inline hw::HardwareConfig shippedConfig(const std::string& name) {
  return hw::HardwareConfig::load(std::string(TESSEL_SOURCE_DIR) + "/configs/" + name);
}

/// A float32 tensor of uniform values in [-1, 1), reproducible from `seed`.
inline Tensor randomTensor(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(static_cast<size_t>(shapeSize(s)));
  for (float& x : v) x = d(rng);
  return Tensor::fromVector(s, v);
}

/// The largest |a[i] - b[i]| of two float32 tensors of one size; `scale` gets the largest |b[i]| (the reference's
/// magnitude, which tolerances are relative to). A NaN on one side only is an infinite difference (std::max would
/// skip it: a NaN output must fail the comparison).
inline float maxAbsDiff(const Tensor& a, const Tensor& b, float* scale) {
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float d = 0;
  *scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::isnan(pa[i]) != std::isnan(pb[i])) return std::numeric_limits<float>::infinity();
    if (!std::isnan(pa[i])) d = std::max(d, std::fabs(pa[i] - pb[i]));
    *scale = std::max(*scale, std::fabs(pb[i]));
  }
  return d;
}

/// conv -> relu -> Neg (CPU only) -> conv (depthwise) -> add(residual) -> GAP -> Flatten (a view on the NPU) -> Gemm.
inline std::unique_ptr<Model> mixedModel() {
  auto m = std::make_unique<Model>();
  m->opsetImports[""] = 17;
  m->graph = std::make_unique<Graph>();
  Graph& g = *m->graph;
  Value* x = g.addInput("x", TensorType::fromShape(DType::Float32, {1, 8, 10, 10}));
  auto conv = [&](Value* in, int64_t group, uint32_t seed) {
    Value* w = g.addConstant(g.uniqueName("w"), randomTensor({8, 8 / group, 3, 3}, seed));
    Value* b = g.addConstant(g.uniqueName("b"), randomTensor({8}, seed + 1));
    Node* n = g.addNode("Conv", {in, w, b}, {g.uniqueName("conv")}, g.uniqueName("conv"));
    n->setAttr("group", group);
    n->setAttr("pads", std::vector<int64_t>{1, 1, 1, 1});
    return n->output(0);
  };
  Value* y = g.addNode("Relu", {conv(x, 1, 1)}, {"r"}, "relu")->output(0);
  y = g.addNode("Neg", {y}, {"neg"}, "neg")->output(0);
  Value* dw = conv(y, 8, 3);
  y = g.addNode("Add", {dw, x}, {"sum"}, "add")->output(0);
  y = g.addNode("GlobalAveragePool", {y}, {"gap"}, "gap")->output(0);
  y = g.addNode("Flatten", {y}, {"flat"}, "flatten")->output(0);
  Node* fc = g.addNode("Gemm", {y, g.addConstant("fcw", randomTensor({8, 5}, 9)), g.addConstant("fcb", randomTensor({5}, 10))},
                       {"logits"}, "fc");
  g.addOutput(fc->output(0));
  inferShapes(g);
  return m;
}

}  // namespace tessel::test
