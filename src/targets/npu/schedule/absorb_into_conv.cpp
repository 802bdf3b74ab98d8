// Work a convolution does on its loads and stores instead of a pass of its own through DRAM.
//
// Squeeze-and-excitation without round trips of the feature map through DRAM. The squeeze (a global pool of the
// map) becomes part of the convolution producing the map (NodeTiling::globalPool): each output tile is reduced
// into a per-channel vector on chip as it is made, so the pool does not load the map again. The excitation's
// broadcast Mul of the map by a per-channel vector cannot be an epilogue of the map's producer (the vector needs
// the whole map first: pool, 1x1 convs, sigmoid), but the convolution reading the product can multiply each
// input block it loads by the block's channels of the vector (NodeTiling::inputScale), one vector instruction on
// data already in SRAM: the Mul's own pass (load the map, multiply, store the product, which the convolution
// loads again) disappears.
//
// Pre-activation blocks (DenseNet: BatchNormalization -> ReLU -> 1x1 Conv on a concatenation that other layers
// read unnormalised) cannot fold the normalisation into the weights (the ReLU is between) nor into the producers
// (the map is read raw too). The convolution applies it to each input block it loads instead
// (NodeTiling::inputNorm): one `vaffine` and one `vun` per block, on the vector unit that a matrix convolution
// otherwise leaves idle, and the normalised map is never stored.
//
// A residual block's shortcut convolution (ResNet's strided 1x1 downsampling) is stored by a group of its own and
// loaded back into the accumulator of the convolution it is added to. Its gemms can start that accumulator
// instead (NodeTiling::residualConv): one more input window per tile, and its result never goes through DRAM.
//
// Each is chosen where the instruction scheduler models it cheaper than the separate pass (a convolution that
// loads its input once per output-channel pass transforms it once per pass).
#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>

#include "../geometry.h"
#include "../lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"
#include "tiling_cost.h"

