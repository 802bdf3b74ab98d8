// Random graphs (tests/npu_random/random_graph.h: convolutions of every kind on odd sizes, pools, element-wise,
// normalisation and shape operators) compiled by the CPU target the way `tessel compile` does, for both vector ISAs
// and both activation layouts, run at 1 and 2 threads and compared with the reference interpreter. Used by
// tests/unit/cpu_random_graph_test.cpp and by the long-run driver tessel_cpu_random (tests/cpu_random/main.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"

namespace tessel::test {

/// One way of compiling a graph for the CPU: `tessel compile --isa ISA --layout LAYOUT`.
struct CpuVariant {
  std::string isa;     ///< "avx2" or "avx512"
  std::string layout;  ///< "nchw", "nchwc8" or "auto"
  std::string name() const { return isa + " " + layout; }
};

/// The variants this machine can run: avx2 with nchw and nchwc8 always, avx512 with nchw and nchwc8 when the CPU
/// has AVX-512F.
std::vector<CpuVariant> cpuRandomVariants();

/// Totals over checked graphs.
struct CpuRunStats {
  size_t graphs = 0, compiles = 0, runs = 0, failures = 0;
  size_t kernelCalls = 0;  ///< kernel calls per inference, summed over compiles
  size_t hostSteps = 0;    ///< nodes the compiled models ran through the interpreter, summed over compiles
  std::map<std::string, size_t> kernels;  ///< kernel calls by kernel name, summed over compiles
  double seconds = 0;                     ///< compile (C++ generation and compiler) seconds, summed
};

/// Compiles random graph `seed` (randomNpuGraph; for even seeds with RandomGraphOptions::channelsOfEight) for every variant into `workDir`, runs each library at 1 and 2
/// threads on randomInputs(model, seed) and compares with the interpreter (compareOutput's tolerance). Returns one
/// text per failing variant (the seed, the variant, what differs, how to replay it, the graph); when `saveDir` is
/// not empty a failing graph is also written there as SEED.tir.
std::vector<std::string> checkRandomGraphOnCpu(uint64_t seed, const std::vector<CpuVariant>& variants,
                                               const std::string& workDir, CpuRunStats& stats,
                                               const std::string& saveDir = "");

}  // namespace tessel::test
