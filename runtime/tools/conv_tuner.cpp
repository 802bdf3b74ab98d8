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
//         milliseconds (the candidates of a line take turns, two passes, see main), or null for a kernel
//         this runtime does not have or that does not apply.
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

/// Best single-thread time in ms of each kernel on one convolution. Every kernel runs once to warm up
/// (caches, scratch buffers); then the kernels take turns, one timed run each per round, for at least 3
/// rounds and more (up to 10) until the timed runs total 30 ms, so a burst of load from other processes
/// slows every candidate alike instead of one of them.
std::vector<double> timeKernels(const std::vector<const Conv2dKernel*>& kernels, const Conv2dShape& s) {
  // Channels rounded up to whole 8-channel blocks: large enough for NCHW and NCHWc8 kernels alike.
  const int64_t in_c = (s.in_channels + 7) / 8 * 8, out_c = (s.out_channels + 7) / 8 * 8;
  size_t inSize = static_cast<size_t>(s.batch * in_c * s.in_h * s.in_w);
  size_t outSize = static_cast<size_t>(s.batch * out_c * s.out_h() * s.out_w());
  size_t wSize = static_cast<size_t>(s.out_channels * s.in_per_group() * s.kernel_h * s.kernel_w);
  AlignedBuffer in(inSize), out(outSize), w(wSize);
  fill(in.data(), inSize, 1);
  fill(w.data(), wSize, 2);
  for (size_t i = 0; i < wSize; ++i) w.data()[i] *= 0.05f;
  std::vector<AlignedBuffer> packed;
  for (const Conv2dKernel* k : kernels) {
    packed.emplace_back(k->packed_weight_size(s));
    k->pack_weights(s, w.data(), packed.back().data());
  }
  auto run = [&](size_t i) {
    auto start = std::chrono::steady_clock::now();
    kernels[i]->run(s, in.data(), packed[i].data(), out.data(), tessel::rt::Epilogue{}, nullptr);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  for (size_t i = 0; i < kernels.size(); ++i) run(i);
  std::vector<double> best(kernels.size(), 1e30);
  double total = 0;
  for (int round = 0; round < 10 && (round < 3 || total < 30.0); ++round) {
    for (size_t i = 0; i < kernels.size(); ++i) {
      double ms = run(i);
      best[i] = std::min(best[i], ms);
      total += ms;
    }
  }
  return best;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "conv_tuner: %s\n", msg.c_str());
  return 2;
}

/// One line of the input: a convolution, the candidate names as given, the applicable ones among them.
struct Job {
  Conv2dShape shape;
  std::vector<std::string> names;
  std::vector<const Conv2dKernel*> kernels;
  std::vector<double> best;  ///< per kernel, over all passes
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: conv_tuner JOBS OUT.json");
  if (!tessel::rt::cpu_has_avx2_fma()) return fail("this CPU has no AVX2+FMA");
  std::ifstream in(argv[1]);
  if (!in) return fail(std::string("cannot read '") + argv[1] + "'");
  std::vector<Job> jobs;
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream ss(line);
    Job job;
    Conv2dShape& s = job.shape;
    int64_t* fields[] = {&s.batch,    &s.in_channels, &s.in_h,       &s.in_w,       &s.out_channels, &s.kernel_h,
                         &s.kernel_w, &s.stride_h,    &s.stride_w,   &s.pad_top,    &s.pad_left,     &s.pad_bottom,
                         &s.pad_right, &s.dilation_h, &s.dilation_w, &s.groups};
    for (int64_t* f : fields)
      if (!(ss >> *f)) return fail("line " + std::to_string(lineNo) + ": expected 16 integers of a conv shape");
    if (s.batch < 1 || s.in_channels < 1 || s.out_channels < 1 || s.groups < 1 || s.stride_h < 1 ||
        s.stride_w < 1 || s.dilation_h < 1 || s.dilation_w < 1 || s.in_channels % s.groups != 0 ||
        s.out_channels % s.groups != 0 || s.out_h() < 1 || s.out_w() < 1)
      return fail("line " + std::to_string(lineNo) + ": not a valid convolution");
    for (std::string name; ss >> name;) {
      const Conv2dKernel* k = tessel::rt::find_conv2d_kernel(name.c_str());
      if (k && k->applicable(s)) job.kernels.push_back(k);
      job.names.push_back(name);
    }
    job.best.assign(job.kernels.size(), 1e30);
    jobs.push_back(std::move(job));
  }
  // Two passes over all convolutions, about a second apart for a large model: load from other processes
  // that slows one candidate through a whole pass rarely does so in both.
  for (int pass = 0; pass < 2; ++pass)
    for (Job& job : jobs) {
      std::vector<double> t = timeKernels(job.kernels, job.shape);
      for (size_t i = 0; i < t.size(); ++i) job.best[i] = std::min(job.best[i], t[i]);
    }
  std::string json = "{\"vector_lanes\": " + std::to_string(kVectorLanes) + ", \"times_ms\": [";
  for (size_t j = 0; j < jobs.size(); ++j) {
    json += j == 0 ? "[" : ", [";
    for (size_t i = 0, t = 0; i < jobs[j].names.size(); ++i) {
      json += i == 0 ? "" : ", ";
      if (t < jobs[j].kernels.size() && jobs[j].names[i] == jobs[j].kernels[t]->name) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", jobs[j].best[t++]);
        json += buf;
      } else {
        json += "null";
      }
    }
    json += "]";
  }
  json += "]}\n";
  std::ofstream out(argv[2]);
  out << json;
  if (!out) return fail(std::string("cannot write '") + argv[2] + "'");
  return 0;
}
