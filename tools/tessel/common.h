// Options and helpers shared by the CLI's sub-commands (model loading, input tensors, flags, formatting).
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "tessel/frontend/model_loader.h"
#include "tessel/ir/tensor.h"
#include "tessel/support/units.h"  // humanCount, humanBytes

namespace tessel::cli {

/// Prints "note: MESSAGE" on stderr (what Tessel assumed for the user; never on stdout, which --json owns).
void printNote(const std::string& message);

/// Options every command that reads a model accepts.
struct ModelOptions {
  std::string path;
  std::vector<std::string> inputShapes;  ///< NAME:DIMS
  /// Adds MODEL (positional) and --input-shape to `cmd`.
  void addTo(CLI::App* cmd, const std::string& modelHelp = "model file (.onnx or .tir)", bool required = true);
  /// The import options of these flags: overrides, `given` input shapes, and undefined input dimensions
  /// fixed to 1 with a note (unless keepOpenDims).
  ImportOptions importOptions(InferenceMode mode, const std::map<std::string, Shape>& given = {},
                              bool keepOpenDims = false) const;
  /// Loads the model with importOptions().
  std::unique_ptr<Model> load(InferenceMode mode, const std::map<std::string, Shape>& given = {},
                              bool keepOpenDims = false) const;
  /// UserError when --input-shape is given for a compiled model (.so, .tnpu), whose shapes are fixed.
  void refuseShapesOfCompiled() const;
  /// NAME -> shape; UserError for a malformed spec or a name given twice.
  std::map<std::string, Shape> shapeOverrides() const;
};

/// Options for feeding inputs: --input NAME=FILE (or FILE.npz) and --seed.
struct InputOptions {
  std::vector<std::string> inputs;  ///< NAME=FILE or FILE.npz
  uint64_t seed = 0;
  void addTo(CLI::App* cmd);
  /// The tensors of the --input files by input name (UserError for a malformed flag or a name given twice).
  std::map<std::string, Tensor> readGiven() const;
  /// `given` checked against the declared inputs of `signature`, plus seeded random tensors for the inputs
  /// not given (one note each unless quiet).
  std::map<std::string, Tensor> resolve(const Graph& signature, std::map<std::string, Tensor> given, bool quiet) const;
  std::map<std::string, Tensor> resolve(const Graph& signature, bool quiet) const {
    return resolve(signature, readGiven(), quiet);
  }
};

/// Adds --threads N, accepted from 1 to `max` (0: this machine's hardware threads); `threads` stays 0 when
/// the flag is not given.
void addThreadsOption(CLI::App* cmd, int& threads, const std::string& help, int max = 0);

/// Adds a flag taking one value per occurrence: NAME VALUE never swallows the following positional MODEL.
CLI::Option* addRepeatable(CLI::App* cmd, const std::string& name, std::vector<std::string>& values,
                           const std::string& help);

/// Creates DIR (and parents); UserError naming it when that fails.
void makeOutputDirectory(const std::string& dir);
/// Writes each output as DIR/<name>.npy.
void writeOutputFiles(const std::string& dir, const std::vector<std::string>& names, const std::vector<Tensor>& outputs);

/// Replaces characters that cannot appear in a file name.
std::string fileNameFor(const std::string& valueName);

}  // namespace tessel::cli
