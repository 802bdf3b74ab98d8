// Model inputs for running any artifact: given tensors checked against the declared inputs, seeded random
// tensors for the rest (the same values for the same seed whichever artifact runs them).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "tessel/ir/graph.h"

namespace tessel::eval {

/// A random tensor for a declared input (floats in [-1, 1), ints in [0, 10), bools), seeded by `seed` and
/// the input's name. UserError when the shape is not fully known.
Tensor randomInput(const Value& input, uint64_t seed);

/// The inputs of a run: every tensor of `given` (UserError for a name that is not a declared input of
/// `signature`, or a tensor of the wrong element type or shape, naming the input and what was expected),
/// plus seeded random tensors for the declared inputs not given; `note` hears one line per random input.
std::map<std::string, Tensor> completeInputs(const Graph& signature, std::map<std::string, Tensor> given, uint64_t seed,
                                             const std::function<void(const std::string&)>& note = {});

/// The inputs of a run where every declared input of `signature` must be given: UserError naming the input for a
/// missing one, and as completeInputs for an unknown name or a tensor of the wrong element type or shape.
std::map<std::string, Tensor> checkedInputs(const Graph& signature, std::map<std::string, Tensor> given);

/// The shapes of a set of tensors (for ImportOptions::givenInputShapes).
std::map<std::string, Shape> shapesOf(const std::map<std::string, Tensor>& tensors);

}  // namespace tessel::eval
