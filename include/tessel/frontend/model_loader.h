// Loads a model from any file form Tessel reads: ONNX (.onnx) or text IR (.tir).
#pragma once

#include <memory>
#include <string>

#include "tessel/frontend/onnx_importer.h"

namespace tessel {

/// Loads PATH by its extension (.onnx, .tir), applies input-shape overrides and runs inference per
/// `options`. UserError for an unknown extension, naming the forms accepted.
std::unique_ptr<Model> loadModel(const std::string& path, const ImportOptions& options = {});

}  // namespace tessel
