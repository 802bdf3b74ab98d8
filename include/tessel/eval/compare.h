// Comparing the outputs of two runs of a model (Polygraphy's manner): per output the largest absolute and
// relative errors, the worst element, and pass/fail against absolute and relative tolerances.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/ir/tensor.h"

namespace tessel::eval {

/// An element of `actual` passes when |actual - expected| <= atol + rtol * |expected| (numpy.allclose);
/// NaN matches NaN only, an infinity only the same infinity.
struct Tolerances {
  double atol = 1e-5;
  double rtol = 1e-5;
};

/// How one output of the run under test (`actual`) differs from the reference run's (`expected`).
struct OutputComparison {
  std::string name;
  bool pass = false;
  std::string problem;        ///< non-empty when the tensors cannot be compared element-wise (dtype, shape, missing)
  int64_t elements = 0;
  int64_t mismatches = 0;     ///< elements outside the tolerances
  double maxAbsError = 0;     ///< max |actual - expected| (infinite when a NaN/infinity does not match)
  double maxRelError = 0;     ///< max |actual - expected| / |expected| over elements with expected != 0
  double meanAbsError = 0;
  /// The element furthest outside the tolerances (the largest |actual - expected| / (atol + rtol |expected|)).
  Shape worstIndex;
  double worstExpected = 0, worstActual = 0;
};

/// Compares one output; `expected` is the reference.
OutputComparison compareTensors(const std::string& name, const Tensor& expected, const Tensor& actual,
                                const Tolerances& tol);

/// Compares two runs' outputs by name: each of `expectedNames` must be among `actualNames` (a missing one
/// fails with its problem set); extra outputs of the run under test are not compared.
std::vector<OutputComparison> compareOutputs(const std::vector<std::string>& expectedNames,
                                             const std::vector<Tensor>& expected,
                                             const std::vector<std::string>& actualNames,
                                             const std::vector<Tensor>& actual, const Tolerances& tol);

/// {"name", "pass", "problem"?, "elements", "mismatches", "max_abs_error", "max_rel_error", "mean_abs_error",
/// "worst": {"index": [...], "expected", "actual"}}; infinite errors are written as null.
nlohmann::json toJson(const OutputComparison& c);

}  // namespace tessel::eval
