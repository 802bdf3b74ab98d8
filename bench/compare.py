#!/usr/bin/python3
"""Times Tessel-compiled models against ONNX Runtime side by side, alternating runs, at 1 and 2 threads.

Installs onnxruntime-node into bench/ort (npm --ignore-scripts) when missing, exports the torchvision models
(scripts/export-models.py), compiles each with `tessel compile`, measures the machine's FMA peak (AVX-512 where the CPU has it, else AVX2), and
prints a table: median ms of each, the ratio Tessel/ORT (median of the back-to-back rounds' ratios, with their
range), and Tessel's GFLOP/s as a share of the peak.

usage: bench/compare.py [--tessel build/tessel] [--models-dir DIR] [--threads 1 2] [--rounds 5]
                        [--iterations 20] [--warmup 3] [--models resnet18 ...] [--markdown FILE]
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1")

PEAK_SOURCE = r"""
// Measures FMA throughput with 12 independent accumulator chains (enough to hide the FMA latency on two
// FMA ports): ymm (AVX2) always, zmm (AVX-512) when compiled with -mavx512f. Prints GFLOP/s of the widest.
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#if defined(__AVX512F__)
typedef __m512 V;
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
constexpr int kLanes = 16;
#else
typedef __m256 V;
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
constexpr int kLanes = 8;
#endif
static float run(long iters) {
  V acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = SET1(1.0f + i * 1e-3f);
  const V a = SET1(0.999999f), b = SET1(1e-7f);
  for (long n = 0; n < iters; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = FMA(acc[i], a, b);
  }
  float s = 0;
  for (int i = 0; i < 12; ++i) s += reinterpret_cast<float*>(&acc[i])[0];
  return s;
}
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  const long iters = 100000000;
  run(iters / 10);  // warm up the clock
  auto t = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  std::vector<float> sink(threads);
  for (int k = 0; k < threads; ++k) pool.emplace_back([&, k] { sink[k] = run(iters); });
  for (auto& th : pool) th.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  std::printf("%.3f %g\n", threads * iters * 12.0 * kLanes * 2 / s / 1e9, sink[0]);
}
"""


def has_avx512():
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and " avx512f" in line for line in f)


def measure_peak(threads):
    """GFLOP/s of a pure FMA loop on `threads` threads at the widest vector width the CPU has (best of 3)."""
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "peak.cpp"), os.path.join(d, "peak")
        with open(src, "w") as f:
            f.write(PEAK_SOURCE)
        flags = ["-mavx2", "-mfma"] + (["-mavx512f"] if has_avx512() else [])
        subprocess.run(["g++", "-O2", *flags, "-pthread", src, "-o", exe], check=True)
        return max(float(subprocess.run([exe, str(threads)], check=True, capture_output=True,
                                        text=True).stdout.split()[0]) for _ in range(3))


LATENCY_SOURCE = r"""
// Cache-line round trip between CPU 0 and CPU 1: two pinned threads hand a flag back and forth; prints
// the mean round trip in ns. On a VM this tells where the host put the two vCPUs: about 50 ns when they
// share a last-level cache, several hundred when they do not, and then every line one thread reads
// while it is dirty in the other's cache costs that much (2-thread kernels slow down, 1-thread ones not).
#include <pthread.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
alignas(64) static std::atomic<int> flag{0};
int main() {
  const int n = 100000;
  std::thread other([&] {
    pin(1);
    for (int i = 0; i < n; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1) {}
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  pin(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    flag.store(2 * i + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 2 * i + 2) {}
  }
  const auto t1 = std::chrono::steady_clock::now();
  other.join();
  std::printf("%.0f\n", std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
}
"""


class CoreLatency:
    """Measures the CPU 0 <-> CPU 1 cache-line round trip (ns) with LATENCY_SOURCE; None without 2 CPUs
    or a compiler."""

    def __init__(self, workdir):
        self.exe = None
        if (os.cpu_count() or 1) < 2:
            return
        src, exe = os.path.join(workdir, "latency.cpp"), os.path.join(workdir, "latency")
        with open(src, "w") as f:
            f.write(LATENCY_SOURCE)
        if subprocess.run(["g++", "-O2", "-pthread", src, "-o", exe], capture_output=True).returncode == 0:
            self.exe = exe

    def __call__(self):
        if self.exe is None:
            return None
        r = subprocess.run([self.exe], capture_output=True, text=True, timeout=60)
        return float(r.stdout.split()[0]) if r.returncode == 0 else None


def cpu_info(key):
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    return ""


def fma_flops_per_cycle():
    """FLOP per cycle per core of the FMA units: 2 units x lanes x 2. AMD's Zen 4 runs AVX-512 on 256-bit
    datapaths (a zmm FMA takes both halves), so its vector width for throughput is 8 lanes."""
    lanes = 16 if has_avx512() and cpu_info("vendor_id") != "AuthenticAMD" else 8
    return 2 * lanes * 2


def nominal_peak(threads):
    """fma_flops_per_cycle() at the clock /proc/cpuinfo reports (GFLOP/s)."""
    with open("/proc/cpuinfo") as f:
        mhz = max(float(line.split(":")[1]) for line in f if line.startswith("cpu MHz"))
    return threads * fma_flops_per_cycle() * mhz / 1e3


def ensure_ort():
    if not os.path.isdir(os.path.join(ROOT, "bench/ort/node_modules/onnxruntime-node")):
        print("installing onnxruntime-node (npm --ignore-scripts) into bench/ort", file=sys.stderr)
        subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund"],
                       cwd=os.path.join(ROOT, "bench/ort"), check=True)


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessel", default=os.path.join(ROOT, "build/tessel"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "bench/models"))
    ap.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5, help="alternations of Tessel and ORT per model/threads")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--markdown", help="also write the table (markdown) to this file")
    a = ap.parse_args()

    ensure_ort()
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts/export-models.py"), a.models_dir, "--models",
                    *a.models], check=True)
    compile_s = {}
    for m in a.models:
        onnx = os.path.join(a.models_dir, f"{m}.onnx")
        start = time.monotonic()
        subprocess.run([a.tessel, "compile", onnx, "-o", os.path.join(a.models_dir, f"{m}.so")], check=True,
                       capture_output=True)
        compile_s[m] = time.monotonic() - start
        print(f"compiled {m} in {compile_s[m]:.1f} s", file=sys.stderr)
    # The share of peak uses the nominal peak (clock x FLOP/cycle/core) or the measured one, whichever is
    # larger: on a loaded machine the FMA loop
    # measures what this process gets, not what the cores can do; both are printed.
    measured = {t: measure_peak(t) for t in a.threads}
    peaks = {t: max(nominal_peak(t), measured[t]) for t in a.threads}

    latency_dir = tempfile.TemporaryDirectory()
    core_latency = CoreLatency(latency_dir.name)
    rows = []
    for t in a.threads:
        for m in a.models:
            inp = os.path.join(a.models_dir, f"{m}.input.npy")
            common = ["--threads", str(t), "--warmup", str(a.warmup), "--iterations", str(a.iterations), "--json"]
            tessel_ms, ort_ms, gflop, latencies = [], [], 0.0, []

            def run_tessel():
                r = run_json([a.tessel, "bench", os.path.join(a.models_dir, f"{m}.so"), "--input",
                              f"input={inp}", *common])
                tessel_ms.append(r["median_ms"])
                return r["gflops"]

            def run_ort():
                o = run_json(["node", os.path.join(ROOT, "bench/ort/ort_bench.js"),
                              os.path.join(a.models_dir, f"{m}.onnx"), "--input", f"input={inp}", *common])
                ort_ms.append(o["median_ms"])

            # Alternate, and swap which goes first every round, so both see the same machine conditions
            # (this machine's speed drifts by 10-30 % over seconds): each round is a pair measured back
            # to back, and the ratio reported is the median of the rounds' ratios.
            for i in range(a.rounds):
                latencies.append(core_latency())
                if i % 2 == 0:
                    gflop = run_tessel()
                    run_ort()
                else:
                    run_ort()
                    gflop = run_tessel()
            tm, om = statistics.median(tessel_ms), statistics.median(ort_ms)
            pair_ratios = [x / y for x, y in zip(tessel_ms, ort_ms)]
            rate = gflop / (tm / 1e3)
            rows.append(dict(model=m, threads=t, tessel_ms=tm, ort_ms=om, ratio=statistics.median(pair_ratios),
                             ratio_lo=min(pair_ratios), ratio_hi=max(pair_ratios), gflop_s=rate,
                             peak_share=rate / peaks[t], compile_s=compile_s[m],
                             latency=[x for x in latencies if x is not None]))
            print(f"{m} @{t}: tessel {tm:.2f} ms, ort {om:.2f} ms", file=sys.stderr)

    lines = [f"Date: {datetime.date.today()}; machine: {cpu_info('model name') or platform.machine()} "
             f"(family {cpu_info('cpu family')} model {cpu_info('model')}), "
             f"{os.cpu_count()} hardware threads; load average at the end {os.getloadavg()[0]:.1f}; "
             f"{a.rounds} alternating rounds x {a.iterations} iterations; ms: median of the rounds' medians; "
             f"Tessel/ORT: median of the rounds' ratios (each round a back-to-back pair), with their range.",
             "Peak used for the share: " + ", ".join(f"{t} thread(s) {p:.1f} GFLOP/s" for t, p in peaks.items()) +
             f" (the larger of: clock from /proc/cpuinfo x {fma_flops_per_cycle()} FLOP/cycle/core "
             f"({'AVX-512' if has_avx512() else 'AVX2'} FMA), and an FMA loop measured during the run: " +
             ", ".join(f"{t} thread(s) {p:.1f} GFLOP/s" for t, p in measured.items()) + "). "
             "GFLOP/s count the model's direct-convolution FLOPs; Winograd convolutions do about a quarter of "
             "those multiplications, so a model with many of them can exceed 100% of the FMA peak. "
             "Core-to-core: the CPU 0 <-> CPU 1 cache-line round trip measured before each round (range); on "
             "a VM several hundred ns means the host put the two vCPUs apart, and 2-thread runs are then slower "
             "(docs/performance.md).",
             "",
             "| model | threads | Tessel ms | ORT ms | Tessel/ORT | rounds' range | Tessel GFLOP/s | % of peak "
             "| compile s | core-to-core ns |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['threads']} | {r['tessel_ms']:.2f} | {r['ort_ms']:.2f} | "
                     f"{r['ratio']:.2f} | {r['ratio_lo']:.2f}-{r['ratio_hi']:.2f} | {r['gflop_s']:.1f} | "
                     f"{100 * r['peak_share']:.0f}% | {r['compile_s']:.1f} | "
                     + (f"{min(r['latency']):.0f}-{max(r['latency']):.0f} |" if r['latency'] else "- |"))
    for t in a.threads:
        ratios = [r["ratio"] for r in rows if r["threads"] == t]
        lines.append(f"\nGeometric mean Tessel/ORT at {t} thread(s): "
                     f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
