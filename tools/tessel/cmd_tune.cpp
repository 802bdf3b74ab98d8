// `tessel tune`: whole-graph evolutionary search (S1) over a target's derived graphs, seeded, resumable and
// parallel; writes a record (every evaluated genome with its fitness, the generation log, the winner checked
// against the untuned compile) that `tessel compile --tuning-file` turns into the tuned artifact, and a
// convergence plot beside it.
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <unistd.h>

#include "command.h"
#include "common.h"
#include "plot.h"
#include "tessel/targets/target.h"
#include "tessel/tune/search.h"

namespace fs = std::filesystem;

namespace tessel::cli {
namespace {

struct TuneCmdOptions {
  ModelOptions model;
  std::string target = "npu", hw, output, plot, strategy = "evolution", isa, dramBudget;
  int generations = 20, population = 32, jobs = 0;
  uint64_t seed = 0;
  double timeBudget = 0;
  bool printGenome = false, noPlot = false;
};

std::string percent(uint64_t now, uint64_t before) {
  if (before == 0 || now == tune::kRejected) return "?";
  return fmt::format("{:+.1f} %", 100.0 * (static_cast<double>(now) / static_cast<double>(before) - 1.0));
}

/// Best and median per generation of a record, for the plot.
nlohmann::json curve(const nlohmann::json& record, const std::string& label) {
  nlohmann::json best = nlohmann::json::array(), median = nlohmann::json::array();
  for (const auto& g : record["generations"]) best.push_back(g["best"]), median.push_back(g["median"]);
  return {{"label", label}, {"best", best}, {"median", median}};
}

void tuneCommand(const TuneCmdOptions& o) {
  const target::Target& t = target::TargetRegistry::instance().get(o.target);
  if (o.output.empty() && !o.printGenome) throw UserError("tessel tune needs -o RECORD.json (the record it writes and resumes)");
  if (!o.output.empty() && fs::path(o.output).extension() != ".json")
    throw UserError(fmt::format("-o {}: the tuning record is a .json file", o.output));
  const std::string plotPath = o.plot.empty() && !o.output.empty() ? fs::path(o.output).replace_extension(".svg").string() : o.plot;
  if (!o.noPlot && !plotPath.empty()) checkPictureOutput("--plot", plotPath);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const bool tty = isatty(2);
  fmt::print(stderr, "[{:6.1f} s] loading {} and compiling it untuned (the reference)\n", elapsed(), o.model.path);
  auto model = o.model.load(InferenceMode::Strict);
  target::TargetOptions to;
  to.hw = o.hw;
  if (!o.isa.empty()) to.host.isa = o.isa;
  if (!o.dramBudget.empty()) to.settings["dram-budget"] = o.dramBudget;
  const std::unique_ptr<tune::Tuning> tuning = t.tuning(*model, o.model.path, to, o.jobs);
  const tune::Problem& problem = tuning->problem();
  const std::string unit = tuning->fitnessUnit();
  const uint64_t untuned = tuning->untunedFigure();
  if (o.printGenome) {
    tune::Genome g = tune::defaultGenome(problem.sites);
    if (!o.output.empty() && fs::exists(o.output)) g = tune::bestGenome(tune::readRecord(o.output, problem.identity));
    fmt::print("{}", tuning->genomeText(g));
    return;
  }
  size_t choices = 0;
  for (const tune::Site& s : problem.sites) choices += s.options > 1;
  fmt::print(stderr, "[{:6.1f} s] untuned: {} {}; {} sites ({} with a choice); {} x {} {}, seed {}{}\n", elapsed(),
             humanCount(static_cast<double>(untuned)), unit, problem.sites.size(), choices, o.generations, o.population,
             o.strategy, o.seed, fs::exists(o.output) ? fmt::format(", resuming {}", o.output) : "");
  tune::SearchOptions so;
  so.generations = o.generations, so.population = o.population, so.seed = o.seed, so.strategy = o.strategy;
  so.timeBudgetSeconds = o.timeBudget;
  nlohmann::json record = tune::runSearch(problem, so, o.output, [&](int gen, int gens, uint64_t best, double rate, const std::string& stats) {
    const std::string line = fmt::format("[{:6.1f} s] generation {}/{}: best {} {} | {:.1f} evaluations/s | {}", elapsed(),
                                         gen + 1, gens, best == tune::kRejected ? "-" : humanCount(static_cast<double>(best)),
                                         tuning->fitnessLabel(), rate, stats);
    if (tty)
      fmt::print(stderr, "\r{:<110}", line);
    else
      fmt::print(stderr, "{}\n", line);
  });
  if (tty) fmt::print(stderr, "\n");
  fmt::print(stderr, "[{:6.1f} s] checking the best genomes on the whole compiled model\n", elapsed());
  record["result"] = tuning->finish(record);
  tune::writeRecord(o.output, record);
  const nlohmann::json& r = record["result"];
  const uint64_t tuned = r["tuned"].get<uint64_t>();
  // A measured fitness (cpu) times the untuned model again beside the winner: that figure, not the first one
  // (taken minutes earlier, in another state of the machine), is what the tuned one compares with.
  const uint64_t base = r.contains("untuned") ? r["untuned"].get<uint64_t>() : untuned;
  fmt::print("tuned {}: {} {} (untuned {}, {}), {} genomes evaluated in {} generations; record {}\n", o.model.path,
             humanCount(static_cast<double>(tuned)), unit, humanCount(static_cast<double>(base)), percent(tuned, base),
             record["evaluations"].size(), record["generations"].size(), o.output);
  if (r["winner_evaluation"].is_null()) fmt::print("no genome beat the untuned compile when checked side by side: the record keeps the compiler's choices\n");
  fmt::print("use it: tessel compile {} --target {}{}{} --tuning-file {}\n", o.model.path, o.target,
             o.hw.empty() ? "" : " --hw " + o.hw, o.isa.empty() ? "" : " --isa " + o.isa, o.output);
  if (o.noPlot || plotPath.empty()) return;
  nlohmann::json data = {{"title", fmt::format("tessel tune {} ({} {}, seed {})", fs::path(o.model.path).filename().string(),
                                               o.hw, o.target, o.seed)},
                         {"unit", unit},
                         {"label", tuning->fitnessLabel()},
                         {"untuned", untuned},
                         {"series", nlohmann::json::array({curve(record, o.strategy)})}};
  // A random-search record of the same model beside this one (NAME.random.json) adds its curve.
  const fs::path sibling = fs::path(o.output).replace_extension("").string() + ".random.json";
  if (o.strategy == "evolution" && fs::exists(sibling)) {
    try {
      data["series"].push_back(curve(tune::readRecord(sibling.string(), problem.identity), "random"));
    } catch (const UserError& e) {
      printNote(fmt::format("not plotting {}: {}", sibling.string(), e.what()));
    }
  }
  try {
    drawChart("convergence", data, plotPath);
    fmt::print("convergence plot: {}\n", plotPath);
  } catch (const UserError& e) {
    printNote(e.what());  // the record is the result; the plot is a convenience
  }
}

}  // namespace

TESSEL_REGISTER_COMMAND(tune, 46, [](CLI::App& app) {
  auto o = std::make_shared<TuneCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "Search the whole graph's schedule (fusion, tiles, on-chip vs DRAM, window) by evolution (S1)");
  cmd->footer(
      "The record (-o) is written after every generation; running the same command again resumes it, and a finished\n"
      "record is reused as it is. Same model, configuration and seed: the same record, byte for byte, whatever --jobs.\n"
      "Examples:\n"
      "  tessel tune resnet18.onnx --target npu --hw default -o r18.tune.json\n"
      "  tessel compile resnet18.onnx --target npu --hw default --tuning-file r18.tune.json -o r18.tnpu\n"
      "  tessel tune resnet18.onnx --hw default --strategy random -o r18.tune.random.json   (the baseline; plotted\n"
      "                                                                                      beside r18.tune.json)\n"
      "  tessel tune resnet18.onnx --hw default --print-genome          (the compiler's choices as a genome)\n"
      "Exit status: 0 success, 2 bad input or a record of another model/configuration/version, 1 internal error.");
  o->model.addTo(cmd);
  cmd->add_option("--target", o->target,
                  "npu (default: schedules, fitness = modelled cycles) or cpu (conv kernels, fitness = measured latency)");
  cmd->add_option("--hw", o->hw, "--target npu: hardware configuration, a file or a name (default, tiny, ...)");
  cmd->add_option("--isa", o->isa,
                  "--target cpu: vector ISA of the builds it times: avx2, avx512 or auto (default; tessel compile --isa). "
                  "The record is for that ISA, and so is --layout auto's choice of blocked regions")
      ->check(CLI::IsMember({"auto", "avx2", "avx512"}));
  cmd->add_option("--dram-budget", o->dramBudget,
                  "--target npu: reject genomes that move more DRAM bytes than this multiple of the compulsory bytes "
                  "(every input, output and constant once), or than the untuned compile when that is more (default "
                  "3; the compiler keeps its own schedule within 2.75; 0: no limit)");
  cmd->add_option("-o,--output", o->output, "the record to write (and resume): RECORD.json");
  cmd->add_option("--generations", o->generations, "generations of the search (default 20)")->check(CLI::Range(1, 100000));
  cmd->add_option("--population", o->population, "individuals per generation (default 32)")->check(CLI::Range(2, 100000));
  cmd->add_option("--seed", o->seed, "seed of the search (default 0)");
  cmd->add_option("--jobs", o->jobs, "threads evaluating candidates (default: all cores; the result does not depend on it)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--time-budget", o->timeBudget, "stop after the generation that passes this many seconds")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--strategy", o->strategy, "evolution (default) or random (the baseline, same number of evaluations)")
      ->check(CLI::IsMember({"evolution", "random"}));
  cmd->add_option("--plot", o->plot, "convergence plot (.svg/.png/.pdf; default: the record's name with .svg)");
  cmd->add_flag("--no-plot", o->noPlot, "do not draw the convergence plot");
  cmd->add_flag("--print-genome", o->printGenome,
                "print the genome (the compiler's, or the record's best with -o) as text and stop");
  cmd->callback([o]() { tuneCommand(*o); });
});

}  // namespace tessel::cli
