// Numbers for people: counts with K/M/G suffixes, byte sizes in KiB/MiB/GiB.
#include "tessel/support/units.h"

#include <fmt/format.h>

namespace tessel {

std::string humanCount(double v) {
  const char* units[] = {"", " K", " M", " G", " T"};
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}{}", v, units[u]);
}

std::string humanBytes(double v) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace tessel
