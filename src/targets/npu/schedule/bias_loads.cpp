// Biases broadcast by the load unit (NodeTiling::biasLoad) for the convolutions of layer-by-layer groups: each
// accumulator tile starts as the bias row, loaded with DRAM strides 0, and the gemms accumulate onto it, instead of
// a vector pass adding the bias after them. It trades vector-unit cycles (one pass over the tile) for load-unit
// cycles (the tile's words at the load bandwidth, one burst per pixel), so it is taken per group where the
// instruction scheduler, pricing the group in context, says the trade pays.
#include <algorithm>
#include <map>
#include <optional>

#include "../lower_context.h"
#include "parallel.h"
#include "tessel/ops/registry.h"
#include "tessel/targets/npu/schedule.h"

namespace tessel::npu {

namespace {

/// The windows a group is priced at (each side takes the better), as channel chains are.
constexpr uint32_t kPricingWindows[] = {2, 8};

}  // namespace

std::string biasLoadRefusal(const GroupSchedule& g, const NodeTiling& t, const Graph& body) {
  if (!t.onMatrixUnit()) return "a matrix-unit tiling";
  if (t.residualInAcc) return "no residual loaded into the accumulator (residual_in_acc)";
  if (!t.residualConv.empty()) return "no shortcut convolution computed into the accumulator (residual_conv)";
  if (!t.maxPool.empty()) return "no max pool of the accumulator tiles (the bias is added to the pooled tile)";
  if (!g.channelChain && (g.tiling.size() != 1 || g.rowTiles != 1)) return "a layer-by-layer group or a channel chain";
  const Node* n = nullptr;
  for (const auto& m : body.nodes())
    if (m->name() == t.node) n = m.get();
  if (!n || (!isOp(*n, "Conv") && !isOp(*n, "Gemm")) || !n->hasInput(2)) return "a Conv or Gemm with a bias";
  return "";
}

std::vector<size_t> biasLoadCandidates(const NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  std::vector<size_t> out;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const GroupSchedule& grp = s.groups[g];
    if (grp.channelChain || grp.tiling.size() != 1 || grp.tiling[0].biasLoad) continue;
    const NodeTiling& t = grp.tiling[0];
    if (!biasLoadRefusal(grp, t, body).empty()) continue;
    // Only where the vector unit's passes over an output vector (the bias, each epilogue step; a complex step as
    // four) exceed half the matrix unit's gemm rows per output vector (one per reduction slice of DIM): elsewhere the
    // matrix unit bounds the group and the trade does not pay (ResNet's convolutions: 4 to 36+ slices, one ReLU).
    const Node& n = *byName.at(t.node);
    const Shape w = n.input(1)->type.isStatic() ? n.input(1)->type.staticShape() : Shape{};
    int64_t reduction = 1;
    for (size_t d = 1; d < w.size(); ++d) reduction *= w[d];  // Conv: C/group x KH x KW; Gemm: one of K, N
    if (isOp(n, "Gemm")) reduction = n.input(0)->type.isStatic() ? n.input(0)->type.staticShape().back() : reduction;
    int64_t vectorPasses = 1;
    for (const std::string& e : t.epilogue) {
      const std::optional<VecOp> op = lower::vectorOpOf(*byName.at(e));
      vectorPasses += op && isComplexVecOp(*op) ? 4 : 1;
    }
    if (2 * vectorPasses * static_cast<int64_t>(cfg.dim) > reduction) out.push_back(g);
  }
  return out;
}

void chooseBiasLoads(NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg) {
  const std::vector<size_t> candidates = biasLoadCandidates(s, body, cfg);
  auto price = [&](const NpuSchedule& sched, const std::vector<size_t>& groups) -> std::optional<uint64_t> {
    std::optional<uint64_t> best;
    for (uint32_t w : kPricingWindows) {
      NpuSchedule at = sched;
      at.window = w;
      const auto c = lower::modelledCostIfItFits(body, cfg, at, groups);
      if (!c) return std::nullopt;
      if (!best || c->cycles < *best) best = c->cycles;
    }
    return best;
  };
  // Each candidate priced against the same schedule (the group before and the one after: fill and drain count), so
  // the choices are independent: priced in parallel, they do not depend on the order.
  std::vector<char> take(candidates.size(), 0);
  auto decide = [&](size_t k) {
    const size_t g = candidates[k];
    std::vector<size_t> context{g};
    if (g > 0) context.insert(context.begin(), g - 1);
    if (g + 1 < s.groups.size()) context.push_back(g + 1);
    const auto apart = price(s, context);
    NpuSchedule trial = s;
    trial.groups[g].tiling[0].biasLoad = true;
    const auto loaded = price(trial, context);
    take[k] = apart && loaded && *loaded < *apart;
  };
  forEachInParallel(candidates.size(), decide);
  if (std::none_of(take.begin(), take.end(), [](char t) { return t != 0; })) return;
  // Taken together, loads priced one by one can crowd the load unit of neighbouring groups: the whole program with
  // them must beat it without them, else none is taken.
  NpuSchedule trial = s;
  for (size_t k = 0; k < candidates.size(); ++k)
    if (take[k]) trial.groups[candidates[k]].tiling[0].biasLoad = true;
  std::vector<size_t> all(s.groups.size());
  for (size_t g = 0; g < all.size(); ++g) all[g] = g;
  const auto before = price(s, all), after = price(trial, all);
  if (before && after && *after < *before) s = std::move(trial);
}

}  // namespace tessel::npu
