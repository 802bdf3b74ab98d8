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

/// GELU as exporters spell it (pass fuse-gelu): x * 0.5 * (1 + Erf(x / sqrt 2)) -> Gelu, and its tanh
/// approximation x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3))) -> Gelu{approximate="tanh"}.
inline constexpr const char* kGeluOp = "Gelu";
/// The nonlinearity at the core of Gelu's tanh approximation.
inline constexpr const char* kGeluTanhCoreOp = "Tanh";

}  // namespace tessel
