// `tessel tune --target cpu`: the CPU's whole-model search space (tuning.cpp).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernel_rules.h"
#include "tessel/ir/graph.h"
#include "tessel/targets/cpu/compiler.h"
#include "tessel/targets/cpu/loader.h"
#include "tessel/targets/cpu/tuner.h"
#include "tessel/tune/search.h"

namespace tessel::cpu {

/// Genome: per layout region NCHW or NCHWc8, per convolution geometry (in either layout) its kernel; fitness: measured median latency (ns, one thread) of the whole
/// compiled model. Measured figures vary from run to run, so unlike the NPU's records these are not
/// byte-reproducible; evaluation is sequential (parallel builds would disturb the timings).
class CpuTuning : public tune::Tuning {
 public:
  CpuTuning(const Model& model, const std::string& modelPath, const CompileOptions& options);
  ~CpuTuning() override;
  const tune::Problem& problem() const override { return problem_; }
  std::string fitnessUnit() const override { return "ns"; }
  std::string fitnessLabel() const override { return "measured median ns (1 thread)"; }
  uint64_t untunedFigure() const override { return untunedNs_; }
  std::string genomeText(const tune::Genome& genome) const override;
  /// {"unit", "untuned", "tuned", "winner_evaluation", "checked", "model_key", "conv_kernels", "layout_regions"}: what
  /// `tessel compile --tuning-file` reads.
  nlohmann::json finish(const nlohmann::json& record) const override;

 private:
  TuningChoices choices(const tune::Genome& g) const;
  nlohmann::json tuningFileJson(const TuningChoices& c) const;
  std::unique_ptr<CompiledModel> build(const TuningChoices& c) const;
  CompileOptions options_;
  std::filesystem::path work_;
  std::unique_ptr<Model> prepared_;
  std::string modelKey_;
  std::vector<LayoutRegion> regions_;  ///< genes [0, regions_.size())
  std::vector<ConvTuneJob> jobs_;      ///< then one gene per job
  std::map<std::string, Tensor> inputs_;
  tune::Problem problem_;
  uint64_t untunedNs_ = 0;
  mutable size_t builds_ = 0, measured_ = 0;
};

}  // namespace tessel::cpu