namespace tessel::npu {

std::vector<std::pair<size_t, size_t>> inputScaleCandidates(const NpuSchedule& s, const Graph& body) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  std::map<std::string, size_t> groupOf;  // groups of one tiled node (and its epilogue) run layer by layer, by that node
  for (size_t g = 0; g < s.groups.size(); ++g)
    if (s.groups[g].tiling.size() == 1 && s.groups[g].rowTiles == 1 && s.groups[g].nodes[0] == s.groups[g].tiling[0].node)
      groupOf[s.groups[g].nodes[0]] = g;
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& [name, gm] : groupOf) {
    const Node& mul = *byName.at(name);
    if (s.groups[gm].nodes.size() != 1 || s.groups[gm].tiling[0].variant != "elementwise" || mul.output(0)->uses().size() != 1)
      continue;
    const Node& conv = *mul.output(0)->uses()[0].node;
    auto gc = groupOf.find(conv.name());
    if (gc == groupOf.end() || !lower::inputScaleOf(body, mul, conv)) continue;
    const NodeTiling& t = s.groups[gc->second].tiling[0];
    if (t.onMatrixUnit()) out.push_back({gm, gc->second});
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

/// `s` with the single node of group `from` done by a convolution of group `into` (named by its tiling's `field`;
/// first of the group's nodes when it runs before the convolution, which is then the group's first tiling, else
/// last, done by the group's last tiling: a fused group's result), group `from` removed.
NpuSchedule absorb(const NpuSchedule& s, size_t from, size_t into, std::string NodeTiling::*field, bool before) {
  NpuSchedule out = s;
  GroupSchedule& conv = out.groups[into];
  (before ? conv.tiling.front() : conv.tiling.back()).*field = s.groups[from].nodes[0];
  conv.nodes.insert(before ? conv.nodes.begin() : conv.nodes.end(), s.groups[from].nodes[0]);
  out.groups.erase(out.groups.begin() + static_cast<long>(from));
  return out;
}

/// `s` with the Mul of group gm applied by the convolution of group gc as it loads its input.
NpuSchedule withInputScale(const NpuSchedule& s, size_t gm, size_t gc) { return absorb(s, gm, gc, &NodeTiling::inputScale, true); }

/// `s` with the normalisation of group gn (and its unary epilogue) applied by the convolution of group gc as it
/// loads its input.
NpuSchedule withInputNorm(const NpuSchedule& s, size_t gn, size_t gc) {
  NpuSchedule out = s;
  GroupSchedule& conv = out.groups[gc];
  const std::vector<std::string>& chain = s.groups[gn].nodes;
  conv.tiling[0].inputNorm = chain;
  conv.nodes.insert(conv.nodes.begin(), chain.begin(), chain.end());
  out.groups.erase(out.groups.begin() + static_cast<long>(gn));
  return out;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> globalPoolCandidates(const NpuSchedule& s, const Graph& body) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  // Groups whose result a convolution makes, by that result: layer-by-layer groups of one convolution (matrix or
  // depthwise), and fused groups ending in a matrix-unit convolution (their last stage makes every output
  // channel of a tile at once, tile after tile in row order, as the running reduction needs).
  std::map<const Value*, size_t> groupOfResult;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const GroupSchedule& grp = s.groups[g];
    const bool fused = grp.tiling.size() > 1;
    if ((!fused && grp.rowTiles != 1) || grp.tiling.empty() || !grp.tiling.back().globalPool.empty()) continue;
    const NodeTiling& t = grp.tiling.back();
    if (!t.onMatrixUnit() && (fused || t.variant != "vector")) continue;
    groupOfResult[byName.at(t.epilogue.empty() ? t.node : t.epilogue.back())->output(0)] = g;
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t gp = 0; gp < s.groups.size(); ++gp) {
    const GroupSchedule& grp = s.groups[gp];
    if (grp.nodes.size() != 1 || grp.tiling.size() != 1 || grp.tiling[0].variant != "global-pool") continue;
    const Node& pool = *byName.at(grp.nodes[0]);
    auto gc = groupOfResult.find(pool.input(0));
    if (gc != groupOfResult.end() &&
        lower::globalPoolFromTiles(pool, *byName.at(s.groups[gc->second].tiling.back().node), pool.input(0)))
      out.push_back({gp, gc->second});
  }
  return out;
}

namespace {

/// `s` with the pool of group gp computed from the output tiles of the convolution of group gc.
NpuSchedule withGlobalPool(const NpuSchedule& s, size_t gp, size_t gc) { return absorb(s, gp, gc, &NodeTiling::globalPool, false); }

/// The group with a tiling of `node`.
size_t groupOfTiling(const NpuSchedule& s, const std::string& node) {
  for (size_t g = 0; g < s.groups.size(); ++g)
    for (const NodeTiling& t : s.groups[g].tiling)
      if (t.node == node) return g;
  TESSEL_ASSERT(false, "npu schedule: no group of " + node);
  return 0;
}

/// The modelled cost of groups `groups` of `s`, or nothing when the vector kept on chip leaves too little room beside
/// a tile (lower::modelledCostIfItFits).
std::optional<lower::ModelledCost> costIfItFits(const Graph& body, const hw::NpuConfig& cfg, const NpuSchedule& s,
                                                const std::vector<size_t>& groups) {
  return lower::modelledCostIfItFits(body, cfg, s, groups);
}

}  // namespace

bool foldGlobalPool(NpuSchedule& schedule, const Graph& body, const std::string& pool, const std::string& conv) {
  for (const auto& [gp, gc] : globalPoolCandidates(schedule, body))
    if (schedule.groups[gp].nodes[0] == pool && schedule.groups[gc].tiling.back().node == conv) {
      schedule = withGlobalPool(schedule, gp, gc);
      return true;
    }
  return false;
}

