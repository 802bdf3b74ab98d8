// Comparing runs of several forms of a model on the same inputs (`tessel compare`, tessel.compare in Python):
// the inputs they share, each one's outputs against the first's, the --json report.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/eval/compare.h"
#include "tessel/eval/runner.h"

namespace tessel::eval {

/// One runner's outputs compared with the reference's (the first runner's).
struct RunnerComparison {
  std::string reference, actual;  ///< the runners' labels
  bool pass = false;
  std::vector<OutputComparison> outputs;
};

/// What a comparison found: each runner's outputs (in its outputNames() order) and the comparisons.
struct ComparisonRun {
  std::vector<std::vector<Tensor>> outputs;
  std::vector<RunnerComparison> comparisons;
  bool pass = true;
};

/// The inputs every runner gets: `given` checked against the first runner that takes inputs (saved outputs
/// take none), seeded random tensors for the rest; `note` hears one line per random input (completeInputs).
std::map<std::string, Tensor> comparisonInputs(const std::vector<Runner*>& runners, std::map<std::string, Tensor> given,
                                               uint64_t seed, const std::function<void(const std::string&)>& note = {});

/// Runs every runner on `inputs` and compares each one after the first with the first.
ComparisonRun compareRunners(const std::vector<Runner*>& runners, const std::map<std::string, Tensor>& inputs,
                             const Tolerances& tol);

/// The object `tessel compare --json` prints (keys in docs/cli.md); `given` names the inputs that were given.
nlohmann::json comparisonJson(const ComparisonRun& run, const std::map<std::string, Tensor>& inputs,
                              const std::set<std::string>& given, const Tolerances& tol, uint64_t seed);

}  // namespace tessel::eval
