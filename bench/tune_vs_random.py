#!/usr/bin/python3
"""Evolution against random search in `tessel tune` (issue 13): for each model, three seeds of each strategy with
the same generations x population (so the same number of evaluations), in one run. Prints per model the best
modelled cycles of each run, the medians, the untuned and tuned simulated cycles of the evolution runs, and
whether evolution beat random (median of the seeds). Records and convergence plots go to --out.

usage: bench/tune_vs_random.py [--tessel build/tessel] [--models-dir build/models] [--models resnet18 ...]
                               [--hw default] [--generations 20] [--population 32] [--seeds 1 2 3] [--out DIR]
Exit status: 0 when evolution beat random on every model, 1 otherwise, 2 bad arguments.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def tune(args, model, strategy, seed):
    stem = os.path.join(args.out, f"{model}.{args.hw}.s{seed}")
    record = stem + (".random.json" if strategy == "random" else ".json")
    cmd = [args.tessel, "tune", os.path.join(args.models_dir, model + ".onnx"), "--target", "npu", "--hw", args.hw,
           "--generations", str(args.generations), "--population", str(args.population), "--seed", str(seed),
           "--strategy", strategy, "-o", record]
    if strategy == "random":
        cmd.append("--no-plot")
    start = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    with open(record) as f:
        r = json.load(f)
    return {"best": r["best"]["fitness"], "evaluations": len(r["evaluations"]), "untuned": r["result"]["untuned"],
            "tuned": r["result"]["tuned"], "seconds": time.time() - start}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessel", default="build/tessel")
    ap.add_argument("--models-dir", default="build/models")
    ap.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1"])
    ap.add_argument("--hw", default="default")
    ap.add_argument("--generations", type=int, default=20)
    ap.add_argument("--population", type=int, default=32)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", default="tune-bench")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"# tessel tune: evolution vs random search, {args.generations} x {args.population}, seeds {args.seeds}, "
          f"--hw {args.hw}; {cpu_name()}, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    print("| model | evolution best (modelled) per seed | random best per seed | median evo / random | untuned -> tuned "
          "(simulated, evolution median seed) | evaluations | beats |")
    print("|---|---|---|---|---|---|---|")
    all_beat = True
    for model in args.models:
        evo = [tune(args, model, "evolution", s) for s in args.seeds]
        rnd = [tune(args, model, "random", s) for s in args.seeds]
        me = statistics.median(r["best"] for r in evo)
        mr = statistics.median(r["best"] for r in rnd)
        mid = sorted(evo, key=lambda r: r["best"])[len(evo) // 2]
        beat = me < mr
        all_beat &= beat
        evo_s = ", ".join(format(r["best"], ",") for r in evo)
        rnd_s = ", ".join(format(r["best"], ",") for r in rnd)
        print(f"| {model} | {evo_s} | {rnd_s} | "
              f"{me / mr:.3f} | {mid['untuned']:,} -> {mid['tuned']:,} ({100 * (mid['tuned'] / mid['untuned'] - 1):+.1f} %) | "
              f"{evo[0]['evaluations']} / {rnd[0]['evaluations']} | {'yes' if beat else 'NO'} |", flush=True)
    return 0 if all_beat else 1


if __name__ == "__main__":
    sys.exit(main())