void chooseGlobalPoolEpilogues(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg) {
  struct Choice {
    std::string pool, conv;
    bool passesOutside = false;  ///< the convolution's passes taken out of its tiles (NodeTiling::inputResident)
  };
  std::vector<Choice> chosen;
  std::set<size_t> taken;  // a convolution reduces one pool from its tiles (a second pool of its result stays apart)
  for (const auto& [gp, gc] : globalPoolCandidates(schedule, body)) {
    TESSEL_ASSERT(gc < gp, "npu schedule: a pool's group before its input's");
    if (taken.count(gc)) continue;
    const lower::ModelledCost apart = lower::modelledCost(body, cfg, schedule, {gc, gp});
    NpuSchedule trial = withGlobalPool(schedule, gp, gc);
    // With the passes inside the tiles every pass's pool vector stays on chip: without room for them, outside.
    bool outside = false;
    if (trial.groups[gc].tiling.back().inputResident) try {
        verifySchedule(trial, body, cfg);
      } catch (const UserError&) {
        trial.groups[gc].tiling.back().inputResident = false, outside = true;
      }
    const std::optional<lower::ModelledCost> pooled = costIfItFits(body, cfg, trial, {gc});
    if (pooled && pooled->cycles <= apart.cycles) {
      chosen.push_back({schedule.groups[gp].nodes[0], schedule.groups[gc].tiling.back().node, outside});
      taken.insert(gc);
    }
  }
  for (const Choice& c : chosen) {
    const size_t gc = groupOfTiling(schedule, c.conv);
    if (c.passesOutside) schedule.groups[gc].tiling.back().inputResident = false;
    schedule = withGlobalPool(schedule, groupOfTiling(schedule, c.pool), gc);
  }
}

std::vector<std::pair<size_t, size_t>> maxPoolCandidates(const NpuSchedule& s, const Graph& body) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  std::map<std::string, size_t> convGroup;  // layer-by-layer groups of one matrix-unit Conv alone (no epilogue), by that node
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const GroupSchedule& grp = s.groups[g];
    if (grp.tiling.size() != 1 || grp.rowTiles != 1 || grp.channelChain || grp.nodes.size() != 1) continue;
    const NodeTiling& t = grp.tiling[0];
    if (t.onMatrixUnit() && t.node == grp.nodes[0] && !t.residualInAcc && t.globalPool.empty() && t.maxPool.empty() &&
        t.inputScale.empty() && t.inputNorm.empty() && t.groupPack == 1)
      convGroup[t.node] = g;
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t gp = 0; gp < s.groups.size(); ++gp) {
    const GroupSchedule& grp = s.groups[gp];
    if (grp.tiling.size() != 1 || grp.rowTiles != 1 || grp.tiling[0].node != grp.nodes[0]) continue;
    const Node& pool = *byName.at(grp.nodes[0]);
    const Node* conv = pool.input(0)->producer();
    auto gc = conv ? convGroup.find(conv->name()) : convGroup.end();
    if (gc == convGroup.end() || !lower::maxPoolFromTiles(body, pool, *conv)) continue;
    std::vector<const Node*> chain;
    for (const std::string& e : grp.tiling[0].epilogue) chain.push_back(byName.at(e));
    const auto steps = lower::epilogueSteps(pool.output(0), chain);
    if (steps && std::all_of(steps->begin(), steps->end(), [](const lower::EpilogueStep& e) { return e.unary; }) &&
        grp.nodes.size() == chain.size() + 1)
      out.push_back({gp, gc->second});
  }
  return out;
}

