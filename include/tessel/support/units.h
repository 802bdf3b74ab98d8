// Numbers for people: counts with K/M/G suffixes, byte sizes in KiB/MiB/GiB (reports of the CLI and targets).
#pragma once

#include <string>

namespace tessel {

/// 1234567 -> "1.23 M"; below 1000 the number itself.
std::string humanCount(double v);
/// 1536 -> "1.50 KiB"; below 1024 "N B".
std::string humanBytes(double v);

}  // namespace tessel
