// The NPU's search space for `tessel tune` (S1): sites from the compiler's own schedule (every node with more
// than one legal tiling, every fusion candidate, the window of each subgraph), schedules derived from a genome,
// fitness as the sum of each group's modelled cycles (the instruction scheduler's, the simulator's rules) cached
// per group, and the final check of the best genomes by compiling and simulating the whole model.
#include "tessel/targets/npu/tuning.h"

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <filesystem>
#include <fmt/format.h>
#include <mutex>
#include <set>
#include <thread>

#include "lower_context.h"
#include "tessel/eval/inputs.h"
#include "tessel/passes/pass.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/model_file.h"
#include "tessel/targets/npu/simulator.h"

namespace tessel::npu {

/// One subgraph's part of the genome.
struct NpuTuning::Space {
  std::string name;
  std::unique_ptr<Graph> body;
  hw::Device device;
  NpuSchedule base;      ///< the compiler's tilings, nothing fused
  NpuSchedule compiler;  ///< the compiler's schedule, with the window its lowering chose
  struct TilingSite {
    size_t group;
    std::vector<NodeTiling> options;
  };
  struct FusionSite {
    std::vector<size_t> members;
    std::vector<FusionLayout> layouts;  ///< option k > 0 is layouts[k - 1]; option 0 leaves the members unfused
  };
  /// A global pool its producer's tiles may compute (option 1), when the producer stays a layer-by-layer group or
  /// ends a fused one (foldGlobalPool runs after the fusions).
  struct PoolSite {
    std::string pool, conv;
  };
  /// A depthwise convolution and the 1x1 convolution reading it as a channel chain: option 0 none, option k > 0
  /// options[k - 1]; not applied when a fusion gene took either group.
  struct ChainSite {
    size_t dw, conv;
    std::vector<GroupSchedule> options;
  };
  /// A MaxPool its convolution's accumulator tiles may compute (NodeTiling::maxPool): option 0 none, option k > 0
  /// with the convolution's tiling options[k - 1]; applied when both are still layer-by-layer groups after the
  /// fusions and chains.
  struct MaxPoolSite {
    std::string pool;
    std::vector<NodeTiling> options;
  };
  /// A shortcut convolution computed into the accumulator of the convolution it is added to (NodeTiling::residualConv):
  /// option 0 none, option k > 0 with that convolution's tiling options[k - 1]; applied when both are still
  /// layer-by-layer groups after the fusions, chains and max pools.
  struct ResidualSite {
    std::string shortcut;
    std::vector<NodeTiling> options;
  };
  std::vector<TilingSite> tilings;
  std::vector<FusionSite> fusions;
  std::vector<ChainSite> chains;
  std::vector<MaxPoolSite> maxPools;
  std::vector<ResidualSite> residuals;
  std::vector<PoolSite> pools;
  size_t firstSite = 0;  ///< tilings, fusions, chains, max pools, residual convolutions, global pools, then the window

