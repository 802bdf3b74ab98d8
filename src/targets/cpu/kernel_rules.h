// What the cpu target's kernels cover (internal): asked alike by its schedule passes (select-layout,
// select-kernels) and by its lowering, so the passes decide on what the code generator will emit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"
#include "tessel/rt/conv.h"

namespace tessel::cpu {

/// The node runs in the blocked NCHWc8 layout (select-layout's meta layout = "nchwc8").
bool runsBlocked(const Node& n);

/// A Conv or a tessel.FusedConv (a Conv with its fused epilogue).
bool isConvNode(const Node& n);

/// The runtime geometry of a 2-D float convolution with static shapes (auto_pad resolved), or nullopt.
std::optional<rt::Conv2dShape> conv2dShape(const Node& conv);

/// A standard element-wise node the runtime computes element by element with one flat kernel: an
/// activation of the registry the runtime has (constant parameters), an rt::unary op, or a two-operand
/// rt::binary op. On operands of the output's shape (or scalars) it runs on any layout's buffer.
bool runsAsElementwiseKernel(const Node& n);

/// The constant data behind v, looking through Identity chains (exporters share weights that way), Constant
/// nodes and a nested graph's captured values, or null (null for a null v too).
const Tensor* constTensor(const Value* v);

/// `small` holds one value per channel of the 4-D `out` ([N or 1, C, 1, 1]: squeeze-and-excitation's scale),
/// which rt::binary_channel_nchwc8 applies to a blocked operand of out's shape.
bool channelScaleOperand(const Shape& small, const Shape& out);

/// A connected region of nodes select-layout can run blocked, with at least one convolution that may: one layout
/// choice (src/targets/cpu/select_layout.cpp).
struct LayoutRegion {
  std::string key;     ///< the name of its first node in graph order (node#<index> when that name is not unique)
  int nodes = 0;
  int convs = 0;       ///< the convolutions in it that may run blocked
  bool blocked = false;  ///< its nodes carry meta layout = "nchwc8" in `graph`
};

/// The layout regions of a graph select-layout has run on (with the same avx512 setting), in graph order.
std::vector<LayoutRegion> layoutRegions(const Graph& graph, bool avx512);

/// The pass option that decides one region: kRegionOption + key = "nchw" | "nchwc8".
inline const std::string kRegionOption = "select-layout.region.";

}  // namespace tessel::cpu
