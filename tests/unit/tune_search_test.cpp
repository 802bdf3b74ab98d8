// Tests of the whole-graph search engine (S1.2-S1.4) on a toy problem whose optimum is known: the compiler's
// genome is in the first generation, the same seed gives the same record byte for byte, a run killed halfway
// and restarted ends with the uninterrupted run's record, evolution beats random sampling with the same number
// of evaluations, and bad records are refused with a message naming what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

#include "tessel/support/error.h"
#include "tessel/tune/search.h"

namespace {

using namespace tessel;
namespace fs = std::filesystem;

/// 16 sites of 8 ordered options; the fitness is a weighted distance to a hidden target with pairwise terms
/// (neighbouring sites prefer equal options), so sites interact as tilings and fusions do.
tune::Problem toyProblem(int* evaluations = nullptr, int failAfter = -1) {
  tune::Problem p;
  for (int i = 0; i < 16; ++i) p.sites.push_back({"site " + std::to_string(i), "tiling", 8, static_cast<uint32_t>(i % 3), true});
  p.identity = {{"target", "toy"}, {"model", "0123"}};
  p.evaluate = [evaluations, failAfter](const std::vector<tune::Genome>& batch) {
    std::vector<uint64_t> out;
    for (const tune::Genome& g : batch) {
      if (evaluations && failAfter >= 0 && ++*evaluations > failAfter) throw std::runtime_error("killed");
      uint64_t f = 1000;
      for (size_t i = 0; i < g.size(); ++i) {
        const int target = static_cast<int>((i * 5 + 3) % 8);
        f += 10 * static_cast<uint64_t>((static_cast<int>(g[i]) - target) * (static_cast<int>(g[i]) - target));
        if (i > 0) f += 3 * static_cast<uint64_t>(std::abs(static_cast<int>(g[i]) - static_cast<int>(g[i - 1])));
      }
      out.push_back(g[0] == 7 && g[1] == 7 ? tune::kRejected : f);  // some genomes do not fit
    }
    return out;
  };
  return p;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("tessel-tune-test-" + std::to_string(getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

tune::SearchOptions options(uint64_t seed, const std::string& strategy = "evolution") {
  tune::SearchOptions o;
  o.generations = 12, o.population = 12, o.seed = seed, o.strategy = strategy;
  return o;
}

TEST(TuneSearch, TheCompilersGenomeIsInTheFirstGenerationAndTheBestIsNeverWorse) {
  const tune::Problem p = toyProblem();
  const nlohmann::json r = tune::runSearch(p, options(1), "");
  tune::Genome d;
  for (const tune::Site& s : p.sites) d.push_back(s.defaultOption);
  EXPECT_EQ(r["evaluations"][0]["genome"].get<tune::Genome>(), d);
  EXPECT_LE(r["best"]["fitness"].get<uint64_t>(), r["evaluations"][0]["fitness"].get<uint64_t>());
  EXPECT_EQ(r["generations"].size(), 12u);
  // The best never gets worse from one generation to the next.
  for (size_t g = 1; g < r["generations"].size(); ++g)
    EXPECT_LE(r["generations"][g]["best"].get<uint64_t>(), r["generations"][g - 1]["best"].get<uint64_t>()) << g;
}

TEST(TuneSearch, SameSeedSameRecordByteForByte) {
  TempDir dir;
  tune::runSearch(toyProblem(), options(7), dir.file("a.json"));
  tune::runSearch(toyProblem(), options(7), dir.file("b.json"));
  tune::runSearch(toyProblem(), options(8), dir.file("c.json"));
  EXPECT_EQ(slurp(dir.file("a.json")), slurp(dir.file("b.json")));
  EXPECT_NE(slurp(dir.file("a.json")), slurp(dir.file("c.json")));
}

TEST(TuneSearch, AKilledRunRestartedEndsWithTheUninterruptedRecord) {
  TempDir dir;
  tune::runSearch(toyProblem(), options(3), dir.file("whole.json"));
  int evaluations = 0;
  EXPECT_THROW(tune::runSearch(toyProblem(&evaluations, 60), options(3), dir.file("killed.json")), std::runtime_error);
  const nlohmann::json partial = nlohmann::json::parse(slurp(dir.file("killed.json")));
  ASSERT_GT(partial["generations"].size(), 0u);
  ASSERT_LT(partial["generations"].size(), 12u) << "the kill came after the end";
  tune::runSearch(toyProblem(), options(3), dir.file("killed.json"));
  EXPECT_EQ(slurp(dir.file("whole.json")), slurp(dir.file("killed.json")));
}

TEST(TuneSearch, EvolutionBeatsRandomSearchWithTheSameEvaluations) {
  std::vector<uint64_t> evolution, random;
  for (uint64_t seed : {1, 2, 3}) {
    const nlohmann::json e = tune::runSearch(toyProblem(), options(seed), "");
    const nlohmann::json r = tune::runSearch(toyProblem(), options(seed, "random"), "");
    EXPECT_EQ(e["evaluations"].size(), r["evaluations"].size()) << seed;
    evolution.push_back(e["best"]["fitness"].get<uint64_t>());
    random.push_back(r["best"]["fitness"].get<uint64_t>());
  }
  std::sort(evolution.begin(), evolution.end());
  std::sort(random.begin(), random.end());
  EXPECT_LT(evolution[1], random[1]);
}

TEST(TuneSearch, BadRecordsAreRefusedWithAMessage) {
  TempDir dir;
  const tune::Problem p = toyProblem();
  const std::string good = dir.file("good.json");
  tune::runSearch(p, options(1), good);
  auto refused = [&](const std::string& path, const nlohmann::json& identity, const std::string& words) {
    try {
      tune::readRecord(path, identity);
      ADD_FAILURE() << path << " was accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  const std::string text = slurp(good);
  std::ofstream(dir.file("truncated.json")) << text.substr(0, text.size() / 2);
  refused(dir.file("truncated.json"), p.identity, "not valid JSON");
  refused(good, {{"target", "toy"}, {"model", "4567"}}, "another model");
  refused(good, {{"target", "npu"}, {"model", "0123"}}, "another target");
  nlohmann::json j = nlohmann::json::parse(text);
  j["version"] = tune::kRecordVersion + 1;
  std::ofstream(dir.file("version.json")) << j.dump();
  refused(dir.file("version.json"), p.identity, "format version");
  std::ofstream(dir.file("other.json")) << R"({"conv_kernels": {}})";
  refused(dir.file("other.json"), p.identity, "not a tuning record");
  refused(dir.file("missing.json"), p.identity, "cannot read");
  // Resuming with other search settings is refused too (the record would mix two searches).
  tune::SearchOptions other = options(1);
  other.population = 10;
  EXPECT_THROW(tune::runSearch(p, other, good), UserError);
}

}  // namespace
