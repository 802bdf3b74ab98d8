// ONNX import (S4.1): ModelProto -> Tessel Model, with opset upgrades, overrides and shape inference.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>

#include "tessel/ir/graph.h"

namespace tessel {

/// How strictly import runs type/shape inference.
enum class InferenceMode {
  Strict,   ///< an inference error is a UserError (default for compile)
  Lenient,  ///< an inference error leaves that node's outputs untyped, with a warning on stderr (run)
  Off,
};

struct ImportOptions {
  /// Overrides of input shapes (`--input-shape name:1x3x224x224`), applied before inference.
  std::map<std::string, Shape> inputShapes;
  /// Shapes of input tensors the caller already has (`tessel run --input x=x.npy`): each fixes the shape of
  /// an input the model leaves not fully known and no override names, when the ranks agree (any other
  /// mismatch is left to the input check, which names the input).
  std::map<std::string, Shape> givenInputShapes;
  /// When set, every input dimension still symbolic or unknown after the two maps above is fixed to this
  /// value (trtexec's rule for undefined dimensions), and `note` is told once per input it changed.
  std::optional<int64_t> defaultDimValue;
  std::function<void(const std::string&)> note;
  InferenceMode inference = InferenceMode::Strict;
};

/// Oldest and newest ai.onnx opset versions Tessel imports.
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 17;

/// Imports a model file; external data is resolved relative to the file's directory. Throws UserError for
/// unreadable, truncated or corrupt files, unsupported opsets, cycles, undefined values, and lists *all*
/// unsupported operators in one message.
std::unique_ptr<Model> importOnnxFile(const std::string& path, const ImportOptions& options = {});
/// Imports serialised ModelProto bytes (`name` labels diagnostics; `baseDir` resolves external data).
std::unique_ptr<Model> importOnnxBytes(const std::string& bytes, const std::string& name, const std::string& baseDir,
                                       const ImportOptions& options = {});

/// Applies `--input-shape` overrides to a graph's inputs (UserError for unknown names or bad ranks).
void applyInputShapes(Graph& graph, const std::map<std::string, Shape>& shapes);
/// Applies `givenInputShapes` and `defaultDimValue` of `options` to a graph's inputs (after applyInputShapes).
void fixOpenInputDims(Graph& graph, const ImportOptions& options);
/// Runs shape inference per `mode` (Lenient: print a warning and keep going on a UserError).
void inferShapesWithMode(Graph& graph, InferenceMode mode);
/// Parses "name:1x3x224x224" (UserError with the expected form otherwise).
std::pair<std::string, Shape> parseInputShapeSpec(const std::string& spec);

}  // namespace tessel