std::vector<NodeTiling> maxPoolTilings(const NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg, size_t gp, size_t gc,
                                       bool overlapping) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  const NodeTiling& current = s.groups[gc].tiling[0];
  const Node& pool = *byName.at(s.groups[gp].nodes[0]);
  const PoolGeometry q = poolGeometry(pool);
  const ConvGeometry geo = convGeometry(*byName.at(current.node));
  // Pooled tiles as wide as the convolution's current tile allows, half and a quarter as wide; per width the output
  // channels per pass as chosen and half as many (more passes load the input again but leave the accumulator room
  // for more rows, which overlap less), each with the most rows whose convolution tile and pooled tile fit half the
  // accumulator (two tiles in flight). Few options: each is priced on the whole convolution.
  // Columns of the map a tile of `c` pooled columns from the first reads (its left padding skipped).
  const auto readCols = [&](int64_t c) { return std::min(q.W, (c - 1) * q.sW - q.pL + q.KW); };
  int64_t pc = 1;
  while (pc < q.OW && readCols(pc + 1) <= std::min(current.cols, q.W)) ++pc;
  pc = ceilDiv(q.OW, ceilDiv(q.OW, pc));  // as many tiles, evenly wide
  const int64_t width = std::min(current.coutPerPass > 0 ? current.coutPerPass : current.channels, geo.M);
  const auto half = static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(Buffer::Accumulator)) / 2);
  const auto inputWords = static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(Buffer::Input)));
  const int64_t Cg = geo.C / geo.group;
  const int64_t cb = current.variant == "matrix" ? std::min(current.inChannels > 0 ? current.inChannels : Cg, Cg) : Cg;
  std::vector<NodeTiling> out;
  for (int64_t cols : {pc, std::max<int64_t>(1, pc / 2), std::max<int64_t>(1, pc / 4)})
    for (int64_t pass : {width, width / 2}) {
      if (pass < 1 || (pass != width && (pass < current.channels || pass % current.channels != 0))) continue;
      // The convolution's largest input region (one input block, one stride phase) for a pooled tile of r rows.
      const int64_t convCols = std::min(q.W, q.inCols(cols));
      const auto window = [&](int64_t r) {
        return tileWindowWordsPerChannel(geo, current, std::min(q.H, q.inRows(r)), convCols, true) * cb;
      };
      // The most rows whose input region fills the buffer, and with `overlapping` the most whose region fits twice,
      // so the next tile's region loads while this one's gemms run (ShuffleNet v2's stem: a region of 88 % of the
      // buffer serialised every tile's load and gemms).
      for (const int64_t room : {inputWords, inputWords / 2}) {
        if (window(1) > room || (room != inputWords && !overlapping)) continue;
        int64_t rows = 1;
        while (rows < q.OH && (q.inRows(rows + 1) * q.inCols(cols) + (rows + 1) * cols) * pass <= half && window(rows + 1) <= room)
          ++rows;
        NodeTiling t = current;
        t.rows = rows, t.cols = cols, t.inputResident = false;
        t.coutPerPass = pass;
        t.maxPool = pool.name();
        t.epilogue = s.groups[gp].tiling[0].epilogue;
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(std::move(t));
      }
    }
  return out;
}

NpuSchedule withMaxPool(const NpuSchedule& s, size_t gp, size_t gc, const NodeTiling& tiling) {
  NpuSchedule out = s;
  GroupSchedule& conv = out.groups[gc];
  conv.tiling[0] = tiling;
  conv.nodes.insert(conv.nodes.end(), s.groups[gp].nodes.begin(), s.groups[gp].nodes.end());
  out.groups.erase(out.groups.begin() + static_cast<long>(gp));
  return out;
}

