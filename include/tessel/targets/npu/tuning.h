// Whole-graph tuning of a model's NPU schedules (S1): the genome of a derived graph (per node its tiling, per
// fusion candidate whether it is fused and how: row tiles, intermediates on chip or through DRAM; per
// subgraph the sliding window), the derivation of schedules from a genome, the fitness (modelled cycles of
// the instruction scheduler, cached per group) and the final check of the best genomes on the simulator.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"
#include "tessel/targets/npu/schedule.h"
#include "tessel/tune/search.h"

namespace tessel::npu {

/// What a tuning record must match to be used for a compile: target, model file, configuration, simulator.
nlohmann::json tuningIdentity(const std::string& modelPath, const hw::HardwareConfig& config);

class NpuTuning : public tune::Tuning {
 public:
  /// Prepares and partitions (a copy of) the model as `tessel compile --target npu` does, compiles and
  /// simulates it untuned, and builds the search space. `jobs` threads evaluate candidates (0: all cores).
  /// `dramBudget`: a genome whose DRAM traffic exceeds this multiple of the compulsory bytes (every input,
  /// output and constant moved once), or the untuned compile's traffic when that is more, is rejected
  /// (0: no limit; kDefaultDramBudget is issue 12's limit on ResNet-50's traffic, the compiler's own is 2.75).
  NpuTuning(const Model& model, const std::string& modelPath, const hw::HardwareConfig& config, int jobs,
            double dramBudget = kDefaultDramBudget);
  static constexpr double kDefaultDramBudget = 3.0;
  ~NpuTuning() override;

  const tune::Problem& problem() const override { return problem_; }
  std::string fitnessUnit() const override { return "cycles"; }
  std::string fitnessLabel() const override { return "modelled cycles"; }
  uint64_t untunedFigure() const override { return untunedCycles_; }
  /// The schedule of every NPU subgraph a genome derives (by subgraph name).
  std::map<std::string, NpuSchedule> derive(const tune::Genome& genome) const;
  /// Simulated cycles of the untuned compile.
  uint64_t untunedCycles() const { return untunedCycles_; }
  /// The genome as text: one line per site with its option (and the compiler's).
  std::string genomeText(const tune::Genome& genome) const override;
  /// Compiles and simulates the best few genomes of a record (and the untuned compile) and returns the
  /// "result" object: the winner's schedules (the untuned compiler's when nothing simulates faster), its and
  /// the untuned simulated cycles, and what was checked.
  nlohmann::json finish(const nlohmann::json& record) const override { return finish(record, 4); }
  nlohmann::json finish(const nlohmann::json& record, size_t candidates) const;
  /// Modelled cycles and DRAM bytes of each genome (both kRejected when it does not fit), groups cached: what the
  /// fitness (problem().evaluate) is made of before the DRAM limit.
  std::vector<std::pair<uint64_t, uint64_t>> modelGenomes(const std::vector<tune::Genome>& batch) const;

 private:
  struct Space;
  std::unique_ptr<Model> prepared_;  ///< the model after the npu pipeline (partitioned copies are made from it)
  hw::HardwareConfig config_;
  std::vector<std::unique_ptr<Space>> spaces_;
  tune::Problem problem_;
  uint64_t untunedCycles_ = 0, untunedDramBytes_ = 0;
  uint64_t compulsoryDramBytes_ = 0;
  double dramBudget_ = kDefaultDramBudget;
  /// The most DRAM bytes a genome may move: modelled (the sum of its groups', in evaluate) and simulated (finish).
  uint64_t modelledDramLimit_ = UINT64_MAX, simulatedDramLimit_ = UINT64_MAX;
  int jobs_ = 1;
  mutable size_t groupsModelled_ = 0, cacheHits_ = 0;
  /// Per group genome (its schedule alone, as JSON): modelled cycles (kRejected when it does not fit) and DRAM bytes.
  mutable std::map<std::string, std::pair<uint64_t, uint64_t>> groupCache_;
  /// Compiles the model with these schedules and simulates it: cycles and DRAM bytes (InternalError on a hazard).
  std::pair<uint64_t, uint64_t> simulate(const std::map<std::string, NpuSchedule>& schedules) const;
  /// Fitness: modelled cycles, kRejected when the genome does not fit or moves more DRAM bytes than allowed.
  std::vector<uint64_t> evaluate(const std::vector<tune::Genome>& batch) const;
};

/// The schedules a tuning record chose, by subgraph name: checked against the model file and configuration
/// being compiled (UserError naming the record and what differs).
std::map<std::string, NpuSchedule> tunedSchedules(const std::string& recordPath, const std::string& modelPath,
                                                  const hw::HardwareConfig& config);

}  // namespace tessel::npu
