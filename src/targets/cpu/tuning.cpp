// The CPU's search space for `tessel tune --target cpu` (S1 on the host): one gene per layout region (NCHW or
// NCHWc8, select-layout's regions) and one per convolution geometry the code generator may call a kernel for
// (options: every applicable kernel of the conv's layout, the compiler's choice as the default); fitness = the
// measured median latency of the whole compiled model (one thread, with a noise check), the final choice
// measured side by side with the untuned model in the same run.
#include "tuning.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <unistd.h>

#include "host_compiler.h"
#include "kernel_rules.h"
#include "tessel/eval/inputs.h"
#include "tessel/hw/hardware_config.h"
#include "tessel/ir/text.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/bench.h"
#include "tessel/targets/cpu/loader.h"
#include "tessel/targets/cpu/tuner.h"

namespace fs = std::filesystem;

namespace tessel::cpu {
namespace {

std::string cpuModelName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "unknown";
}

/// Median latency (ns) over `rounds` x `runs` timed runs on one thread; the noise check doubles the runs while the
/// spread (p90 - min) exceeds a fifth of the median, up to three times.
double medianNs(CompiledModel& m, const std::map<std::string, Tensor>& inputs, int runs) {
  std::vector<TimedRun> all = timeRuns(m, inputs, 2, runs, false);
  for (int extra = 0; extra < 3; ++extra) {
    const LatencyStats s = latencyStats(all);
    if (s.p90 - s.min <= 0.2 * s.median) break;
    std::vector<TimedRun> more = timeRuns(m, inputs, 0, runs * (1 << extra), false);
    all.insert(all.end(), more.begin(), more.end());
  }
  return latencyStats(all).median * 1e6;
}

}  // namespace

CpuTuning::CpuTuning(const Model& model, const std::string& modelPath, const CompileOptions& options)
    : options_(options), work_(fs::temp_directory_path() / fmt::format("tessel-cpu-tune-{}", getpid())) {
  prepared_ = model.clone();
  prepareModel(*prepared_, options_);
  options_.tune = false;
  options_.progress = nullptr;
  modelKey_ = fmt::format("{:016x}", hw::fnv1a64(printGraphText(*prepared_->graph)));
  const bool avx512 = targetHasAvx512(options_);
  // Layout genes first: one per region select-layout may block, its default the compiler's choice. The kernel
  // genes cover every conv geometry in both layouts a region can take (the graph with every region flipped
  // gives the other one); a kernel gene whose conv runs in the other layout is not used by that genome.
  regions_ = layoutRegions(*prepared_->graph, avx512);
  for (const LayoutRegion& r : regions_)
    problem_.sites.push_back({"layout " + r.key, "layout", 2, r.blocked ? 1u : 0u, false});
  jobs_ = convTuneJobs(*prepared_->graph, avx512);
  if (!regions_.empty()) {
    TuningChoices flipped;
    for (const LayoutRegion& r : regions_) flipped.layouts[r.key] = r.blocked ? "nchw" : "nchwc8";
    std::set<std::string> keys;
    for (const ConvTuneJob& j : jobs_) keys.insert(j.key);
    for (ConvTuneJob& j : convTuneJobs(*withTunedChoices(*prepared_, flipped, options_)->graph, avx512))
      if (keys.insert(j.key).second) jobs_.push_back(std::move(j));
  }
  for (const ConvTuneJob& j : jobs_) {
    auto it = std::find(j.candidates.begin(), j.candidates.end(), j.untuned);
    const uint32_t def = it == j.candidates.end() ? 0 : static_cast<uint32_t>(it - j.candidates.begin());
    problem_.sites.push_back({"conv " + j.key, "kernel", static_cast<uint32_t>(j.candidates.size()), def, false});
  }
  inputs_ = eval::completeInputs(*prepared_->graph, {}, 0);
  fs::create_directories(work_);
  problem_.identity = {{"target", "cpu"}, {"model", tune::fileFingerprint(modelPath)}, {"march", options_.march},
                        {"isa", targetHasAvx512(options_) ? "avx512" : "avx2"}, {"cpu", cpuModelName()}};
  problem_.evaluate = [this](const std::vector<tune::Genome>& batch) {
    std::vector<uint64_t> out;
    for (const tune::Genome& g : batch) {
      auto m = build(choices(g));
      out.push_back(static_cast<uint64_t>(medianNs(*m, inputs_, 15)));
      ++measured_;
    }
    return out;
  };
  problem_.statistics = [this] { return fmt::format("{} models compiled and timed", measured_); };
  auto untuned = build({});
  untunedNs_ = static_cast<uint64_t>(medianNs(*untuned, inputs_, 15));
}

CpuTuning::~CpuTuning() {
  std::error_code ec;
  fs::remove_all(work_, ec);
}

