// Dispatch of model files to the ONNX importer or the text IR reader.
#include "tessel/frontend/model_loader.h"

#include <filesystem>
#include <fmt/format.h>

#include "tessel/ir/text.h"
#include "tessel/ir/verifier.h"

namespace tessel {

std::unique_ptr<Model> loadModel(const std::string& path, const ImportOptions& options) {
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".onnx") return importOnnxFile(path, options);
  if (ext == ".tir") {
    auto model = readModelTextFile(path);
    verifyOrThrow(*model->graph);
    applyInputShapes(*model->graph, options.inputShapes);
    fixOpenInputDims(*model->graph, options);
    inferShapesWithMode(*model->graph, options.inference);
    return model;
  }
  throw UserError(fmt::format("'{}': unknown model format '{}' (expected .onnx or .tir)", path, ext));
}

}  // namespace tessel
