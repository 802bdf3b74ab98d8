// tessel.compare: two forms of a model (Model, Compiled, a path, or outputs as a dict) run on the same inputs,
// compared as `tessel compare` compares them.
#include "py_compare.h"

#include <cmath>
#include <fmt/format.h>
#include <set>

#include "arrays.h"
#include "errors.h"
#include "options.h"
#include "py_compiled.h"
#include "py_model.h"
#include "tessel/eval/compare_runs.h"
#include "tessel/eval/inputs.h"

namespace tessel::python {
namespace {

bool isPath(py::handle side) { return py::isinstance<py::str>(side) || py::hasattr(side, "__fspath__"); }

/// The runners of the two sides. Those that are not model files open first: their fixed input shapes, with the
/// given inputs', then fix the undefined dimensions of the model files (as `tessel compare A B` does).
class Sides {
 public:
  Sides(py::handle a, py::handle b, std::map<std::string, Shape> shapes) : shapes_(std::move(shapes)) {
    const py::handle sides[2] = {a, b};
    const char* names[2] = {"a", "b"};
    for (size_t i = 0; i < 2; ++i)
      if (!isModelFile(sides[i], names[i])) runners_[i] = openFixed(sides[i], names[i]);
    for (size_t i = 0; i < 2; ++i)
      if (runners_[i] == nullptr) runners_[i] = openModel(sides[i], names[i]);
    if (runners_[0]->target() == "saved" && runners_[1]->target() == "saved")
      throw UserError("compare: both sides are saved outputs; one must be something that runs");
  }
  std::vector<eval::Runner*> order() const { return {runners_[0], runners_[1]}; }
  std::vector<std::string> notes;

 private:
  static bool isModelFile(py::handle side, const char* which) {
    if (py::isinstance<PyModel>(side)) return true;
    return isPath(side) && eval::artifactKind(pathOf(side, which)) == "model";
  }

  /// Records the runner's fixed input shapes.
  eval::Runner* remember(eval::Runner* r) {
    for (Value* in : r->signature().inputs())
      if (in->type.isStatic()) shapes_.emplace(in->name(), in->type.staticShape());
    return r;
  }
  eval::Runner* own(std::unique_ptr<eval::Runner> r) {
    owned_.push_back(std::move(r));
    return owned_.back().get();
  }

  eval::Runner* openFixed(py::handle side, const char* which) {
    if (py::isinstance<Compiled>(side)) return remember(side.cast<Compiled*>());  // owned by Python, alive meanwhile
    if (py::isinstance<py::dict>(side)) {
      auto given = tensorsFromDict("output", side);
      std::string summary = fmt::format("{} given output(s)", given.size());
      return remember(own(eval::savedOutputs({given.begin(), given.end()}, "given outputs", std::move(summary))));
    }
    if (isPath(side)) {
      std::string path = pathOf(side, which);
      py::gil_scoped_release release;
      return remember(own(eval::openArtifact(path, eval::RunnerOptions{})));
    }
    throw py::type_error(fmt::format("compare: {} must be a tessel.Model, a tessel.Compiled, a path (.onnx, .tir, .so, "
                                     ".tnpu, or .npz of saved outputs) or a dict {{output name: array}}, not {}",
                                     which, py::str(py::type::handle_of(side).attr("__name__")).cast<std::string>()));
  }

  eval::Runner* openModel(py::handle side, const char* which) {
    if (py::isinstance<PyModel>(side)) return own(interpreterFor(*side.cast<const PyModel*>(), shapes_, notes));
    eval::RunnerOptions options;
    options.import.givenInputShapes = shapes_;
    options.import.defaultDimValue = 1;
    options.import.inference = InferenceMode::Lenient;
    options.import.note = [this](const std::string& n) { notes.push_back(n); };
    std::string path = pathOf(side, which);
    py::gil_scoped_release release;
    return own(eval::openArtifact(path, options));
  }

  std::map<std::string, Shape> shapes_;
  std::vector<std::unique_ptr<eval::Runner>> owned_;
  eval::Runner* runners_[2] = {nullptr, nullptr};
};

py::object compare(py::handle a, py::handle b, py::handle inputs, double atol, double rtol, uint64_t seed) {
  if (!(atol >= 0) || !(rtol >= 0))
    throw UserError(fmt::format("atol={} rtol={}: tolerances must be non-negative numbers", atol, rtol));
  const eval::Tolerances tol{atol, rtol};
  std::map<std::string, Tensor> given;
  if (!inputs.is_none()) given = tensorsFromDict("input", inputs);
  std::set<std::string> givenNames;
  for (const auto& [name, t] : given) givenNames.insert(name);
  Sides sides(a, b, eval::shapesOf(given));
  auto used = eval::comparisonInputs(sides.order(), std::move(given), seed,
                                     [&](const std::string& n) { sides.notes.push_back(n); });
  eval::ComparisonRun run;
  {
    py::gil_scoped_release release;
    run = eval::compareRunners(sides.order(), used, tol);
  }
  warnNotes(sides.notes);
  return pythonOf(eval::comparisonJson(run, used, givenNames, tol, seed));
}

}  // namespace

void registerCompare(py::module_& m) {
  m.def("compare", &compare, py::arg("a"), py::arg("b"), py::arg("inputs") = py::none(), py::arg("atol") = 1e-5,
        py::arg("rtol") = 1e-5, py::arg("seed") = 0,
        "compare(a, b, inputs=None, atol=1e-5, rtol=1e-5, seed=0) -> dict\n\nRuns two forms of a model on the same "
        "inputs and compares b's outputs with a's (the reference), as `tessel compare` does. Each side is a "
        "tessel.Model (run on the reference interpreter), a tessel.Compiled, a path (.onnx/.tir, .so, .tnpu, or "
        ".npz of saved outputs) or a dict {output name: array} of outputs computed elsewhere (e.g. by PyTorch). "
        "inputs: {input name: array}; inputs not given are random (seeded by seed, one tessel.Note each). An "
        "element passes when |b - a| <= atol + rtol * |a| (numpy.allclose). Returns what `tessel compare --json` "
        "prints: atol, rtol, seed, inputs, comparisons (per output: pass, max_abs_error, max_rel_error, "
        "mean_abs_error, worst element, mismatches), and 'pass'; a mismatch is a result, not an exception.");
}

}  // namespace tessel::python
