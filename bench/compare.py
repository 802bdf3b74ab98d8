#!/usr/bin/python3
"""Times Tessel-compiled models against ONNX Runtime side by side, alternating runs, at 1 and 2 threads.

Installs onnxruntime-node into bench/ort (npm --ignore-scripts) when missing, exports the torchvision models
(scripts/export-models.py), compiles each with `tessel compile --isa` for every ISA asked for, and prints a
table: median ms of each, the ratio Tessel/ORT (median of the back-to-back rounds' ratios, with their range),
the ratio of the best round medians (issue 16's method), the ratio of the fastest runs, and Tessel's GFLOP/s as a
share of the FMA peak of the ISA (`tessel bench` measures it on one core). Geometric means over the models, and over
the four tuned CNNs when the run has them and others.

usage: bench/compare.py [--tessel build/tessel] [--models-dir DIR] [--threads 1 2] [--rounds 5]
                        [--iterations 20] [--min-round-ms 300] [--warmup 3] [--set cnn4|all|dense | --models resnet18 ...]
                        [--isa auto|avx2|avx512|avx2,avx512] [--markdown FILE]
"""
import argparse
import ast
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



def export_lists():
    """MODELS, MORE_MODELS and DENSE_MODELS of scripts/export-models.py (read without importing torch)."""
    with open(os.path.join(ROOT, "scripts/export-models.py")) as f:
        tree = ast.parse(f.read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("MODELS", "MORE_MODELS", "DENSE_MODELS"):
                found[node.targets[0].id] = tuple(ast.literal_eval(node.value))
    return found["MODELS"], found["MORE_MODELS"], found["DENSE_MODELS"]


# --set: "cnn4" the four tuned CNNs, "all" those and torchvision's other CNN classifiers (issue 16), "dense"
# the dense-prediction networks at 512-520 pixels (segmentation heads, atrous convs, upsampling, skip concats).
SETS = {"cnn4": MODELS, "all": MODELS + export_lists()[1], "dense": export_lists()[2]}


def has_avx512():
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and " avx512f" in line for line in f)


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


# A round trip above this means the host put the two vCPUs apart (on this kind of VM: 50-90 ns close, 310-360 apart).
APART_NS = 200.0


def core_state(before, after):
    """'close' or 'apart' when the probes before and after a round agree, else None (the vCPUs moved)."""
    if before is None or after is None:
        return None
    if before < APART_NS and after < APART_NS:
        return "close"
    if before >= APART_NS and after >= APART_NS:
        return "apart"
    return None


def state_cell(ratios):
    return f"{statistics.median(ratios):.2f} ({len(ratios)})" if ratios else "-"


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


def fma_flops_per_cycle(isa):
    """FLOP per cycle per core of the FMA units for code of `isa`: 2 units x lanes x 2. AMD's Zen 4 runs
    AVX-512 on 256-bit datapaths (a zmm FMA takes both halves), so its vector width for throughput is 8 lanes."""
    lanes = 16 if isa == "avx512" and cpu_info("vendor_id") != "AuthenticAMD" else 8
    return 2 * lanes * 2


def nominal_peak(threads, isa):
    """fma_flops_per_cycle(isa) at the clock /proc/cpuinfo reports (GFLOP/s)."""
    with open("/proc/cpuinfo") as f:
        mhz = max(float(line.split(":")[1]) for line in f if line.startswith("cpu MHz"))
    return threads * fma_flops_per_cycle(isa) * mhz / 1e3


