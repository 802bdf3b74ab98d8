// Tile fusion choices (S0.2, S0.5): which groups of a schedule can run as one fused group (connected by values
// used only inside, around a preset operator), how many row tiles fit the buffers, and whether fusing pays:
// each option is priced by scheduling it (the modelled cycles of the instruction scheduler) against the same
// nodes layer by layer; a group that cannot gain stays layer by layer.
#include <algorithm>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "../geometry.h"
#include "../lower_context.h"
#include "tiling_cost.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"

namespace tessel::npu {
namespace {

/// Spatial geometry of a fusable node: input H, W, C; output OH, OW, M; kernel rows, stride, padding.
struct Spatial {
  int64_t H = 0, W = 0, C = 0, OH = 0, OW = 0, M = 0, KH = 1, KW = 1, sH = 1, dH = 1, pT = 0;
  bool pool = false, depthwise = false;
};

std::optional<Spatial> spatialOf(const Node& n) {
  const auto family = lower::opFamily(n);
  if (family == lower::OpFamily::Pool) {
    const PoolGeometry q = poolGeometry(n);
    if (q.N != 1) return std::nullopt;
    Spatial s{q.H, q.W, q.C, q.OH, q.OW, q.C, q.KH, q.KW, q.sH, 1, q.pT, true, false};
    return s;
  }
  if (family == lower::OpFamily::Matrix && n.opType() == "Conv") {
    const ConvGeometry g = convGeometry(n);
    if (g.N != 1 || (g.group != 1 && !g.depthwise())) return std::nullopt;
    Spatial s{g.H, g.W, g.C, g.OH, g.OW, g.M, g.KH, g.KW, g.sH, g.dH, g.pT, false, g.depthwise()};
    return s;
  }
  return std::nullopt;
}

/// Words of a matrix convolution's weights (fusable ones are ungrouped).
uint64_t weightWords(const Spatial& sp) { return static_cast<uint64_t>(sp.C * sp.M * sp.KH * sp.KW); }

struct Candidate {
  std::vector<size_t> members;  ///< group indices, in schedule order
};

/// The result value of a single-node group (its anchor's last epilogue node's output).
const Value* resultOf(const GroupSchedule& g, const std::map<std::string, const Node*>& byName) {
  return byName.at(g.nodes.back())->output(0);
}

}  // namespace

std::vector<std::vector<size_t>> fusionCandidates(const NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  const auto& outs = body.outputs();
  std::map<const Node*, size_t> groupOfAnchor;
  // (A group that pools its result on the way is not fused: its last node is the pool; nor one that normalises its
  // input on the load side: its first nodes are the normalisation.)
  for (size_t g = 0; g < s.groups.size(); ++g)
    if (s.groups[g].tiling.size() == 1 && s.groups[g].rowTiles == 1 && s.groups[g].tiling[0].globalPool.empty() &&
        s.groups[g].tiling[0].inputNorm.empty())
      groupOfAnchor[byName.at(s.groups[g].tiling[0].node)] = g;
  // Union of groups joined by a value every use of which is the first input of a fusable anchor.
  std::vector<size_t> parent(s.groups.size());
  for (size_t g = 0; g < parent.size(); ++g) parent[g] = g;
  std::function<size_t(size_t)> find = [&](size_t g) { return parent[g] == g ? g : parent[g] = find(parent[g]); };
  std::set<size_t> joined;
  // The groups reading each group's result, when every use of it is the first input of a fusable anchor.
  std::map<size_t, std::vector<size_t>> readers;
  for (const auto& [anchor, g] : groupOfAnchor) {
    if (!spatialOf(*anchor)) continue;
    const Value* r = resultOf(s.groups[g], byName);
    if (r->uses().empty() || std::find(outs.begin(), outs.end(), r) != outs.end()) continue;
    std::vector<size_t> users;
    for (const Use& u : r->uses()) {
      auto it = groupOfAnchor.find(u.node);
      if (u.index != 0 || it == groupOfAnchor.end() || !spatialOf(*u.node)) {
        users.clear();
        break;
      }
      users.push_back(it->second);
    }
    if (!users.empty()) readers[g] = users;
  }
  // A chain link joins a group to its only reader; a fan-out (SqueezeNet's squeeze feeding two expands) joins
  // only readers that end the chain, so groups stay chains or shallow trees.
  for (const auto& [g, users] : readers) {
    if (users.size() > 1)
      if (std::any_of(users.begin(), users.end(), [&](size_t h) { return readers.count(h) != 0; })) continue;
    for (size_t h : users) {
      parent[find(h)] = find(g);
      joined.insert(g), joined.insert(h);
    }
  }
  std::map<size_t, std::vector<size_t>> components;
  for (size_t g : joined) components[find(g)].push_back(g);
  std::map<const Node*, size_t> groupOfNode;
  for (size_t g = 0; g < s.groups.size(); ++g)
    for (const std::string& name : s.groups[g].nodes) groupOfNode[byName.at(name)] = g;
  // The fused group takes its last member's place, so a group outside it that reads a member's values must
  // come after that place (RegNet: a fan-out of two 1x1 convs where one's result feeds a grouped conv between).
  auto readBeforeLast = [&](const std::vector<size_t>& members) {
    const std::set<size_t> inside(members.begin(), members.end());
    for (size_t g : members)
      for (const std::string& name : s.groups[g].nodes)
        for (const Value* v : byName.at(name)->outputs())
          if (v)
            for (const Use& u : v->uses()) {
              const size_t reader = groupOfNode.at(u.node);
              if (!inside.count(reader) && reader < members.back()) return true;
            }
    return false;
  };
  std::vector<std::vector<size_t>> out;
  for (auto& [root, members] : components) {
    std::sort(members.begin(), members.end());
    if (readBeforeLast(members)) continue;
    bool preset = false;
    for (size_t g : members)
      for (const std::string& op : cfg.presetOperators) preset |= byName.at(s.groups[g].tiling[0].node)->opType() == op;
    if (preset && members.size() > 1) out.push_back(members);
  }
  return out;
}

namespace {

/// The fused group of `members` with `rowTiles` row tiles. Every stage computes chunks of rows (full width, all
/// output channels) whose accumulator tile fits half the accumulator; stages reading on chip are unphased;
/// weights stay resident while they fit the weight buffer, the rest are streamed.
GroupSchedule fuse(const NpuSchedule& s, const std::vector<size_t>& members, const std::map<std::string, const Node*>& byName,
                   const hw::NpuConfig& cfg, int64_t rowTiles, bool intermediatesOnChip) {
  GroupSchedule f;
  const uint64_t inpHalf = cfg.bufferWords(static_cast<size_t>(Buffer::Input)) / 2;
  f.rowTiles = rowTiles;
  for (int64_t t = 0; t < rowTiles; ++t) f.tileOrder.push_back(t);
  const uint64_t accHalf = cfg.bufferWords(static_cast<size_t>(Buffer::Accumulator)) / 2;
  // Weights stay resident while they fit; when some stage's do not, that stage streams them in chunks of up to
  // half the weight buffer, so the resident ones get the other half only (else the stream waits forever).
  const uint64_t wgtCap = cfg.bufferWords(static_cast<size_t>(Buffer::Weight));
  uint64_t allWeights = 0;
  for (size_t g : members) {
    const Spatial sp = *spatialOf(*byName.at(s.groups[g].tiling[0].node));
    if (!sp.pool && !sp.depthwise) allWeights += weightWords(sp);
  }
  uint64_t wgtLeft = allWeights <= wgtCap ? wgtCap : wgtCap - wgtCap / 2;
  std::set<const Value*> produced;
  for (size_t g : members) {
    const GroupSchedule& src = s.groups[g];
    f.nodes.insert(f.nodes.end(), src.nodes.begin(), src.nodes.end());
    NodeTiling t = src.tiling[0];
    t.inputResident = false;  // a fused stage's tiles carry every output channel
    const Node& n = *byName.at(t.node);
    const Spatial sp = *spatialOf(n);
    const bool onChip = intermediatesOnChip && produced.count(n.input(0)) != 0;
    if (onChip) f.onChip.push_back(n.input(0)->name());
    int64_t channels = sp.pool || sp.depthwise ? std::min<int64_t>(sp.C, 4 * cfg.dim) : sp.M;
    // A depthwise block's per-tap weights fit half the weight buffer (a large kernel on a small one: narrower blocks).
    while (sp.depthwise && channels > 1 &&
           static_cast<uint64_t>(depthwiseWeightWords(sp.KH * sp.KW, channels, t.matrixEvery > 0, cfg.dim)) >
               cfg.bufferWords(static_cast<size_t>(Buffer::Weight)) / 2)
      channels = (channels + 1) / 2;
    t.cols = std::min<int64_t>(sp.OW, std::max<int64_t>(1, static_cast<int64_t>(accHalf) / channels));
    t.rows = std::max<int64_t>(1, std::min<int64_t>(sp.OH, static_cast<int64_t>(accHalf) / (t.cols * channels)));
    if (!onChip) {
      // A chunk loads its input window from DRAM: it (one input block of it) must fit half the input buffer. Stacked:
      // one region row per output row, holding the KH input rows it reads side by side.
      const int64_t cb = sp.pool || sp.depthwise ? channels : std::min<int64_t>(sp.C, t.inChannels > 0 ? t.inChannels : cfg.dim);
      const bool stacked = t.variant == "stacked";
      auto window = [&](int64_t rows, int64_t cols) {
        if (stacked) return static_cast<uint64_t>(rows * ((cols - 1) * sp.sH + sp.KW) * sp.KH * cb);
        return static_cast<uint64_t>(((rows - 1) * sp.sH + (sp.KH - 1) * sp.dH + 1) * ((cols - 1) * sp.sH + sp.KW) * cb);
      };
      while (t.cols > 1 && window(1, t.cols) > inpHalf) t.cols = (t.cols + 1) / 2;
      while (t.rows > 1 && window(t.rows, t.cols) > inpHalf) --t.rows;
    }
    // Fused pools read their windows in `inp`. A conv loading from DRAM keeps its reduction layout (a stacked stem's
    // region holds KH input rows per output row, as sized above); one reading on chip becomes per-tap "matrix".
    if (t.variant == "pool-wide") t.variant = "pool";
    if (sp.pool || sp.depthwise) {
      t.channels = channels;
    } else {
      t.coutPerPass = sp.M;
      t.channels = std::min<int64_t>(cfg.dim, sp.M);
      if (onChip) t.variant = "matrix", t.phased = false, t.inChannels = sp.C;
      if (!onChip && t.variant == "matrix" && t.inChannels == 0) t.inChannels = std::min<int64_t>(sp.C, cfg.dim);
      const uint64_t weights = weightWords(sp);
      t.weightsResident = weights <= wgtLeft;
      if (t.weightsResident) wgtLeft -= weights;
    }
    f.tiling.push_back(t);
    produced.insert(resultOf(src, byName));
  }
  return f;
}

/// Words of `inp` one row tile of the fused group holds for the windows of stages reading on chip, with
/// `lastRows` output rows of the group per tile (the windows of two tiles can be live at once).
uint64_t windowWords(const NpuSchedule& s, const std::vector<size_t>& members, const std::map<std::string, const Node*>& byName,
                     int64_t lastRows) {
  std::set<const Value*> produced;
  const Spatial last = *spatialOf(*byName.at(s.groups[members.back()].tiling[0].node));
  uint64_t words = 0;
  for (size_t g : members) {
    const Node& n = *byName.at(s.groups[g].tiling[0].node);
    const Spatial sp = *spatialOf(n);
    if (produced.count(n.input(0))) {
      const int64_t rows = std::max<int64_t>(1, ceilDiv(lastRows * sp.OH, last.OH));
      const int64_t inRows = (rows - 1) * sp.sH + (sp.KH - 1) * sp.dH + 1;
      words += static_cast<uint64_t>(inRows * (sp.W + sp.KW) * sp.C);
    }
    produced.insert(resultOf(s.groups[g], byName));
  }
  return 2 * words;
}

/// Row tile counts (distinct, even splits) of a fused group whose on-chip windows fit three quarters of `inp`: the
/// fewest that fit and the next ones, at most `count`; none when even one output row per tile does not fit.
std::vector<int64_t> onChipRowTiles(const NpuSchedule& s, const std::vector<size_t>& members,
                                    const std::map<std::string, const Node*>& byName, uint64_t inpWords, size_t count) {
  const Spatial last = *spatialOf(*byName.at(s.groups[members.back()].tiling[0].node));
  int64_t minTiles = 1;
  while (minTiles < last.OH && windowWords(s, members, byName, ceilDiv(last.OH, minTiles)) > inpWords * 3 / 4) ++minTiles;
  std::vector<int64_t> out;
  if (windowWords(s, members, byName, ceilDiv(last.OH, minTiles)) > inpWords * 3 / 4) return out;
  for (int64_t n = minTiles; n <= last.OH && out.size() < count; ++n) {
    const int64_t tiles = ceilDiv(last.OH, ceilDiv(last.OH, n));
    if (std::find(out.begin(), out.end(), tiles) == out.end()) out.push_back(tiles);
  }
  return out;
}

}  // namespace

bool fusionPaysOff(const PricedOption& layered, const PricedOption& fused, uint64_t traffic, const hw::NpuConfig& cfg) {
  if (fused.cycles <= layered.cycles) return true;
  const uint64_t saved = layered.dramBytes > fused.dramBytes ? layered.dramBytes - fused.dramBytes : 0;
  const uint64_t extra = fused.cycles - layered.cycles;
  // With only the fifth, ResNet-18's layer1 blocks on `edge` stayed apart: 1.55 MB saved of the 10.1 MB around them
  // for 1.9 % more cycles (29.7k, in which the load unit moves 0.95 MB). Savings under a tenth are within the
  // estimate's noise: ShuffleNet v2's stage2.0 branch on `default` (80 KB for 790 cycles, 2.4 %) priced +0.5 % in
  // context and made the whole program 1.5 % slower.
  return fused.cycles * 100 <= layered.cycles * 103 &&
         (saved * 5 >= traffic || (saved * 10 >= traffic && saved >= extra * cfg.loadBytesPerCycle));
}

void chooseFusion(NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  const uint64_t inpWords = cfg.bufferWords(static_cast<size_t>(Buffer::Input));
  std::vector<std::pair<std::vector<size_t>, GroupSchedule>> chosen;
  for (const std::vector<size_t>& members : fusionCandidates(s, body, cfg)) {
    const Spatial last = *spatialOf(*byName.at(s.groups[members.back()].tiling[0].node));
    // Intermediates on chip (row tiles from the fewest whose windows fit, to a few more), or through DRAM with
    // the tiles of the nodes interleaved (the stages still pipeline across units); each option priced against
    // the same groups layer by layer.
    // Priced in context: with the groups right before and after (fill and drain at the boundaries count).
    std::vector<size_t> context = members;
    if (members.front() > 0) context.insert(context.begin(), members.front() - 1);
    if (members.back() + 1 < s.groups.size()) context.push_back(members.back() + 1);
    const lower::ModelledCost layered = lower::modelledCost(body, cfg, s, context);
    lower::ModelledCost best = layered;
    std::optional<GroupSchedule> bestGroup;
    // An option is taken when it is not slower, or when it removes enough activation traffic (DRAM bytes beyond
    // the weights) for at most 3 % more cycles (fusionPaysOff): what fusion is for, intermediates that never leave
    // the chip.
    uint64_t compulsory = 0;
    for (size_t g : context)
      for (const std::string& name : s.groups[g].nodes)
        for (const Value* v : byName.at(name)->inputs())
          if (v && v->isConstant()) compulsory += 4 * static_cast<uint64_t>(v->constant().numel());
    const uint64_t layeredTraffic = layered.dramBytes > compulsory ? layered.dramBytes - compulsory : 0;
    auto better = [&](const lower::ModelledCost& c) {
      return fusionPaysOff({layered.cycles, layered.dramBytes}, {c.cycles, c.dramBytes}, layeredTraffic, cfg) &&
             (c.cycles < best.cycles || !bestGroup);
    };
    // The cost of the schedule `base` with the fused group `f` in place of the members (it takes the last member's
    // position, the others are dropped), priced with the groups around it; nothing when the buffers cannot hold it.
    auto priceFused = [&](const NpuSchedule& base, const GroupSchedule& f) -> std::optional<lower::ModelledCost> {
      NpuSchedule trial = base;
      trial.groups[members.back()] = f;
      for (size_t k = members.size() - 1; k-- > 0;) trial.groups.erase(trial.groups.begin() + static_cast<long>(members[k]));
      const size_t at = members.back() - (members.size() - 1);
      std::vector<size_t> around{at};
      if (members.front() > 0) around.insert(around.begin(), members.front() - 1);
      if (at + 1 < trial.groups.size()) around.push_back(at + 1);
      try {
        return lower::modelledCost(body, cfg, trial, around);
      } catch (const InternalError&) {
        return std::nullopt;  // the buffers cannot hold this option
      }
    };
    auto tryOption = [&](int64_t tiles, bool onChip) {
      const GroupSchedule f = fuse(s, members, byName, cfg, tiles, onChip);
      const std::optional<lower::ModelledCost> cost = priceFused(s, f);
      if (cost && better(*cost)) best = *cost, bestGroup = f;
    };
    // The fewest row tiles that fit, and the next count (fewer tiles: less halo and weight traffic).
    const std::vector<int64_t> onChipTiles = onChipRowTiles(s, members, byName, inpWords, 2);
    for (int64_t tiles : onChipTiles) tryOption(tiles, true);
    if (onChipTiles.empty() && last.OH > 8) {
      // Intermediates through DRAM, 8 output rows per tile: no traffic saved, so it must be faster, and both are
      // priced with the widest window the program may get (with a narrow one, layer by layer cannot overlap a
      // node's tiles with the next node's, and this option looks better than it turns out: MobileNetV2).
      NpuSchedule wide = s;
      wide.window = *std::max_element(std::begin(kWindowChoices), std::end(kWindowChoices));
      const GroupSchedule f = fuse(s, members, byName, cfg, ceilDiv(last.OH, 8), false);
      const std::optional<lower::ModelledCost> cost = priceFused(wide, f);
      if (cost && cost->cycles < lower::modelledCost(body, cfg, wide, context).cycles) bestGroup = f;
    }
    if (bestGroup) chosen.push_back({members, *bestGroup});
  }
  replaceByFusedGroups(s, chosen);
}

void replaceByFusedGroups(NpuSchedule& s, const std::vector<std::pair<std::vector<size_t>, GroupSchedule>>& fused) {
  // A fused group takes the place of its last member; the other members go.
  std::map<size_t, const GroupSchedule*> replace;
  std::set<size_t> drop;
  for (const auto& [members, f] : fused) {
    replace[members.back()] = &f;
    drop.insert(members.begin(), members.end() - 1);
  }
  std::vector<GroupSchedule> groups;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    if (drop.count(g)) continue;
    auto it = replace.find(g);
    groups.push_back(it != replace.end() ? *it->second : s.groups[g]);
  }
  s.groups = std::move(groups);
}

std::vector<FusionLayout> fusionLayouts(const NpuSchedule& s, const std::vector<size_t>& members, const Graph& body,
                                        const hw::NpuConfig& cfg) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  const uint64_t inpWords = cfg.bufferWords(static_cast<size_t>(Buffer::Input));
  const Spatial last = *spatialOf(*byName.at(s.groups[members.back()].tiling[0].node));
  std::vector<FusionLayout> out;
  // On chip: from the fewest row tiles whose windows fit the input buffer, the next few counts.
  for (int64_t tiles : onChipRowTiles(s, members, byName, inpWords, 5)) out.push_back({tiles, true});
  // Through DRAM: 4, 8 or 16 output rows per tile.
  for (int64_t rows : {4, 8, 16})
    if (last.OH > rows) out.push_back({ceilDiv(last.OH, rows), false});
  return out;
}

GroupSchedule fuseGroup(const NpuSchedule& s, const std::vector<size_t>& members, const Graph& body, const hw::NpuConfig& cfg,
                        const FusionLayout& layout) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  return fuse(s, members, byName, cfg, layout.rowTiles, layout.onChip);
}

}  // namespace tessel::npu
