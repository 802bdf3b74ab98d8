// tessel.Compiled: a model built for a target (cpu: a compiled shared library; npu: instructions for the simulated
// NPU; ref: the reference interpreter), run on numpy arrays; also an eval::Runner, so that compare can run it.
#pragma once

#include <memory>
#include <mutex>
#include <pybind11/pybind11.h>
#include <string>
#include <vector>

#include "arrays.h"
#include "tessel/eval/runner.h"

namespace tessel::python {

namespace py = pybind11;
class PyModel;

class Compiled : public eval::Runner {
 public:
  std::string target() const override { return target_; }
  std::string label() const override { return label_; }
  std::vector<std::string> outputNames() const override { return outputNames_; }
  /// Runs on checked inputs; one run at a time per object (runs from several threads wait for each other).
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) final;
  std::string lastRunSummary() const override { return "ran " + label_; }

  /// Compiled.run: {name: array} in, {name: array} out. Every input is checked (name, dtype, shape) before any
  /// work; the GIL is released while the model runs.
  py::dict runArrays(py::handle inputs);
  std::vector<TensorInfo> inputInfos() const;
  virtual std::vector<TensorInfo> outputInfos() const = 0;

  /// Writes the artifact (cpu: the shared library, npu: a .tnpu, ref: text IR .tir).
  virtual void save(const std::string& path) = 0;
  /// What `tessel bench --json` prints (cpu only).
  virtual py::object bench(py::handle inputs, int iterations, int warmup, bool profile, uint64_t seed);
  /// What `tessel sim --json` prints (npu only); with `profile`, what `tessel sim --json --profile` prints.
  virtual py::object simulate(py::handle inputs, bool profile, uint64_t seed);
  /// Writes the Chrome trace of a simulated run (npu only).
  virtual void trace(const std::string& path, py::handle inputs, uint64_t seed);

 protected:
  Compiled(std::string target, std::string label) : target_(std::move(target)), label_(std::move(label)) {}
  void setOutputNames(std::vector<std::string> names) { outputNames_ = std::move(names); }
  /// Runs on inputs already checked against signature(); called with the run lock held.
  virtual std::vector<Tensor> runLocked(const std::map<std::string, Tensor>& inputs) = 0;
  /// The given {name: array} inputs (None: none) checked, plus seeded random tensors for the rest.
  std::map<std::string, Tensor> completedInputs(py::handle inputs, uint64_t seed) const;
  /// UserError: `what` is not available for this target.
  [[noreturn]] void notForTarget(const std::string& what, const std::string& targets) const;

  std::mutex runMutex_;

 private:
  std::string target_, label_;
  std::vector<std::string> outputNames_;
};

/// Builds `model` for `target` ("cpu", "npu" or "ref"); the notes of loading it are appended to `notes`.
/// `threads` and `tuningFile` apply to cpu, `hw` to npu (UserError when given for another target).
std::unique_ptr<Compiled> compileModel(const PyModel& model, const std::string& target, py::handle hw,
                                       py::handle threads, py::handle tuningFile, std::vector<std::string>& notes);

/// The reference interpreter over `model` loaded as `tessel run` loads it, with undefined input dimensions fixed
/// by `given` shapes (else 1).
std::unique_ptr<Compiled> interpreterFor(const PyModel& model, const std::map<std::string, Shape>& given,
                                         std::vector<std::string>& notes);

/// Registers tessel.Compiled, tessel.compile and tessel.load_compiled.
void registerCompiled(py::module_& m);

}  // namespace tessel::python
