// The convolution tuner behind `tessel compile --tune`. `tessel compile` builds it once per compiler and
// --march with the same flags as the runtime objects it links (so it times the code paths the compiled
// model will run, e.g. the AVX-512 ones under -march=native on an AVX-512 machine) and caches it next to
// them (src/targets/cpu/compiler.cpp). Not part of the runtime library itself.
//
// Usage: conv_tuner JOBS OUT.json
//   JOBS: one convolution per line: the 16 integers of rt::Conv2dShape in declaration order (batch,
//         in_channels, in_h, in_w, out_channels, kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left,
//         pad_bottom, pad_right, dilation_h, dilation_w, groups), then the candidate kernel names.
//   OUT.json: {"vector_lanes": L, "times_ms": [[t, ...], ...]}, one list per line of JOBS, one time per
//         candidate in the order given: the best of several single-thread runs after a warm-up, in
//         milliseconds, or null for a kernel this runtime does not have or that does not apply.
//         L is the float lanes of the widest vectors this build uses (16 with AVX-512F, else 8).
// Exit status: 0 success, 2 unreadable or malformed input (message on stderr).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/cpu.h"

namespace {

using tessel::rt::AlignedBuffer;
using tessel::rt::Conv2dKernel;
using tessel::rt::Conv2dShape;

#if defined(__AVX512F__)
constexpr int kVectorLanes = 16;
#else
constexpr int kVectorLanes = 8;
#endif

/// Deterministic values in [-1, 1) (not zeros, so no kernel gets a data-dependent shortcut).
void fill(float* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
  }
}

/// Best single-thread time of one kernel in ms: one warm-up run (caches, scratch buffers), then at least
/// 3 timed runs and more (up to 10) while the timed runs total under 20 ms.
double timeKernel(const Conv2dKernel& k, const Conv2dShape& s) {
  size_t inSize = static_cast<size_t>(s.batch * s.in_channels * s.in_h * s.in_w);
  size_t outSize = static_cast<size_t>(s.batch * s.out_channels * s.out_h() * s.out_w());
  size_t wSize = static_cast<size_t>(s.out_channels * s.in_per_group() * s.kernel_h * s.kernel_w);
  AlignedBuffer in(inSize), out(outSize), w(wSize), packed(k.packed_weight_size(s));
  fill(in.data(), inSize, 1);
  fill(w.data(), wSize, 2);
  for (size_t i = 0; i < wSize; ++i) w.data()[i] *= 0.05f;
  k.pack_weights(s, w.data(), packed.data());
  double best = 1e30, total = 0;
  for (int r = 0; r < 11; ++r) {
    auto start = std::chrono::steady_clock::now();
    k.run(s, in.data(), packed.data(), out.data(), tessel::rt::Epilogue{}, nullptr);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r == 0) continue;
    best = std::min(best, ms);
    total += ms;
    if (r >= 3 && total >= 20.0) break;
  }
  return best;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "conv_tuner: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: conv_tuner JOBS OUT.json");
  if (!tessel::rt::cpu_has_avx2_fma()) return fail("this CPU has no AVX2+FMA");
  std::ifstream jobs(argv[1]);
  if (!jobs) return fail(std::string("cannot read '") + argv[1] + "'");
  std::string json = "{\"vector_lanes\": " + std::to_string(kVectorLanes) + ", \"times_ms\": [";
  std::string line;
  int lineNo = 0, jobCount = 0;
  while (std::getline(jobs, line)) {
    ++lineNo;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream ss(line);
    Conv2dShape s;
    int64_t* fields[] = {&s.batch,    &s.in_channels, &s.in_h,       &s.in_w,       &s.out_channels, &s.kernel_h,
                         &s.kernel_w, &s.stride_h,    &s.stride_w,   &s.pad_top,    &s.pad_left,     &s.pad_bottom,
                         &s.pad_right, &s.dilation_h, &s.dilation_w, &s.groups};
    for (int64_t* f : fields)
      if (!(ss >> *f)) return fail("line " + std::to_string(lineNo) + ": expected 16 integers of a conv shape");
    if (s.batch < 1 || s.in_channels < 1 || s.out_channels < 1 || s.groups < 1 || s.stride_h < 1 ||
        s.stride_w < 1 || s.dilation_h < 1 || s.dilation_w < 1 || s.in_channels % s.groups != 0 ||
        s.out_channels % s.groups != 0 || s.out_h() < 1 || s.out_w() < 1)
      return fail("line " + std::to_string(lineNo) + ": not a valid convolution");
    json += jobCount++ > 0 ? ", [" : "[";
    std::string name;
    bool first = true;
    while (ss >> name) {
      const Conv2dKernel* k = tessel::rt::find_conv2d_kernel(name.c_str());
      json += first ? "" : ", ";
      first = false;
      if (k == nullptr || k->layout != tessel::rt::ConvLayout::NCHW || !k->applicable(s)) {
        json += "null";
        continue;
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", timeKernel(*k, s));
      json += buf;
    }
    json += "]";
  }
  json += "]}\n";
  std::ofstream out(argv[2]);
  out << json;
  if (!out) return fail(std::string("cannot write '") + argv[2] + "'");
  return 0;
}
