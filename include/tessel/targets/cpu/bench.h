// Timing a loaded compiled CPU model (`tessel bench`, Compiled.bench in Python): latency statistics and the
// per-layer profile of its kernel calls.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/targets/cpu/loader.h"

namespace tessel::cpu {

/// One timed inference: its start and duration on the steady clock, and (when profiled) the per-step record
/// written by the model (num_steps durations in ns, then the first step's start time).
struct TimedRun {
  double startNs = 0, ns = 0;
  std::vector<double> steps;
};

/// Runs `model` on `inputs` (every declared input, checked) `warmup` times untimed, then `iterations` times
/// timed, each kernel call too when `profile`.
std::vector<TimedRun> timeRuns(CompiledModel& model, const std::map<std::string, Tensor>& inputs, int warmup,
                               int iterations, bool profile);

/// Latency statistics of the timed runs, in milliseconds.
struct LatencyStats {
  double median = 0, min = 0, p90 = 0, mean = 0, max = 0;
};
LatencyStats latencyStats(const std::vector<TimedRun>& runs);

/// One kernel call of the per-layer profile: its median and minimum time over the timed runs.
struct ProfileRow {
  size_t index;
  const CompiledStepInfo* step;
  double ms;     ///< median
  double minMs;  ///< fastest run (on a shared machine: the run least disturbed by other processes)
};
/// The profile of runs timed with `profile` (rows point into `steps`).
std::vector<ProfileRow> profileRows(const std::vector<CompiledStepInfo>& steps, const std::vector<TimedRun>& runs);

/// Kernel-type totals of a profile, largest first.
struct KernelTotal {
  std::string kernel;
  int calls = 0;
  double ms = 0, flops = 0;
};
std::vector<KernelTotal> byKernel(const std::vector<ProfileRow>& rows);

/// Median over the runs of (sum of the run's step times) / (the run's wall time): how much of an inference the
/// kernel calls account for (the rest is the call into the model and the clock reads at its ends).
double profileCoverage(const std::vector<TimedRun>& runs, size_t numSteps);

/// Single-core FMA peak of `isa` ("avx2": 8-lane, "avx512": 16-lane fused multiply-adds) in GFLOP/s, measured on
/// the calling thread by a short loop of independent FMA chains (best of a few ~10 ms repetitions); 0 for
/// another isa or a CPU without it.
double fmaPeakGflops(const std::string& isa);

/// The object `tessel bench --json` prints (keys in docs/cli.md) for runs of `model` on `threads` threads, with
/// "profile" when the runs were profiled; `name` is the "model" key. Also "isa" (what the library was built
/// for) and, when known, "peak_gflop_per_s" (fmaPeakGflops of it) and "peak_fraction" (gflop_per_s / peak).
nlohmann::json benchJson(const std::string& name, const CompiledModel& model, int threads, int warmup,
                         const std::vector<TimedRun>& runs, bool profile);

}  // namespace tessel::cpu
