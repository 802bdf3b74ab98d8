#!/usr/bin/python3
"""`tessel tune` and `tessel compile --tuning-file` on the ResNet basic block of test_sched.py (tiny configuration):
  tune                 exit 0, a record with the documented keys, tuned <= untuned, a convergence plot
  reproducible         the same command (and with --jobs 1) writes the same record byte for byte; a finished
                       record given again is kept as it is
  compile              --tuning-file: a .tnpu (byte-identical twice) whose simulated cycles are the record's and
                       whose output matches `tessel run` on the ONNX model, without hazards
  --print-genome       the sites, the compiler's options marked (cpu: a layout gene per region, then kernels)
  bad records          truncated, another configuration, another model, another format version, not a record;
                       a cpu record for the npu; --target ref (no tuner); a bad --dram-budget, one for the cpu, or
                       another one than the record's: exit 2 with a message
Usage: test_tune.py --tessel build/tessel"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402
from test_sched import basic_block  # noqa: E402


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", required=True)
    args = ap.parse_args()
    c = Checks(os.path.abspath(args.tessel))
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "block.onnx")
        basic_block(model)
        x = model + ".x.npy"
        tune = ["tune", model, "--target", "npu", "--hw", "tiny", "--generations", "3", "--population", "6", "--seed", "4"]
        rec = os.path.join(d, "a.json")
        code, out, err = c.run(tune + ["-o", rec])
        c.check("tune exits 0 and says how to use the record", code == 0 and "--tuning-file" in out, err[-600:])
        if code != 0:
            return c.summary()
        r = json.loads(read(rec))
        keys = {"format", "version", "identity", "search", "sites", "evaluations", "generations", "best", "result"}
        c.check("record: documented keys", keys <= set(r), sorted(keys - set(r)))
        res = r.get("result", {})
        c.check("record: the DRAM budget (default 3) in the identity; the result within its limit",
                r["identity"].get("dram_budget") == 3.0 and res.get("tuned_dram_bytes", 1) <= res.get("dram_limit_bytes", 0) and
                res.get("dram_limit_bytes", 0) >= 3 * res.get("compulsory_dram_bytes", 1 << 60) - 1,
                json.dumps(r["identity"]) + " " + json.dumps({k: v for k, v in res.items() if "dram" in k}))
        c.check("record: 3 generations, the compiler's genome evaluated first",
                len(r["generations"]) == 3 and r["evaluations"][0]["genome"] == [s["default"] for s in r["sites"]],
                (len(r["generations"]), r["evaluations"][0]))
        res = r["result"]
        c.check("record: tuned <= untuned (simulated)", res["tuned"] <= res["untuned"], res)
        c.check("convergence plot next to the record", os.path.getsize(os.path.join(d, "a.svg")) > 1000
                if os.path.exists(os.path.join(d, "a.svg")) else False, err[-300:])
        code, out, err = c.run(tune + ["-o", os.path.join(d, "b.json"), "--jobs", "1", "--no-plot"])
        c.check("same seed, --jobs 1: the same record byte for byte", code == 0 and read(rec) == read(os.path.join(d, "b.json")),
                err[-300:])
        before = read(rec)
        code, out, err = c.run(tune + ["-o", rec, "--no-plot"])
        c.check("a finished record given again is kept as it is", code == 0 and read(rec) == before, err[-300:])
        code, out, err = c.run(tune + ["--print-genome"])
        c.check("--print-genome lists the sites with the compiler's choices", code == 0 and "(compiler's)" in out and
                "window" in out, err[-300:] or out[:300])

        code, out, err = c.run(["run", model, "--input", f"x={x}", "-o", os.path.join(d, "ref")])
        want = np.load(os.path.join(d, "ref", "y.npy")) if code == 0 else None
        tnpu = os.path.join(d, "t.tnpu")
        compile_ = ["compile", model, "--target", "npu", "--hw", "tiny", "--tuning-file", rec]
        code, out, err = c.run(compile_ + ["-o", tnpu])
        code2, _, err2 = c.run(compile_ + ["-o", os.path.join(d, "t2.tnpu")])
        c.check("compile --tuning-file: exit 0, the same .tnpu twice", code == 0 and code2 == 0 and
                read(tnpu) == read(os.path.join(d, "t2.tnpu")), err[-300:] + err2[-300:])
        if code == 0:
            code, out, err = c.run(["sim", tnpu, "--json", "--input", f"x={x}", "-o", os.path.join(d, "tuned")])
            ok = code == 0
            if ok:
                s = json.loads(out)
                got = np.load(os.path.join(d, "tuned", "y.npy"))
                ok = (s["hazards"] == 0 and s["cycles"] == res["tuned"] and want is not None and
                      float(np.abs(got - want).max()) <= 1e-4 * float(np.abs(want).max()))
            c.check("the tuned .tnpu: no hazard, the record's cycles, output matches the reference", ok, err[-300:] or out[:300])

        # The CPU: kernels per convolution geometry, fitness measured; the winner never slower side by side.
        cpu_rec = os.path.join(d, "cpu.json")
        code, out, err = c.run(["tune", model, "--target", "cpu", "--generations", "2", "--population", "3", "-o", cpu_rec,
                                "--no-plot"])
        ok = code == 0
        if ok:
            res = json.loads(read(cpu_rec))["result"]
            ok = (res["tuned"] <= res["untuned"] and res["unit"] == "ns" and "conv_kernels" in res and
                  isinstance(res.get("layout_regions"), dict))
        c.check("tune --target cpu: a record whose winner is not slower than untuned (side by side)", ok, err[-400:])
        # With AVX2 code the block's convolutions form one layout region (blocked by the compiler): a layout gene.
        code, out, err = c.run(["tune", model, "--target", "cpu", "--isa", "avx2", "--print-genome"])
        c.check("tune --target cpu --print-genome: a layout gene per region, then the kernel genes",
                code == 0 and "1 layout regions" in out and any(
                    "] layout conv1 " in l and "nchwc8" in l and "(compiler's)" in l for l in out.splitlines()),
                err[-300:] or out[:600])
        so = os.path.join(d, "tuned.so")
        code, out, err = c.run(["compile", model, "--tuning-file", cpu_rec, "-o", so])
        if code == 0:
            code, out, err = c.run(["compare", model, so, "--input", f"x={x}"])
        c.check("compile --tuning-file with a cpu record: the .so matches the model", code == 0 and "PASS" in out, err[-400:] or out[-400:])

        def refused(name, argv, words):
            code, out, err = c.run(argv)
            c.check(f"{name}: exit 2 naming the problem", code == 2 and all(w in err for w in words), (code, err[-400:]))

        text = read(rec)
        trunc = os.path.join(d, "trunc.json")
        with open(trunc, "wb") as f:
            f.write(text[: len(text) // 2])
        refused("truncated record", ["compile", model, "--target", "npu", "--hw", "tiny", "--tuning-file", trunc],
                ["not valid JSON"])
        refused("record of another configuration", ["compile", model, "--target", "npu", "--hw", "default", "--tuning-file", rec],
                ["another configuration"])
        other = os.path.join(d, "other.onnx")
        basic_block(other)
        m = onnx.load(other)
        m.graph.name = "another block"  # the same network, another file
        onnx.save(m, other)
        refused("record of another model", ["compile", other, "--target", "npu", "--hw", "tiny", "--tuning-file", rec],
                ["another model"])
        j = json.loads(text)
        j["version"] = 99
        ver = os.path.join(d, "ver.json")
        with open(ver, "w") as f:
            json.dump(j, f)
        refused("record of another format version", ["compile", model, "--target", "npu", "--hw", "tiny", "--tuning-file", ver],
                ["format version 99"])
        notrec = os.path.join(d, "not.json")
        with open(notrec, "w") as f:
            f.write('{"conv_kernels": {}}')
        refused("a file that is not a record", ["compile", model, "--target", "npu", "--hw", "tiny", "--tuning-file", notrec],
                ["not a tuning record"])
        refused("tune --target ref (no tuner)", ["tune", model, "--target", "ref", "-o", os.path.join(d, "c.json")],
                ["no whole-graph tuner"])
        refused("a cpu record for --target npu", ["compile", model, "--target", "npu", "--hw", "tiny", "--tuning-file",
                                                  os.path.join(d, "cpu.json")], ["another target"])
        refused("tune -o without .json", tune + ["-o", os.path.join(d, "r.txt")], [".json"])
        refused("tune --dram-budget that is not a number", tune + ["-o", os.path.join(d, "e.json"), "--dram-budget", "lots"],
                ["--dram-budget lots", "expected a number"])
        refused("tune --dram-budget with --target cpu", ["tune", model, "--target", "cpu", "-o", os.path.join(d, "e.json"),
                                                        "--dram-budget", "2"], ["does not apply", "cpu"])
        refused("resuming a record with another --dram-budget", tune + ["-o", rec, "--dram-budget", "0", "--no-plot"],
                ["another dram_budget"])
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
