// The textual IR (.tir): a readable, editable form of a Model that prints and parses back identically.
// Grammar and conventions: docs/ir.md. Large constants live in a side file referenced from the text.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tessel/ir/graph.h"

namespace tessel {

struct TextPrintOptions {
  /// Constants with more elements than this are written to the side file (when one is given) instead of
  /// inline. Inline constants are printed exactly (floats round-trip bit for bit).
  int64_t inlineLimit = 16;
};

/// Prints a model. Constants above the inline limit are printed as references into `sideFileName`
/// (e.g. "model.tir.bin") and their bytes appended to `sideData`; with sideData == nullptr every
/// constant is printed inline.
std::string printModelText(const Model& model, const TextPrintOptions& options = {}, std::string* sideData = nullptr,
                           const std::string& sideFileName = "");
/// Prints one graph (for pass dumps: --print-after); large constants are elided as "<N bytes>".
std::string printGraphText(const Graph& graph);

/// Parses the text form. `sideData` holds the side file's bytes (may be empty when no constant refers
/// to it). Errors are UserError "FILE:LINE:COL: expected ..., found ...".
std::unique_ptr<Model> parseModelText(std::string_view text, const std::string& fileName, std::string_view sideData = {});

/// Writes PATH and, when needed, PATH.bin (the side file). Throws UserError when not writable.
void writeModelTextFile(const Model& model, const std::string& path, const TextPrintOptions& options = {});
/// Reads PATH (and PATH.bin when the text refers to it).
std::unique_ptr<Model> readModelTextFile(const std::string& path);

}  // namespace tessel
