// Output comparison of two runs: max absolute / relative error, worst element, pass/fail by tolerances.
#include "tessel/eval/compare.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

namespace tessel::eval {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The multi-dimensional index of a flat (row-major) position.
Shape unravel(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return index;
}

/// How far one element is outside the tolerances (<= 1 passes) and its absolute error.
struct ElementError {
  double abs, ratio;
};
ElementError elementError(double e, double a, const Tolerances& tol) {
  if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a) ? ElementError{0, 0} : ElementError{kInf, kInf};
  if (std::isinf(e) || std::isinf(a)) return e == a ? ElementError{0, 0} : ElementError{kInf, kInf};
  double abs = std::fabs(a - e), allowed = tol.atol + tol.rtol * std::fabs(e);
  return {abs, allowed > 0 ? abs / allowed : (abs > 0 ? kInf : 0)};
}

void compareStrings(const Tensor& expected, const Tensor& actual, OutputComparison& c) {
  int64_t worst = -1;
  for (int64_t i = 0; i < c.elements; ++i)
    if (expected.data<std::string>()[i] != actual.data<std::string>()[i]) {
      if (worst < 0) worst = i;
      ++c.mismatches;
    }
  if (worst >= 0) c.worstIndex = unravel(worst, expected.shape()), c.maxAbsError = c.maxRelError = kInf;
}

void compareNumbers(const Tensor& expected, const Tensor& actual, const Tolerances& tol, OutputComparison& c) {
  double worstRatio = -1, sumAbs = 0;
  int64_t worst = 0;
  for (int64_t i = 0; i < c.elements; ++i) {
    double e = expected.elementAsDouble(i), a = actual.elementAsDouble(i);
    ElementError err = elementError(e, a, tol);
    c.maxAbsError = std::max(c.maxAbsError, err.abs);
    if (e != 0 && std::isfinite(e)) c.maxRelError = std::max(c.maxRelError, err.abs / std::fabs(e));
    else if (err.abs == kInf) c.maxRelError = kInf;
    sumAbs += err.abs;
    if (err.ratio > 1) ++c.mismatches;
    if (err.ratio > worstRatio) worstRatio = err.ratio, worst = i;
  }
  c.meanAbsError = c.elements > 0 ? sumAbs / static_cast<double>(c.elements) : 0;
  if (c.elements == 0) return;
  c.worstIndex = unravel(worst, expected.shape());
  c.worstExpected = expected.elementAsDouble(worst);
  c.worstActual = actual.elementAsDouble(worst);
}

}  // namespace

OutputComparison compareTensors(const std::string& name, const Tensor& expected, const Tensor& actual,
                                const Tolerances& tol) {
  OutputComparison c;
  c.name = name;
  if (expected.dtype() != actual.dtype() || expected.shape() != actual.shape()) {
    c.problem = fmt::format("expected {}[{}], got {}[{}]", dtypeName(expected.dtype()), shapeToString(expected.shape()),
                            dtypeName(actual.dtype()), shapeToString(actual.shape()));
    c.maxAbsError = c.maxRelError = kInf;
    return c;
  }
  c.elements = expected.numel();
  if (expected.dtype() == DType::String) compareStrings(expected, actual, c);
  else if (expected.dtype() == DType::Complex64 || expected.dtype() == DType::Complex128)
    c.problem = "complex outputs are not compared";
  else compareNumbers(expected, actual, tol, c);
  c.pass = c.problem.empty() && c.mismatches == 0;
  return c;
}

std::vector<OutputComparison> compareOutputs(const std::vector<std::string>& expectedNames,
                                             const std::vector<Tensor>& expected,
                                             const std::vector<std::string>& actualNames,
                                             const std::vector<Tensor>& actual, const Tolerances& tol) {
  std::vector<OutputComparison> out;
  for (size_t i = 0; i < expectedNames.size() && i < expected.size(); ++i) {
    auto it = std::find(actualNames.begin(), actualNames.end(), expectedNames[i]);
    size_t j = static_cast<size_t>(it - actualNames.begin());
    if (it == actualNames.end() || j >= actual.size()) {
      OutputComparison c;
      c.name = expectedNames[i];
      c.problem = fmt::format("the run under test has no output '{}' (its outputs: {})", expectedNames[i],
                              fmt::join(actualNames, ", "));
      c.maxAbsError = c.maxRelError = kInf;
      out.push_back(c);
      continue;
    }
    out.push_back(compareTensors(expectedNames[i], expected[i], actual[j], tol));
  }
  return out;
}

nlohmann::json toJson(const OutputComparison& c) {
  auto number = [](double v) -> nlohmann::json { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"name", c.name},
                      {"pass", c.pass},
                      {"elements", c.elements},
                      {"mismatches", c.mismatches},
                      {"max_abs_error", number(c.maxAbsError)},
                      {"max_rel_error", number(c.maxRelError)},
                      {"mean_abs_error", number(c.meanAbsError)}};
  if (!c.problem.empty()) j["problem"] = c.problem;
  if (c.elements > 0 && c.problem.empty())
    j["worst"] = {{"index", c.worstIndex}, {"expected", number(c.worstExpected)}, {"actual", number(c.worstActual)}};
  return j;
}

}  // namespace tessel::eval
