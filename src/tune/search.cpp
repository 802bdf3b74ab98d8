// The evolutionary search over genomes (S1.2-S1.4) and its random baseline, with the record that makes a run
// reproducible and resumable. Randomness comes from splitmix64 seeded per generation, so generation g's
// offspring depend only on the seed and the population after generation g-1 (which the record holds).
#include "tessel/tune/search.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <set>

#include "tessel/hw/hardware_config.h"
#include "tessel/support/error.h"

namespace fs = std::filesystem;

namespace tessel::tune {
namespace {

uint64_t next(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t below(uint64_t& state, uint64_t n) { return n <= 1 ? 0 : next(state) % n; }

/// The search state: every evaluation so far (genome -> index), and the current population (indices).
struct State {
  std::vector<Genome> genomes;
  std::vector<uint64_t> fitness;
  std::map<Genome, size_t> index;
  std::vector<size_t> population;
  nlohmann::json log = nlohmann::json::array();

  bool known(const Genome& g) const { return index.count(g) != 0; }
  /// Evaluates the genomes not seen before (in order, once each) and returns every genome's index.
  std::vector<size_t> evaluate(const Problem& p, const std::vector<Genome>& batch) {
    std::vector<Genome> fresh;
    std::set<Genome> queued;
    for (const Genome& g : batch)
      if (!known(g) && queued.insert(g).second) fresh.push_back(g);
    if (!fresh.empty()) {
      const std::vector<uint64_t> f = p.evaluate(fresh);
      TESSEL_ASSERT(f.size() == fresh.size(), "tune: the problem returned a fitness per genome");
      for (size_t i = 0; i < fresh.size(); ++i) {
        index[fresh[i]] = genomes.size();
        genomes.push_back(fresh[i]);
        fitness.push_back(f[i]);
      }
    }
    std::vector<size_t> out;
    for (const Genome& g : batch) out.push_back(index.at(g));
    return out;
  }
  /// Indices sorted by fitness, ties by evaluation order.
  void rank(std::vector<size_t>& v) const {
    std::sort(v.begin(), v.end(), [&](size_t a, size_t b) { return fitness[a] != fitness[b] ? fitness[a] < fitness[b] : a < b; });
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
};

/// Tournament of three: the fittest of three members drawn at random.
size_t tournament(const State& s, uint64_t& rng) {
  size_t best = s.population[below(rng, s.population.size())];
  for (int k = 0; k < 2; ++k) {
    const size_t c = s.population[below(rng, s.population.size())];
    if (s.fitness[c] < s.fitness[best] || (s.fitness[c] == s.fitness[best] && c < best)) best = c;
  }
  return best;
}

/// Moves one site: an ordered site to a neighbouring option, another to a different option drawn uniformly.
void mutate(Genome& g, const std::vector<Site>& sites, const std::vector<size_t>& mutable_, uint64_t& rng) {
  const size_t i = mutable_[below(rng, mutable_.size())];
  const Site& site = sites[i];
  if (site.ordered) {
    const bool up = g[i] == 0 || (g[i] + 1 < site.options && below(rng, 2) == 0);
    g[i] = up ? g[i] + 1 : g[i] - 1;
  } else {
    g[i] = static_cast<uint32_t>((g[i] + 1 + below(rng, site.options - 1)) % site.options);
  }
}

uint64_t median(std::vector<uint64_t> v) {
  v.erase(std::remove(v.begin(), v.end(), kRejected), v.end());
  if (v.empty()) return kRejected;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

nlohmann::json fitnessJson(uint64_t f) { return f == kRejected ? nlohmann::json() : nlohmann::json(f); }

nlohmann::json searchJson(const SearchOptions& o) {
  return {{"strategy", o.strategy}, {"seed", o.seed}, {"population", o.population}, {"generations", o.generations}};
}

nlohmann::json sitesJson(const std::vector<Site>& sites) {
  nlohmann::json a = nlohmann::json::array();
  for (const Site& s : sites)
    a.push_back({{"name", s.name}, {"kind", s.kind}, {"options", s.options}, {"default", s.defaultOption}, {"ordered", s.ordered}});
  return a;
}

nlohmann::json recordJson(const Problem& p, const SearchOptions& o, const State& s) {
  nlohmann::json evals = nlohmann::json::array();
  for (size_t i = 0; i < s.genomes.size(); ++i) evals.push_back({{"genome", s.genomes[i]}, {"fitness", fitnessJson(s.fitness[i])}});
  nlohmann::json r = {{"format", "tessel-tune-record"}, {"version", kRecordVersion}, {"identity", p.identity},
                      {"search", searchJson(o)},        {"sites", sitesJson(p.sites)},  {"evaluations", evals},
                      {"generations", s.log}};
  if (!s.population.empty()) {
    const size_t best = s.population.front();
    r["best"] = {{"evaluation", best}, {"genome", s.genomes[best]}, {"fitness", fitnessJson(s.fitness[best])}};
    r["default"] = {{"evaluation", 0}, {"fitness", fitnessJson(s.fitness[0])}};
  }
  return r;
}

/// The population after one generation: the elites and a few immigrants drawn from the rest of the pool.
std::vector<size_t> select(const State& s, std::vector<size_t> pool, size_t size, uint64_t& rng) {
  s.rank(pool);
  const size_t immigrants = std::min<size_t>(pool.size() > size ? pool.size() - size : 0, std::max<size_t>(1, size / 16));
  std::vector<size_t> next(pool.begin(), pool.begin() + static_cast<long>(std::min(pool.size(), size - immigrants)));
  std::vector<size_t> rest(pool.begin() + static_cast<long>(next.size()), pool.end());
  for (size_t k = 0; k < immigrants && !rest.empty(); ++k) {
    const size_t pick = below(rng, rest.size());
    next.push_back(rest[pick]);
    rest.erase(rest.begin() + static_cast<long>(pick));
  }
  s.rank(next);
  return next;
}

}  // namespace

Genome defaultGenome(const std::vector<Site>& sites) {
  Genome g;
  for (const Site& s : sites) g.push_back(s.defaultOption);
  return g;
}

std::vector<size_t> rankedEvaluations(const nlohmann::json& record) {
  std::vector<std::pair<uint64_t, size_t>> ranked;
  const auto& evals = record["evaluations"];
  for (size_t i = 0; i < evals.size(); ++i)
    if (!evals[i]["fitness"].is_null()) ranked.push_back({evals[i]["fitness"].get<uint64_t>(), i});
  std::sort(ranked.begin(), ranked.end());
  std::vector<size_t> out;
  for (const auto& r : ranked) out.push_back(r.second);
  return out;
}

std::string fileFingerprint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(fmt::format("cannot read '{}'", path));
  return fmt::format("{:016x}", hw::fnv1a64(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>())));
}

Genome randomGenome(const std::vector<Site>& sites, uint64_t& state) {
  Genome g;
  for (const Site& s : sites) g.push_back(below(state, 2) == 0 ? s.defaultOption : static_cast<uint32_t>(below(state, s.options)));
  return g;
}

void writeRecord(const std::string& path, const nlohmann::json& record) {
  const std::string tmp = path + ".partial";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !(f << record.dump(1) << "\n")) throw UserError(fmt::format("cannot write the tuning record '{}'", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw UserError(fmt::format("cannot write the tuning record '{}': {}", path, ec.message()));
}

nlohmann::json readRecord(const std::string& path, const nlohmann::json& identity) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(fmt::format("cannot read the tuning record '{}'", path));
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  nlohmann::json r;
  try {
    r = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(fmt::format("tuning record '{}' is not valid JSON (truncated?): {}", path, e.what()));
  }
  if (!r.is_object() || r.value("format", "") != "tessel-tune-record")
    throw UserError(fmt::format("'{}' is not a tuning record of tessel tune (no \"format\": \"tessel-tune-record\")", path));
  if (!r.contains("version") || !r["version"].is_number_integer() || r["version"].get<int>() != kRecordVersion)
    throw UserError(fmt::format("tuning record '{}' has format version {}, this tessel reads version {}", path,
                                r.contains("version") ? r["version"].dump() : "(none)", kRecordVersion));
  for (const char* key : {"identity", "search", "sites", "evaluations", "generations"})
    if (!r.contains(key)) throw UserError(fmt::format("tuning record '{}': no \"{}\" (truncated or edited?)", path, key));
  if (!identity.is_null()) {
    // The target first: a record of another target differs in everything else too.
    std::vector<std::string> keys{"target"};
    for (const auto& [key, value] : identity.items())
      if (key != "target") keys.push_back(key);
    for (const std::string& key : keys) {
      if (!identity.contains(key)) continue;
      const nlohmann::json& mine = r["identity"].contains(key) ? r["identity"][key] : nlohmann::json();
      if (mine != identity[key])
        throw UserError(fmt::format("tuning record '{}' was made for another {}: {} (this compile: {})", path, key,
                                    mine.is_null() ? "(none)" : mine.dump(), identity[key].dump()));
    }
  }
  return r;
}

Genome bestGenome(const nlohmann::json& record) {
  if (!record.contains("best")) throw UserError("the tuning record holds no evaluated genome yet");
  return record["best"]["genome"].get<Genome>();
}

nlohmann::json runSearch(const Problem& p, const SearchOptions& o, const std::string& recordPath, const Progress& progress) {
  if (o.strategy != "evolution" && o.strategy != "random")
    throw UserError(fmt::format("--strategy {}: expected evolution or random", o.strategy));
  if (o.population < 2) throw UserError(fmt::format("--population {}: at least 2", o.population));
  if (o.generations < 1) throw UserError(fmt::format("--generations {}: at least 1", o.generations));
  State s;
  const size_t P = static_cast<size_t>(o.population);
  int start = 0;
  // Resume: a record of the same problem and search continues after its last complete generation.
  if (!recordPath.empty() && fs::exists(recordPath)) {
    const nlohmann::json r = readRecord(recordPath, p.identity);
    if (r["search"] != searchJson(o) || r["sites"] != sitesJson(p.sites))
      throw UserError(fmt::format("tuning record '{}' was made with other search settings ({}); remove it or use another -o",
                                  recordPath, r["search"].dump()));
    for (const auto& e : r["evaluations"]) {
      s.index[e["genome"].get<Genome>()] = s.genomes.size();
      s.genomes.push_back(e["genome"].get<Genome>());
      s.fitness.push_back(e["fitness"].is_null() ? kRejected : e["fitness"].get<uint64_t>());
    }
    s.log = r["generations"];
    if (!s.log.empty()) {
      s.population = s.log.back()["population"].get<std::vector<size_t>>();
      start = s.log.back()["generation"].get<int>() + 1;
    }
  }
  std::vector<size_t> mutable_;
  for (size_t i = 0; i < p.sites.size(); ++i)
    if (p.sites[i].options > 1) mutable_.push_back(i);
  const auto t0 = std::chrono::steady_clock::now();
  size_t evaluatedHere = 0;
  for (int gen = start; gen < o.generations; ++gen) {
    uint64_t rng = o.seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(gen) * 0x9E3779B97F4A7C15ull;
    const size_t before = s.genomes.size();
    std::vector<Genome> batch;
    if (gen == 0) {
      // The compiler's choice, then random derivations.
      batch.push_back(defaultGenome(p.sites));
      for (size_t k = 0; batch.size() < P && k < 20 * P; ++k) {
        Genome g = randomGenome(p.sites, rng);
        if (std::find(batch.begin(), batch.end(), g) == batch.end()) batch.push_back(g);
      }
    } else if (o.strategy == "random" || mutable_.empty()) {
      for (size_t k = 0; batch.size() < P && k < 20 * P; ++k) {
        Genome g = randomGenome(p.sites, rng);
        if (!s.known(g) && std::find(batch.begin(), batch.end(), g) == batch.end()) batch.push_back(g);
      }
    } else {
      for (size_t k = 0; batch.size() < P && k < 20 * P; ++k) {
        Genome child = s.genomes[tournament(s, rng)];
        if (below(rng, 10) < 6) {  // uniform crossover with a second parent
          const Genome& other = s.genomes[tournament(s, rng)];
          for (size_t i = 0; i < child.size(); ++i)
            if (below(rng, 2)) child[i] = other[i];
        }
        const int mutations = 1 + static_cast<int>(below(rng, 2));
        for (int m = 0; m < mutations; ++m) mutate(child, p.sites, mutable_, rng);
        for (int tries = 0; tries < 4 && (s.known(child) || std::find(batch.begin(), batch.end(), child) != batch.end()); ++tries)
          mutate(child, p.sites, mutable_, rng);
        if (!s.known(child) && std::find(batch.begin(), batch.end(), child) == batch.end()) batch.push_back(child);
      }
    }
    const std::vector<size_t> idx = s.evaluate(p, batch);
    evaluatedHere += s.genomes.size() - before;
    std::vector<size_t> pool = s.population;
    pool.insert(pool.end(), idx.begin(), idx.end());
    s.population = select(s, pool, P, rng);
    std::vector<uint64_t> fit;
    for (size_t i : s.population) fit.push_back(s.fitness[i]);
    s.log.push_back({{"generation", gen},
                     {"best", fitnessJson(s.fitness[s.population.front()])},
                     {"median", fitnessJson(median(fit))},
                     {"evaluations", s.genomes.size()},
                     {"population", s.population}});
    if (!recordPath.empty()) writeRecord(recordPath, recordJson(p, o, s));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress)
      progress(gen, o.generations, s.fitness[s.population.front()], secs > 0 ? static_cast<double>(evaluatedHere) / secs : 0,
               p.statistics ? p.statistics() : "");
    if (o.timeBudgetSeconds > 0 && secs > o.timeBudgetSeconds) break;
  }
  return recordJson(p, o, s);
}

}  // namespace tessel::tune
