// Comparing runs of several forms of a model on the same inputs: shared inputs, per-runner comparison, report.
#include "tessel/eval/compare_runs.h"

#include <algorithm>

#include "tessel/eval/inputs.h"

namespace tessel::eval {

std::map<std::string, Tensor> comparisonInputs(const std::vector<Runner*>& runners, std::map<std::string, Tensor> given,
                                               uint64_t seed, const std::function<void(const std::string&)>& note) {
  TESSEL_ASSERT(runners.size() >= 2, "a comparison needs two runners");
  const Runner* declaring = runners[0]->target() == "saved" ? runners[1] : runners[0];
  return completeInputs(declaring->signature(), std::move(given), seed, note);
}

ComparisonRun compareRunners(const std::vector<Runner*>& runners, const std::map<std::string, Tensor>& inputs,
                             const Tolerances& tol) {
  ComparisonRun run;
  for (Runner* r : runners) run.outputs.push_back(r->run(inputs));
  for (size_t k = 1; k < runners.size(); ++k) {
    RunnerComparison c;
    c.reference = runners[0]->label();
    c.actual = runners[k]->label();
    c.outputs = compareOutputs(runners[0]->outputNames(), run.outputs[0], runners[k]->outputNames(), run.outputs[k], tol);
    c.pass = std::all_of(c.outputs.begin(), c.outputs.end(), [](const OutputComparison& o) { return o.pass; });
    run.pass &= c.pass;
    run.comparisons.push_back(std::move(c));
  }
  return run;
}

nlohmann::json comparisonJson(const ComparisonRun& run, const std::map<std::string, Tensor>& inputs,
                              const std::set<std::string>& given, const Tolerances& tol, uint64_t seed) {
  nlohmann::json comparisons = nlohmann::json::array();
  for (const RunnerComparison& c : run.comparisons) {
    nlohmann::json outs = nlohmann::json::array();
    for (const OutputComparison& o : c.outputs) outs.push_back(toJson(o));
    comparisons.push_back({{"reference", c.reference}, {"actual", c.actual}, {"pass", c.pass}, {"outputs", outs}});
  }
  nlohmann::json in = nlohmann::json::array();
  for (const auto& [name, t] : inputs)
    in.push_back({{"name", name}, {"dtype", dtypeName(t.dtype())}, {"shape", t.shape()}, {"given", given.count(name) > 0}});
  return {{"atol", tol.atol}, {"rtol", tol.rtol}, {"seed", seed}, {"inputs", in}, {"comparisons", comparisons},
          {"pass", run.pass}};
}

}  // namespace tessel::eval
