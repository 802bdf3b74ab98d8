// Whole-graph type and shape inference driven by the registry's per-operator rules.
#pragma once

#include "tessel/ir/graph.h"

namespace tessel {

/// Infers the type of every value of `graph` (and of nested graphs, through their owners' rules), in
/// topological order. Small values computable at compile time (shape arithmetic) are evaluated with the
/// reference kernels so that Reshape/Expand/... targets become known. Throws UserError naming the node on
/// an inconsistency (wrong rank, incompatible shapes, wrong element type).
void inferShapes(Graph& graph);

}  // namespace tessel
