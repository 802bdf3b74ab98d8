// The geometry of a ConvTranspose node (src/ops/conv.cpp: output_shape, auto_pad and output_padding
// resolved), for the interpreter and the cpu target's compiled ConvTranspose.
#pragma once

#include <array>
#include <cstdint>

#include "tessel/ir/graph.h"

namespace tessel {

/// A convolution's extents with the spatial part normalised to three axes (missing ones have extent 1).
struct ConvWindow {
  int64_t batch = 1, inChannels = 1, outChannels = 1, groups = 1;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1}, pad{0, 0, 0};
  int64_t inSize() const { return in[0] * in[1] * in[2]; }
  int64_t outSize() const { return out[0] * out[1] * out[2]; }
  int64_t kernelSize() const { return kernel[0] * kernel[1] * kernel[2]; }
};

/// The problem of a ConvTranspose node on input shape xs and weight shape ws (`in` holds x's extents, `out` the
/// result's); UserError naming the node when they do not match or an extent comes out negative.
ConvWindow convTransposeWindow(const Node& node, const Shape& xs, const Shape& ws);

}  // namespace tessel
