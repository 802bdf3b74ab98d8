// tessel.Model, the loaders behind tessel.load, and tessel.partition.
#include "py_model.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "arrays.h"
#include "errors.h"
#include "options.h"
#include "tessel/frontend/model_info.h"
#include "tessel/frontend/model_loader.h"
#include "tessel/ir/text.h"
#include "tessel/partition/partitioner.h"
#include "tessel/targets/npu/lowering.h"
#include "tessel/targets/target.h"

namespace tessel::python {
namespace {

/// {input name: shape} from None or a dict of sequences of whole numbers.
std::map<std::string, Shape> shapesOf(py::handle inputShapes) {
  std::map<std::string, Shape> out;
  if (inputShapes.is_none()) return out;
  if (!py::isinstance<py::dict>(inputShapes))
    throw py::type_error("input_shapes: expected a dict {input name: shape} or None");
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(inputShapes)) {
    if (!py::isinstance<py::str>(key)) throw py::type_error("input_shapes: keys are input names (str)");
    const std::string name = key.cast<std::string>();
    auto bad = [&] {
      return UserError(fmt::format("input_shapes['{}']: expected a sequence of whole numbers >= 0, got {}", name,
                                   py::repr(value).cast<std::string>()));
    };
    if (py::isinstance<py::str>(value) || !py::isinstance<py::iterable>(value)) throw bad();
    Shape shape;
    for (py::handle d : value) {
      if (!py::isinstance<py::int_>(d) || py::isinstance<py::bool_>(d) || d < py::int_(0) || d > py::int_(INT64_MAX))
        throw bad();
      shape.push_back(d.cast<int64_t>());
    }
    out.emplace(name, std::move(shape));
  }
  return out;
}

/// The partition report of a model for a configuration, as `tessel partition --json` prints it.
py::object partitionModel(const PyModel& model, py::handle hw) {
  hw::HardwareConfig config = hardwareConfigOf(hw);
  std::vector<std::string> notes;
  nlohmann::json report;
  {
    py::gil_scoped_release release;
    auto loaded = model.reload(InferenceMode::Strict, {}, notes);
    npu::prepareModelForNpu(*loaded);
    partition::PartitionOptions options;
    options.canLower = target::loweringCheck();
    report = partition::placementJson(partition::partitionGraph(*loaded->graph, config, options), config, model.name());
  }
  warnNotes(notes);
  return pythonOf(report);
}

}  // namespace

PyModel::PyModel(std::string name, std::string path, std::string bytes, std::map<std::string, Shape> shapes)
    : name_(std::move(name)), path_(std::move(path)), bytes_(std::move(bytes)), shapes_(std::move(shapes)) {
  ImportOptions options = importOptions(InferenceMode::Lenient);
  options.defaultDimValue.reset();  // kept as declared
  model_ = path_.empty() ? importOnnxBytes(bytes_, name_, "", options) : loadModel(path_, options);
}

std::unique_ptr<PyModel> PyModel::fromPath(const std::string& path, py::handle inputShapes) {
  auto shapes = shapesOf(inputShapes);
  py::gil_scoped_release release;
  return std::unique_ptr<PyModel>(new PyModel(path, path, "", std::move(shapes)));
}

std::unique_ptr<PyModel> PyModel::fromBytes(std::string bytes, const std::string& name, py::handle inputShapes) {
  auto shapes = shapesOf(inputShapes);
  py::gil_scoped_release release;
  return std::unique_ptr<PyModel>(new PyModel(name, "", std::move(bytes), std::move(shapes)));
}

ImportOptions PyModel::importOptions(InferenceMode mode) const {
  ImportOptions options;
  options.inputShapes = shapes_;
  options.defaultDimValue = 1;
  options.inference = mode;
  return options;
}

