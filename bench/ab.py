#!/usr/bin/python3
"""A/B timing of two or more compiled models (.so) on this machine, alternating, the way every
per-change figure in docs/performance.md is measured.

usage: bench/ab.py A.so B.so [C.so ...] [--tessel build/tessel] [--threads 1] [--rounds 10]
                   [--iterations 30] [--warmup 3] [--max-core-latency NS]

Each round runs `tessel bench X.so --json` once for every model, in an order that rotates from round
to round, so a drift of the machine's speed (often 10-30% within seconds on a shared VM) hits all of
them alike. Prints, per model, the median and minimum over the rounds of its median latency, and
its ratio to the first model: the median of the per-round ratios, with their range.

On a VM the host sometimes places the two vCPUs far apart (a cache-line round trip of 300+ ns instead of
about 50), and 2-thread runs then take about their 1-thread time (docs/performance.md). With
--max-core-latency NS a round counts only when the CPU 0 <-> CPU 1 round trip (bench/compare.py's probe)
is below NS both before and after it; other rounds are run again, up to 5x --rounds attempts.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(tessel, so, threads, iterations, warmup):
    out = subprocess.run([tessel, "bench", so, "--threads", str(threads), "--iterations", str(iterations),
                          "--warmup", str(warmup), "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["median_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="compiled models (.so); the first is the baseline")
    ap.add_argument("--tessel", default=os.path.join(ROOT, "build/tessel"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--max-core-latency", type=float, default=None, metavar="NS",
                    help="count only rounds with the CPU 0 <-> CPU 1 cache-line round trip below NS before and after")
    args = ap.parse_args()
    if len(args.models) < 2:
        sys.exit("ab.py: give at least two models")
    latency = None
    if args.max_core_latency is not None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import tempfile
        from compare import CoreLatency
        latency = CoreLatency(tempfile.mkdtemp(prefix="tessel-ab-"))
        if latency.exe is None:
            sys.exit("ab.py: --max-core-latency needs 2 CPUs and g++")
    times = {m: [] for m in args.models}
    rounds = attempts = skipped = 0
    while rounds < args.rounds and attempts < (5 * args.rounds if latency else args.rounds):
        attempts += 1
        if latency and latency() >= args.max_core_latency:
            skipped += 1
            continue
        order = args.models[rounds % len(args.models):] + args.models[:rounds % len(args.models)]
        got = {m: bench(args.tessel, m, args.threads, args.iterations, args.warmup) for m in order}
        if latency and latency() >= args.max_core_latency:
            skipped += 1
            continue
        for m in args.models:
            times[m].append(got[m])
        rounds += 1
    if rounds == 0:
        sys.exit(f"ab.py: no round with the vCPUs closer than {args.max_core_latency} ns in {attempts} attempts")
    base = args.models[0]
    print(f"{rounds} rounds x {args.iterations} iterations, {args.threads} thread(s)" +
          (f"; {skipped} attempt(s) skipped (vCPUs apart)" if latency else ""))
    print(f"{'model':50} {'median ms':>10} {'min ms':>8} {'ratio':>6} {'range':>11}")
    for m in args.models:
        ratios = [t / b for t, b in zip(times[m], times[base])]
        print(f"{m[-50:]:50} {statistics.median(times[m]):10.3f} {min(times[m]):8.3f} "
              f"{statistics.median(ratios):6.3f} {min(ratios):5.2f}-{max(ratios):4.2f}")


if __name__ == "__main__":
    main()
