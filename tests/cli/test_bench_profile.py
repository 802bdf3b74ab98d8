#!/usr/bin/python3
"""`tessel bench --profile --trace` on a small CNN compiled to a .so.

Checks that the per-layer table has one row per kernel call (the count `tessel compile` reports), with
positive times whose shares sum to 100 % and whose total is close to the whole inference; that the FLOPs
of the conv/GEMM rows equal the ones computed here from the model's shapes; that the Chrome trace is valid
JSON with one "inference" event per timed run and every kernel call nested inside it; that the model ABI
version is checked; and that a bad --trace path is one clear error (exit status 2).
Usage: test_bench_profile.py --tessel build/tessel
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

failures = []
count = 0


def check(name, ok, detail=""):
    global count
    count += 1
    if ok:
        print(f"ok   {name}")
    else:
        failures.append(name)
        print(f"FAIL {name}\n  {str(detail).strip()[:800]}")


def run(tessel, args, timeout=300):
    p = subprocess.run([tessel] + args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def small_cnn(path):
    """Conv+BN+Relu -> MaxPool -> 1x1 Conv + residual Add + Relu -> GlobalAveragePool -> Flatten -> Gemm ->
    Softmax on 1x3x16x16. Returns {node name: FLOPs} for the convolutions and the GEMM (2 x multiply-adds),
    computed from the shapes here."""
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    inits = [numpy_helper.from_array(f(8, 3, 3, 3), "w1"), numpy_helper.from_array(f(8), "b1"),
             numpy_helper.from_array(np.abs(f(8)) + 0.5, "gamma"), numpy_helper.from_array(f(8), "beta"),
             numpy_helper.from_array(f(8), "mean"), numpy_helper.from_array(np.abs(f(8)) + 0.5, "var"),
             numpy_helper.from_array(f(8, 8, 1, 1), "w2"), numpy_helper.from_array(f(10, 8), "wfc"),
             numpy_helper.from_array(f(10), "bfc")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="stem_conv", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn1"], name="stem_bn"),
             helper.make_node("Relu", ["bn1"], ["r1"], name="stem_relu"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], name="block_conv", kernel_shape=[1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["a2"], name="block_add"),
             helper.make_node("Relu", ["a2"], ["r2"], name="block_relu"),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["fl"], name="flatten"),
             helper.make_node("Gemm", ["fl", "wfc", "bfc"], ["logits"], name="fc", transB=1),
             helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1)]
    g = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return {"stem_conv": 2 * 8 * 3 * 3 * 3 * 16 * 16, "block_conv": 2 * 8 * 8 * 1 * 1 * 8 * 8, "fc": 2 * 1 * 10 * 8}, \
        {n.name for n in nodes}


def parse_table(text):
    """Rows of the per-layer table: (index, node, op, kernel, shape, ms, min ms, gflops, share%); the total line's
    ms; the whole inference's median."""
    rows, total = [], None
    section = text.split("per-layer profile", 1)[-1].split("by kernel:", 1)[0]
    for line in section.splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if re.fullmatch(r"\d+", cols[0]) and len(cols) == 9:
            rows.append((int(cols[0]), cols[1], cols[2], cols[3], cols[4], float(cols[5]), float(cols[6]), cols[7],
                         float(cols[8].rstrip("%"))))
        elif cols[0].startswith("total of"):
            total = float(cols[1])
    whole = re.search(r"whole inference \(median\)\s+([\d.]+)", section)
    return rows, total, float(whole.group(1)) if whole else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", default=os.path.join(os.path.dirname(__file__), "../../build/tessel"))
    tessel = os.path.abspath(ap.parse_args().tessel)
    iterations = 15
    with tempfile.TemporaryDirectory() as d:
        j = lambda n: os.path.join(d, n)
        flops, node_names = small_cnn(j("cnn.onnx"))
        # NCHW: the stem conv, its ReLU and the MaxPool fuse into one call there (in NCHWc8 the 3x3 stem has its
        # own kernel and the pool runs blocked).
        code, out, err = run(tessel, ["compile", j("cnn.onnx"), "-o", j("cnn.so"), "--layout", "nchw"])
        m = re.search(r"kernel calls: (\d+)", out + err)
        check("compile the small CNN", code == 0 and m, out + err)
        if code != 0 or not m:
            return 1
        calls = int(m.group(1))

        # 1. Text table.
        trace = j("trace.json")
        code, out, err = run(tessel, ["bench", j("cnn.so"), "--threads", "1", "--warmup", "3", "--iterations",
                                      str(iterations), "--profile", "--trace", trace])
        check("bench --profile --trace exits 0", code == 0, out + err)
        rows, total, whole = parse_table(out)
        check(f"one table row per kernel call ({calls})", len(rows) == calls and
              [r[0] for r in rows] == list(range(calls)), out)
        check("every row has a positive time, min <= median", rows and all(0 < r[6] <= r[5] for r in rows), out)
        check("rows name graph nodes", rows and all(r[1] in node_names or r[2] == "copy to output" for r in rows),
              out)
        check("shares sum to 100%", rows and abs(sum(r[8] for r in rows) - 100) < 0.1 * len(rows) + 0.2, out)
        check("total line is the sum of the rows", total is not None and
              abs(total - sum(r[5] for r in rows)) <= 1e-4 * len(rows) + 1e-3 * total, out)
        # Sum of per-step medians vs median of whole runs: equal up to noise and the call overhead.
        check("total of the calls is close to the whole inference", total and whole and 0.5 * whole <= total <= 1.05 * whole,
              f"total {total} whole {whole}")
        conv_rows = {r[1]: r for r in rows if r[1] in flops}
        check("conv, conv and gemm rows present", set(conv_rows) == set(flops), out)
        # Within the rounding of the printed columns (ms to 4 decimals, GFLOP/s to 1).
        check("GFLOP/s column = FLOPs / time", conv_rows and all(
            abs(float(r[7]) - flops[r[1]] / (r[5] * 1e6)) <= 0.05 + float(r[7]) * (0.51e-4 / r[5] + 1e-3)
            for r in conv_rows.values()), out)
        # The stem conv and its MaxPool run as one fused call, labelled with everything it absorbed (the
        # BatchNormalization is folded into the weights by the fold-batchnorm pass, before lowering).
        check("by-kernel totals printed", "by kernel:" in out and "conv2d_nchw_direct_small_cin_maxpool" in out, out)
        check("fused stem row shows conv+Relu+MaxPool",
              any(r[1] == "stem_conv" and r[2] == "conv+Relu+MaxPool" for r in rows), out)

        # 2. Trace.
        try:
            doc = json.load(open(trace))
            events = doc["traceEvents"]
        except Exception as e:  # noqa: BLE001 - any failure to read it is the test failing
            check("trace is valid JSON with traceEvents", False, e)
            events = None
        if events is not None:
            check("trace is valid JSON with traceEvents", isinstance(events, list), "")
            xs = [e for e in events if e.get("ph") == "X"]
            runs = [e for e in xs if e.get("cat") == "inference"]
            kernels = [e for e in xs if e.get("cat") != "inference"]
            check(f"one inference event per timed run ({iterations})", len(runs) == iterations, len(runs))
            check("one kernel event per call per run", len(kernels) == calls * iterations, len(kernels))
            check("events have numeric ts/dur >= 0, pid, tid", all(
                isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0 and
                "pid" in e and "tid" in e for e in xs), xs[:2])
            check("thread named by metadata", any(e.get("ph") == "M" and e.get("name") == "thread_name" for e in events),
                  "")
            nested = True
            coverage = []
            for r in runs:
                inside = [k for k in kernels if r["ts"] - 1e-3 <= k["ts"] and k["ts"] + k["dur"] <= r["ts"] + r["dur"] + 1e-3]
                nested = nested and len(inside) == calls and all(k["tid"] == r["tid"] for k in inside)
                coverage.append(sum(k["dur"] for k in inside) / r["dur"])
            check("every run's kernel calls lie inside its inference event", nested, "")
            # A run lasts tens of microseconds on this small model, so one preemption by the OS can take a single
            # run below 90 % (CI saw one run at 11 %). Overhead of Tessel's own making would show in most runs: it
            # must be at least 9 runs in 10 that reach 90 %, and no run may have kernels longer than itself.
            covered = sum(c >= 0.9 for c in coverage)
            check("kernel calls account for >= 90% of the wall time of at least 9 runs in 10",
                  coverage and covered >= 0.9 * len(coverage) - 1e-9 and max(coverage) <= 1.0 + 1e-6, coverage)
            names = {k["args"]["node"] for k in kernels}
            check("trace names the nodes", {"stem_conv", "block_conv", "gap", "fc"} <= names, names)

        # 3. --json with --profile, two threads.
        code, out, err = run(tessel, ["bench", j("cnn.so"), "--threads", "2", "--warmup", "2", "--iterations", "5",
                                      "--profile", "--json"])
        try:
            doc = json.loads(out)
            layers = doc["profile"]["layers"]
        except Exception as e:  # noqa: BLE001
            doc, layers = None, None
            check("--json --profile has the per-layer list", False, f"{e}: {out}{err}")
        if layers is not None:
            check("--json --profile has the per-layer list", len(layers) == calls and doc["threads"] == 2, out)
            check("json layers: 0 < min_ms <= ms, share sums to 1", all(0 < l["min_ms"] <= l["ms"] for l in layers) and
                  abs(sum(l["share"] for l in layers) - 1) < 1e-6, layers)
            check("json layers: FLOPs of conv/gemm as computed from the model", all(
                l["flops"] == flops[l["node"]] and abs(l["gflop_per_s"] - l["flops"] / (l["ms"] * 1e6)) < 1e-6
                for l in layers if l["node"] in flops) and sum(1 for l in layers if l["node"] in flops) == 3, layers)
            check("json keeps median_ms/min_ms/p90_ms", all(k in doc for k in ("median_ms", "min_ms", "p90_ms")), doc)
        code, out, err = run(tessel, ["bench", j("cnn.so"), "--iterations", "2", "--warmup", "0", "--json"])
        check("no profile without --profile", code == 0 and "profile" not in json.loads(out), out + err)

        # 4. --isa: the compile report and the library say which ISA; bench reports GFLOP/s against the FMA peak
        # of that ISA, measured on one core.
        native = "avx512" if " avx512f" in open("/proc/cpuinfo").read() else "avx2"
        for isa in ("avx2", native):
            code, out, err = run(tessel, ["compile", j("cnn.onnx"), "--isa", isa, "--json", "-o", j(f"cnn-{isa}.so")])
            report = json.loads(out) if code == 0 else {}
            check(f"compile --isa {isa} --json reports isa {isa}", report.get("isa") == isa, out + err)
            code, out, err = run(tessel, ["bench", j(f"cnn-{isa}.so"), "--iterations", "3", "--warmup", "1", "--json"])
            doc = json.loads(out) if code == 0 else {}
            peak = doc.get("peak_gflop_per_s", 0)
            check(f"bench --json of the {isa} library: isa, peak_gflop_per_s > 0, peak_fraction = gflop_per_s / peak",
                  doc.get("isa") == isa and peak > 0 and abs(doc["peak_fraction"] - doc["gflop_per_s"] / peak) < 1e-9,
                  out + err)

        # 5. Bad --trace paths and a model of another ABI.
        for what, path in (("missing directory", "/nonexistent-dir/t.json"), ("a directory", d)):
            code, out, err = run(tessel, ["bench", j("cnn.so"), "--iterations", "1", "--trace", path])
            check(f"--trace into {what}: exit 2, one error naming it", code == 2 and err.count("error") == 1 and
                  "cannot write trace" in err and path in err and "Traceback" not in err, f"rc {code}: {out}{err}")
        check("no trace left behind on error", not os.path.exists("/nonexistent-dir/t.json"), "")
        open(j("old.cpp"), "w").write('extern "C" int tessel_abi_version(void) { return 1; }\n')
        subprocess.run([os.environ.get("CXX", "g++"), "-shared", "-fPIC", "-o", j("old.so"), j("old.cpp")], check=True)
        code, out, err = run(tessel, ["bench", j("old.so"), "--profile"])
        check("a .so of another ABI: exit 2, asks to recompile", code == 2 and "ABI 1" in err and "recompile" in err,
              f"rc {code}: {err}")
    print(f"{count - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
