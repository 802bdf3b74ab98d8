// Dispatch of model files to the ONNX importer or the text IR reader.
#include "tessel/frontend/model_loader.h"

#include <filesystem>
#include <fmt/format.h>
#include <iostream>

#include "tessel/ir/text.h"
#include "tessel/ir/verifier.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {

std::unique_ptr<Model> loadModel(const std::string& path, const ImportOptions& options) {
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".onnx") return importOnnxFile(path, options);
  if (ext == ".tir") {
    auto model = readModelTextFile(path);
    verifyOrThrow(*model->graph);
    applyInputShapes(*model->graph, options.inputShapes);
    if (options.inference != InferenceMode::Off) {
      try {
        inferShapes(*model->graph);
      } catch (const UserError& e) {
        if (options.inference == InferenceMode::Strict) throw;
        std::cerr << "tessel: warning: shape inference stopped: " << e.what() << "\n";
      }
    }
    return model;
  }
  throw UserError(fmt::format("'{}': unknown model format '{}' (expected .onnx or .tir)", path, ext));
}

}  // namespace tessel
