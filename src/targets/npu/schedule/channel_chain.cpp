// Channel chains (GroupSchedule::channelChain): a depthwise convolution and the 1x1 convolution reading its result
// run as one group whose tiles walk the depthwise channel blocks, so the depthwise result never goes to DRAM; the 1x1
// expand convolution before them may join as a first stage (lower_chain.cpp). Chosen where the instruction scheduler
// prices the chain, in context, below the groups it replaces.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "../geometry.h"
#include "../lower_context.h"
#include "../lower_conv.h"
#include "parallel.h"
#include "tiling_cost.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"

namespace tessel::npu {

namespace {

/// The windows a chain and the pair it replaces are priced at (each side takes the better).
constexpr uint32_t kChainPricingWindows[] = {2, 8};
/// The options priced per candidate chain (all of chainOptions' kinds).
constexpr size_t kChainOptions = 8;

std::map<std::string, const Node*> nodesByName(const Graph& body) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  return byName;
}

/// The value a layer-by-layer group's tiling stores (its last epilogue node's result, or its node's).
const Value* resultOf(const NodeTiling& t, const std::map<std::string, const Node*>& byName) {
  return byName.at(t.epilogue.empty() ? t.node : t.epilogue.back())->output(0);
}

/// Whether group `prev`, a layer-by-layer 1x1 convolution, may be the first stage (an expand stage) of a chain whose
/// depthwise convolution is node `dw` (lower::expandChainRefusal).
bool expandsInto(const GroupSchedule& prev, const std::string& dw, const Graph& body, const std::map<std::string, const Node*>& byName) {
  if (prev.tiling.size() != 1 || prev.rowTiles != 1 || prev.channelChain || prev.nodes.front() != prev.tiling[0].node) return false;
  const NodeTiling& e = prev.tiling[0];
  if (e.variant != "matrix" || e.groupPack != 1 || e.phased || e.residualInAcc || !e.inputScale.empty() || !e.inputNorm.empty() ||
      !e.globalPool.empty())
    return false;
  std::vector<const Node*> epilogue;
  for (const std::string& n : e.epilogue) epilogue.push_back(byName.at(n));
  return lower::expandChainRefusal(body, *byName.at(e.node), epilogue, *byName.at(dw)).empty();
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

namespace {

/// The chain options of a depthwise group `gd` and a 1x1 group `gc`, with the 1x1 expand group `ge` first when given:
/// blocks of one vector of channels with every matrix-unit share, and blocks of two on the vector unit (the candidates
/// that won on MobileNetV2; a two-vector block with matrix-unit tiles never did), each with the largest tile (fewest
/// tiles; ties: the wider; even row tiles) whose working set fits with two depthwise blocks in flight: two windows and
/// two block copies in the input buffer (with an expand stage, also the tile's input pixels), the 1x1 accumulator tile
/// and two depthwise ones (and two expanded blocks) in the accumulator. With an expand stage, also the vector-unit
/// blocks with their windows in the accumulator (NodeTiling::windowInAcc), where the input buffer leaves larger tiles.
std::vector<GroupSchedule> chainOptions(const GroupSchedule* ge, const GroupSchedule& gd, const GroupSchedule& gc, const Graph& body,
                                        const hw::NpuConfig& cfg, size_t count) {
  const auto byName = nodesByName(body);
  const Node& dw = *byName.at(gd.tiling[0].node);
  const ConvGeometry dg = convGeometry(dw), cg = convGeometry(*byName.at(gc.tiling[0].node));
  const ConvGeometry eg = ge ? convGeometry(*byName.at(ge->tiling[0].node)) : ConvGeometry{};
  const auto words = [&](Buffer b) { return static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(b))); };
  // inAcc (NodeTiling::windowInAcc): the two windows in the accumulator, where the expand stage makes them; with
  // matrix-unit blocks (`every`) also one window in the input buffer, where their gemms read it.
  auto fits = [&](int64_t th, int64_t tw, int64_t cb, int64_t every, bool inAcc) {
    const int64_t px = ge ? std::min(dg.inRows(th), dg.H) * std::min(dg.inCols(tw), dg.W) : 0, window = dg.inRows(th) * dg.inCols(tw) * cb;
    const int64_t inputWindows = inAcc ? (every > 0 ? window : 0) : 2 * window;
    return px * eg.C + inputWindows + 2 * th * tw * cb <= words(Buffer::Input) &&
           2 * (inAcc ? window : px * cb) + th * tw * (cg.M + 2 * cb) <= words(Buffer::Accumulator);
  };
  auto largest = [&](int64_t cb, int64_t every, bool inAcc) -> std::optional<std::pair<int64_t, int64_t>> {
    std::optional<std::pair<int64_t, int64_t>> best;
    int64_t bestTiles = 0;
    for (int64_t parts = 1; parts <= dg.OW; ++parts) {
      const int64_t tw = ceilDiv(dg.OW, parts);
      if (parts > 1 && ceilDiv(dg.OW, parts - 1) == tw) continue;
      int64_t th = dg.OH;
      while (th >= 1 && !fits(th, tw, cb, every, inAcc)) --th;
      if (th < 1) continue;
      th = ceilDiv(dg.OH, ceilDiv(dg.OH, th));
      const int64_t tiles = ceilDiv(dg.OH, th) * ceilDiv(dg.OW, tw);
      if (!best || tiles < bestTiles) best = {th, tw}, bestTiles = tiles;
    }
    return best;
  };
  std::vector<GroupSchedule> out;
  const int64_t lanes = cfg.vectorLanes;
  // (vectors of channels per block, matrixEvery, windowInAcc); the windows in the accumulator with an expand stage
  // only, there also with every 4th block's taps on the matrix unit (their windows in the input buffer; every 3rd and
  // 6th never won on MobileNetV2 or MnasNet).
  const std::tuple<int64_t, int64_t, bool> kinds[] = {{1, 0, false}, {1, 2, false}, {1, 3, false}, {1, 4, false},
                                                       {2, 0, false}, {1, 0, true},  {2, 0, true},  {1, 4, true}};
  for (const auto& [vectors, every, inAcc] : kinds) {
    if (out.size() >= count) break;
    if (inAcc && !ge) continue;
    const int64_t cb = std::min(dg.C, vectors * lanes);
    const auto tile = largest(cb, every, inAcc);
    if (!tile) continue;
    NodeTiling d = gd.tiling[0];
    d.channels = d.inChannels = cb, d.matrixEvery = every, d.windowInAcc = inAcc;
    d.rows = tile->first, d.cols = tile->second;
    // Every block's parameters of the units its tiles run on, and one block's of both within the buffer (the
    // verifier's rule for any depthwise tiling).
    const int64_t dwWeights = depthwiseNodeWeightWords(dg.C, dg.KH * dg.KW, cb, every, spatialTiles(dg, d), true, cfg.dim);
    if (depthwiseWeightWords(dg.KH * dg.KW, cb, every > 0, cfg.dim) > words(Buffer::Weight)) continue;
    if (dwWeights + cb * cg.M + (ge ? eg.C * cb : 0) > words(Buffer::Weight)) continue;
    NodeTiling c = gc.tiling[0];
    c.rows = d.rows, c.cols = d.cols, c.inputResident = false;
    c.channels = std::min<int64_t>(cfg.dim, cg.M), c.inChannels = cb, c.coutPerPass = cg.M;
    c.weightsResident = dwWeights + cg.C * cg.M <= words(Buffer::Weight) / 2;
    c.biasGemm = true;
    GroupSchedule g;
    if (ge) g.nodes = ge->nodes;
    g.nodes.insert(g.nodes.end(), gd.nodes.begin(), gd.nodes.end());
    g.nodes.insert(g.nodes.end(), gc.nodes.begin(), gc.nodes.end());
    g.tiling = {d, c};
    g.onChip = {resultOf(d, byName)->name()};
    if (ge) {
      NodeTiling e = ge->tiling[0];
      e.inputResident = false;
      e.rows = std::min(dg.inRows(d.rows), dg.H), e.cols = std::min(dg.inCols(d.cols), dg.W);
      e.channels = std::min<int64_t>(cfg.dim, cb), e.inChannels = eg.C, e.coutPerPass = cb;
      // Its weights resident when they fit beside the others' in half the buffer, else each block's per tile.
      e.weightsResident = eg.C * eg.M + dwWeights + (c.weightsResident ? cg.C * cg.M : cb * cg.M) <= words(Buffer::Weight) / 2;
      e.biasGemm = true;
      g.tiling.insert(g.tiling.begin(), e);
      g.onChip.insert(g.onChip.begin(), resultOf(e, byName)->name());
    }
    g.channelChain = true;
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(std::move(g));
  }
  return out;
}

/// Replaces each candidate's member groups by its cheapest option where that beats the members: every option and the
/// members lowered and list-scheduled in context (the group before and the one after: fill and drain count) at windows
/// 2 and 8, each side at its better window (the program's window is chosen for the whole program later, and a chain,
/// few large tiles, and the layer-by-layer groups, many small ones, gain from different widths: priced at window 2
/// alone, chains that lost at the program's window 8 were taken). Each candidate is priced against the same schedule,
/// so they are independent: priced in parallel, the choices do not depend on the order.
void chooseReplacements(NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg,
                        const std::vector<std::pair<std::vector<size_t>, std::vector<GroupSchedule>>>& candidates, bool biasLoads) {
  std::vector<std::optional<GroupSchedule>> choice(candidates.size());
  auto price = [&](const NpuSchedule& sched, const std::vector<size_t>& groups) {
    uint64_t best = 0;
    for (uint32_t w : kChainPricingWindows) {
      NpuSchedule at = sched;
      at.window = w;
      const uint64_t c = lower::modelledCost(body, cfg, at, groups).cycles;
      if (best == 0 || c < best) best = c;
    }
    return best;
  };
  auto decide = [&](size_t k) {
    const std::vector<size_t>& members = candidates[k].first;
    std::vector<size_t> context = members;
    if (members.front() > 0) context.insert(context.begin(), members.front() - 1);
    if (members.back() + 1 < s.groups.size()) context.push_back(members.back() + 1);
    uint64_t best = price(s, context);
    auto tryOption = [&](const GroupSchedule& option) {
      NpuSchedule trial = s;
      replaceByFusedGroups(trial, {{members, option}});
      const size_t at = members.front();
      std::vector<size_t> around{at};
      if (at > 0) around.insert(around.begin(), at - 1);
      if (at + 1 < trial.groups.size()) around.push_back(at + 1);
      try {
        verifySchedule(trial, body, cfg);
        const uint64_t cost = price(trial, around);
        if (cost < best) best = cost, choice[k] = option;
      } catch (const std::exception&) {
        // the buffers cannot hold this option (refused by the verifier, or no room found by the scheduler)
      }
    };
    for (const GroupSchedule& option : candidates[k].second) tryOption(option);
    // The options add their biases on the matrix unit (which the chains mostly leave room on); the best one is also
    // priced with them on the vector unit.
    if (choice[k]) {
      GroupSchedule twin = *choice[k];
      bool differs = false;
      for (NodeTiling& t : twin.tiling) differs |= std::exchange(t.biasGemm, false);
      if (differs) tryOption(twin);
    }
    // And with the biases broadcast by the load unit (NodeTiling::biasLoad), which chains leave mostly idle: the
    // expand stage's alone, then every stage's that can.
    if (choice[k] && biasLoads) {
      const GroupSchedule best = *choice[k];
      auto loaded = [&](bool all) {
        GroupSchedule twin = best;
        bool differs = false;
        for (size_t t = 0; t < twin.tiling.size(); ++t) {
          NodeTiling& n = twin.tiling[t];
          const bool expand = twin.tiling.size() == 3 && t == 0;
          if ((!expand && !all) || !biasLoadRefusal(twin, n, body).empty()) continue;
          n.biasGemm = false, n.biasLoad = true, differs = true;
        }
        if (differs) tryOption(twin);
      };
      loaded(false);
      loaded(true);
    }
  };
  forEachInParallel(candidates.size(), decide);
  std::vector<std::pair<std::vector<size_t>, GroupSchedule>> chosen;
  for (size_t k = 0; k < candidates.size(); ++k)
    if (choice[k]) chosen.push_back({candidates[k].first, *choice[k]});
  replaceByFusedGroups(s, chosen);
}

}  // namespace

