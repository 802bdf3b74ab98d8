// Channel chains (GroupSchedule::channelChain): a depthwise convolution and the 1x1 convolution reading its result
// run as one group whose tiles walk the depthwise channel blocks, so the depthwise result never goes to DRAM
// (lower_chain.cpp). Chosen where the instruction scheduler prices the chain, in context, below the two groups.
#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <thread>

#include "../geometry.h"
#include "../lower_context.h"
#include "../lower_conv.h"
#include "tiling_cost.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"

namespace tessel::npu {

namespace {

/// The windows a chain and the pair it replaces are priced at (each side takes the better).
constexpr uint32_t kChainPricingWindows[] = {2, 8};

std::map<std::string, const Node*> nodesByName(const Graph& body) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  return byName;
}

/// The value a layer-by-layer group's tiling stores (its last epilogue node's result, or its node's).
const Value* resultOf(const NodeTiling& t, const std::map<std::string, const Node*>& byName) {
  return byName.at(t.epilogue.empty() ? t.node : t.epilogue.back())->output(0);
}

}  // namespace

std::vector<std::pair<size_t, size_t>> channelChainCandidates(const NpuSchedule& s, const Graph& body) {
  const auto byName = nodesByName(body);
  auto single = [&](const GroupSchedule& g) {
    return g.tiling.size() == 1 && g.rowTiles == 1 && !g.channelChain && g.nodes.front() == g.tiling[0].node;
  };
  std::map<const Value*, size_t> depthwiseResult;
  for (size_t g = 0; g < s.groups.size(); ++g)
    if (single(s.groups[g]) && s.groups[g].tiling[0].variant == "vector" && s.groups[g].tiling[0].globalPool.empty())
      depthwiseResult[resultOf(s.groups[g].tiling[0], byName)] = g;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const GroupSchedule& grp = s.groups[g];
    if (!single(grp) || grp.tiling[0].variant != "matrix" || grp.tiling[0].groupPack != 1 || grp.tiling[0].phased ||
        !grp.tiling[0].inputScale.empty() || !grp.tiling[0].inputNorm.empty())
      continue;
    const Node& conv = *byName.at(grp.tiling[0].node);
    auto it = depthwiseResult.find(conv.input(0));
    if (it == depthwiseResult.end() || it->second + 1 != g) continue;  // groups are lowered in order: adjacent only
    const NodeTiling& d = s.groups[it->second].tiling[0];
    std::vector<const Node*> epilogue;
    for (const std::string& e : d.epilogue) epilogue.push_back(byName.at(e));
    if (lower::channelChainRefusal(body, *byName.at(d.node), epilogue, conv).empty()) out.push_back({it->second, g});
  }
  return out;
}

std::vector<GroupSchedule> channelChainOptions(const NpuSchedule& s, size_t dwGroup, size_t convGroup, const Graph& body,
                                               const hw::NpuConfig& cfg, size_t count) {
  const auto byName = nodesByName(body);
  const GroupSchedule &gd = s.groups[dwGroup], &gc = s.groups[convGroup];
  const Node& dw = *byName.at(gd.tiling[0].node);
  const ConvGeometry dg = convGeometry(dw), cg = convGeometry(*byName.at(gc.tiling[0].node));
  const auto words = [&](Buffer b) { return static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(b))); };
  // One tile's working set with two depthwise blocks in flight (the next block's window loads while the current one
  // computes): two windows and two block copies in the input buffer; the 1x1 accumulator tile and two depthwise
  // ones in the accumulator.
  auto fits = [&](int64_t th, int64_t tw, int64_t cb) {
    return 2 * (dg.inRows(th) * dg.inCols(tw) * cb + th * tw * cb) <= words(Buffer::Input) &&
           th * tw * (cg.M + 2 * cb) <= words(Buffer::Accumulator);
  };
  // The largest tile (fewest tiles; ties: the wider) of even row tiles that fits.
  auto largest = [&](int64_t cb) -> std::optional<std::pair<int64_t, int64_t>> {
    std::optional<std::pair<int64_t, int64_t>> best;
    int64_t bestTiles = 0;
    for (int64_t parts = 1; parts <= dg.OW; ++parts) {
      const int64_t tw = ceilDiv(dg.OW, parts);
      if (parts > 1 && ceilDiv(dg.OW, parts - 1) == tw) continue;
      int64_t th = dg.OH;
      while (th >= 1 && !fits(th, tw, cb)) --th;
      if (th < 1) continue;
      th = ceilDiv(dg.OH, ceilDiv(dg.OH, th));
      const int64_t tiles = ceilDiv(dg.OH, th) * ceilDiv(dg.OW, tw);
      if (!best || tiles < bestTiles) best = {th, tw}, bestTiles = tiles;
    }
    return best;
  };
  std::vector<NodeTiling> tilings;
  const int64_t lanes = cfg.vectorLanes;
  // Blocks of one vector of channels with every share of the matrix unit, and blocks of two on the vector unit (the
  // candidates that won on MobileNetV2; a two-vector block with matrix-unit tiles never did).
  const std::pair<int64_t, int64_t> kinds[] = {{1, 0}, {1, 2}, {1, 3}, {1, 4}, {2, 0}};
  for (const auto& [vectors, every] : kinds) {
    const int64_t cb = std::min(dg.C, vectors * lanes);
    const auto tile = largest(cb);
    if (!tile) continue;
    NodeTiling d = gd.tiling[0];
    d.channels = d.inChannels = cb, d.matrixEvery = every;
    d.rows = tile->first, d.cols = tile->second;
    if (std::find(tilings.begin(), tilings.end(), d) == tilings.end()) tilings.push_back(d);
  }
  std::vector<GroupSchedule> out;
  for (const NodeTiling& d : tilings) {
    if (out.size() >= count) break;
    const int64_t cb = std::min(d.channels, dg.C);
    const int64_t dwWeights = depthwiseWeightWords(dg.KH * dg.KW, cb, d.matrixEvery > 0, cfg.dim) * ceilDiv(dg.C, cb);
    if (dwWeights + cb * cg.M > words(Buffer::Weight)) continue;
    NodeTiling c = gc.tiling[0];
    c.rows = d.rows, c.cols = d.cols;
    c.channels = std::min<int64_t>(cfg.dim, cg.M), c.inChannels = cb, c.coutPerPass = cg.M;
    c.weightsResident = dwWeights + cg.C * cg.M <= words(Buffer::Weight) / 2;
    GroupSchedule g;
    g.nodes = gd.nodes;
    g.nodes.insert(g.nodes.end(), gc.nodes.begin(), gc.nodes.end());
    g.tiling = {d, c};
    g.onChip = {resultOf(d, byName)->name()};
    g.channelChain = true;
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(std::move(g));
  }
  return out;
}