TuningChoices CpuTuning::choices(const tune::Genome& g) const {
  // Layouts only where the genome leaves the compiler's choice, so a genome of default layouts is exactly a
  // kernels-only tuning file.
  TuningChoices out;
  for (size_t i = 0; i < regions_.size(); ++i)
    if (g.at(i) != problem_.sites[i].defaultOption) out.layouts[regions_[i].key] = g[i] == 1 ? "nchwc8" : "nchw";
  for (size_t i = 0; i < jobs_.size(); ++i) out.kernels[jobs_[i].key] = jobs_[i].candidates.at(g.at(regions_.size() + i));
  return out;
}

std::unique_ptr<CompiledModel> CpuTuning::build(const TuningChoices& c) const {
  CompileOptions o = options_;
  const fs::path so = work_ / fmt::format("m{}.so", builds_++);
  if (!c.empty()) {
    o.tuningFile = (work_ / "choices.json").string();
    std::ofstream(o.tuningFile) << tuningFileJson(c).dump();
  } else {
    o.tuningFile.clear();
  }
  compileSharedLibrary(*prepared_, so.string(), o);
  auto m = std::make_unique<CompiledModel>(so.string(), 1);
  std::error_code ec;
  fs::remove(so, ec);  // dlopen keeps it mapped
  return m;
}

nlohmann::json CpuTuning::tuningFileJson(const TuningChoices& c) const {
  nlohmann::json j{{"model", modelKey_}, {"conv_kernels", c.kernels}};
  if (!c.layouts.empty()) j["layout_regions"] = c.layouts;
  return j;
}

std::string CpuTuning::genomeText(const tune::Genome& g) const {
  std::string out = fmt::format("{} layout regions (layout_regions keys: nchw or nchwc8), {} convolution geometries "
                                "(conv_kernels keys), one gene each\n",
                                regions_.size(), jobs_.size());
  for (size_t i = 0; i < regions_.size(); ++i)
    out += fmt::format("  [{:3}] layout {:<46} {:<28}{}  ({} nodes, {} convs)\n", i, regions_[i].key,
                       g.at(i) == 1 ? "nchwc8" : "nchw", g[i] == problem_.sites[i].defaultOption ? " (compiler's)" : "",
                       regions_[i].nodes, regions_[i].convs);
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const size_t s = regions_.size() + i;
    out += fmt::format("  [{:3}] conv {:<48} {:<28}{}\n", s, jobs_[i].key, jobs_[i].candidates.at(g.at(s)),
                       g[s] == problem_.sites[s].defaultOption ? " (compiler's)" : "");
  }
  return out;
}

nlohmann::json CpuTuning::finish(const nlohmann::json& record) const {
  // The best three genomes and the untuned model, timed side by side in interleaved rounds (the same machine
  // state for all): the winner must beat the untuned median by 2 %, else the record keeps the compiler's kernels.
  const std::vector<size_t> ranked = tune::rankedEvaluations(record);
  const auto& evals = record["evaluations"];
  // Candidate 0 is the untuned model (no tuning file); a genome with the compiler's kernels would be the same code.
  const TuningChoices untuned = choices(tune::defaultGenome(problem_.sites));
  std::vector<TuningChoices> candidates{{}};
  std::vector<nlohmann::json> which{nlohmann::json()};
  for (size_t k = 0; k < std::min<size_t>(3, ranked.size()); ++k) {
    const auto c = choices(evals[ranked[k]]["genome"].get<tune::Genome>());
    if (c == untuned || std::find(candidates.begin(), candidates.end(), c) != candidates.end()) continue;
    candidates.push_back(c);
    which.push_back(ranked[k]);
  }
  std::vector<std::unique_ptr<CompiledModel>> models;
  for (const auto& c : candidates) models.push_back(build(c));
  std::vector<std::vector<double>> rounds(models.size());
  for (int r = 0; r < 5; ++r)
    for (size_t m = 0; m < models.size(); ++m) rounds[m].push_back(medianNs(*models[m], inputs_, 10));
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  size_t best = 0;
  nlohmann::json checked = nlohmann::json::array();
  for (size_t m = 0; m < models.size(); ++m) {
    checked.push_back({{"evaluation", which[m]}, {"median_ns", static_cast<uint64_t>(med(rounds[m]))}});
    if (m > 0 && med(rounds[m]) < 0.98 * med(rounds[0]) && med(rounds[m]) < med(rounds[best])) best = m;
  }
  return {{"unit", "ns"},
          {"untuned", static_cast<uint64_t>(med(rounds[0]))},
          {"tuned", static_cast<uint64_t>(med(rounds[best]))},
          {"winner_evaluation", which[best]},
          {"checked", checked},
          {"model_key", modelKey_},
          {"conv_kernels", candidates[best].kernels},
          {"layout_regions", candidates[best].layouts}};
}

}  // namespace tessel::cpu