std::vector<GroupSchedule> channelChainOptions(const NpuSchedule& s, size_t dwGroup, size_t convGroup, const Graph& body,
                                               const hw::NpuConfig& cfg, size_t count) {
  return chainOptions(nullptr, s.groups[dwGroup], s.groups[convGroup], body, cfg, count);
}

std::vector<size_t> expandChainCandidates(const NpuSchedule& s, const Graph& body) {
  const auto byName = nodesByName(body);
  std::vector<size_t> out;
  for (size_t g = 1; g < s.groups.size(); ++g)
    if (s.groups[g].channelChain && s.groups[g].tiling.size() == 2 &&
        expandsInto(s.groups[g - 1], s.groups[g].tiling[0].node, body, byName))
      out.push_back(g);
  return out;
}

std::vector<GroupSchedule> expandChainOptions(const NpuSchedule& s, size_t chainGroup, const Graph& body, const hw::NpuConfig& cfg,
                                              size_t count) {
  const GroupSchedule& chain = s.groups[chainGroup];
  GroupSchedule gd, gc;  // the chain's two groups as they were
  gd.tiling = {chain.tiling[0]}, gc.tiling = {chain.tiling[1]};
  const auto split = std::find(chain.nodes.begin(), chain.nodes.end(), chain.tiling[1].node);
  gd.nodes.assign(chain.nodes.begin(), split), gc.nodes.assign(split, chain.nodes.end());
  return chainOptions(&s.groups[chainGroup - 1], gd, gc, body, cfg, count);
}

