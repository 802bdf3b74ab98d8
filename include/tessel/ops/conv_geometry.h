// The geometry of a ConvTranspose node (src/ops/conv.cpp: output_shape, auto_pad, output_padding resolved),
// for the cpu target's compiled ConvTranspose.
#pragma once

#include "tessel/ir/graph.h"
#include "tessel/rt/conv_nd.h"

namespace tessel {

/// The problem of a ConvTranspose node on input shape xs and weight shape ws; UserError naming the node
/// when they do not match.
rt::ConvNdShape convTransposeShape(const Node& node, const Shape& xs, const Shape& ws);

}  // namespace tessel
