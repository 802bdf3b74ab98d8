// tessel.Model: a model loaded from an ONNX file, ONNX bytes or text IR, with its undefined dimensions kept as
// declared; compile, compare and partition load it again as the CLI commands do.
#pragma once

#include <map>
#include <memory>
#include <pybind11/pybind11.h>
#include <string>
#include <vector>

#include "tessel/frontend/onnx_importer.h"

namespace tessel::python {

namespace py = pybind11;

class PyModel {
 public:
  /// Loads a file (.onnx, .tir) or serialised ModelProto bytes (`name` labels it in messages), with
  /// `inputShapes` (None or {input name: shape}) fixing input shapes as --input-shape does.
  static std::unique_ptr<PyModel> fromPath(const std::string& path, py::handle inputShapes);
  static std::unique_ptr<PyModel> fromBytes(std::string bytes, const std::string& name, py::handle inputShapes);

  /// The path, or the name given with the bytes.
  const std::string& name() const { return name_; }
  /// The model as loaded (undefined input dimensions kept; lenient shape inference, as `tessel info`).
  const Model& loaded() const { return *model_; }

  /// A fresh copy loaded as a CLI command loads it: `mode` Strict as `compile`/`partition`, Lenient as `run`;
  /// undefined input dimensions fixed by `given` shapes, else 1 (one note each, appended to `notes`).
  std::unique_ptr<Model> reload(InferenceMode mode, const std::map<std::string, Shape>& given,
                                std::vector<std::string>& notes) const;

  /// `tessel info --json` of the model (undefined dimensions counted as 1; the notes appended to `notes`).
  py::object info(std::vector<std::string>& notes) const;

 private:
  PyModel(std::string name, std::string path, std::string bytes, std::map<std::string, Shape> shapes);
  ImportOptions importOptions(InferenceMode mode) const;

  std::string name_, path_, bytes_;
  std::map<std::string, Shape> shapes_;
  std::unique_ptr<Model> model_;
};

/// Registers tessel.Model and the loaders behind tessel.load.
void registerModel(py::module_& m);

}  // namespace tessel::python
