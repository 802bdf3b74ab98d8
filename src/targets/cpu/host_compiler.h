// Questions the cpu target asks the host C++ compiler that builds its code (internal; compiler.cpp).
#pragma once

#include "tessel/targets/cpu/compiler.h"

namespace tessel::cpu {

/// True when code built for o.march and o.isa may use AVX-512F. isa "avx2": false; "auto": asks the C++
/// compiler's preprocessor (for -march=native that is this CPU; false when the compiler cannot be run,
/// --emit=cpp without one); "avx512": true, UserError when -march has no AVX-512F. UserError for another isa.
bool targetHasAvx512(const CompileOptions& o);

/// The ISA flags of the host C++ compiler: -march=o.march, plus avx512OffFlag(o).
std::string isaFlags(const CompileOptions& o);

/// " -mno-avx512f" for isa "avx2", else "" (UserError for an isa that is not avx2, avx512 or auto).
std::string avx512OffFlag(const CompileOptions& o);

/// "avx512" or "avx2": the vector ISA the code built with `o` uses (targetHasAvx512).
std::string targetIsa(const CompileOptions& o);

}  // namespace tessel::cpu
