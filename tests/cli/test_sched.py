#!/usr/bin/python3
"""`tessel sched` and the NPU schedule flags of `tessel compile`, on a ResNet basic block built here (16 channels,
24x24: conv3x3 -> relu -> conv3x3 -> add -> relu):
  sched --compare --json   every documented key; MAC-ideal cycles and compulsory DRAM bytes against counts made
                           here from the model; bound <= window <= sequential; no hazard; peaks within capacity
  sched --json / text      the schedule (groups, strategy, window) and the group table
  sched --dump-deps        Graphviz whose edges name their dependency kinds
  compile --npu-strategy   greedy and sequential programs compute what `tessel run` computes on the ONNX model
  bad flags                --npu-strategy with --target cpu, an unknown strategy: exit 2
Usage: test_sched.py --tessel build/tessel"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

C, H = 16, 24


def basic_block(path):
    rng = np.random.default_rng(7)
    w = lambda name: numpy_helper.from_array((rng.standard_normal((C, C, 3, 3)) * 0.1).astype(np.float32), name)
    conv = lambda i, o, wn, name: helper.make_node("Conv", [i, wn], [o], name=name, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    nodes = [conv("x", "c1", "w1", "conv1"), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2", "conv2"), helper.make_node("Add", ["c2", "x"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu2")]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, C, H, H])
    g = helper.make_graph(nodes, "block", [vi("x")], [vi("y")], [w("w1"), w("w2")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    np.save(path + ".x.npy", rng.standard_normal((1, C, H, H)).astype(np.float32))


def check_compare(c, model):
    code, out, err = c.run(["sched", model, "--hw", "tiny", "--compare", "--json"])
    c.check("sched --compare --json exits 0", code == 0, err)
    if code != 0:
        return
    j = json.loads(out)
    top = {"configuration", "mac_ideal_cycles", "lower_bound_cycles", "compulsory_dram_bytes", "host_nodes", "npu_calls",
           "schedules", "sram_capacity_bytes", "groups"}
    c.check("compare: top-level keys", top <= set(j), sorted(top - set(j)))
    s = j.get("schedules", {})
    names = {"sequential", "greedy", "layer_by_layer", "window"}
    c.check("compare: the four schedules", names == set(s), sorted(s))
    entry = {"cycles", "dram_bytes", "peak_sram_bytes", "hazards"}
    c.check("compare: each schedule has cycles, dram_bytes, peak_sram_bytes, hazards",
            all(entry <= set(s.get(n, {})) for n in names), {n: sorted(s.get(n, {})) for n in names})
    g = s.get("greedy", {})
    greedy_keys = {"sram_needed_bytes", "sram_needed_total_bytes", "cycles_forced_to_fit", "forced_to_fit",
                   "forced_to_fit_tile_caps", "buffers_over_capacity"}
    c.check("compare: greedy's SRAM need and forced-to-fit cycles", greedy_keys <= set(g), sorted(greedy_keys - set(g)))
    if not (top <= set(j) and names == set(s) and greedy_keys <= set(g)):
        return
    macs = 2 * C * C * 9 * H * H
    c.check("compare: mac_ideal_cycles = MACs / 16^2 (counted from the model here)",
            j["mac_ideal_cycles"] == -(-macs // 256), (j["mac_ideal_cycles"], macs))
    compulsory = 4 * (2 * C * H * H + 2 * C * C * 9)  # input, output, the two weight tensors
    c.check("compare: compulsory_dram_bytes = input + output + weights", j["compulsory_dram_bytes"] == compulsory,
            (j["compulsory_dram_bytes"], compulsory))
    c.check("compare: no host node", j["host_nodes"] == [], j["host_nodes"])
    lb, win, seq = j["lower_bound_cycles"], s["window"]["cycles"], s["sequential"]["cycles"]
    c.check("compare: MAC-ideal <= lower bound <= window < sequential", j["mac_ideal_cycles"] <= lb <= win < seq,
            (j["mac_ideal_cycles"], lb, win, seq))
    c.check("compare: greedy forced to fit is no faster than greedy on unbounded buffers",
            g["cycles_forced_to_fit"] >= g["cycles"], (g["cycles_forced_to_fit"], g["cycles"]))
    c.check("compare: no hazard in any schedule", all(s[n]["hazards"] == 0 for n in names) and
            g["forced_to_fit"]["hazards"] == 0, {n: s[n]["hazards"] for n in names})
    cap = j["sram_capacity_bytes"]
    within = all(v <= cap[b] for n in ("window", "layer_by_layer", "sequential") for b, v in s[n]["peak_sram_bytes"].items())
    c.check("compare: peak SRAM within capacity on the real buffers", within, {n: s[n]["peak_sram_bytes"] for n in names})
    over = [b for b, v in g["sram_needed_bytes"].items() if v > cap[b]]
    c.check("compare: buffers_over_capacity lists exactly the buffers greedy's need exceeds", over == g["buffers_over_capacity"],
            (over, g["buffers_over_capacity"]))
    rows = [r for sub in j["groups"] for r in sub["groups"]]
    c.check("compare: the per-group table names every node once",
            sorted(n for r in rows for n in r["nodes"]) == sorted(["conv1", "relu1", "conv2", "add", "relu2"]), rows)


def check_plain(c, model, d):
    code, out, err = c.run(["sched", model, "--hw", "edge", "--json"])
    ok = code == 0
    if ok:
        j = json.loads(out)
        text = json.dumps(j)
        ok = "strategy" in text and "groups" in text and "conv1" in text
    c.check("sched --json prints the schedule", ok, err or out[:400])
    code, out, err = c.run(["sched", model, "--hw", "edge"])
    c.check("sched prints the schedule and a group table",
            code == 0 and "schedule of subgraph" in out and "MAC-ideal" in out and "total:" in out, err or out)
    c.check("sched says when no node is left on the host", code == 0 and "host nodes: none" in out, out[-400:])
    # conv-only sends only the convolutions to the NPU: both Relus and the Add stay on the host, each listed
    # with the partitioner's reason, in the text and in the JSON.
    code, out, err = c.run(["sched", model, "--hw", "conv-only"])
    c.check("sched lists every host node with its reason",
            code == 0 and "host nodes: 3" in out and "add (Add): " in out and "relu1 (Relu): " in out
            and "does not list operator Add" in out, err or out[-600:])
    code, out, err = c.run(["sched", model, "--hw", "conv-only", "--json"])
    hosts = json.loads(out).get("host_nodes", []) if code == 0 else []
    c.check("sched --json: host_nodes with node, op and reason",
            sorted(h["node"] for h in hosts) == ["add", "relu1", "relu2"] and all(h["reason"] for h in hosts), out[-600:])
    dot = os.path.join(d, "deps.dot")
    code, out, err = c.run(["sched", model, "--hw", "tiny", "--dump-deps", dot, "--deps-count", "60"])
    text = open(dot).read() if os.path.exists(dot) else ""
    # The accumulating gemms of a convolution rewrite what the previous one wrote: RAW+WAW edges.
    c.check("sched --dump-deps writes a Graphviz graph whose edges name their kinds (RAW, WAW)",
            code == 0 and text.startswith("digraph") and 'label="RAW", style=solid' in text and "WAW" in text,
            err or text[:300])


def check_strategies(c, model, d):
    x = model + ".x.npy"
    code, out, err = c.run(["run", model, "--input", f"x={x}", "-o", os.path.join(d, "ref")])
    c.check("run on the ONNX model (reference)", code == 0, err)
    want = np.load(os.path.join(d, "ref", "y.npy")) if code == 0 else None
    for strategy in ("greedy", "sequential", "window"):
        tnpu = os.path.join(d, f"{strategy}.tnpu")
        code, out, err = c.run(["compile", model, "--target", "npu", "--hw", "tiny", "--npu-strategy", strategy,
                                "-o", tnpu])
        ok = code == 0
        if ok:
            code, out, err = c.run(["sim", tnpu, "--json", "--input", f"x={x}", "-o", os.path.join(d, strategy)])
            ok = code == 0 and json.loads(out)["hazards"] == 0
        if ok and want is not None:
            got = np.load(os.path.join(d, strategy, "y.npy"))
            ok = float(np.abs(got - want).max()) <= 1e-4 * float(np.abs(want).max())
        c.check(f"compile --npu-strategy {strategy}: no hazard, output matches the reference", ok, err or out[:300])
    # sim --profile: one row per node, the matrix unit's breakdown; with --json the same as a "profile" object whose
    # per-unit totals are the run's own busy cycles.
    tnpu = os.path.join(d, "window.tnpu")
    code, out, err = c.run(["sim", tnpu, "--profile", "--input", f"x={x}"])
    c.check("sim --profile prints the per-node table and the matrix unit's breakdown",
            code == 0 and "per-node profile" in out and "setup and weight shifts" in out and "conv1" in out and "conv2" in out,
            err or out[-500:])
    code, out, err = c.run(["sim", tnpu, "--profile", "--json", "--input", f"x={x}"])
    ok = code == 0
    if ok:
        j = json.loads(out)
        prof = j.get("profile", {})
        ok = bool(prof.get("nodes")) and all(
            prof["totals"]["busy"][u] == j["units"][u]["busy"] for u in ("LD", "MM", "VEC", "ST"))
    c.check("sim --profile --json: a profile whose per-unit totals are the run's busy cycles", ok, err or out[:300])
    code, out, err = c.run(["compile", model, "--npu-strategy", "greedy", "-o", os.path.join(d, "m.so")])
    c.check("--npu-strategy with --target cpu: exit 2 naming the flag", code == 2 and "--npu-strategy" in err, (code, err))
    code, out, err = c.run(["compile", model, "--target", "npu", "--hw", "tiny", "--npu-strategy", "fastest"])
    c.check("--npu-strategy fastest: exit 2 naming the choices", code == 2 and "greedy" in err, (code, err))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", required=True)
    args = ap.parse_args()
    c = Checks(os.path.abspath(args.tessel))
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "block.onnx")
        basic_block(model)
        check_compare(c, model)
        check_plain(c, model, d)
        check_strategies(c, model, d)
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
