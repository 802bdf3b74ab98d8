// Input tensors of a run: given ones checked against the declared inputs, seeded random ones for the rest.
#include "tessel/eval/inputs.h"

#include <cstring>
#include <fmt/format.h>
#include <random>

#include "tessel/interp/interpreter.h"
#include "tessel/support/dtype.h"

namespace tessel::eval {

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

namespace {

/// Checks every given tensor against the declared input of its name (converting uint16 bit patterns for a
/// bfloat16 input); UserError for a name that is not a declared input or a tensor of the wrong type or shape.
void checkGiven(const Graph& signature, std::map<std::string, Tensor>& given) {
  std::vector<std::string> names;
  for (Value* in : signature.inputs())
    if (!in->isConstant()) names.push_back("'" + in->name() + "'");
  for (auto& [name, tensor] : given) {
    Value* v = signature.findValue(name);
    if (!v || !v->isGraphInput())
      throw UserError(fmt::format("the model has no input named '{}' (its inputs: {})", name, fmt::join(names, ", ")));
    // bfloat16 travels as uint16 bit patterns in .npy/.pb test data (numpy has no bfloat16).
    if (v->type.dtype == DType::BFloat16 && tensor.dtype() == DType::UInt16) {
      Tensor bf(DType::BFloat16, tensor.shape());
      std::memcpy(bf.rawData(), tensor.rawData(), tensor.nbytes());
      tensor = bf;
    }
    Interpreter::checkInput(*v, tensor);
  }
}

}  // namespace

std::map<std::string, Tensor> completeInputs(const Graph& signature, std::map<std::string, Tensor> given, uint64_t seed,
                                             const std::function<void(const std::string&)>& note) {
  checkGiven(signature, given);
  for (Value* in : signature.inputs()) {
    if (given.count(in->name()) || in->isConstant()) continue;
    given[in->name()] = randomInput(*in, seed);
    if (note) note(fmt::format("input '{}' not given; using random {} (seed {})", in->name(), in->type.toString(), seed));
  }
  return given;
}

std::map<std::string, Tensor> checkedInputs(const Graph& signature, std::map<std::string, Tensor> given) {
  checkGiven(signature, given);
  for (Value* in : signature.inputs())
    if (!in->isConstant() && !given.count(in->name()))
      throw UserError(fmt::format("missing input '{}' (expected {})", in->name(), in->type.toString()));
  return given;
}

std::map<std::string, Shape> shapesOf(const std::map<std::string, Tensor>& tensors) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : tensors) shapes[name] = t.shape();
  return shapes;
}

}  // namespace tessel::eval
