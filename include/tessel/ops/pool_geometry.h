// The window problem of a MaxPool/AveragePool/LpPool node (src/ops/pool.cpp), shared by the interpreter
// and the cpu target's N-D pooling steps.
#pragma once

#include "tessel/ir/graph.h"
#include "tessel/rt/pool_nd.h"

namespace tessel {

/// The pooling problem of node on an input of shape xs (rank 3 to 5); UserError naming the node otherwise.
rt::PoolNdShape poolNdShape(const Node& node, const Shape& xs);

}  // namespace tessel
