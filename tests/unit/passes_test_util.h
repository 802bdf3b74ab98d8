// Helpers for the pass tests: run passes on text IR, compare with expected text IR, and check that the
// interpreter computes the same outputs before and after (the semantic check every pass must pass).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>

#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"
#include "tessel/passes/pass.h"

namespace tessel::testing {

inline std::string passesDataPath(const std::string& file) { return std::string(TESSEL_SOURCE_DIR) + "/tests/unit/data/passes/" + file; }

/// Random float inputs (uniform in [-2, 2]) for every static f32 graph input.
inline std::map<std::string, Tensor> randomInputs(const Graph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::map<std::string, Tensor> inputs;
  for (const Value* in : graph.inputs()) {
    Tensor t(in->type.dtype, in->type.staticShape());
    float* d = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) d[i] = dist(rng);
    inputs[in->name()] = t;
  }
  return inputs;
}

/// Largest |a - b| relative to the largest |b| (1 when b is all zeros), over all outputs.
inline double maxRelativeDifference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t o = 0; o < std::min(a.size(), b.size()); ++o) {
    EXPECT_EQ(a[o].shape(), b[o].shape()) << "output " << o;
    if (a[o].shape() != b[o].shape()) return INFINITY;
    std::vector<double> x = a[o].toDoubleVector(), y = b[o].toDoubleVector();
    double scale = 0, diff = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      scale = std::max(scale, std::abs(y[i]));
      diff = std::max(diff, std::abs(x[i] - y[i]));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-30));
  }
  return worst;
}

/// Runs `model` and a copy transformed by `pipeline` on the same random inputs; returns the relative error.
inline double semanticDifference(const Model& original, const Model& transformed, uint64_t seed = 1) {
  auto inputs = randomInputs(*original.graph, seed);
  Interpreter before(*original.graph), after(*transformed.graph);
  return maxRelativeDifference(after.run(inputs), before.run(inputs));
}

/// Debug options that only turn on the verifier after every pass.
inline PipelineDebugOptions verifyEachPass() {
  PipelineDebugOptions debug;
  debug.verifyEach = true;
  return debug;
}

/// data/passes/<stem>.in.tir -> passes -> printed graph equals data/passes/<stem>.expected.tir, and the
/// outputs agree with the input graph's within 1e-5 (relative).
inline void expectPassCase(const std::string& stem, const std::string& passes, const PassOptions& options = {}) {
  SCOPED_TRACE(stem);
  auto model = readModelTextFile(passesDataPath(stem + ".in.tir"));
  auto original = model->clone();
  PassPipeline::parse(passes).run(*model, options, verifyEachPass());
  auto expected = readModelTextFile(passesDataPath(stem + ".expected.tir"));
  EXPECT_EQ(printGraphText(*model->graph), printGraphText(*expected->graph));
  EXPECT_LE(semanticDifference(*original, *model), 1e-5);
}

}  // namespace tessel::testing
