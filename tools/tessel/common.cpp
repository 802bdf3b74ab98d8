// Shared CLI helpers: model options, input resolution, --threads, output files, number formatting.
#include "common.h"

#include <filesystem>
#include <fmt/format.h>
#include <set>

#include "tessel/eval/inputs.h"
#include "tessel/eval/runner.h"
#include "tessel/frontend/tensor_io.h"
#include "tessel/rt/cpu.h"

namespace tessel::cli {

void printNote(const std::string& message) {
  static std::set<std::string> printed;  // a model loaded twice (compare --target) says it once
  if (printed.insert(message).second) fmt::print(stderr, "note: {}\n", message);
}

CLI::Option* addRepeatable(CLI::App* cmd, const std::string& name, std::vector<std::string>& values,
                           const std::string& help) {
  return cmd->add_option(name, values, help)->allow_extra_args(false);
}

void ModelOptions::addTo(CLI::App* cmd, const std::string& modelHelp, bool required) {
  CLI::Option* model = cmd->add_option("model", path, modelHelp);
  if (required) model->required();
  addRepeatable(cmd, "--input-shape", inputShapes,
                "fix an input's shape, e.g. --input-shape input:1x3x224x224 (repeatable; undefined dimensions are "
                "otherwise 1)");
}

void ModelOptions::refuseShapesOfCompiled() const {
  std::string kind = eval::artifactKind(path);
  if (!inputShapes.empty() && !kind.empty() && kind != "model" && kind != "outputs")
    throw UserError(fmt::format("--input-shape applies to model files (.onnx, .tir); '{}' was compiled for fixed "
                                "input shapes (compile it with --input-shape instead)", path));
}

std::map<std::string, Shape> ModelOptions::shapeOverrides() const {
  std::map<std::string, Shape> out;
  for (const auto& spec : inputShapes) {
    auto [name, shape] = parseInputShapeSpec(spec);
    if (!out.emplace(name, shape).second)
      throw UserError(fmt::format("--input-shape '{}' is given twice ({} and {}); give each input once", name,
                                  fmt::join(out[name], "x"), fmt::join(shape, "x")));
  }
  return out;
}

ImportOptions ModelOptions::importOptions(InferenceMode mode, const std::map<std::string, Shape>& given,
                                          bool keepOpenDims) const {
  ImportOptions opts;
  opts.inputShapes = shapeOverrides();
  opts.givenInputShapes = given;
  if (!keepOpenDims) opts.defaultDimValue = 1;
  opts.note = printNote;
  opts.inference = mode;
  return opts;
}

std::unique_ptr<Model> ModelOptions::load(InferenceMode mode, const std::map<std::string, Shape>& given,
                                          bool keepOpenDims) const {
  return loadModel(path, importOptions(mode, given, keepOpenDims));
}

void InputOptions::addTo(CLI::App* cmd) {
  addRepeatable(cmd, "--input", inputs,
                "input tensor NAME=FILE (.npy, .npz or ONNX TensorProto .pb), or FILE.npz with one array per input "
                "name; repeatable. Inputs not given are random (seeded by --seed)");
  cmd->add_option("--seed", seed, "seed for random inputs and random operators")->default_val(0);
}

std::map<std::string, Tensor> InputOptions::readGiven() const {
  std::map<std::string, Tensor> out;
  auto add = [&](const std::string& name, Tensor t) {
    if (!out.emplace(name, std::move(t)).second) throw UserError(fmt::format("--input '{}' is given twice", name));
  };
  for (const auto& spec : inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos && std::filesystem::path(spec).extension() == ".npz") {
      for (auto& [name, t] : readNpz(spec)) add(name, std::move(t));
      continue;
    }
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw UserError(fmt::format("bad --input '{}': expected NAME=FILE (e.g. --input image=digits.npy) or FILE.npz",
                                  spec));
    std::string name = spec.substr(0, eq);
    add(name, readTensorFile(spec.substr(eq + 1), name));
  }
  return out;
}

std::map<std::string, Tensor> InputOptions::resolve(const Graph& signature, std::map<std::string, Tensor> given,
                                                    bool quiet) const {
  return eval::completeInputs(signature, std::move(given), seed,
                              quiet ? std::function<void(const std::string&)>() : printNote);
}

void addThreadsOption(CLI::App* cmd, int& threads, const std::string& help, int max) {
  const int limit = max > 0 ? max : rt::hardware_thread_count();
  const bool here = max <= 0;
  cmd->add_option("--threads", threads, help)
      ->check(CLI::Validator(
          [limit, here](std::string& text) -> std::string {
            size_t used = 0;
            long v = -1;
            try {
              v = std::stol(text, &used);
            } catch (const std::exception&) {
              used = 0;
            }
            if (used == text.size() && v >= 1 && v <= limit) return "";
            return fmt::format("expected a whole number from 1 to {}{}, got '{}'{}", limit,
                               here ? " (the hardware threads of this machine)" : "", text,
                               here ? "; leave --threads out to use all of them" : "");
          },
          "1..N"));
}

void makeOutputDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw UserError(fmt::format("cannot create output directory '{}': {}", dir, ec ? ec.message() : "not a directory"));
}

void writeOutputFiles(const std::string& dir, const std::vector<std::string>& names, const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < outputs.size() && i < names.size(); ++i)
    writeNpy((std::filesystem::path(dir) / (fileNameFor(names[i]) + ".npy")).string(), outputs[i]);
}

std::string fileNameFor(const std::string& valueName) {
  std::string s = valueName;
  for (char& c : s)
    if (c == '/' || c == '\\' || c == '\0') c = '_';
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

}  // namespace tessel::cli