void chooseChannelChains(NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg) {
  std::vector<std::pair<std::vector<size_t>, std::vector<GroupSchedule>>> candidates;
  for (const auto& [gd, gc] : channelChainCandidates(s, body))
    candidates.push_back({{gd, gc}, channelChainOptions(s, gd, gc, body, cfg, kChainOptions)});
  chooseReplacements(s, body, cfg, candidates, false);
  // Then the expand convolutions before the chains taken, and before the pairs left apart: a pair's chain may lose
  // to its two groups while the three stages together, the expanded tensor no longer going through DRAM, win
  // (MobileNetV2's stride-2 blocks). A group joins one candidate at most (the earlier).
  candidates.clear();
  const auto byName = nodesByName(body);
  std::vector<bool> taken(s.groups.size(), false);
  for (size_t g : expandChainCandidates(s, body)) {
    candidates.push_back({{g - 1, g}, expandChainOptions(s, g, body, cfg, kChainOptions)});
    taken[g - 1] = taken[g] = true;
  }
  for (const auto& [gd, gc] : channelChainCandidates(s, body)) {
    if (gd == 0 || taken[gd - 1] || taken[gd] || taken[gc] || !expandsInto(s.groups[gd - 1], s.groups[gd].tiling[0].node, body, byName))
      continue;
    candidates.push_back({{gd - 1, gd, gc}, chainOptions(&s.groups[gd - 1], s.groups[gd], s.groups[gc], body, cfg, kChainOptions)});
    taken[gd - 1] = taken[gd] = taken[gc] = true;
  }
  chooseReplacements(s, body, cfg, candidates, true);
}

}  // namespace tessel::npu
