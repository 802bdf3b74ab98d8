// Facts about a loaded model (what `tessel info` reports): inputs, outputs, opsets, operator histogram, parameters, FLOPs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tessel/frontend/onnx_importer.h"

namespace tessel {

/// The object `tessel info --json` prints (keys in docs/cli.md) for a model loaded with its undefined input
/// dimensions kept: inputs show their declared types, and the counts are made on a copy whose open dimensions
/// are fixed per `fix` (fixOpenInputDims, then inference in `fix.inference` mode). `name` is the "model" key.
nlohmann::json modelInfoJson(const Model& model, const std::string& name, const ImportOptions& fix);

}  // namespace tessel
