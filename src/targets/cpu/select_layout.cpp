// Pass select-layout (cpu target): chooses which 4-D nodes run in the blocked NCHWc8 layout (8 channels per
// vector). Connected regions of layout-capable nodes are blocked only when they contain a convolution, so a
// lone pool or add between NCHW nodes never costs two reorders. Every value a blocked node produces has a
// multiple of 8 channels (no padding lanes). Convolutions the runtime runs faster in NCHW (AVX-512 pixel
// tiles, the 7x7 stem, Winograd on channels that are not whole blocks) stay NCHW. The IR stays NCHW
// semantically; the choice is node->meta["layout"] = "nchwc8", and the cpu code generator puts reorders on
// the region edges. Options: select-layout.mode = "nchw" keeps everything in NCHW, "auto" does not block a
// region whose only convolutions are depthwise ones the NCHW depthwise kernel runs faster on its small-map
// path (see nchwSmallMapDepthwise); select-layout.avx512 = 1 for an AVX-512 target; select-layout.region.<key> =
// nchw | nchwc8 decides one region whatever the mode (layoutRegions lists them: the CPU tuner's layout genes).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <numeric>

#include "kernel_rules.h"
#include "tessel/ops/registry.h"
#include "tessel/passes/pass.h"

namespace tessel::cpu {
namespace {

bool isRank4F32(const Value* v) { return v && v->type.dtype == DType::Float32 && v->type.isStatic() && v->type.rank() == 4; }

/// A 4-D float value whose channel count is a multiple of 8: blocked, it has no padding lanes, so every
/// kernel of the region can treat it as a flat array where it works element by element.
bool whole8(const Value* v) { return isRank4F32(v) && v->type.staticShape()[1] % 8 == 0; }

/// Dense (groups 1) or depthwise 2-D convolutions whose NCHW kernel would not be faster: the NCHWc8
/// kernels are direct convolutions, so a conv the runtime would run with Winograd (3x3 stride 1), with
/// AVX-512 pixel tiles or with the stem kernel (at most 4 input channels, which NCHWc8 pads to 8) stays
/// NCHW (select-layout.avx512 = 1 for an AVX-512 target, as select-kernels).
bool blockableConv(const Node& n, bool avx512) {
  if (!isConvNode(n) || !isRank4F32(n.input(0)) || !whole8(n.output(0)) || !n.input(1)) return false;
  const int64_t group = n.attrInt("group");
  const int64_t channels = n.input(0)->type.staticShape()[1];
  const int64_t outChannels = n.output(0)->type.staticShape()[1];
  auto shape = conv2dShape(n);
  if (!shape) return false;
  const bool depthwise = group == channels && group == outChannels;
  if (group != 1 && !depthwise && !rt::conv2d_nchwc8_direct_applicable(*shape)) return false;
  const rt::Conv2dKernel* nchw = rt::select_conv2d_kernel(*shape, rt::ConvLayout::NCHW, avx512);
  const std::string name = nchw ? nchw->name : "";
  // A few-channel stem joins a region when its NCHWc8 stem kernel applies (3x3: it reads the NCHW input and
  // writes the region's layout, no reorder after it); others (7x7) keep the NCHW stem kernel.
  if (name == "conv2d_nchw_direct_small_cin") return rt::conv2d_stem_nchwc8_applicable(*shape);
  // Winograd has an NCHWc8 twin (whole 8-channel blocks in and out), faster than the NCHW one on AVX2.
  if (name == "conv2d_winograd_f43_avx2") return rt::conv2d_winograd_f43_nchwc8_applicable(*shape);
  // An atrous conv whose taps mostly read padding (DeepLabV3's ASPP on a 33x33 map) keeps the NCHW per-tap GEMMs:
  // the NCHWc8 direct kernel computes every tap.
  if (name == "conv2d_nchw_dilated_taps" && rt::conv2d_mostly_dead_taps(*shape)) return false;
  return name != "conv2d_nchw_pixel_tile";
}

bool isDepthwise(const Node& n) {
  return isConvNode(n) && n.attrInt("group") > 1 && n.attrInt("group") == n.input(0)->type.staticShape()[1];
}

/// A depthwise conv that the AVX2 NCHW kernel (runtime/src/conv_depthwise_nchw.cpp) runs on its small-map
/// path with channels in the vector lanes (dw_lanes_stream): kernel width 3 or 5, stride 1 or 2, undilated,
/// at most 28 output columns, and for 3x3 at most 14 (kStream3x3MaxOutW with 8 lanes; wider 3x3 maps take
/// the 3x3 row path). Since the NCHWc8 tiles' assembly tail (2026-12-04) the NCHW kernel beats the NCHWc8 one
/// on the 5x5 ones only (Zen 2, ReLU: 1152 on 7x7 87 against 98 us; the 3x3s 0.87-0.89x in NCHWc8), so only
/// those do not make mode auto block their region (mode auto blocks on AVX2 targets only, see pipeline.cpp).
bool nchwSmallMapDepthwise(const Node& n) {
  auto s = conv2dShape(n);
  if (!s || s->kernel_w != 5 || !(s->stride_w == 1 || s->stride_w == 2) || s->dilation_h != 1 ||
      s->dilation_w != 1 || s->out_w() > 28)
    return false;
  return true;
}

/// Mul or Add of a 4-D value by one value per channel ([N or 1, C, 1, 1]: squeeze-and-excitation's scale),
/// which the runtime runs on the blocked value (binary_channel_nchwc8); the per-channel operand's blocked
/// layout is its NCHW one.
bool channelScale(const Node& n) {
  if (!n.domain().empty() || !(isOp(n, "Mul") || isOp(n, "Add")) || n.numInputs() != 2 || !n.input(0) ||
      !n.input(1))
    return false;
  const Value* y = n.output(0);
  for (int side = 0; side < 2; ++side) {
    const Value *big = n.input(side), *small = n.input(1 - side);
    if (big->type == y->type && isRank4F32(small) && channelScaleOperand(small->type.staticShape(), y->type.staticShape()))
      return true;
  }
  return false;
}

/// Whether every constant a fused element-wise chain's body reads (constTensor: what the chain's lowering reads
/// as a constant) has one element. fuse-elementwise moves constants into the body; one per channel ([C, 1, 1], a
/// bias added after a convolution) is indexed at NCHW positions by the chain's code, which is wrong on a blocked
/// buffer (random graph 426 of the CPU test: Add(conv, c) and Add(conv, that) fused, the per-channel c read as if
/// the blocked conv were NCHW).
bool bodyConstantsAreScalars(const Node& n) {
  for (const auto& node : n.attrGraph("body").nodes())
    for (size_t i = 0; i < node->numInputs(); ++i)
      if (const Tensor* c = constTensor(node->input(i)); c && c->numel() != 1) return false;
  return true;
}

/// Max pooling, a channel Concat of such values, and element-wise ops (the registry's) that the runtime
/// computes element by element, or a fused chain of them with scalar constants only, whose inputs have the
/// output's shape or are scalars: they run on the blocked buffer as it is.
bool blockableOther(const Node& n) {
  if (!whole8(n.output(0)) || n.numOutputs() != 1) return false;
  if (isOp(n, "MaxPool")) return isRank4F32(n.input(0)) && !n.hasAttr("dilations");
  if (isOp(n, "GlobalAveragePool")) return whole8(n.input(0));
  if (channelScale(n)) return true;
  if (isOp(n, "Concat")) {
    if (n.attrInt("axis") != 1 && n.attrInt("axis") != -3) return false;
    for (Value* in : n.inputs())
      if (!whole8(in)) return false;
    return true;
  }
  const bool elementwise = (isOp(n, "FusedElementwise", "tessel") && bodyConstantsAreScalars(n)) ||
                           (hasTrait(n, OpTrait::Elementwise) && runsAsElementwiseKernel(n));
  if (!elementwise) return false;
  for (Value* in : n.inputs()) {
    if (!in) continue;
    const bool scalar = in->type.isStatic() && in->type.staticSize() == 1;
    if (!scalar && !(in->type == n.output(0)->type)) return false;
  }
  return true;
}

size_t findRoot(std::vector<size_t>& parent, size_t i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

/// A connected region of layout-capable nodes that contains a blockable convolution: a layout choice
/// select-layout makes, and one of `tessel tune --target cpu`'s layout genes.
struct Region {
  std::vector<size_t> members;  ///< node indices, in graph order
  std::string key;              ///< its first node's name (node#<index> when that name is not unique)
  int convs = 0;                ///< blockable convolutions
  bool autoBlocks = false;      ///< what mode auto decides
};

/// The regions of `graph`, in the graph order of their first nodes.
std::vector<Region> findRegions(const Graph& graph, bool avx512) {
  const auto& nodes = graph.nodes();
  std::map<const Node*, size_t> index;
  std::vector<bool> capable(nodes.size()), hasConv(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    index[nodes[i].get()] = i;
    hasConv[i] = blockableConv(*nodes[i], avx512);
    capable[i] = hasConv[i] || blockableOther(*nodes[i]);
  }
  std::vector<size_t> parent(nodes.size());
  std::iota(parent.begin(), parent.end(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!capable[i]) continue;
    for (Value* in : nodes[i]->inputs()) {
      if (!in || !in->producer() || in->graph() != &graph) continue;
      size_t p = index.at(in->producer());
      if (capable[p]) parent[findRoot(parent, p)] = findRoot(parent, i);
    }
  }
  // A region pays for its reorders when it has a convolution (mode nchwc8); in mode auto a depthwise conv
  // that the NCHW kernel runs faster on its small-map path (nchwSmallMapDepthwise: MnasNet's 5x5 1152ch on
  // 7x7 0.167 -> 0.071 ms) does not count, and a region with a channel Concat counts any conv (the
  // inception and fire modules' branches write their slices of the Concat in place).
  // History: auto blocked only regions with a depthwise, grouped or Concat-joined conv while ResNet-18/50
  // ran their 3x3 convs with the NCHW-only Winograd (1x1 convs between them: a reorder on every edge, 1.09x /
  // 1.03x blocked). With Winograd's NCHWc8 twin and the NCHWc8 direct kernel's flat tiles on small maps
  // (2026-12-05), bench/ab.py, Zen 2 (AMD EPYC family 23 model 49), 1 thread, every conv region blocked
  // against that rule: ResNet-18 0.83, ResNet-50 0.88, ShuffleNetV2 0.97, MobileNetV3-small 0.97,
  // MobileNetV2 0.99, the other eight within 0.99-1.03 (noise: GoogLeNet 1.03 then 1.00 on a rerun),
  // MnasNet 1.02 (its 5x5 depthwise regions, which this rule leaves NCHW: 1.00).
  std::map<size_t, size_t> regionOfRoot;
  std::vector<Region> regions;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!capable[i]) continue;
    auto [it, fresh] = regionOfRoot.emplace(findRoot(parent, i), regions.size());
    if (fresh) regions.emplace_back();
    Region& r = regions[it->second];
    r.members.push_back(i);
    if (hasConv[i]) ++r.convs;
    // (A region without a convolution is dropped below, so a Concat sets autoBlocks for "any conv".)
    if (isOp(*nodes[i], "Concat") || (hasConv[i] && (!isDepthwise(*nodes[i]) || !nchwSmallMapDepthwise(*nodes[i]))))
      r.autoBlocks = true;
  }
  // Keys are the regions' first nodes' names (node#<index> for an unnamed or twice-named node, so a key is unique).
  std::map<std::string, int> nameCount;
  for (const auto& n : nodes) ++nameCount[n->name()];
  for (Region& r : regions) {
    const size_t first = r.members.front();
    const std::string& name = nodes[first]->name();
    r.key = !name.empty() && nameCount[name] == 1 ? name : fmt::format("node#{}", first);
  }
  // Only regions with a convolution are choices.
  std::erase_if(regions, [](const Region& r) { return r.convs == 0; });
  return regions;
}

class SelectLayoutPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    const std::string mode = options.get("select-layout.mode", "nchwc8");
    if (mode != "nchwc8" && mode != "nchw" && mode != "auto")
      throw UserError(fmt::format("pass option select-layout.mode={}: expected nchwc8, nchw or auto", mode));
    Graph& graph = *model.graph;
    bool changed = false;
    for (const auto& n : graph.nodes()) changed |= n->meta.erase("layout") > 0;
    // Per-region choices (select-layout.region.<key> = nchw | nchwc8: a tuning file's layout genes) override
    // the mode's rule for that region.
    std::map<std::string, std::string> overrides;
    for (const auto& [key, value] : options.values)
      if (key.rfind(kRegionOption, 0) == 0) {
        if (value != "nchw" && value != "nchwc8")
          throw UserError(fmt::format("pass option {}={}: expected nchw or nchwc8", key, value));
        overrides[key.substr(kRegionOption.size())] = value;
      }
    if (mode == "nchw" && overrides.empty()) return changed;
    const bool avx512 = options.get("select-layout.avx512", "0") == "1";
    const std::vector<Region> regions = findRegions(graph, avx512);
    const auto& nodes = graph.nodes();
    std::vector<std::string> keys;
    for (const Region& r : regions) {
      keys.push_back(r.key);
      bool block = mode == "nchwc8" || (mode == "auto" && r.autoBlocks);
      if (auto o = overrides.find(r.key); o != overrides.end()) {
        block = o->second == "nchwc8";
        overrides.erase(o);
      }
      if (!block) continue;
      for (size_t i : r.members) nodes[i]->meta["layout"] = std::string("nchwc8");
      changed = true;
    }
    if (!overrides.empty())
      throw UserError(fmt::format("pass option {}{}: the graph has no layout region of that name (its regions are "
                                  "named by their first node: {})",
                                  kRegionOption, overrides.begin()->first,
                                  keys.empty() ? "none" : fmt::format("{}", fmt::join(keys, ", "))));
    return changed;
  }
};

}  // namespace

std::vector<LayoutRegion> layoutRegions(const Graph& graph, bool avx512) {
  std::vector<LayoutRegion> out;
  for (const Region& r : findRegions(graph, avx512)) {
    LayoutRegion region{r.key, static_cast<int>(r.members.size()), r.convs, false};
    for (size_t i : r.members) region.blocked |= runsBlocked(*graph.nodes()[i]);
    out.push_back(std::move(region));
  }
  return out;
}

TESSEL_REGISTER_PASS(select_layout, "select-layout",
                     "mark regions of convs/pools/element-wise ops that run in blocked NCHWc8 (meta layout)",
                     [] { return std::make_unique<SelectLayoutPass>(); });

}  // namespace tessel::cpu
