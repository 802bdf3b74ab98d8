// Whole-graph search (S1.2-S1.4), independent of the target: a genome is one choice per site (a decision the
// compiler makes: a node's tiling, a fusion, the window), option `defaultOption` of each site being the
// compiler's own choice. The search evolves a population (or samples at random, the baseline) against a
// fitness the target computes (lower is better), writes a record as it goes and resumes from it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessel::tune {

/// One gene.
struct Site {
  std::string name;            ///< what it decides, e.g. "tiling /layer1/conv1" or "fusion g3+g4"
  std::string kind;            ///< "tiling", "fusion", "window", ...
  uint32_t options = 1;        ///< how many alternatives
  uint32_t defaultOption = 0;  ///< the compiler's choice
  /// Neighbouring options are similar (tile sizes, row tile counts, windows): mutation moves to a neighbour.
  bool ordered = true;
};

using Genome = std::vector<uint32_t>;

/// A rejected genome's fitness (does not fit the buffers, cannot be lowered).
inline constexpr uint64_t kRejected = std::numeric_limits<uint64_t>::max();

/// What the target supplies.
struct Problem {
  std::vector<Site> sites;
  /// What a record must match to be resumed or reused: target, model and configuration hashes, simulator version.
  nlohmann::json identity;
  /// Fitness of each genome of a batch, in order (kRejected for an invalid one). Deterministic: the same genome
  /// always gets the same fitness, whatever else is in the batch.
  std::function<std::vector<uint64_t>(const std::vector<Genome>&)> evaluate;
  /// One short phrase for the progress line (e.g. "812 groups simulated, 4,302 cache hits").
  std::function<std::string()> statistics;
};

struct SearchOptions {
  int generations = 20;
  int population = 32;
  uint64_t seed = 0;
  std::string strategy = "evolution";  ///< "evolution" or "random"
  double timeBudgetSeconds = 0;        ///< stop after the generation that passes it (0: none)
};

/// Progress after each generation: generation index, generations in all, best fitness, evaluations per second
/// of this run, the problem's statistics.
using Progress = std::function<void(int, int, uint64_t, double, const std::string&)>;

/// The format version of records; a record of another version is refused.
inline constexpr int kRecordVersion = 1;

/// Runs (or, when `recordPath` holds a record of the same problem and search, continues) the search. The record
/// (every evaluated genome and its fitness, per generation the population, best and median, the seed, the
/// problem's identity) is rewritten after every generation; the same problem, options and seed give the same
/// record byte for byte whether or not the run was interrupted and resumed. Returns the record.
nlohmann::json runSearch(const Problem& problem, const SearchOptions& options, const std::string& recordPath,
                         const Progress& progress = {});

/// The compiler's genome: every site at its default option.
Genome defaultGenome(const std::vector<Site>& sites);

/// The evaluations of a record that were not rejected, fittest first (ties: the earlier evaluation).
std::vector<size_t> rankedEvaluations(const nlohmann::json& record);

/// FNV-1a of a file's bytes as 16 hex digits (what a record's identity names a model file by); UserError when
/// it cannot be read.
std::string fileFingerprint(const std::string& path);

/// A random genome of the derivation rules: each site keeps the compiler's choice or, with probability 1/2,
/// takes an option drawn uniformly.
Genome randomGenome(const std::vector<Site>& sites, uint64_t& state);

/// A target's search space for `tessel tune`: the problem, and what turns a record into a result.
class Tuning {
 public:
  virtual ~Tuning() = default;
  virtual const Problem& problem() const = 0;
  /// The unit of the fitness ("cycles", "ns").
  virtual std::string fitnessUnit() const = 0;
  /// What the fitness is, for progress lines and plots ("modelled cycles", "measured median ns").
  virtual std::string fitnessLabel() const = 0;
  /// The untuned compile's figure in that unit (measured, not modelled).
  virtual uint64_t untunedFigure() const = 0;
  /// A genome as text, one line per site (`tessel tune --print-genome`).
  virtual std::string genomeText(const Genome& genome) const = 0;
  /// The record's "result": the winner checked against the untuned compile (never worse than it), in the form
  /// `tessel compile --tuning-file` reads.
  virtual nlohmann::json finish(const nlohmann::json& record) const = 0;
};

/// Reads a record written by runSearch and checks its format, version and identity (`identity`: null skips
/// the check). Throws UserError naming `path` and what is wrong.
nlohmann::json readRecord(const std::string& path, const nlohmann::json& identity);

/// Writes `record` to `path` atomically (a temporary file renamed over it).
void writeRecord(const std::string& path, const nlohmann::json& record);

/// The record's best genome (the fittest evaluation).
Genome bestGenome(const nlohmann::json& record);

}  // namespace tessel::tune