void chooseMaxPools(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg) {
  std::vector<std::pair<std::string, NodeTiling>> chosen;  // (pool, the convolution's tiling)
  for (const auto& [gp, gc] : maxPoolCandidates(schedule, body)) {
    TESSEL_ASSERT(gc < gp, "npu schedule: a pool's group before its input's");
    // Priced with the compiler's pricing window; the cheapest options no slower than the two groups apart are then
    // priced with 8 tiles in flight, as the final program often runs, and the first that wins there too is taken (at
    // window 2 alone ShuffleNetV2's stem on tiny was priced 7 % cheaper merged and ran 18 % slower in the program).
    const uint64_t apart = lower::modelledCost(body, cfg, schedule, {gc, gp}).cycles;
    std::vector<std::pair<uint64_t, NodeTiling>> cheaper;
    for (const NodeTiling& t : maxPoolTilings(schedule, body, cfg, gp, gc))
      if (const auto pooled = costIfItFits(body, cfg, withMaxPool(schedule, gp, gc, t), {gc}); pooled && pooled->cycles <= apart)
        cheaper.push_back({pooled->cycles, t});
    std::stable_sort(cheaper.begin(), cheaper.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::optional<NodeTiling> take;
    if (!cheaper.empty()) {
      NpuSchedule wide = schedule;
      wide.window = 8;
      const uint64_t apart8 = lower::modelledCost(body, cfg, wide, {gc, gp}).cycles;
      for (const auto& [cycles, t] : cheaper)
        if (const auto pooled8 = costIfItFits(body, cfg, withMaxPool(wide, gp, gc, t), {gc}); pooled8 && pooled8->cycles <= apart8) {
          take = t;
          break;
        }
    }
    if (take) chosen.push_back({schedule.groups[gp].nodes[0], *take});
  }
  for (const auto& [pool, tiling] : chosen)
    schedule = withMaxPool(schedule, groupOfTiling(schedule, pool), groupOfTiling(schedule, tiling.node), tiling);
}

std::vector<std::pair<size_t, size_t>> inputNormCandidates(const NpuSchedule& s, const Graph& body) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  std::map<std::string, size_t> readerGroup;  // layer-by-layer groups of one matrix-unit convolution or pool, nothing absorbed
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const GroupSchedule& grp = s.groups[g];
    if (grp.tiling.size() != 1 || grp.rowTiles != 1 || grp.nodes[0] != grp.tiling[0].node) continue;
    const NodeTiling& t = grp.tiling[0];
    const bool reader = t.onMatrixUnit() || t.variant == "pool" || t.variant == "pool-wide";
    if (reader && t.inputScale.empty() && t.inputNorm.empty() && t.epilogue.size() + 1 == grp.nodes.size()) readerGroup[t.node] = g;
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t gn = 0; gn < s.groups.size(); ++gn) {
    const GroupSchedule& grp = s.groups[gn];
    if (grp.tiling.size() != 1 || grp.rowTiles != 1 || grp.tiling[0].variant != "elementwise" || grp.nodes[0] != grp.tiling[0].node)
      continue;
    std::vector<const Node*> chain;
    for (const std::string& name : grp.nodes) chain.push_back(byName.at(name));
    if (!isOp(*chain[0], "BatchNormalization") || chain.back()->output(0)->uses().size() != 1) continue;
    const Node& reader = *chain.back()->output(0)->uses()[0].node;
    auto gr = readerGroup.find(reader.name());
    if (gr != readerGroup.end() && lower::inputNormOf(body, chain, reader)) out.push_back({gn, gr->second});
  }
  return out;
}

