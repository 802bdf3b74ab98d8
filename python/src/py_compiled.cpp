// tessel.Compiled for the three targets (cpu, npu, ref), tessel.compile and tessel.load_compiled.
#include "py_compiled.h"

#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <pybind11/stl.h>

#include "errors.h"
#include "options.h"
#include "py_model.h"
#include "tessel/eval/inputs.h"
#include "tessel/interp/interpreter.h"
#include "tessel/ir/text.h"
#include "tessel/rt/cpu.h"
#include "tessel/targets/cpu/bench.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/cpu/loader.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/npu/run_trace.h"

namespace fs = std::filesystem;

namespace tessel::python {
namespace {

/// Compiles run one at a time in a process (the cpu compile driver's work and cache files are named by process).
std::mutex& compileMutex() {
  static std::mutex m;
  return m;
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A private temporary directory, removed with everything in it when destroyed (empty: none).
class TempDir {
 public:
  TempDir() = default;
  static TempDir create() {
    std::string pattern = (fs::temp_directory_path() / "tessel-python-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw UserError(fmt::format("cannot create a temporary directory like '{}'", pattern));
    TempDir d;
    d.path_ = pattern;
    return d;
  }
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> namesOf(const auto& infos) {
  std::vector<std::string> names;
  for (const auto& i : infos) names.push_back(i.name);
  return names;
}

std::vector<TensorInfo> infosOf(const auto& infos) {
  std::vector<TensorInfo> out;
  for (const auto& i : infos) out.push_back(TensorInfo::of(i.name, i.dtype, i.shape));
  return out;
}

class CpuCompiled final : public Compiled {
 public:
  /// Loads `library` on `threads` threads (0: all cores); `dir` is the temporary directory holding it, if any.
  CpuCompiled(const std::string& library, std::string label, int threads, TempDir dir)
      : Compiled("cpu", std::move(label)),
        dir_(std::move(dir)),
        library_(library),
        threads_(threads > 0 ? threads : rt::hardware_thread_count()),
        model_(std::make_unique<cpu::CompiledModel>(library, threads_)),
        signature_(eval::inputSignature(model_->inputs())) {
    setOutputNames(namesOf(model_->outputs()));
  }
  ~CpuCompiled() override { model_.reset(); }  // unloaded before its directory goes
  const Graph& signature() const override { return *signature_; }
  std::vector<TensorInfo> outputInfos() const override { return infosOf(model_->outputs()); }

  void save(const std::string& path) override {
    std::error_code ec;
    fs::copy_file(library_, path, fs::copy_options::overwrite_existing, ec);
    if (ec) throw UserError(fmt::format("cannot write '{}': {}", path, ec.message()));
  }

  py::object bench(py::handle inputs, int iterations, int warmup, bool profile, uint64_t seed) override {
    auto tensors = completedInputs(inputs, seed);
    nlohmann::json report;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(runMutex_);
      auto runs = cpu::timeRuns(*model_, tensors, warmup, iterations, profile);
      report = cpu::benchJson(label(), *model_, threads_, warmup, runs, profile);
    }
    return pythonOf(report);
  }

 protected:
  std::vector<Tensor> runLocked(const std::map<std::string, Tensor>& inputs) override { return model_->run(inputs); }

 private:
  TempDir dir_;
  std::string library_;
  int threads_;
  std::unique_ptr<cpu::CompiledModel> model_;
  std::unique_ptr<Graph> signature_;
};

class NpuCompiled final : public Compiled {
 public:
  NpuCompiled(npu::CompiledNpuModel model, std::string label)
      : Compiled("npu", std::move(label)), model_(std::move(model)), signature_(eval::inputSignature(model_.inputs)) {
    setOutputNames(namesOf(model_.outputs));
  }
  const Graph& signature() const override { return *signature_; }
  std::vector<TensorInfo> outputInfos() const override { return infosOf(model_.outputs); }

  void save(const std::string& path) override {
    if (!endsWith(path, ".tnpu")) throw UserError(fmt::format("save('{}'): an NPU model file must end in .tnpu", path));
    py::gil_scoped_release release;
    npu::writeNpuModel(model_, path);
  }

  py::object simulate(py::handle inputs, bool profile, uint64_t seed) override {
    auto tensors = completedInputs(inputs, seed);
    nlohmann::json summary;
    {
      py::gil_scoped_release release;
      std::lock_guard lock(runMutex_);
      const npu::NpuModelRun run = npu::runNpuModel(model_, tensors);
      summary = npu::runSummaryJson(model_, run);
      if (profile) summary["profile"] = npu::runProfileJson(model_, run);
    }
    return pythonOf(summary);
  }

  void trace(const std::string& path, py::handle inputs, uint64_t seed) override {
    auto tensors = completedInputs(inputs, seed);
    py::gil_scoped_release release;
    std::lock_guard lock(runMutex_);
    npu::writeRunTrace(model_, npu::runNpuModel(model_, tensors), path);
  }

 protected:
  std::vector<Tensor> runLocked(const std::map<std::string, Tensor>& inputs) override {
    return npu::runNpuModel(model_, inputs).outputs;
  }

 private:
  npu::CompiledNpuModel model_;
  std::unique_ptr<Graph> signature_;
};

class RefCompiled final : public Compiled {
 public:
  RefCompiled(std::unique_ptr<Model> model, std::string label)
      : Compiled("ref", std::move(label)), model_(std::move(model)), interpreter_(*model_->graph) {
    std::vector<std::string> names;
    for (const Value* v : model_->graph->outputs()) names.push_back(v->name());
    setOutputNames(std::move(names));
  }
  const Graph& signature() const override { return *model_->graph; }
  std::vector<TensorInfo> outputInfos() const override { return python::outputInfos(*model_->graph); }

  void save(const std::string& path) override {
    if (!endsWith(path, ".tir"))
      throw UserError(fmt::format("save('{}'): the ref target saves the model as text IR, a path ending in .tir", path));
    py::gil_scoped_release release;
    writeModelTextFile(*model_, path);
  }

 protected:
  std::vector<Tensor> runLocked(const std::map<std::string, Tensor>& inputs) override {
    return interpreter_.run(inputs);
  }

 private:
  std::unique_ptr<Model> model_;
  Interpreter interpreter_;
};

/// UserError when an option is given for a target it does not apply to.
void checkApplies(py::handle value, const char* option, const std::string& applies, const std::string& target) {
  if (!value.is_none() && target != applies)
    throw UserError(fmt::format("{} applies to target '{}', not '{}'", option, applies, target));
}

std::unique_ptr<Compiled> loadCompiled(py::handle pathArg, py::handle threads, py::handle hw) {
  const std::string path = pathOf(pathArg, "path");
  const std::string kind = eval::artifactKind(path);
  if (kind == "cpu") {
    checkApplies(hw, "hw", "npu", "cpu");
    int n = threadsOf(threads);
    py::gil_scoped_release release;
    return std::make_unique<CpuCompiled>(path, path + " (cpu)", n, TempDir());
  }
  if (kind == "npu") {
    checkApplies(threads, "threads", "cpu", "npu");
    std::string config = hw.is_none() ? "" : pathOf(hw, "hw");
    py::gil_scoped_release release;
    return std::make_unique<NpuCompiled>(eval::readNpuArtifact(path, config), path + " (npu)");
  }
  throw UserError(fmt::format("load_compiled('{}'): not a compiled model (expected a .so compiled for the CPU or a "
                              ".tnpu compiled for the NPU; load model files with tessel.load)", path));
}

}  // namespace

std::vector<Tensor> Compiled::run(const std::map<std::string, Tensor>& inputs) {
  std::lock_guard lock(runMutex_);
  return runLocked(inputs);
}

py::dict Compiled::runArrays(py::handle inputs) {
  auto checked = eval::checkedInputs(signature(), tensorsFromDict("input", inputs));
  std::vector<Tensor> outputs;
  {
    py::gil_scoped_release release;
    outputs = run(checked);
  }
  return dictFromTensors(outputNames_, outputs);
}

std::vector<TensorInfo> Compiled::inputInfos() const { return python::inputInfos(signature()); }

std::map<std::string, Tensor> Compiled::completedInputs(py::handle inputs, uint64_t seed) const {
  std::map<std::string, Tensor> given;
  if (!inputs.is_none()) given = tensorsFromDict("input", inputs);
  return eval::completeInputs(signature(), std::move(given), seed);
}

void Compiled::notForTarget(const std::string& what, const std::string& targets) const {
  throw UserError(fmt::format("{} is for models compiled for {}; this one is compiled for '{}'", what, targets, target_));
}

py::object Compiled::bench(py::handle, int, int, bool, uint64_t) { notForTarget("bench()", "'cpu' (the NPU has simulate())"); }
py::object Compiled::simulate(py::handle, bool, uint64_t) { notForTarget("simulate()", "'npu'"); }
void Compiled::trace(const std::string&, py::handle, uint64_t) { notForTarget("trace()", "'npu'"); }

std::unique_ptr<Compiled> compileModel(const PyModel& model, const std::string& target, py::handle hw,
                                       py::handle threads, py::handle tuningFile, std::vector<std::string>& notes) {
  if (target != "cpu" && target != "npu" && target != "ref")
    throw UserError(fmt::format("unknown target '{}' (known: cpu, npu, ref)", target));
  checkApplies(hw, "hw", "npu", target);
  checkApplies(threads, "threads", "cpu", target);
  checkApplies(tuningFile, "tuning_file", "cpu", target);
  if (target == "cpu") {
    cpu::CompileOptions options;
    options.defaultThreads = threadsOf(threads);
    if (!tuningFile.is_none()) options.tuningFile = pathOf(tuningFile, "tuning_file");
    TempDir dir = TempDir::create();
    py::gil_scoped_release release;
    std::lock_guard lock(compileMutex());
    auto loaded = model.reload(InferenceMode::Strict, {}, notes);
    cpu::prepareModel(*loaded, options);
    const std::string library = dir.path() + "/model.so";
    cpu::compileSharedLibrary(*loaded, library, options);
    return std::make_unique<CpuCompiled>(library, model.name() + " (cpu)", options.defaultThreads, std::move(dir));
  }
  if (target == "npu") {
    hw::HardwareConfig config = hardwareConfigOf(hw);
    py::gil_scoped_release release;
    std::lock_guard lock(compileMutex());
    auto loaded = model.reload(InferenceMode::Strict, {}, notes);
    return std::make_unique<NpuCompiled>(npu::compileForNpu(*loaded, config),
                                         fmt::format("{} (npu, {})", model.name(), config.name()));
  }
  return interpreterFor(model, {}, notes);
}

std::unique_ptr<Compiled> interpreterFor(const PyModel& model, const std::map<std::string, Shape>& given,
                                         std::vector<std::string>& notes) {
  py::gil_scoped_release release;
  return std::make_unique<RefCompiled>(model.reload(InferenceMode::Lenient, given, notes), model.name() + " (ref)");
}

void registerCompiled(py::module_& m) {
  py::class_<Compiled>(m, "Compiled",
                       "A model built for a target by tessel.compile (or loaded by tessel.load_compiled): 'cpu' (a "
                       "compiled shared library), 'npu' (instructions for the simulated NPU, run on its simulator) "
                       "or 'ref' (the reference interpreter). Input shapes are fixed. One object may be used from "
                       "several threads; its runs take turns.")
      .def_property_readonly("target", &Compiled::target, "'cpu', 'npu' or 'ref'.")
      .def_property_readonly("name", &Compiled::label, "What runs, e.g. 'resnet18.onnx (cpu)'.")
      .def_property_readonly("inputs", &Compiled::inputInfos, "The inputs (list of TensorInfo), shapes fixed.")
      .def_property_readonly("outputs", &Compiled::outputInfos, "The outputs (list of TensorInfo).")
      .def("run", &Compiled::runArrays, py::arg("inputs"),
           "run(inputs) -> dict\n\nRuns the model on {input name: array} (numpy arrays, or anything numpy.asarray "
           "takes) and returns {output name: numpy array}. Every input must be given with the element type and "
           "shape of Compiled.inputs; a missing, unknown or mismatched input raises tessel.UserError naming it, "
           "before anything runs. C-contiguous arrays are used in place (no copy); on cpu the outputs are written "
           "straight into the returned arrays. The GIL is released while the model runs.")
      .def("save", [](Compiled& c, py::handle path) { c.save(pathOf(path, "path")); }, py::arg("path"),
           "save(path) -> None\n\nWrites the artifact: cpu the shared library (runs with `tessel run PATH.so` or "
           "tessel.load_compiled), npu a .tnpu file, ref the model as text IR (.tir).")
      .def("bench", &Compiled::bench, py::arg("inputs") = py::none(), py::arg("iterations") = 20,
           py::arg("warmup") = 5, py::arg("profile") = false, py::arg("seed") = 0,
           "bench(inputs=None, iterations=20, warmup=5, profile=False, seed=0) -> dict\n\ncpu only. Times `warmup` "
           "untimed and `iterations` timed runs and returns what `tessel bench --json` prints: median_ms, min_ms, "
           "p90_ms, mean_ms, max_ms, threads, hash, gflops, gflop_per_s, ... (with profile=True also 'profile', "
           "the per-layer times). Inputs not given are random (seeded by seed).")
      .def("simulate", &Compiled::simulate, py::arg("inputs") = py::none(), py::arg("profile") = false,
           py::arg("seed") = 0,
           "simulate(inputs=None, profile=False, seed=0) -> dict\n\nnpu only. Runs the model on the NPU simulator and "
           "returns what `tessel sim --json` prints: cycles, lower_bound_cycles, mm_utilization, units (busy/stall "
           "cycles per unit), dram_bytes, peak_sram_bytes, sram_capacity_bytes, hazards, npu_calls, subgraphs, ... "
           "(with profile=True also 'profile': per node, each unit's busy cycles and the matrix unit's overheads, as "
           "`tessel sim --profile --json`). Inputs not given are random (seeded by seed).")
      .def("trace", [](Compiled& c, py::handle path, py::handle inputs,
                       uint64_t seed) { c.trace(pathOf(path, "path"), inputs, seed); },
           py::arg("path"), py::arg("inputs") = py::none(), py::arg("seed") = 0,
           "trace(path, inputs=None, seed=0) -> None\n\nnpu only. Simulates a run and writes its Chrome/Perfetto "
           "trace (one track per unit, SRAM counters) to path, as `tessel sim --trace`.")
      .def("__repr__", [](const Compiled& c) {
        return fmt::format("<tessel.Compiled {}: {} input(s), {} output(s)>", c.label(), c.inputInfos().size(),
                           c.outputNames().size());
      });
  m.def(
      "compile",
      [](const PyModel& model, const std::string& target, py::handle hw, py::handle threads, py::handle tuningFile) {
        std::vector<std::string> notes;
        auto compiled = compileModel(model, target, hw, threads, tuningFile, notes);
        warnNotes(notes);
        return compiled;
      },
      py::arg("model"), py::arg("target") = "cpu", py::arg("hw") = py::none(), py::arg("threads") = py::none(),
      py::arg("tuning_file") = py::none(),
      "compile(model, target='cpu', hw=None, threads=None, tuning_file=None) -> Compiled\n\nBuilds a Model for a "
      "target, as `tessel compile` does: 'cpu' generates C++ and compiles it into a shared library (threads: the "
      "threads it runs on, None for all cores; tuning_file: kernel choices saved by `tessel compile --tune "
      "--tuning-file`); 'npu' partitions and lowers it for the hardware configuration hw (a name such as "
      "'default' or 'tiny', a JSON file, or a dict with the file's content; None: 'default'); 'ref' runs it on "
      "the reference interpreter. Undefined input dimensions become 1 (a tessel.Note says so; fix them with "
      "tessel.load(..., input_shapes=...)). Raises tessel.UserError for what the target cannot compile, naming "
      "the nodes. The GIL is released while compiling.");
  m.def("load_compiled", &loadCompiled, py::arg("path"), py::arg("threads") = py::none(), py::arg("hw") = py::none(),
        "load_compiled(path, threads=None, hw=None) -> Compiled\n\nOpens a saved artifact: a .so compiled for the "
        "CPU (threads: None for all cores) or a .tnpu compiled for the NPU (hw: refuse it unless it was compiled "
        "for this configuration, a name or a file).");
}

}  // namespace tessel::python
