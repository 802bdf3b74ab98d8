// Shared CLI helpers: model options, input resolution, random inputs, number formatting.
#include "common.h"

#include <fmt/format.h>
#include <cstring>
#include <random>

#include "tessel/frontend/tensor_io.h"

namespace tessel::cli {

void ModelOptions::addTo(CLI::App* cmd, const std::string& modelHelp) {
  cmd->add_option("model", path, modelHelp)->required();
  cmd->add_option("--input-shape", inputShapes,
                  "fix an input's shape, e.g. --input-shape input:1x3x224x224 (repeatable)");
}

std::map<std::string, Shape> ModelOptions::shapeOverrides() const {
  std::map<std::string, Shape> out;
  for (const auto& spec : inputShapes) out.insert(parseInputShapeSpec(spec));
  return out;
}

std::unique_ptr<Model> ModelOptions::load(InferenceMode mode) const {
  ImportOptions opts;
  opts.inputShapes = shapeOverrides();
  opts.inference = mode;
  return loadModel(path, opts);
}

void InputOptions::addTo(CLI::App* cmd) {
  cmd->add_option("--input", inputs,
                  "input tensor NAME=FILE (.npy or ONNX TensorProto .pb); repeatable. Inputs not given are "
                  "random (seeded by --seed)");
  cmd->add_option("--seed", seed, "seed for random inputs and random operators")->default_val(0);
}

Tensor randomInput(const Value& input, uint64_t seed) {
  if (!input.type.isStatic())
    throw UserError(fmt::format("input '{}' has shape {}, which is not fully known: give it with --input {}=FILE or "
                                "fix it with --input-shape {}:DIMS",
                                input.name(), input.type.toString(), input.name(), input.name()));
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(input.name()));
  Tensor t(input.type.dtype, input.type.staticShape());
  if (t.dtype() == DType::String) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<std::string>()[i] = fmt::format("s{}", rng() % 100);
    return t;
  }
  if (t.dtype() == DType::Complex64 || t.dtype() == DType::Complex128)
    throw UserError(fmt::format("input '{}': give complex inputs with --input", input.name()));
  dispatchNumeric(t.dtype(), "random input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = t.data<T>();
    std::uniform_real_distribution<double> uni(-1.0, 1.0);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, bool>) d[i] = (rng() & 1) != 0;
      else if constexpr (std::is_integral_v<T>) d[i] = static_cast<T>(rng() % 10);
      else d[i] = T(static_cast<compute_t<T>>(uni(rng)));
    }
  });
  return t;
}

std::map<std::string, Tensor> InputOptions::resolve(const Graph& graph, bool quiet) const {
  std::map<std::string, Tensor> out;
  for (const auto& spec : inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw UserError(fmt::format("bad --input '{}': expected NAME=FILE, e.g. --input image=digits.npy", spec));
    std::string name = spec.substr(0, eq);
    if (out.count(name)) throw UserError(fmt::format("--input '{}' is given twice", name));
    Tensor t = readTensorFile(spec.substr(eq + 1));
    // bfloat16 travels as uint16 bit patterns in .npy/.pb test data (numpy has no bfloat16).
    if (Value* v = graph.findValue(name); v && v->type.dtype == DType::BFloat16 && t.dtype() == DType::UInt16) {
      Tensor bf(DType::BFloat16, t.shape());
      std::memcpy(bf.rawData(), t.rawData(), t.nbytes());
      t = bf;
    }
    out[name] = t;
  }
  for (Value* in : graph.inputs()) {
    if (out.count(in->name()) || in->isConstant()) continue;
    out[in->name()] = randomInput(*in, seed);
    if (!quiet) fmt::print(stderr, "note: input '{}' not given; using random {} (seed {})\n", in->name(), in->type.toString(), seed);
  }
  return out;
}

std::string fileNameFor(const std::string& valueName) {
  std::string s = valueName;
  for (char& c : s)
    if (c == '/' || c == '\\' || c == '\0') c = '_';
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

std::string humanCount(double v) {
  const char* units[] = {"", " K", " M", " G", " T"};
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}{}", v, units[u]);
}

std::string humanBytes(double v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace tessel::cli
