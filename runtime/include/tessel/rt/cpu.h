// Run-time CPU feature checks: generated code calls these before taking the AVX2+FMA kernels.
#pragma once

namespace tessel::rt {

/// True when the CPU and the OS support AVX2 and FMA3 (the ISA every kernel of this library needs).
bool cpu_has_avx2_fma();

/// Number of hardware threads the OS reports (at least 1).
int hardware_thread_count();

}  // namespace tessel::rt
