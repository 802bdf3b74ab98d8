// Decomposed forms of ops, as exporters spell them, kept beside the ops' definitions so the rewrite passes that
// recombine them (fuse-activation-patterns) name no op lists of their own.
#pragma once

#include "tessel/ir/graph.h"

namespace tessel {

/// When `mul` is x * HardSigmoid(x) with HardSwish's constants (alpha 1/6, beta 1/2; torch's hardswish below
/// opset 14), the same-typed result read by nothing but `mul`: the HardSigmoid node; else nullptr.
Node* hardSwishDecomposition(const Node& mul);
/// The op the decomposition recombines into.
inline constexpr const char* kHardSwishOp = "HardSwish";

}  // namespace tessel
