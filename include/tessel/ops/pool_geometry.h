// The window problem of a pooling node (src/ops/pool.cpp), for the interpreter's kernels and the cpu
// target's compiled N-D pooling.
#pragma once

#include <array>
#include <cstdint>

#include "tessel/ir/graph.h"

namespace tessel {

/// A pooling window problem with the spatial part normalised to three axes (leading axes of extent 1).
struct PoolWindow {
  int64_t planes = 1;  ///< N * C
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1};
  std::array<int64_t, 3> padBegin{0, 0, 0}, padEnd{0, 0, 0};
  int64_t inSize() const { return in[0] * in[1] * in[2]; }
  int64_t outSize() const { return out[0] * out[1] * out[2]; }
};

/// The window problem of a MaxPool/AveragePool/LpPool node on an input of shape xs (rank 3 to 5); UserError
/// naming the node otherwise.
PoolWindow poolWindow(const Node& node, const Shape& xs);

}  // namespace tessel