std::unique_ptr<Model> PyModel::reload(InferenceMode mode, const std::map<std::string, Shape>& given,
                                       std::vector<std::string>& notes) const {
  ImportOptions options = importOptions(mode);
  options.givenInputShapes = given;
  options.note = [&notes](const std::string& n) { notes.push_back(n); };
  return path_.empty() ? importOnnxBytes(bytes_, name_, "", options) : loadModel(path_, options);
}

py::object PyModel::info(std::vector<std::string>& notes) const {
  ImportOptions fix = importOptions(InferenceMode::Lenient);
  fix.note = [&notes](const std::string& n) { notes.push_back(n); };
  return pythonOf(modelInfoJson(*model_, name_, fix));
}

void registerModel(py::module_& m) {
  py::class_<PyModel>(m, "Model",
                      "A model loaded by tessel.load (ONNX file, onnx.ModelProto, ONNX bytes or text IR .tir), its "
                      "undefined input dimensions kept as declared. tessel.compile, tessel.compare and "
                      "tessel.partition load it again the way the CLI commands do (undefined dimensions become 1, "
                      "with a tessel.Note warning); for a file that means reading the file again.")
      .def_property_readonly("name", &PyModel::name, "The model's path, or the name given to ModelProto/bytes.")
      .def_property_readonly(
          "inputs", [](const PyModel& p) { return inputInfos(*p.loaded().graph); },
          "The inputs (list of TensorInfo, constants with initialisers left out), as declared.")
      .def_property_readonly(
          "outputs", [](const PyModel& p) { return outputInfos(*p.loaded().graph); },
          "The outputs (list of TensorInfo).")
      .def(
          "info",
          [](const PyModel& p) {
            std::vector<std::string> notes;
            py::object facts = p.info(notes);
            warnNotes(notes);
            return facts;
          },
          "info() -> dict\n\nWhat `tessel info --json` prints: model, producer, opsets, inputs (with declared_type), "
          "outputs, parameters, parameter_bytes, flops, nodes, operators (see docs/cli.md). Undefined input "
          "dimensions count as 1 (a tessel.Note says so).")
      .def(
          "ir",
          [](const PyModel& p, py::handle path) -> py::object {
            if (path.is_none()) return py::str(printModelText(p.loaded()));
            writeModelTextFile(p.loaded(), pathOf(path, "path"));
            return py::none();
          },
          py::arg("path") = py::none(),
          "ir(path=None) -> str | None\n\nThe model in Tessel's text IR (docs/ir.md), as `tessel ir` writes it. "
          "Without a path: returned as a string with every constant inline (long for large models). With a path "
          "(.tir): written there, large constants in PATH.bin next to it; returns None.")
      .def("__repr__", [](const PyModel& p) {
        return fmt::format("<tessel.Model {}: {} input(s), {} output(s), {} node(s)>", p.name(),
                           inputInfos(*p.loaded().graph).size(), p.loaded().graph->outputs().size(),
                           p.loaded().graph->numNodes());
      });
  m.def("_load_path", &PyModel::fromPath, py::arg("path"), py::arg("input_shapes") = py::none(),
        "Loads a model file (.onnx, .tir); tessel.load is the public entry point.");
  m.def("_load_bytes",
        [](py::bytes bytes, const std::string& name, py::handle inputShapes) {
          return PyModel::fromBytes(std::string(bytes), name, inputShapes);
        },
        py::arg("data"), py::arg("name"), py::arg("input_shapes") = py::none(),
        "Loads serialised ONNX ModelProto bytes; tessel.load is the public entry point.");
  m.def("partition", &partitionModel, py::arg("model"), py::arg("hw") = py::none(),
        "partition(model, hw=None) -> dict\n\nPlaces every node of the model on a device of the hardware "
        "configuration hw (a name such as 'default' or 'tiny', a JSON file, or a dict with the file's content; None: "
        "'default') and returns what `tessel partition --json` prints: model, hw_config, hw_hash, placements (node, "
        "op, device, subgraph, reason), nodes_per_device, subgraphs, transfer_values, transfer_bytes.");
}

}  // namespace tessel::python