void chooseChannelChains(NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg) {
  const std::vector<std::pair<size_t, size_t>> candidates = channelChainCandidates(s, body);
  // Each candidate is priced against the same schedule, so the candidates are independent: priced in parallel (the
  // tuner models groups in threads the same way), the choices do not depend on the order.
  std::vector<std::optional<GroupSchedule>> choice(candidates.size());
  auto decide = [&](size_t k) {
    const auto [gd, gc] = candidates[k];
    // Priced in context, as chooseFusion does: the group before and the one after (fill and drain count).
    std::vector<size_t> context{gd, gc};
    if (gd > 0) context.insert(context.begin(), gd - 1);
    if (gc + 1 < s.groups.size()) context.push_back(gc + 1);
    // Each side at the better of a narrow and the widest window: the program's window is chosen for the whole
    // program later, and a chain (few, large tiles) and the layer-by-layer pair (many small ones) gain from
    // different widths (priced at window 2 alone, chains that lost at the program's window 8 were taken).
    auto price = [&](const NpuSchedule& sched, const std::vector<size_t>& groups) {
      lower::ModelledCost best;
      for (uint32_t w : {kChainPricingWindows[0], kChainPricingWindows[1]}) {
        NpuSchedule at = sched;
        at.window = w;
        const lower::ModelledCost c = lower::modelledCost(body, cfg, at, groups);
        if (best.cycles == 0 || c.cycles < best.cycles) best = c;
      }
      return best;
    };
    uint64_t best = price(s, context).cycles;
    for (const GroupSchedule& option : channelChainOptions(s, gd, gc, body, cfg, 8)) {
      NpuSchedule trial = s;
      replaceByFusedGroups(trial, {{{gd, gc}, option}});
      std::vector<size_t> around{gd};
      if (gd > 0) around.insert(around.begin(), gd - 1);
      if (gd + 1 < trial.groups.size()) around.push_back(gd + 1);
      try {
        verifySchedule(trial, body, cfg);
        const lower::ModelledCost cost = price(trial, around);
        if (cost.cycles < best) best = cost.cycles, choice[k] = option;
      } catch (const std::exception&) {
        // the buffers cannot hold this option (refused by the verifier, or no room found by the scheduler)
      }
    }
  };
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next++) < candidates.size();) decide(k);
  };
  std::vector<std::thread> threads;
  const size_t jobs = std::max(1u, std::thread::hardware_concurrency());
  for (size_t j = 1; j < std::min(jobs, candidates.size()); ++j) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  std::vector<std::pair<std::vector<size_t>, GroupSchedule>> chosen;
  for (size_t k = 0; k < candidates.size(); ++k)
    if (choice[k]) chosen.push_back({{candidates[k].first, candidates[k].second}, *choice[k]});
  replaceByFusedGroups(s, chosen);
}

}  // namespace tessel::npu