namespace {

/// Moves the group of each candidate (absorbed group, convolution group; the absorbed one first) onto the
/// convolution's loads with `absorb`, where the instruction scheduler models the merged group no slower than the
/// two apart. The convolution's tiling was chosen without the vector work on its loads, so its first few tiling
/// options are priced merged too and the cheapest is taken (one that loads its input fewer times, with more output
/// channels per pass, often suits it better). `vectors` per-channel vectors of the input's channels are staged
/// per pass in the output buffer, within `limit` words.
void absorbOntoLoads(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg,
                     const std::vector<std::pair<size_t, size_t>>& candidates,
                     NpuSchedule (*absorb)(const NpuSchedule&, size_t, size_t), int64_t vectors, uint64_t limit) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  struct Choice {
    std::string first;  ///< the absorbed group's first node
    NodeTiling conv;    ///< the convolution's tiling to take
  };
  std::vector<Choice> chosen;
  for (const auto& [ga, gc] : candidates) {
    TESSEL_ASSERT(ga < gc, "npu schedule: an absorbed group after its reader's");
    const NodeTiling& current = schedule.groups[gc].tiling[0];
    const Node& conv = *byName.at(current.node);
    if (isOp(conv, "Conv")) {
      const ConvGeometry geo = packGroups(convGeometry(conv), current.groupPack);
      if (static_cast<uint64_t>(vectors * (geo.C / geo.group)) > limit) continue;
    } else if (static_cast<uint64_t>(vectors * conv.input(0)->type.staticShape()[1]) >
               cfg.bufferWords(static_cast<size_t>(Buffer::Weight)) / 2) {
      continue;  // a pool stages its vectors for all channels in the weight buffer
    }
    uint64_t bestCycles = lower::modelledCost(body, cfg, schedule, {ga, gc}).cycles;
    std::optional<Choice> best;
    std::vector<NodeTiling> options = tilingOptions(conv, current, body, cfg);
    options.resize(std::min<size_t>(options.size(), 6));
    for (const NodeTiling& option : options) {
      NpuSchedule trial = schedule;
      trial.groups[gc].tiling[0] = option;
      // The absorbed group precedes the convolution's (groups are ordered by their nodes): the merged one is gc - 1.
      const std::optional<lower::ModelledCost> merged = costIfItFits(body, cfg, absorb(trial, ga, gc), {gc - 1});
      if (merged && merged->cycles <= bestCycles) best = Choice{schedule.groups[ga].nodes[0], option}, bestCycles = merged->cycles;
    }
    if (best) chosen.push_back(*best);
  }
  for (const Choice& c : chosen) {
    size_t ga = 0;
    while (schedule.groups[ga].nodes[0] != c.first) ++ga;
    const size_t gc = groupOfTiling(schedule, c.conv.node);
    schedule.groups[gc].tiling[0] = c.conv;
    schedule = absorb(schedule, ga, gc);
  }
}

}  // namespace

void chooseInputNorms(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg) {
  absorbOntoLoads(schedule, body, cfg, inputNormCandidates(schedule, body), withInputNorm, 2,
                  cfg.bufferWords(static_cast<size_t>(Buffer::Output)) / 2);
}

void chooseInputScaling(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg) {
  absorbOntoLoads(schedule, body, cfg, inputScaleCandidates(schedule, body), withInputScale, 1,
                  cfg.bufferWords(static_cast<size_t>(Buffer::Output)) / 4);
}

NodeTiling residualConvTiling(const NodeTiling& conv, const Node& residual) {
  const ConvGeometry geo = convGeometry(residual);
  NodeTiling t;
  t.node = residual.name(), t.op = residual.opType(), t.variant = "matrix";
  t.rows = conv.rows, t.cols = conv.cols, t.channels = conv.channels, t.coutPerPass = conv.coutPerPass;
  t.inputResident = conv.inputResident, t.slots = conv.slots;
  t.inChannels = conv.residualInChannels > 0 ? std::min(conv.residualInChannels, geo.C) : geo.C;
  t.weightsResident = conv.residualWeightsResident;
  t.phased = geo.sH > 1 || geo.sW > 1;
  return t;
}