def ensure_ort():
    if not os.path.isdir(os.path.join(ROOT, "bench/ort/node_modules/onnxruntime-node")):
        print("installing onnxruntime-node (npm --ignore-scripts) into bench/ort", file=sys.stderr)
        subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund"],
                       cwd=os.path.join(ROOT, "bench/ort"), check=True)


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def isa_list(text):
    isas = text.split(",")
    for isa in isas:
        if isa not in ("auto", "avx2", "avx512"):
            raise argparse.ArgumentTypeError(f"{isa}: expected auto, avx2 or avx512 (comma-separated)")
    return isas


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessel", default=os.path.join(ROOT, "build/tessel"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "bench/models"))
    ap.add_argument("--set", choices=sorted(SETS), default="cnn4",
                    help="cnn4: the four tuned CNNs (default); all: those and torchvision's other CNN classifiers; "
                         "dense: segmentation networks and a U-Net at 512-520 pixels")
    ap.add_argument("--models", nargs="+", choices=SETS["all"] + SETS["dense"], help="these models instead of --set")
    ap.add_argument("--isa", type=isa_list, default=["auto"],
                    help="tessel compile --isa of the Tessel side, comma-separated for several in one run "
                         "(e.g. avx2,avx512; default auto: what the CPU has)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5, help="alternations of Tessel and ORT per model/threads")
    ap.add_argument("--iterations", type=int, default=20,
                    help="timed runs per side and round, at least (see --min-round-ms)")
    ap.add_argument("--min-round-ms", type=float, default=300.0,
                    help="more iterations for fast models, so that each side of a round times at least this long "
                         "(from an untimed 3-run probe of the Tessel build; 0: exactly --iterations). A burst of host "
                         "noise then moves a few of a round's runs, not its median (default 300)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--markdown", help="also write the table (markdown) to this file")
    a = ap.parse_args()
    models = a.models or list(SETS[a.set])

    ensure_ort()
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts/export-models.py"), a.models_dir, "--models",
                    *models], check=True)
    compile_s, isa_of = {}, {}
    # The first compile for an ISA builds the runtime library for -march=native once (cached in
    # ~/.cache/tessel): done untimed here, so the "compile s" column is each model's own compile.
    for isa in a.isa:
        with tempfile.TemporaryDirectory() as warm:
            run_json([a.tessel, "compile", os.path.join(a.models_dir, f"{models[0]}.onnx"), "--isa", isa, "--json",
                      "-o", os.path.join(warm, "warm.so")])
    for m in models:
        for isa in a.isa:
            onnx = os.path.join(a.models_dir, f"{m}.onnx")
            start = time.monotonic()
            report = run_json([a.tessel, "compile", onnx, "--isa", isa, "--json", "-o",
                               os.path.join(a.models_dir, f"{m}.{isa}.so")])
            compile_s[m, isa] = time.monotonic() - start
            isa_of[isa] = report["isa"]
            print(f"compiled {m} --isa {isa} ({report['isa']}) in {compile_s[m, isa]:.1f} s", file=sys.stderr)

    latency_dir = tempfile.TemporaryDirectory()
    core_latency = CoreLatency(latency_dir.name)
    rows, peaks = [], {}
    for t in a.threads:
        for m in models:
            for isa in a.isa:
                inp = os.path.join(a.models_dir, f"{m}.input.npy")
                iterations = a.iterations
                if a.min_round_ms > 0:
                    probe = run_json([a.tessel, "bench", os.path.join(a.models_dir, f"{m}.{isa}.so"), "--input",
                                      f"input={inp}", "--threads", str(t), "--warmup", "1", "--iterations", "3",
                                      "--json"])
                    iterations = max(iterations, math.ceil(a.min_round_ms / max(probe["median_ms"], 1e-3)))
                common = ["--threads", str(t), "--warmup", str(a.warmup), "--iterations", str(iterations), "--json"]
                tessel_ms, ort_ms, tessel_min, ort_min, latencies, bench = [], [], [], [], [], {}

                def run_tessel():
                    r = run_json([a.tessel, "bench", os.path.join(a.models_dir, f"{m}.{isa}.so"), "--input",
                                  f"input={inp}", *common])
                    tessel_ms.append(r["median_ms"])
                    tessel_min.append(r["min_ms"])
                    bench.update(r)
                    # One core's FMA peak of the library's ISA, measured by tessel bench: the best of the run.
                    key = (isa_of[isa], t)
                    peaks[key] = max(peaks.get(key, 0.0), r.get("peak_gflop_per_s", 0.0) * t)

                def run_ort():
                    o = run_json(["node", os.path.join(ROOT, "bench/ort/ort_bench.js"),
                                  os.path.join(a.models_dir, f"{m}.onnx"), "--input", f"input={inp}", *common])
                    ort_ms.append(o["median_ms"])
                    ort_min.append(o["min_ms"])

                # Alternate, and swap which goes first every round, so both see the same machine conditions
                # (this machine's speed drifts by 10-30 % over seconds): each round is a pair measured back
                # to back, and the ratio reported is the median of the rounds' ratios.
                states = []  # per round: "close", "apart" or None (the vCPUs moved during it, or no probe)
                for i in range(a.rounds):
                    before = core_latency()
                    latencies.append(before)
                    first, second = (run_tessel, run_ort) if i % 2 == 0 else (run_ort, run_tessel)
                    first()
                    second()
                    states.append(core_state(before, core_latency()) if t > 1 else None)
                tm, om = statistics.median(tessel_ms), statistics.median(ort_ms)
                pair_ratios = [x / y for x, y in zip(tessel_ms, ort_ms)]
                by_state = {k: [x for x, st in zip(pair_ratios, states) if st == k] for k in ("close", "apart")}
                rows.append(dict(model=m, isa=isa_of[isa], threads=t, tessel_ms=tm, ort_ms=om,
                                 ratio=statistics.median(pair_ratios), ratio_lo=min(pair_ratios),
                                 ratio_hi=max(pair_ratios), min_ratio=min(tessel_min) / min(ort_min),
                                 best_median_ratio=min(tessel_ms) / min(ort_ms),
                                 gflop_s=bench["gflops"] / (tm / 1e3),
                                 compile_s=compile_s[m, isa], latency=[x for x in latencies if x is not None],
                                 iterations=iterations,
                                 by_state=by_state))
                print(f"{m} {isa_of[isa]} @{t}: tessel {tm:.2f} ms, ort {om:.2f} ms", file=sys.stderr)

    # The share of peak uses the nominal peak (clock x FLOP/cycle/core) or the measured one, whichever is
    # larger: on a loaded machine the FMA loop measures what this process gets, not what the cores can do.
    used = {k: max(nominal_peak(k[1], k[0]), p) for k, p in peaks.items()}
    for r in rows:
        r["peak_share"] = r["gflop_s"] / used[r["isa"], r["threads"]]
    isas = sorted(set(isa_of.values()))
    lines = [f"Date: {datetime.date.today()}; commit {git_commit()}; CPU: {cpu_info('model name') or platform.machine()} "
             f"(family {cpu_info('cpu family')} model {cpu_info('model')}{', AVX-512' if has_avx512() else ''}), "
             f"{os.cpu_count()} hardware threads; Tessel ISA(s): {', '.join(isas)}; load average at the end "
             f"{os.getloadavg()[0]:.1f}; {a.rounds} alternating rounds, each side of a round at least {a.iterations} "
             f"timed runs and at least {a.min_round_ms:.0f} ms of them (runs/round: the count); ms: median of "
             "the rounds' medians; Tessel/ORT: median of the rounds' ratios (each round a back-to-back pair), with "
             "their range; best medians: the lowest of Tessel's round medians over the lowest of ORT's (issue "
             "16's method: median latency, minima of the rounds); of minima: the fastest Tessel run over the "
             "fastest ORT run (on a VM whose speed drops for seconds at a time, the figure least moved by those "
             "drops).",
             "Peak used for the share (per ISA and threads): " +
             ", ".join(f"{isa} {t} thread(s) {used[isa, t]:.1f} GFLOP/s" for isa, t in sorted(used)) +
             " (the larger of: clock from /proc/cpuinfo x FMA FLOP/cycle/core of the ISA, and threads x the one-core "
             "FMA loop of `tessel bench` (best of the run): " +
             ", ".join(f"{isa} {p / t:.1f}" for (isa, t), p in sorted(peaks.items()) if t == min(a.threads)) + "). "
             "GFLOP/s count the model's direct-convolution FLOPs; Winograd convolutions do about a quarter of "
             "those multiplications, so a model with many of them can exceed 100% of the FMA peak. "
             "Core-to-core: the CPU 0 <-> CPU 1 cache-line round trip measured before each round (range); on "
             "a VM several hundred ns means the host put the two vCPUs apart, and 2-thread runs are then slower "
             "(docs/performance.md). Close / apart: the median Tessel/ORT of the 2-thread rounds whose probes before "
             f"and after were both below / both above {APART_NS:.0f} ns (how many rounds); a round with one of each "
             "(the host moved the vCPUs during it) counts in neither. Compile s: `tessel compile` of the model, after "
             "an untimed first compile "
             "that built the runtime library for this machine (once per ISA, cached in ~/.cache/tessel).",
             "",
             "| model | ISA | threads | Tessel ms | ORT ms | Tessel/ORT | rounds' range | best medians | of minima "
             "| close / apart | Tessel GFLOP/s | % of peak | compile s | core-to-core ns | runs/round |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['isa']} | {r['threads']} | {r['tessel_ms']:.2f} | {r['ort_ms']:.2f} | "
                     f"{r['ratio']:.2f} | {r['ratio_lo']:.2f}-{r['ratio_hi']:.2f} | {r['best_median_ratio']:.2f} | "
                     f"{r['min_ratio']:.2f} | "
                     + (f"{state_cell(r['by_state']['close'])} / {state_cell(r['by_state']['apart'])} | "
                        if r["threads"] > 1 else "- | ") +
                     f"{r['gflop_s']:.1f} | "
                     f"{100 * r['peak_share']:.0f}% | {r['compile_s']:.1f} | "
                     + (f"{min(r['latency']):.0f}-{max(r['latency']):.0f} |" if r['latency'] else "- |")
                     + f" {r['iterations']} |")
    lines.append("")
    for isa in isas:
        for t in a.threads:
            these = [r for r in rows if r["threads"] == t and r["isa"] == isa]
            # Over every model, and over the four tuned CNNs when the run has them all (issue 16's two sets).
            for label, group in (("", these), (", four CNNs", [r for r in these if r["model"] in MODELS])):
                if not group or (label and (len(group) != len(MODELS) or len(group) == len(these))):
                    continue
                worst = max(group, key=lambda r: r["ratio"])
                worst_best = max(group, key=lambda r: r["best_median_ratio"])
                lines.append(f"Geometric mean Tessel/ORT, {isa}, {t} thread(s){label}: "
                             f"{geomean([r['ratio'] for r in group]):.2f} (worst {worst['model']} {worst['ratio']:.2f}); "
                             f"of the best medians {geomean([r['best_median_ratio'] for r in group]):.2f} "
                             f"(worst {worst_best['model']} {worst_best['best_median_ratio']:.2f}); "
                             f"of the minima {geomean([r['min_ratio'] for r in group]):.2f}")
                for state in ("close", "apart"):
                    if t > 1 and group and all(r["by_state"][state] for r in group):
                        per = {r["model"]: statistics.median(r["by_state"][state]) for r in group}
                        worst_m = max(per, key=per.get)
                        lines.append(f"  {state} rounds only: geometric mean {geomean(list(per.values())):.2f} "
                                     f"(worst {worst_m} {per[worst_m]:.2f})")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 0


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
