// Run-time CPU feature checks: generated code calls these before taking the AVX2+FMA kernels.
#pragma once

#include <cstdint>

namespace tessel::rt {

/// True when the CPU and the OS support AVX2 and FMA3 (the ISA every kernel of this library needs).
bool cpu_has_avx2_fma();

/// Number of hardware threads the OS reports (at least 1).
int hardware_thread_count();

/// Bytes of one core's L2 cache as the OS reports it (1 MiB when it does not say): kernels size the
/// blocks they keep in L2 from it (Zen 4 has 1 MiB per core, Sapphire Rapids 2 MiB).
int64_t cpu_l2_bytes();

}  // namespace tessel::rt