std::vector<std::pair<size_t, size_t>> residualConvCandidates(const NpuSchedule& s, const Graph& body) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  // Layer-by-layer groups of a convolution starting its accumulator with a residual (and nothing else absorbed), by
  // the residual's producer.
  std::map<std::string, size_t> readerOf;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const GroupSchedule& grp = s.groups[g];
    if (grp.tiling.size() != 1 || grp.rowTiles != 1 || grp.channelChain) continue;
    const NodeTiling& t = grp.tiling[0];
    if (!t.onMatrixUnit() || !t.residualInAcc || !t.residualConv.empty() || !t.maxPool.empty() || !t.inputScale.empty() ||
        !t.inputNorm.empty() || t.groupPack != 1 || t.epilogue.empty() || grp.nodes[0] != t.node)
      continue;
    const Node& add = *byName.at(t.epilogue.front());
    const Node& conv = *byName.at(t.node);
    for (int i = 0; i < 2 && add.numInputs() == 2; ++i)
      if (add.input(i) == conv.output(0) && add.input(1 - i) && add.input(1 - i)->producer())
        readerOf[add.input(1 - i)->producer()->name()] = g;
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t gr = 0; gr < s.groups.size(); ++gr) {
    const GroupSchedule& grp = s.groups[gr];
    if (grp.tiling.size() != 1 || grp.rowTiles != 1 || grp.channelChain || grp.nodes.size() != 1) continue;
    const NodeTiling& t = grp.tiling[0];
    if (t.node != grp.nodes[0] || !t.onMatrixUnit() || !t.epilogue.empty() || t.residualInAcc || !t.globalPool.empty() ||
        !t.maxPool.empty() || !t.inputScale.empty() || !t.inputNorm.empty() || t.groupPack != 1)
      continue;
    auto gc = readerOf.find(t.node);
    if (gc == readerOf.end() || gc->second <= gr) continue;
    if (lower::residualConvInto(body, *byName.at(t.node), *byName.at(s.groups[gc->second].tiling[0].node)))
      out.push_back({gr, gc->second});
  }
  return out;
}

namespace {

/// Input- and weight-buffer words a convolution tiled by `t` (the convolution computed into, or the residual one)
/// holds per tile: its largest input region (with passes inside the tile, its whole window) and its resident weights
/// (every pass's with passes inside the tile, else one pass's); streamed weights count half the weight buffer.
std::pair<int64_t, int64_t> residentWords(const Node& n, const NodeTiling& t, const hw::NpuConfig& cfg) {
  const ConvGeometry geo = convGeometry(n);
  const int64_t th = std::min(t.rows, geo.OH), tw = std::min(t.cols, geo.OW), Cg = geo.C / geo.group, Mg = geo.M / geo.group;
  const int64_t cb = t.variant == "matrix" ? std::min(t.inChannels > 0 ? t.inChannels : Cg, Cg) : Cg;
  const int64_t input = t.inputResident ? tileWindowWordsPerChannel(geo, t, th, tw) * Cg
                                        : tileWindowWordsPerChannel(geo, t, th, tw, true) * cb;
  const int64_t pass = std::min(t.coutPerPass > 0 ? t.coutPerPass : t.channels, Mg);
  const int64_t weights = t.weightsResident ? Cg * geo.KH * geo.KW * (t.inputResident ? Mg : pass)
                                            : static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(Buffer::Weight)) / 2);
  return {input, weights};
}

}  // namespace

std::vector<NodeTiling> residualConvTilings(const NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg, size_t gr, size_t gc) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  const NodeTiling& current = s.groups[gc].tiling[0];
  const NodeTiling& own = s.groups[gr].tiling[0];
  const Node& conv = *byName.at(current.node);
  const Node& residual = *byName.at(own.node);
  const int64_t C = convGeometry(residual).C;
  // Input blocks of all its channels, of the width its own tiling chose, and of DIM channels.
  const int64_t dim = cfg.dim;
  std::vector<int64_t> widths{C};
  for (int64_t w : {own.inChannels > 0 ? std::min(own.inChannels, C) : C, std::min(dim, C)})
    if (std::find(widths.begin(), widths.end(), w) == widths.end()) widths.push_back(w);
  // The convolution's tiling as chosen, then its next few options: one with fewer rows or narrower input blocks may
  // leave room for the residual convolution's window (ResNet-18's layer2 on edge: the whole map's window of the
  // 3x3 convolution and that of the 1x1 overflow the input buffer together).
  std::vector<NodeTiling> options = tilingOptions(conv, current, body, cfg);
  options.resize(std::min<size_t>(options.size(), 4));
  std::vector<NodeTiling> out;
  for (const NodeTiling& option : options)
    for (int64_t width : widths)
      for (bool resident : {true, false}) {
        NodeTiling t = option;
        t.residualInAcc = true;
        t.residualConv = residual.name(), t.residualInChannels = width, t.residualWeightsResident = resident;
        if (residualConvOverflow(conv, residual, t, cfg).empty()) out.push_back(std::move(t));
      }
  return out;
}

