// Squeeze-and-excitation's broadcast Mul on the load side (NodeTiling::inputScale): the Mul of a feature map by a
// per-channel vector cannot be an epilogue of the map's producer (the vector needs the whole map first: global
// pool, 1x1 convs, sigmoid), but the convolution reading the product can multiply each input block it loads by
// the block's channels of the vector, one vector instruction on data already in SRAM. The Mul's own pass (load
// the map, multiply, store the product, which the convolution loads again) disappears. Whether that pays is
// priced by the instruction scheduler: a convolution that loads its input once per output-channel pass
// multiplies it once per pass.
#include <algorithm>
#include <map>

#include "../geometry.h"
#include "../lower_context.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"

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
    if (t.variant == "matrix" || t.variant == "packed" || t.variant == "stacked") out.push_back({gm, gc->second});
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

/// `s` with the Mul of group gm applied by the convolution of group gc as it loads its input.
NpuSchedule withInputScale(const NpuSchedule& s, size_t gm, size_t gc) {
  NpuSchedule out = s;
  GroupSchedule& conv = out.groups[gc];
  conv.tiling[0].inputScale = s.groups[gm].nodes[0];
  conv.nodes.insert(conv.nodes.begin(), s.groups[gm].nodes[0]);
  out.groups.erase(out.groups.begin() + static_cast<long>(gm));
  return out;
}

}  // namespace

void chooseInputScaling(NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg) {
  const uint64_t quarter = cfg.bufferWords(static_cast<size_t>(Buffer::Output)) / 4;
  std::vector<std::pair<std::string, std::string>> chosen;  // (Mul, convolution)
  for (const auto& [gm, gc] : inputScaleCandidates(schedule, body)) {
    TESSEL_ASSERT(gm < gc, "npu schedule: a Mul's group after its reader's");
    const Node* conv = nullptr;
    for (const auto& n : body.nodes())
      if (n->name() == schedule.groups[gc].nodes[0]) conv = n.get();
    const ConvGeometry geo = convGeometry(*conv);
    if (static_cast<uint64_t>(geo.C / geo.group) > quarter) continue;  // the vector is staged per pass
    const lower::ModelledCost apart = lower::modelledCost(body, cfg, schedule, {gm, gc});
    // The Mul's group precedes the convolution's (groups are ordered by their nodes), so the merged group is gc - 1.
    const lower::ModelledCost scaled = lower::modelledCost(body, cfg, withInputScale(schedule, gm, gc), {gc - 1});
    if (scaled.cycles <= apart.cycles) chosen.push_back({schedule.groups[gm].nodes[0], schedule.groups[gc].nodes[0]});
  }
  for (const auto& [mul, conv] : chosen) {
    auto groupOf = [&](const std::string& node) {
      for (size_t g = 0; g < schedule.groups.size(); ++g)
        if (schedule.groups[g].tiling.size() == 1 && schedule.groups[g].tiling[0].node == node) return g;
      TESSEL_ASSERT(false, "npu schedule: input scaling lost the group of " + node);
      return size_t{0};
    };
    schedule = withInputScale(schedule, groupOf(mul), groupOf(conv));
  }
}

}  // namespace tessel::npu
