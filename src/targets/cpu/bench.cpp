// Timing a loaded compiled CPU model: warm-up and timed runs on the steady clock, latency statistics, the
// per-layer profile from the model's per-step timing.
#include "tessel/targets/cpu/bench.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <immintrin.h>

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

/// Independent FMA chains of the peak loop: enough to cover FMA latency (4 cycles) times two FMA pipes, and few
/// enough for AVX2's 16 registers.
constexpr int kFmaChains = 12;

// `iterations` x kFmaChains FMAs of 8 or 16 floats; the result depends on all of them. (Written out per ISA:
// a template over the vector type would pass __m512 through a function compiled without AVX-512.)
// The chains converge to y / (1 - x): no overflow, no denormals.
[[gnu::target("avx2,fma")]] float fmaLoop256(int64_t iterations, float seed) {
  __m256 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(seed * 1e-3f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  for (int i = 1; i < kFmaChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  return _mm256_cvtss_f32(acc[0]);
}

[[gnu::target("avx512f")]] float fmaLoop512(int64_t iterations, float seed) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(seed * 1e-3f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  for (int i = 1; i < kFmaChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  return _mm512_cvtss_f32(acc[0]);
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

double fmaPeakGflops(const std::string& isa) {
  __builtin_cpu_init();
  const bool avx512 = isa == "avx512";
  if (!(avx512 ? __builtin_cpu_supports("avx512f") : isa == "avx2" && __builtin_cpu_supports("fma"))) return 0;
  const int lanes = avx512 ? 16 : 8;
  const int64_t iterations = 200000;  // 2.4 M FMAs: about 10 ms at 3 GHz with two pipes (AVX2)
  volatile float seed = 1.0f, sink = 0;
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first repetition also brings the vector units up to speed
    const double start = steadyNs();
    sink = sink + (avx512 ? fmaLoop512(iterations, seed) : fmaLoop256(iterations, seed));
    best = std::min(best, steadyNs() - start);
  }
  return 2.0 * lanes * kFmaChains * static_cast<double>(iterations) / best;  // FLOP per ns = GFLOP/s
}

nlohmann::json benchJson(const std::string& name, const CompiledModel& model, int threads, int warmup,
                         const std::vector<TimedRun>& runs, bool profile) {
  const LatencyStats s = latencyStats(runs);
  nlohmann::json j = {{"model", name},           {"hash", model.hash()},   {"threads", threads},
                      {"warmup", warmup},        {"iterations", runs.size()}, {"median_ms", s.median},
                      {"min_ms", s.min},         {"p90_ms", s.p90},        {"mean_ms", s.mean},
                      {"max_ms", s.max},         {"gflops", model.flops() / 1e9},
                      {"gflop_per_s", model.flops() / (s.median * 1e6)}};
  j["isa"] = model.isa();
  if (const double peak = fmaPeakGflops(model.isa()); peak > 0) {
    j["peak_gflop_per_s"] = peak;
    j["peak_fraction"] = model.flops() / (s.median * 1e6) / peak;
  }
  if (profile) j["profile"] = profileJson(profileRows(model.steps(), runs), profileCoverage(runs, model.steps().size()));
  return j;
}

}  // namespace tessel::cpu
