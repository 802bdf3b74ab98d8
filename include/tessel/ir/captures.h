// Values nested graphs read from enclosing scopes by name (If branches, Loop and Scan bodies).
#pragma once

#include <set>
#include <string>

#include "tessel/ir/graph.h"

namespace tessel {

/// Names the nested graphs of g's nodes (at any depth) read from enclosing scopes: values of g (or of a
/// graph around it) that must stay even when no node of g reads them.
std::set<std::string> capturedNames(const Graph& g);

}  // namespace tessel