  NpuSchedule derive(const tune::Genome& g) const {
    NpuSchedule s = base;
    size_t i = firstSite;
    for (const TilingSite& t : tilings) s.groups[t.group].tiling[0] = t.options.at(g[i++]);
    // A fused group is derived from the compiler's tilings of its members (the layouts were sized for them; the
    // fused lowering re-tiles every stage anyway): the members' tiling genes apply while they are not fused.
    std::vector<std::pair<std::vector<size_t>, GroupSchedule>> fused;
    std::set<size_t> taken;
    for (const FusionSite& f : fusions) {
      const uint32_t option = g[i++];
      if (option == 0) continue;
      fused.push_back({f.members, fuseGroup(base, f.members, *body, device.npu, f.layouts.at(option - 1))});
      taken.insert(f.members.begin(), f.members.end());
    }
    for (const ChainSite& c : chains) {
      const uint32_t option = g[i++];
      if (option == 0) continue;
      const GroupSchedule& chain = c.options.at(option - 1);
      // An option with an expand stage takes the group before the depthwise one too.
      std::vector<size_t> members{c.dw, c.conv};
      if (chain.tiling.size() == 3) members.insert(members.begin(), c.dw - 1);
      if (std::none_of(members.begin(), members.end(), [&](size_t m) { return taken.count(m) != 0; })) {
        fused.push_back({members, chain});
        taken.insert(members.begin(), members.end());
      }
    }
    replaceByFusedGroups(s, fused);
    for (const MaxPoolSite& m : maxPools) {
      const uint32_t option = g[i++];
      if (option == 0) continue;
      for (const auto& [gp, gc] : maxPoolCandidates(s, *body))
        if (s.groups[gp].nodes[0] == m.pool) {
          s = withMaxPool(s, gp, gc, m.options.at(option - 1));
          break;
        }
    }
    for (const ResidualSite& r : residuals) {
      const uint32_t option = g[i++];
      if (option == 0) continue;
      for (const auto& [gr, gc] : residualConvCandidates(s, *body))
        if (s.groups[gr].nodes[0] == r.shortcut) {
          s = withResidualConv(s, gr, gc, r.options.at(option - 1));
          break;
        }
    }
    for (const PoolSite& p : pools)
      if (g[i++] == 1) foldGlobalPool(s, *body, p.pool, p.conv);
    s.strategy = "window";
    s.window = kWindowChoices[g[i]];
    return s;
  }
};

namespace {

std::string tilingText(const NodeTiling& t) {
  std::string s = fmt::format("{} {}x{}x{}", t.variant, t.rows, t.cols, t.channels);
  if (t.onMatrixUnit())
    s += fmt::format(" cin {} cout/pass {}{}{}{}", t.inChannels, t.coutPerPass, t.weightsResident ? "" : " streamed",
                     t.phased ? " phased" : "", t.inputResident ? " passes-inside" : "");
  if (t.variant == "vector") s += fmt::format(" matrix-every {}", t.matrixEvery);
  return s;
}

}  // namespace

nlohmann::json tuningIdentity(const std::string& modelPath, const hw::HardwareConfig& config) {
  return {{"target", "npu"}, {"model", tune::fileFingerprint(modelPath)}, {"configuration", config.hashHex()}, {"simulator", kSimulatorVersion}};
}

NpuTuning::~NpuTuning() = default;

NpuTuning::NpuTuning(const Model& model, const std::string& modelPath, const hw::HardwareConfig& config, int jobs,
                     double dramBudget)
    : config_(config),
      dramBudget_(dramBudget),
      jobs_(jobs > 0 ? jobs : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  if (!(dramBudget >= 0.0) || dramBudget > 1e6)
    throw UserError(fmt::format("--dram-budget {}: expected a multiple of the compulsory DRAM bytes (3 by "
                                "default), or 0 for no limit", dramBudget));
  if (!config.firstNpu()) throw UserError(fmt::format("configuration '{}' has no npu device", config.name()));
  prepared_ = model.clone();
  namedPipeline("npu").run(*prepared_);
  // The untuned compile: the compiler's schedule of each subgraph, and the body it schedules.
  std::unique_ptr<Model> copy = prepared_->clone();
  ScheduleChooser chooser = [&](const Graph& body, const hw::Device& device, const std::string& name) {
    auto space = std::make_unique<Space>();
    space->name = name;
    space->body = body.clone();
    space->device = device;
    space->compiler = compilerSchedule(body, device.npu, name);
    space->base = tiledSchedule(body, device.npu, name);
    spaces_.push_back(std::move(space));
    return spaces_.back()->compiler;
  };
  const CompiledNpuModel compiled = compilePreparedForNpu(*copy, config, chooser);
  for (const LoweredSubgraph& l : compiled.subgraphs)
    for (auto& s : spaces_)
      if (s->name == l.name) s->compiler.window = l.schedule.window;
  untunedCycles_ = 0;
  {
    const NpuModelRun run = runNpuModel(compiled, eval::completeInputs(*prepared_->graph, {}, 0));
    for (const auto& r : run.subgraphs)
      untunedCycles_ += r.report.totalCycles, untunedDramBytes_ += r.report.dramBytesRead + r.report.dramBytesWritten;
  }
  for (const LoweredSubgraph& l : compiled.subgraphs) compulsoryDramBytes_ += l.compulsoryDramBytes;
  // The sites.
  for (auto& sp : spaces_) {
    Space& s = *sp;
    s.firstSite = problem_.sites.size();
    const Graph& body = *s.body;
    std::map<std::string, const Node*> byName;
    for (const auto& n : body.nodes()) byName[n->name()] = n.get();
    for (size_t g = 0; g < s.base.groups.size(); ++g) {
      const NodeTiling& t = s.base.groups[g].tiling.at(0);
      std::vector<NodeTiling> options = tilingOptions(*byName.at(t.node), t, body, s.device.npu);
      if (options.size() < 2) continue;
      problem_.sites.push_back({fmt::format("{}: tiling of {}", s.name, t.node), "tiling", static_cast<uint32_t>(options.size()), 0,
                                true});
      s.tilings.push_back({g, std::move(options)});
    }
    for (const std::vector<size_t>& members : fusionCandidates(s.base, body, s.device.npu)) {
      Space::FusionSite f{members, {}};
      // Layouts whose fused group the instruction scheduler can place in the buffers (priced once here, alone,
      // with the compiler's window): the others would only be rejected genomes.
      for (const FusionLayout& layout : fusionLayouts(s.base, members, body, s.device.npu)) {
        NpuSchedule trial = s.base;
        trial.window = s.compiler.window;
        replaceByFusedGroups(trial, {{members, fuseGroup(s.base, members, body, s.device.npu, layout)}});
        try {
          lower::modelledCost(body, s.device.npu, trial, {members.back() - (members.size() - 1)});
          f.layouts.push_back(layout);
        } catch (const std::exception&) {
        }
      }
      // The compiler's choice: the group of the compiled schedule holding the same nodes, if it fused them in row
      // tiles (one tiling per member, not a channel chain). A convolution pooling its own accumulator tiles holds the
      // same nodes in one tiling, a channel chain with its expand stage those of three members: taking either for a
      // fusion derived the compiler's genome as a fused group of one row tile, the whole image, which no buffer holds
      // (SqueezeNet's, MobileNetV2's and ShuffleNet v2's compiler genomes were rejected).
      std::vector<std::string> nodes;
      for (size_t m : members) nodes.insert(nodes.end(), s.base.groups[m].nodes.begin(), s.base.groups[m].nodes.end());
      uint32_t chosen = 0;
      for (const GroupSchedule& g : s.compiler.groups)
        if (g.nodes == nodes && g.tiling.size() == members.size() && !g.channelChain) {
          const FusionLayout layout{g.rowTiles, !g.onChip.empty()};
          auto it = std::find(f.layouts.begin(), f.layouts.end(), layout);
          if (it == f.layouts.end()) it = f.layouts.insert(f.layouts.end(), layout);
          chosen = static_cast<uint32_t>(it - f.layouts.begin()) + 1;
        }
      std::string what;
      for (size_t m : members) what += (what.empty() ? "" : " + ") + s.base.groups[m].tiling[0].node;
      problem_.sites.push_back({fmt::format("{}: fusion of {}", s.name, what), "fusion",
                                static_cast<uint32_t>(f.layouts.size() + 1), chosen, false});
      s.fusions.push_back(std::move(f));
    }
    for (const auto& [dw, conv] : channelChainCandidates(s.base, body)) {
      Space::ChainSite c{dw, conv, channelChainOptions(s.base, dw, conv, body, s.device.npu, 8)};
      // With the expand convolution before it as a first stage, when it can be one (built on the first option).
      if (!c.options.empty()) {
        NpuSchedule chained = s.base;
        replaceByFusedGroups(chained, {{{dw, conv}, c.options.front()}});
        const std::vector<size_t> expandable = expandChainCandidates(chained, body);
        if (std::find(expandable.begin(), expandable.end(), dw) != expandable.end())
          for (GroupSchedule& o : expandChainOptions(chained, dw, body, s.device.npu, 8)) c.options.push_back(std::move(o));
      }
      // The compiler's choice: its chain of the same nodes, if it made one (an option of its own if it is none of these).
      std::vector<std::string> nodes = s.base.groups[dw].nodes;
      nodes.insert(nodes.end(), s.base.groups[conv].nodes.begin(), s.base.groups[conv].nodes.end());
      uint32_t chosen = 0;
      std::vector<std::string> withExpand;
      if (dw > 0) {
        withExpand = s.base.groups[dw - 1].nodes;
        withExpand.insert(withExpand.end(), nodes.begin(), nodes.end());
      }
      for (const GroupSchedule& g : s.compiler.groups)
        if (g.channelChain && (g.nodes == nodes || (g.tiling.size() == 3 && g.nodes == withExpand))) {
          auto it = std::find(c.options.begin(), c.options.end(), g);
          if (it == c.options.end()) it = c.options.insert(c.options.end(), g);
          chosen = static_cast<uint32_t>(it - c.options.begin()) + 1;
        }
      if (c.options.empty()) continue;
      problem_.sites.push_back({fmt::format("{}: channel chain of {} + {}", s.name, s.base.groups[dw].tiling[0].node,
                                            s.base.groups[conv].tiling[0].node),
                                "chain", static_cast<uint32_t>(c.options.size() + 1), chosen, false});
      s.chains.push_back(std::move(c));
    }
    for (const auto& [gp, gc] : maxPoolCandidates(s.base, body)) {
      Space::MaxPoolSite m{s.base.groups[gp].nodes[0], maxPoolTilings(s.base, body, s.device.npu, gp, gc, true)};
      // The compiler's choice: the convolution's tiling if it pools (an option of its own if it is none of these).
      uint32_t chosen = 0;
      const std::string& conv = s.base.groups[gc].tiling[0].node;
      if (const NodeTiling* t = s.compiler.tilingOf(conv); t && t->maxPool == m.pool) {
        auto it = std::find(m.options.begin(), m.options.end(), *t);
        if (it == m.options.end()) it = m.options.insert(m.options.end(), *t);
        chosen = static_cast<uint32_t>(it - m.options.begin()) + 1;
      }
      problem_.sites.push_back({fmt::format("{}: max pool {} from the accumulator tiles of {}", s.name, m.pool, conv), "max-pool",
                                static_cast<uint32_t>(m.options.size() + 1), chosen, false});
      s.maxPools.push_back(std::move(m));
    }
    for (const auto& [gr, gc] : residualConvCandidates(s.base, body)) {
      Space::ResidualSite r{s.base.groups[gr].nodes[0], residualConvTilings(s.base, body, s.device.npu, gr, gc)};
      // The compiler's choice: the convolution's tiling if it computes the shortcut (an option of its own if it is none
      // of these).
      uint32_t chosen = 0;
      const std::string& conv = s.base.groups[gc].tiling[0].node;
      if (const NodeTiling* t = s.compiler.tilingOf(conv); t && t->residualConv == r.shortcut) {
        auto it = std::find(r.options.begin(), r.options.end(), *t);
        if (it == r.options.end()) it = r.options.insert(r.options.end(), *t);
        chosen = static_cast<uint32_t>(it - r.options.begin()) + 1;
      }
      if (r.options.empty()) continue;
      problem_.sites.push_back({fmt::format("{}: {} computed into the accumulator of {}", s.name, r.shortcut, conv), "residual-conv",
                                static_cast<uint32_t>(r.options.size() + 1), chosen, false});
      s.residuals.push_back(std::move(r));
    }
    for (const auto& [gp, gc] : globalPoolCandidates(s.base, body)) {
      Space::PoolSite p{s.base.groups[gp].nodes[0], s.base.groups[gc].tiling.back().node};
      const NodeTiling* t = s.compiler.tilingOf(p.conv);
      const uint32_t chosen = t && t->globalPool == p.pool ? 1 : 0;
      problem_.sites.push_back({fmt::format("{}: global pool {} from the tiles of {}", s.name, p.pool, p.conv), "pool", 2, chosen, false});
      s.pools.push_back(std::move(p));
    }
    const auto* w = std::find(std::begin(kWindowChoices), std::end(kWindowChoices), static_cast<uint32_t>(s.compiler.window));
    problem_.sites.push_back({fmt::format("{}: window", s.name), "window", static_cast<uint32_t>(std::size(kWindowChoices)),
                              static_cast<uint32_t>(w == std::end(kWindowChoices) ? 1 : w - std::begin(kWindowChoices)), true});
  }
  problem_.identity = tuningIdentity(modelPath, config);
  // The budget changes which genomes count, so a record is resumed only with the same one (a compile from the
  // record does not care: tunedSchedules checks the identity without it).
  problem_.identity["dram_budget"] = dramBudget_;
  problem_.evaluate = [this](const std::vector<tune::Genome>& batch) { return evaluate(batch); };
  if (dramBudget_ > 0) {
    // The limits: the budget, or what the compiler's own genome moves when that is more (modelled and simulated
    // bytes are counted apart, so the compiler's genome is never rejected).
    const auto budget = static_cast<uint64_t>(dramBudget_ * static_cast<double>(compulsoryDramBytes_));
    simulatedDramLimit_ = std::max(budget, untunedDramBytes_);
    const uint64_t modelled = modelGenomes({tune::defaultGenome(problem_.sites)}).at(0).second;
    modelledDramLimit_ = std::max(budget, modelled == tune::kRejected ? 0 : modelled);
  }
  problem_.statistics = [this] {
    return fmt::format("{} groups modelled, {} cache hits", groupsModelled_, cacheHits_);
  };
}

std::map<std::string, NpuSchedule> NpuTuning::derive(const tune::Genome& genome) const {
  if (genome.size() != problem_.sites.size())
    throw UserError(fmt::format("a genome of {} genes for a search space of {} sites", genome.size(), problem_.sites.size()));
  for (size_t i = 0; i < genome.size(); ++i)
    if (genome[i] >= problem_.sites[i].options)
      throw UserError(fmt::format("gene {} ({}) is {}, expected below {}", i, problem_.sites[i].name, genome[i],
                                  problem_.sites[i].options));
  std::map<std::string, NpuSchedule> out;
  for (const auto& s : spaces_) out[s->name] = s->derive(genome);
  return out;
}

std::vector<uint64_t> NpuTuning::evaluate(const std::vector<tune::Genome>& batch) const {
  std::vector<uint64_t> out;
  for (const auto& [cycles, bytes] : modelGenomes(batch)) out.push_back(bytes > modelledDramLimit_ ? tune::kRejected : cycles);
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> NpuTuning::modelGenomes(const std::vector<tune::Genome>& batch) const {
  // Derive and verify every genome; collect the groups whose cost is not cached yet (each once).
  struct Task {
    const Space* space;
    const NpuSchedule* schedule;
    size_t group;
    std::string key;
    uint64_t cycles = tune::kRejected, dramBytes = 0;
  };
  std::vector<std::vector<NpuSchedule>> schedules(batch.size());
  std::vector<bool> valid(batch.size(), true);
  std::vector<Task> tasks;
  std::set<std::string> queued;
  std::vector<std::vector<std::string>> keys(batch.size());
  for (size_t b = 0; b < batch.size(); ++b) {
    for (const auto& s : spaces_) {
      schedules[b].push_back(s->derive(batch[b]));
      try {
        verifySchedule(schedules[b].back(), *s->body, s->device.npu);
      } catch (const UserError& e) {
        valid[b] = false;  // does not fit the buffers: rejected before any modelling
        if (std::getenv("TESSEL_TUNE_VERBOSE")) fmt::print(stderr, "tune: genome rejected by the verifier: {}\n", e.what());
      }
    }
    if (!valid[b]) continue;
    for (size_t k = 0; k < spaces_.size(); ++k) {
      const NpuSchedule& sched = schedules[b][k];
      for (size_t g = 0; g < sched.groups.size(); ++g) {
        // The group's genome: its schedule alone, with the window (a group's cycles depend on nothing else).
        NpuSchedule one;
        one.subgraph = sched.subgraph, one.window = sched.window, one.groups = {sched.groups[g]};
        std::string key = one.toJson().dump();
        if (groupCache_.count(key) || !queued.insert(key).second)
          ++cacheHits_;
        else
          tasks.push_back({spaces_[k].get(), &sched, g, key});
        keys[b].push_back(std::move(key));
      }
    }
  }
  // Model the new groups in parallel (each task its own lowering; the order of completion does not matter).
  std::atomic<size_t> nextTask{0};
  auto worker = [&] {
    for (size_t i; (i = nextTask++) < tasks.size();) {
      Task& t = tasks[i];
      try {
        const lower::ModelledCost c = lower::modelledCost(*t.space->body, t.space->device.npu, *t.schedule, {t.group});
        t.cycles = c.cycles, t.dramBytes = c.dramBytes;
      } catch (const std::exception& e) {
        t.cycles = tune::kRejected;  // the buffers cannot hold it, or the lowering refuses it
        if (std::getenv("TESSEL_TUNE_VERBOSE"))
          fmt::print(stderr, "tune: group {} rejected in modelling: {}\n", t.schedule->groups[t.group].nodes.front(), e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < std::min<int>(jobs_, static_cast<int>(tasks.size())); ++j) threads.emplace_back(worker);
  worker();
  for (auto& th : threads) th.join();
  for (const Task& t : tasks) groupCache_[t.key] = {t.cycles, t.dramBytes};
  groupsModelled_ += tasks.size();
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (size_t b = 0; b < batch.size(); ++b) {
    uint64_t total = valid[b] ? 0 : tune::kRejected, bytes = 0;
    for (const std::string& key : keys[b]) {
      const auto [c, d] = groupCache_.at(key);
      total = c == tune::kRejected || total == tune::kRejected ? tune::kRejected : total + c;
      bytes += d;
    }
    out.push_back({total, total == tune::kRejected ? tune::kRejected : bytes});
  }
  return out;
}

std::pair<uint64_t, uint64_t> NpuTuning::simulate(const std::map<std::string, NpuSchedule>& schedules) const {
  std::unique_ptr<Model> copy = prepared_->clone();
  ScheduleChooser chooser = [&](const Graph&, const hw::Device&, const std::string& name) { return schedules.at(name); };
  CompiledNpuModel compiled;
  try {
    compiled = compilePreparedForNpu(*copy, config_, chooser);
  } catch (const std::exception&) {
    return {tune::kRejected, 0};  // the whole program does not fit the buffers with this window
  }
  const NpuModelRun run = runNpuModel(compiled, eval::completeInputs(*prepared_->graph, {}, 0));
  uint64_t cycles = 0, bytes = 0;
  for (const auto& r : run.subgraphs) {
    if (!r.report.hazards.empty())
      throw InternalError(fmt::format("tune: subgraph {} has {} hazard(s) in simulation", r.name, r.report.hazards.size()));
    cycles += r.report.totalCycles;
    bytes += r.report.dramBytesRead + r.report.dramBytesWritten;
  }
  return {cycles, bytes};
}

nlohmann::json NpuTuning::finish(const nlohmann::json& record, size_t candidates) const {
  // The best distinct genomes by fitness, compiled and simulated whole; the untuned compile is the reference.
  const std::vector<size_t> ranked = tune::rankedEvaluations(record);
  const auto& evals = record["evaluations"];
  nlohmann::json checked = nlohmann::json::array();
  uint64_t best = untunedCycles_, bestBytes = untunedDramBytes_;
  std::map<std::string, NpuSchedule> winner;
  for (const auto& s : spaces_) winner[s->name] = s->compiler;
  nlohmann::json winnerEval;  // null: the untuned schedule
  for (size_t k = 0; k < std::min(candidates, ranked.size()); ++k) {
    const size_t i = ranked[k];
    const std::map<std::string, NpuSchedule> schedules = derive(evals[i]["genome"].get<tune::Genome>());
    const auto [cycles, bytes] = simulate(schedules);
    checked.push_back({{"evaluation", i}, {"modelled_cycles", evals[i]["fitness"]},
                       {"simulated_cycles", cycles == tune::kRejected ? nlohmann::json() : nlohmann::json(cycles)},
                       {"dram_bytes", bytes}});
    if (cycles < best && bytes <= simulatedDramLimit_) best = cycles, bestBytes = bytes, winner = schedules, winnerEval = i;
  }
  nlohmann::json scheds = nlohmann::json::array();
  for (const auto& [name, s] : winner) scheds.push_back(s.toJson());
  return {{"unit", "cycles"}, {"untuned", untunedCycles_}, {"tuned", best}, {"untuned_dram_bytes", untunedDramBytes_},
          {"tuned_dram_bytes", bestBytes}, {"compulsory_dram_bytes", compulsoryDramBytes_},
          {"dram_limit_bytes", dramBudget_ > 0 ? nlohmann::json(simulatedDramLimit_) : nlohmann::json()},
          {"winner_evaluation", winnerEval},
          {"checked", checked}, {"schedules", scheds}};
}

std::string NpuTuning::genomeText(const tune::Genome& genome) const {
  std::string out;
  for (const auto& sp : spaces_) {
    const Space& s = *sp;
    size_t i = s.firstSite;
    out += fmt::format("subgraph {}: {} tiling sites, {} fusion sites, {} chain sites, {} max-pool sites, {} residual-conv sites, "
                       "{} pool sites, 1 window site\n", s.name, s.tilings.size(), s.fusions.size(), s.chains.size(),
                       s.maxPools.size(), s.residuals.size(), s.pools.size());
    for (const auto& t : s.tilings) {
      const uint32_t o = genome[i];
      out += fmt::format("  [{:3}] tiling {:<40} option {:2} of {:2}{}: {}\n", i, s.base.groups[t.group].tiling[0].node, o,
                         t.options.size(), o == problem_.sites[i].defaultOption ? " (compiler's)" : "", tilingText(t.options[o]));
      ++i;
    }
    for (const auto& f : s.fusions) {
      const uint32_t o = genome[i];
      std::string what = o == 0 ? "not fused"
                                : fmt::format("fused, {} row tiles, intermediates {}", f.layouts[o - 1].rowTiles,
                                              f.layouts[o - 1].onChip ? "on chip" : "through DRAM");
      out += fmt::format("  [{:3}] fusion of {} groups (first {}) option {} of {}{}: {}\n", i, f.members.size(),
                         s.base.groups[f.members.front()].tiling[0].node, o, f.layouts.size() + 1,
                         o == problem_.sites[i].defaultOption ? " (compiler's)" : "", what);
      ++i;
    }
    for (const auto& c : s.chains) {
      const uint32_t o = genome[i];
      std::string what = "not chained";
      if (o > 0) {
        const GroupSchedule& chain = c.options[o - 1];
        const NodeTiling& d = chain.tiling[chain.tiling.size() - 2];
        what = fmt::format("chained{}, {}x{} px tiles, depthwise blocks of {} channels, matrix-every {}",
                           chain.tiling.size() == 3 ? " with the expand stage" : "", d.rows, d.cols, d.channels, d.matrixEvery);
      }
      out += fmt::format("  [{:3}] channel chain of {} + {} option {} of {}{}: {}\n", i, s.base.groups[c.dw].tiling[0].node,
                         s.base.groups[c.conv].tiling[0].node, o, c.options.size() + 1,
                         o == problem_.sites[i].defaultOption ? " (compiler's)" : "", what);
      ++i;
    }
    for (const auto& m : s.maxPools) {
      const uint32_t o = genome[i];
      const std::string what = o == 0 ? "apart" : "from the accumulator tiles, " + tilingText(m.options[o - 1]);
      out += fmt::format("  [{:3}] max pool {} option {} of {}{}: {}\n", i, m.pool, o, m.options.size() + 1,
                         o == problem_.sites[i].defaultOption ? " (compiler's)" : "", what);
      ++i;
    }
    for (const auto& r : s.residuals) {
      const uint32_t o = genome[i];
      const std::string what =
          o == 0 ? "apart"
                 : fmt::format("into the accumulator, {}, its blocks of {} channels, weights {}", tilingText(r.options[o - 1]),
                               r.options[o - 1].residualInChannels, r.options[o - 1].residualWeightsResident ? "resident" : "streamed");
      out += fmt::format("  [{:3}] shortcut {} option {} of {}{}: {}\n", i, r.shortcut, o, r.options.size() + 1,
                         o == problem_.sites[i].defaultOption ? " (compiler's)" : "", what);
      ++i;
    }
    for (const auto& p : s.pools) {
      out += fmt::format("  [{:3}] global pool {} {} the tiles of {}{}\n", i, p.pool, genome[i] ? "computed from" : "apart from",
                         p.conv, genome[i] == problem_.sites[i].defaultOption ? " (compiler's)" : "");
      ++i;
    }
    out += fmt::format("  [{:3}] window {}{}\n", i, kWindowChoices[genome[i]],
                       genome[i] == problem_.sites[i].defaultOption ? " (compiler's)" : "");
  }
  return out;
}

std::map<std::string, NpuSchedule> tunedSchedules(const std::string& recordPath, const std::string& modelPath,
                                                  const hw::HardwareConfig& config) {
  const nlohmann::json r = tune::readRecord(recordPath, tuningIdentity(modelPath, config));
  if (!r.contains("result") || !r["result"].contains("schedules"))
    throw UserError(fmt::format("tuning record '{}' has no result yet (the search did not finish: run tessel tune again "
                                "to complete it)", recordPath));
  std::map<std::string, NpuSchedule> out;
  for (const auto& j : r["result"]["schedules"]) {
    NpuSchedule s = NpuSchedule::fromJson(j, recordPath);
    out[s.subgraph] = std::move(s);
  }
  return out;
}

}  // namespace tessel::npu
