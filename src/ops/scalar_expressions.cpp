// The activations' scalar formulas as C++ expression text (tessel/ops/scalar_expressions.h); each mirrors
// the reference kernel in activation.cpp.
#include "tessel/ops/scalar_expressions.h"

#include <fmt/format.h>

#include <map>
#include <utility>
#include <vector>

namespace tessel {
namespace {

/// An expression pattern and the float attributes (with their defaults) substituted for {name}.
struct Formula {
  std::string pattern;
  std::vector<std::pair<std::string, float>> attrs;
};

const std::map<std::string, Formula>& formulas() {
  static const std::map<std::string, Formula> f = {
      {"Relu", {"a > 0 ? a : 0", {}}},
      {"Sigmoid", {"1.0 / (1.0 + std::exp(-dbl(a)))", {}}},
      {"Tanh", {"std::tanh(dbl(a))", {}}},
      {"Softplus", {"std::log1p(std::exp(dbl(a)))", {}}},
      {"Softsign", {"dbl(a) / (1.0 + std::fabs(dbl(a)))", {}}},
      {"Mish", {"dbl(a) * std::tanh(std::log1p(std::exp(dbl(a))))", {}}},
      {"Elu", {"dbl(a) >= 0 ? dbl(a) : {alpha} * std::expm1(dbl(a))", {{"alpha", 1.0f}}}},
      {"Celu", {"std::max(0.0, dbl(a)) + std::min(0.0, {alpha} * std::expm1(dbl(a) / {alpha}))", {{"alpha", 1.0f}}}},
      {"Selu", {"dbl(a) > 0 ? {gamma} * dbl(a) : {gamma} * ({alpha} * std::exp(dbl(a)) - {alpha})",
                {{"alpha", 1.67326319217681884765625f}, {"gamma", 1.05070102214813232421875f}}}},
      {"ThresholdedRelu", {"dbl(a) > {alpha} ? a : 0", {{"alpha", 1.0f}}}},
      {"LeakyRelu", {"dbl(a) >= 0 ? dbl(a) : {alpha} * dbl(a)", {{"alpha", 0.01f}}}},
      {"HardSigmoid", {"std::max(0.0, std::min(1.0, {alpha} * dbl(a) + {beta}))", {{"alpha", 0.2f}, {"beta", 0.5f}}}},
      {"HardSwish", {"dbl(a) * std::max(0.0, std::min(1.0, dbl(a) / 6.0 + 0.5))", {}}},
      {"Shrink", {"dbl(a) < -{lambd} ? dbl(a) + {bias} : dbl(a) > {lambd} ? dbl(a) - {bias} : 0.0",
                  {{"lambd", 0.5f}, {"bias", 0.0f}}}},
      {"PRelu", {"a < 0 ? a * b : a", {}}},
  };
  return f;
}

}  // namespace

std::optional<std::string> activationExpression(const Node& n) {
  if (!n.domain().empty()) return std::nullopt;
  auto it = formulas().find(n.opType());
  if (it == formulas().end()) return std::nullopt;
  std::string expr = it->second.pattern;
  for (const auto& [name, fallback] : it->second.attrs) {
    const float v = n.hasAttr(name) ? n.attrFloat(name) : fallback;
    const std::string key = "{" + name + "}", literal = fmt::format("{:.9g}", static_cast<double>(v));
    for (size_t at = expr.find(key); at != std::string::npos; at = expr.find(key, at + literal.size()))
      expr.replace(at, key.size(), literal);
  }
  return expr;
}

}  // namespace tessel
