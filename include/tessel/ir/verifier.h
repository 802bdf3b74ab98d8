// Structural checks of a graph: defined-before-use, known operators, arity and attributes.
#pragma once

#include <string>
#include <vector>

#include "tessel/ir/graph.h"

namespace tessel {

/// Returns every problem found in `graph` and its nested graphs (empty when valid), each naming the node
/// or value: unknown operators, wrong input/output counts, unknown / missing / mistyped attributes,
/// values used before their definition, captured names that no enclosing scope defines, undefined outputs.
std::vector<std::string> verifyGraph(const Graph& graph);

/// verifyGraph, throwing one UserError that lists every problem.
void verifyOrThrow(const Graph& graph);

/// Lists operators with no registry definition as "OpType (node 'a', node 'b')", one entry per op type.
std::vector<std::string> unsupportedOperators(const Graph& graph);

}  // namespace tessel
