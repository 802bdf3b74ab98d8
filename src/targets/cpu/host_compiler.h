// Questions the cpu target asks the host C++ compiler that builds its code (internal; compiler.cpp).
#pragma once

#include "tessel/targets/cpu/compiler.h"

namespace tessel::cpu {

/// True when code built with -march=o.march may use AVX-512F: asks the C++ compiler's preprocessor (for
/// "native" that is this CPU). False when the compiler cannot be run (--emit=cpp without one).
bool targetHasAvx512(const CompileOptions& o);

}  // namespace tessel::cpu
