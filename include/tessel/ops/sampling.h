// GridSample's attributes as the runtime's enumerators (src/ops/detection.cpp), for the interpreter and
// the cpu target's compiled GridSample.
#pragma once

#include <string>

#include "tessel/rt/detection.h"

namespace tessel {

/// GridSample's mode (bilinear, nearest, bicubic) and padding_mode (zeros, border, reflection).
rt::GridMode gridModeOf(const std::string& mode);
rt::GridPadding gridPaddingOf(const std::string& padding);

}  // namespace tessel
