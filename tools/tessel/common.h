// Options and helpers shared by the CLI's sub-commands (model loading, input tensors, formatting).
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "tessel/frontend/model_loader.h"
#include "tessel/ir/tensor.h"

namespace tessel::cli {

/// Options every command that reads a model accepts.
struct ModelOptions {
  std::string path;
  std::vector<std::string> inputShapes;  ///< NAME:DIMS
  /// Adds MODEL (positional, required) and --input-shape to `cmd`.
  void addTo(CLI::App* cmd, const std::string& modelHelp = "model file (.onnx or .tir)");
  /// Loads the model with the overrides applied.
  std::unique_ptr<Model> load(InferenceMode mode) const;
  std::map<std::string, Shape> shapeOverrides() const;
};

/// Options for feeding inputs: --input NAME=FILE and --seed.
struct InputOptions {
  std::vector<std::string> inputs;  ///< NAME=FILE
  uint64_t seed = 0;
  void addTo(CLI::App* cmd);
  /// Reads the given files and makes seeded random tensors for the inputs not given. Prints one line per
  /// generated input unless quiet.
  std::map<std::string, Tensor> resolve(const Graph& graph, bool quiet) const;
};

/// A random tensor for a declared input (floats in [-1, 1), ints in [0, 10), bools); UserError when the
/// shape is not fully known.
Tensor randomInput(const Value& input, uint64_t seed);

/// Replaces characters that cannot appear in a file name.
std::string fileNameFor(const std::string& valueName);

/// "1.2 M", "3.4 G" style.
std::string humanCount(double v);
std::string humanBytes(double v);

}  // namespace tessel::cli
