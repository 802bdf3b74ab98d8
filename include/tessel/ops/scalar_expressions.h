// The activations' scalar formulas as C++ expression text, for code generators (the cpu target's generated
// broadcast loop). Kept with the operators' definitions (src/ops), one entry per activation.
#pragma once

#include <optional>
#include <string>

#include "tessel/ir/graph.h"

namespace tessel {

/// The C++ expression an activation node computes from its operand `a` (and `b` for PRelu's slope), with its
/// attributes substituted; `dbl(x)` is x as a double. nullopt for any other node.
std::optional<std::string> activationExpression(const Node& n);

}  // namespace tessel
