// Run-time CPU feature checks (cpuid + xgetbv via the GCC/Clang builtins).
#include "tessel/rt/cpu.h"

#include <thread>

namespace tessel::rt {

bool cpu_has_avx2_fma() {
  __builtin_cpu_init();
  // __builtin_cpu_supports also checks the OS enabled the YMM state (xgetbv).
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int hardware_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace tessel::rt
