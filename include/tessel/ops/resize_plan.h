// The interpolation taps of a Resize or Upsample node (src/ops/resize.cpp's planning), for the cpu target's
// compiled Resize: per axis and output coordinate, the input indices and weights it sums.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tessel/ir/graph.h"

namespace tessel {

struct ResizeAxisTaps {
  std::vector<std::vector<std::pair<int64_t, double>>> taps;  ///< per output coordinate: (input index, weight)
  std::vector<bool> outside;  ///< per output coordinate: extrapolated (tf_crop_and_resize outside the input)
};

/// The taps of every axis of node (Resize: roi, scales and sizes constant, null when absent; Upsample:
/// scales) on an input of shape `in`; UserError naming the node when the operands are invalid.
std::vector<ResizeAxisTaps> resizeTaps(const Node& node, const Shape& in, const Tensor* roi, const Tensor* scales,
                                       const Tensor* sizes);

}  // namespace tessel
