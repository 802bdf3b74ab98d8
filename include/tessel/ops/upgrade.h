// Shared steps of opset upgrades: moving a legacy attribute into the constant input that replaced it.
#pragma once

#include <string>

#include "tessel/ops/registry.h"

namespace tessel {

/// Removes attribute `attr` and feeds `value` as a constant to input `inputIndex` (skipped optional
/// inputs before it become omitted). Does nothing when the attribute is absent or the input is already
/// given (a model never has both; the input wins).
void moveAttrToInput(UpgradeContext& ctx, const std::string& attr, size_t inputIndex, Tensor value);
/// moveAttrToInput for an ints attribute (e.g. `axes`, `split`): the constant is a 1-D int64 tensor.
void moveIntsAttrToInput(UpgradeContext& ctx, const std::string& attr, size_t inputIndex);

}  // namespace tessel
