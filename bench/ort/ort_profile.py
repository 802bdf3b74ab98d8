#!/usr/bin/python3
"""Summarises an ONNX Runtime profile (ort_bench.js --profile PREFIX) per node, in execution order.

usage: bench/ort/ort_profile.py PROFILE.json [--skip-runs N]

Prints one row per kernel call: node name (ORT's, after its graph optimisations), op, output shape,
median and minimum microseconds over the runs, and the share of the summed medians; then the totals.
The first N runs (default 5, ort_bench.js's warm-up) are left out.
"""
import argparse
import json
import statistics
import sys
from collections import OrderedDict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--skip-runs", type=int, default=5)
    args = ap.parse_args()
    with open(args.profile) as f:
        events = json.load(f)
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    runs = runs[args.skip_runs:]
    if not runs:
        sys.exit("no model_run events after the warm-up runs")
    first_ts = runs[0]["ts"]
    nodes = OrderedDict()
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < first_ts:
            continue
        name = e["name"][: -len("_kernel_time")]
        a = e.get("args", {})
        shape = a.get("output_type_shape", [{}])
        shape = "x".join(str(d) for d in next(iter(shape[0].values()), [])) if shape else ""
        nodes.setdefault(name, {"op": a.get("op_name", "?"), "shape": shape, "times": []})["times"].append(e["dur"])
    total = sum(statistics.median(n["times"]) for n in nodes.values())
    print(f"{'#':>3}  {'node':60} {'op':18} {'output':18} {'med us':>8} {'min us':>8} {'share':>6}")
    for i, (name, n) in enumerate(nodes.items()):
        med = statistics.median(n["times"])
        print(f"{i:3}  {name[:60]:60} {n['op'][:18]:18} {n['shape'][:18]:18} {med:8.1f} {min(n['times']):8.1f}"
              f" {100 * med / total:5.1f}%")
    print(f"     total of {len(nodes)} kernel calls: {total / 1000:.3f} ms (sum of medians), "
          f"model_run median {statistics.median(r['dur'] for r in runs) / 1000:.3f} ms over {len(runs)} runs")


if __name__ == "__main__":
    main()