std::string residualConvOverflow(const Node& conv, const Node& residual, const NodeTiling& t, const hw::NpuConfig& cfg) {
  const auto cap = [&](Buffer b) { return static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(b))); };
  const auto [convInput, convWeights] = residentWords(conv, t, cfg);
  const auto [input, weights] = residentWords(residual, residualConvTiling(t, residual), cfg);
  // With passes inside the tile both windows stay; else one region of each is enough to go on.
  const int64_t inputs = t.inputResident ? convInput + input : std::max(convInput, input);
  if (inputs > cap(Buffer::Input))
    return fmt::format("its input regions and the residual convolution's need {} input words, the buffer holds {}", inputs,
                       cap(Buffer::Input));
  if (convWeights + weights > cap(Buffer::Weight))
    return fmt::format("its weights and the residual convolution's need {} weight words on chip, the buffer holds {}",
                       convWeights + weights, cap(Buffer::Weight));
  return "";
}

NpuSchedule withResidualConv(const NpuSchedule& s, size_t gr, size_t gc, const NodeTiling& tiling) {
  NpuSchedule out = s;
  GroupSchedule& conv = out.groups[gc];
  conv.tiling[0] = tiling;
  conv.nodes.insert(conv.nodes.begin(), s.groups[gr].nodes[0]);
  out.groups.erase(out.groups.begin() + static_cast<long>(gr));
  return out;
}

void chooseResidualConvs(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg) {
  std::vector<NodeTiling> chosen;  // the convolutions' tilings, each naming its residual convolution
  for (const auto& [gr, gc] : residualConvCandidates(schedule, body)) {
    // The two groups apart and every merged option, priced with the pricing window, are picked from as a convolution's
    // tilings are (pickMatrixTiling): the cheapest in cycles, or within 2 % of it the one that moves the fewest DRAM
    // bytes. A merged group saves the shortcut's store and load, but its options may load the other input or weights
    // more often (ResNet-50's layer3 on edge: 1 % fewer cycles for 7.4 MB more). A merged pick must then also win
    // with 8 tiles in flight (no slower than the groups apart, or within 2 % and fewer bytes), as the final program
    // often runs. The merged group is gc - 1 (gr comes first).
    const lower::ModelledCost apart = lower::modelledCost(body, cfg, schedule, {gr, gc});
    std::vector<std::pair<uint64_t, uint64_t>> costs{{apart.cycles, apart.dramBytes}};  // option 0: apart
    std::vector<NodeTiling> merges;
    for (const NodeTiling& t : residualConvTilings(schedule, body, cfg, gr, gc))
      if (const auto merged = costIfItFits(body, cfg, withResidualConv(schedule, gr, gc, t), {gc - 1}))
        costs.push_back({merged->cycles, merged->dramBytes}), merges.push_back(t);
    const size_t pick = pickCheapOrLight(costs);
    if (pick == 0) continue;
    const NodeTiling& take = merges[pick - 1];
    NpuSchedule wide = schedule;
    wide.window = 8;
    const lower::ModelledCost apart8 = lower::modelledCost(body, cfg, wide, {gr, gc});
    const auto merged8 = costIfItFits(body, cfg, withResidualConv(wide, gr, gc, take), {gc - 1});
    if (merged8 && (merged8->cycles <= apart8.cycles ||
                    (merged8->cycles * 50 <= apart8.cycles * 51 && merged8->dramBytes < apart8.dramBytes)))
      chosen.push_back(take);
  }
  for (const NodeTiling& t : chosen)
    schedule = withResidualConv(schedule, groupOfTiling(schedule, t.residualConv), groupOfTiling(schedule, t.node), t);
}

}  // namespace tessel::npu
