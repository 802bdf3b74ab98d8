// Run-time CPU feature checks (cpuid + xgetbv via the GCC/Clang builtins).
#include "tessel/rt/cpu.h"

#include <unistd.h>

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

int64_t cpu_l2_bytes() {
  static const int64_t bytes = [] {
    const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return v >= (64 << 10) && v <= (64 << 20) ? int64_t{v} : int64_t{1} << 20;
  }();
  return bytes;
}

}  // namespace tessel::rt
