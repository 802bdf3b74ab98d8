// Timing a loaded compiled CPU model: warm-up and timed runs on the steady clock, latency statistics, the
// per-layer profile from the model's per-step timing.
#include "tessel/targets/cpu/bench.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>

namespace tessel::cpu {
namespace {

double percentile(const std::vector<double>& sorted, double p) {
  double idx = p * (static_cast<double>(sorted.size()) - 1);
  size_t lo = static_cast<size_t>(idx);
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - static_cast<double>(lo));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return percentile(v, 0.5);
}

/// Nanoseconds on the steady clock (the clock the generated code's step timing uses).
double steadyNs() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

nlohmann::json profileJson(const std::vector<ProfileRow>& rows, double cover) {
  double total = 0;
  for (const ProfileRow& r : rows) total += r.ms;
  nlohmann::json layers = nlohmann::json::array(), kernels = nlohmann::json::array();
  auto gflops = [](double flops, double ms) -> nlohmann::json {
    if (flops > 0 && ms > 0) return flops / (ms * 1e6);
    return nullptr;
  };
  for (const ProfileRow& r : rows)
    layers.push_back({{"index", r.index},
                      {"node", r.step->node},
                      {"op", r.step->op},
                      {"kernel", r.step->kernel},
                      {"shape", r.step->shape},
                      {"flops", r.step->flops},
                      {"ms", r.ms},
                      {"min_ms", r.minMs},
                      {"gflop_per_s", gflops(r.step->flops, r.ms)},
                      {"share", total > 0 ? r.ms / total : 0.0}});
  for (const KernelTotal& k : byKernel(rows))
    kernels.push_back({{"kernel", k.kernel},
                       {"calls", k.calls},
                       {"ms", k.ms},
                       {"gflop_per_s", gflops(k.flops, k.ms)},
                       {"share", total > 0 ? k.ms / total : 0.0}});
  return {{"layers", layers}, {"by_kernel", kernels}, {"total_ms", total}, {"coverage", cover}};
}

}  // namespace

std::vector<TimedRun> timeRuns(CompiledModel& model, const std::map<std::string, Tensor>& inputs, int warmup,
                               int iterations, bool profile) {
  if (iterations < 1) throw UserError(fmt::format("iterations {}: must be at least 1", iterations));
  if (warmup < 0) throw UserError(fmt::format("warmup {}: must not be negative", warmup));
  std::vector<const void*> in;
  for (const auto& info : model.inputs()) {
    auto it = inputs.find(info.name);
    TESSEL_ASSERT(it != inputs.end(), "timeRuns: input '" + info.name + "' not given");
    in.push_back(it->second.rawData());
  }
  std::vector<Tensor> outs;
  std::vector<void*> out;
  for (const auto& info : model.outputs()) {
    outs.emplace_back(info.dtype, info.shape);
    out.push_back(outs.back().rawData());
  }
  std::vector<double> record(model.steps().size() + 1);
  if (profile) model.setProfile(record.data());
  struct ProfileOff {
    CompiledModel& m;
    ~ProfileOff() { m.setProfile(nullptr); }
  } off{model};
  for (int i = 0; i < warmup; ++i) model.runRaw(in.data(), out.data());
  std::vector<TimedRun> runs;
  for (int i = 0; i < iterations; ++i) {
    TimedRun run;
    run.startNs = steadyNs();
    model.runRaw(in.data(), out.data());
    run.ns = steadyNs() - run.startNs;
    if (profile) run.steps = record;
    runs.push_back(std::move(run));
  }
  return runs;
}

LatencyStats latencyStats(const std::vector<TimedRun>& runs) {
  std::vector<double> ms;
  for (const TimedRun& r : runs) ms.push_back(r.ns / 1e6);
  LatencyStats s;
  if (ms.empty()) return s;
  for (double v : ms) s.mean += v / static_cast<double>(ms.size());
  std::sort(ms.begin(), ms.end());
  s.median = percentile(ms, 0.5);
  s.p90 = percentile(ms, 0.9);
  s.min = ms.front();
  s.max = ms.back();
  return s;
}

std::vector<ProfileRow> profileRows(const std::vector<CompiledStepInfo>& steps, const std::vector<TimedRun>& runs) {
  std::vector<ProfileRow> rows;
  for (size_t i = 0; i < steps.size(); ++i) {
    std::vector<double> t;
    for (const TimedRun& r : runs) t.push_back(r.steps.at(i) / 1e6);
    rows.push_back({i, &steps[i], median(t), *std::min_element(t.begin(), t.end())});
  }
  return rows;
}

std::vector<KernelTotal> byKernel(const std::vector<ProfileRow>& rows) {
  std::vector<KernelTotal> out;
  for (const ProfileRow& r : rows) {
    auto it = std::find_if(out.begin(), out.end(), [&](const KernelTotal& k) { return k.kernel == r.step->kernel; });
    if (it == out.end()) it = out.insert(out.end(), KernelTotal{r.step->kernel});
    it->calls++;
    it->ms += r.ms;
    it->flops += r.step->flops;
  }
  std::stable_sort(out.begin(), out.end(), [](const KernelTotal& a, const KernelTotal& b) { return a.ms > b.ms; });
  return out;
}

double profileCoverage(const std::vector<TimedRun>& runs, size_t numSteps) {
  std::vector<double> c;
  for (const TimedRun& r : runs) {
    double sum = 0;
    for (size_t i = 0; i < numSteps; ++i) sum += r.steps[i];
    c.push_back(r.ns > 0 ? sum / r.ns : 0.0);
  }
  return median(c);
}

nlohmann::json benchJson(const std::string& name, const CompiledModel& model, int threads, int warmup,
                         const std::vector<TimedRun>& runs, bool profile) {
  const LatencyStats s = latencyStats(runs);
  nlohmann::json j = {{"model", name},           {"hash", model.hash()},   {"threads", threads},
                      {"warmup", warmup},        {"iterations", runs.size()}, {"median_ms", s.median},
                      {"min_ms", s.min},         {"p90_ms", s.p90},        {"mean_ms", s.mean},
                      {"max_ms", s.max},         {"gflops", model.flops() / 1e9},
                      {"gflop_per_s", model.flops() / (s.median * 1e6)}};
  if (profile) j["profile"] = profileJson(profileRows(model.steps(), runs), profileCoverage(runs, model.steps().size()));
  return j;
}

}  // namespace tessel::cpu
