// Channel chains (GroupSchedule::channelChain): a depthwise convolution and the 1x1 convolution reading its result
// run as one group whose tiles walk the depthwise channel blocks, so the depthwise result never goes to DRAM
// (lower_chain.cpp). Chosen where the instruction scheduler prices the chain, in context, below the two groups.
#include <algorithm>
#include <map>

#include "../geometry.h"
#include "../lower_context.h"
#include "../lower_conv.h"
#include "tiling_cost.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"

namespace tessel::npu {

namespace {

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
  std::vector<GroupSchedule> out;
  // The depthwise tilings the node would take alone, cheapest first, each cut down until two tiles of the chain fit
  // (window and block copy in the input buffer, depthwise and 1x1 accumulator tiles).
  for (NodeTiling d : tilingOptions(dw, gd.tiling[0], body, cfg)) {
    if (out.size() >= count) break;
    if (d.variant != "vector") continue;
    const int64_t cb = std::min(d.channels, dg.C);
    auto fits = [&](int64_t th, int64_t tw) {
      return 2 * (dg.inRows(th) * dg.inCols(tw) * cb + th * tw * cb) <= words(Buffer::Input) &&
             2 * th * tw * (cg.M + cb) <= words(Buffer::Accumulator);
    };
    int64_t th = std::min(d.rows, dg.OH), tw = std::min(d.cols, dg.OW);
    while (th > 1 && !fits(th, tw)) --th;
    while (tw > 1 && !fits(th, tw)) --tw;
    if (!fits(th, tw)) continue;
    d.rows = ceilDiv(dg.OH, ceilDiv(dg.OH, th)), d.cols = tw;
    const int64_t dwWeights = depthwiseWeightWords(dg.KH * dg.KW, cb, d.matrixEvery > 0, cfg.dim) * ceilDiv(dg.C, cb);
    NodeTiling c = gc.tiling[0];
    c.rows = d.rows, c.cols = d.cols;
    c.channels = std::min<int64_t>(cfg.dim, cg.M), c.inChannels = cb, c.coutPerPass = cg.M;
    c.weightsResident = dwWeights + cg.C * cg.M <= words(Buffer::Weight) / 2;
    if (dwWeights + cb * cg.M > words(Buffer::Weight)) continue;
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
  std::vector<std::pair<std::vector<size_t>, GroupSchedule>> chosen;
  for (const auto& [gd, gc] : channelChainCandidates(s, body)) {
    // Priced in context, as chooseFusion does: the group before and the one after (fill and drain count).
    std::vector<size_t> context{gd, gc};
    if (gd > 0) context.insert(context.begin(), gd - 1);
    if (gc + 1 < s.groups.size()) context.push_back(gc + 1);
    const lower::ModelledCost layered = lower::modelledCost(body, cfg, s, context);
    uint64_t best = layered.cycles;
    std::optional<GroupSchedule> bestGroup;
    for (const GroupSchedule& option : channelChainOptions(s, gd, gc, body, cfg, 4)) {
      NpuSchedule trial = s;
      replaceByFusedGroups(trial, {{{gd, gc}, option}});
      std::vector<size_t> around{gd};
      if (gd > 0) around.insert(around.begin(), gd - 1);
      if (gd + 1 < trial.groups.size()) around.push_back(gd + 1);
      try {
        verifySchedule(trial, body, cfg);
        const lower::ModelledCost cost = lower::modelledCost(body, cfg, trial, around);
        if (cost.cycles < best) best = cost.cycles, bestGroup = option;
      } catch (const std::exception&) {
        // the buffers cannot hold this option (refused by the verifier, or no room found by the scheduler)
      }
    }
    if (bestGroup) chosen.push_back({{gd, gc}, *bestGroup});
  }
  replaceByFusedGroups(s, chosen);
}

}  // namespace tessel::npu
