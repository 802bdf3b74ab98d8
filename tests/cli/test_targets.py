#!/usr/bin/python3
"""Targets through the registry, and heterogeneous .tnpu files whose host part is compiled CPU code, on a small CNN
built here (conv -> relu -> conv -> add -> GlobalAveragePool -> Flatten -> Gemm -> Softmax) and, when the
torchvision models are there (build/models), on ResNet-18:
  --hw cpu-only -o M.tnpu  the target follows -o; every node on the host as compiled code; run, bench, sim and
                           compare accept it; outputs match the interpreter's
  --hw conv-only           only the convolutions on the NPU, the rest compiled; run matches the interpreter
  version 2 files          a .tnpu without a HOST section (as version 2 wrote them) runs on the interpreter;
                           version 1 is refused with a message saying to recompile
  bad flags                unknown target, a flag of another target, --hw for the cpu, --target ref: exit 2
Usage: test_targets.py --tessel build/tessel [--models build/models]"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

C, H = 8, 12


def small_cnn(path):
    rng = np.random.default_rng(3)
    arr = lambda name, shape: numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)
    conv = lambda i, o, wn, name: helper.make_node("Conv", [i, wn], [o], name=name, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    nodes = [conv("x", "c1", "w1", "conv1"), helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             conv("r1", "c2", "w2", "conv2"), helper.make_node("Add", ["c2", "x"], ["a"], name="add"),
             helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["l"], name="fc"),
             helper.make_node("Softmax", ["l"], ["y"], name="softmax", axis=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                          [arr("w1", (C, C, 3, 3)), arr("w2", (C, C, 3, 3)), arr("fw", (C, 5)), arr("fb", (5,))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    np.save(path + ".x.npy", rng.standard_normal((1, C, H, H)).astype(np.float32))


def run_outputs(c, model, inputs, out_dir):
    code, out, err = c.run(["run", model, "--input", inputs, "-o", out_dir])
    if code != 0:
        return None, out + err
    return {f: np.load(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))}, out


def check_matches(c, name, got, want, rtol=1e-4, atol=1e-5):
    ok = got is not None and want is not None and got.keys() == want.keys() and all(
        np.allclose(got[k], want[k], rtol=rtol, atol=atol) for k in want)
    detail = "" if ok or got is None or want is None else {
        k: float(np.max(np.abs(got[k] - want[k]))) for k in want if k in got}
    c.check(name, ok, detail)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def as_version(path, out, version):
    """Rewrites a .tnpu as an older version wrote it: its HOST section dropped, the version field set."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 20)
    payload, pos, kept = data[28:28 + n], 0, b""
    while pos < len(payload):
        tag = payload[pos:pos + 4]
        (size,) = struct.unpack_from("<Q", payload, pos + 4)
        if tag != b"HOST":
            kept += payload[pos:pos + 12 + size]
        pos += 12 + size
    body = data[:8] + struct.pack("<I", version) + data[12:20] + struct.pack("<Q", len(kept)) + kept
    open(out, "wb").write(body + struct.pack("<Q", fnv1a64(kept)))
    return len(kept) < len(payload)


def check_cpu_only(c, d, model, x):
    tnpu = os.path.join(d, "cpu-only.tnpu")
    code, out, err = c.run(["compile", model, "--hw", "cpu-only", "-o", tnpu, "--json"])
    c.check("compile --hw cpu-only -o M.tnpu (no --target) exits 0", code == 0, err)
    if code != 0:
        return None
    j = json.loads(out)
    c.check("cpu-only: the npu target wrote it, no NPU subgraph, host part compiled",
            j.get("target") == "npu" and j.get("npu_subgraphs") == 0 and j.get("host_code") == "compiled"
            and j.get("host_code_bytes", 0) > 0, j)
    want, _ = run_outputs(c, model, x, os.path.join(d, "ref"))
    got, text = run_outputs(c, tnpu, x, os.path.join(d, "cpu-only-out"))
    check_matches(c, "cpu-only: tessel run M.tnpu matches the interpreter", got, want)
    c.check("cpu-only: run says the host part is compiled code", "host part: compiled code" in text, text)
    code, out, err = c.run(["bench", tnpu, "--warmup", "1", "--iterations", "3", "--json", "--input", x])
    ok = code == 0 and json.loads(out).get("median_ms", 0) > 0
    c.check("cpu-only: tessel bench M.tnpu --json gives a median", ok, (code, out, err))
    code, out, err = c.run(["bench", tnpu, "--profile"])
    c.check("cpu-only: bench --profile on a .tnpu: exit 2 naming the flag", code == 2 and "--profile" in err, (code, err))
    code, out, err = c.run(["sim", tnpu, "--json", "--input", x])
    c.check("cpu-only: tessel sim M.tnpu: 0 NPU calls", code == 0 and json.loads(out).get("npu_calls") == 0, (code, err))
    code, out, err = c.run(["compare", model, tnpu, "--input", x])
    c.check("cpu-only: tessel compare MODEL M.tnpu passes", code == 0, out + err)
    return tnpu


def check_conv_only(c, d, model, x, name="small CNN", convs=2):
    tnpu = os.path.join(d, f"conv-only-{os.path.basename(model)}.tnpu")
    code, out, err = c.run(["compile", model, "--target", "npu", "--hw", "conv-only", "-o", tnpu, "--json"])
    c.check(f"{name}: compile --hw conv-only exits 0", code == 0, err)
    if code != 0:
        return
    j = json.loads(out)
    c.check(f"{name}: conv-only lowers exactly the {convs} convolutions, host part compiled",
            j.get("lowered_nodes") == convs and j.get("host_code") == "compiled", j)
    want, _ = run_outputs(c, model, x, os.path.join(d, f"ref-{name}"))
    got, text = run_outputs(c, tnpu, x, os.path.join(d, f"conv-only-out-{name}"))
    check_matches(c, f"{name}: conv-only tessel run matches the interpreter", got, want, rtol=1e-3, atol=1e-4)
    calls = text.split("NPU call")[0].rsplit("(", 1)[-1].strip()
    c.check(f"{name}: conv-only run made NPU calls from compiled host code",
            calls.isdigit() and int(calls) > 0 and "host part: compiled code" in text, text)


def check_old_versions(c, d, model, x, tnpu):
    v2 = os.path.join(d, "v2.tnpu")
    dropped = as_version(tnpu, v2, 2)
    c.check("the compiled file had a HOST section to drop", dropped)
    want, _ = run_outputs(c, model, x, os.path.join(d, "ref-v2"))
    got, text = run_outputs(c, v2, x, os.path.join(d, "v2-out"))
    check_matches(c, "version 2 file (no HOST section) runs on the interpreter and matches", got, want)
    c.check("version 2 file: run says the host part is interpreted", "host part: reference interpreter" in text, text)
    v1 = os.path.join(d, "v1.tnpu")
    as_version(tnpu, v1, 1)
    code, out, err = c.run(["run", v1])
    c.check("version 1 file: exit 2 saying to recompile", code == 2 and "version 1" in err and "recompile" in err,
            (code, err))


def check_bad_flags(c, d, model):
    cases = [
        (["--target", "gpu"], "unknown target 'gpu'"),
        (["--target", "cpu", "--npu-window", "2"], "--npu-window does not apply to --target cpu"),
        (["--target", "cpu", "--hw", "default"], "--hw does not apply to --target cpu"),
        (["--target", "ref"], "writes no artifact"),
        (["--target", "npu"], "needs --hw"),
        (["--target", "npu", "--hw", "default", "--emit", "cpp"], "--emit cpp applies to --target cpu"),
    ]
    for flags, message in cases:
        code, out, err = c.run(["compile", model, "-o", os.path.join(d, "bad.out")] + flags)
        c.check(f"compile {' '.join(flags)}: exit 2, '{message}'", code == 2 and message in err, (code, err))
    code, out, err = c.run(["compile", "--help"])
    c.check("compile --help lists the registered targets", code == 0 and "cpu, npu, ref" in out, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", required=True)
    ap.add_argument("--models", help="folder with resnet18.onnx (default: next to tessel, build/models)")
    args = ap.parse_args()
    c = Checks(os.path.abspath(args.tessel))
    models = args.models or os.path.join(os.path.dirname(os.path.abspath(args.tessel)), "models")
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "cnn.onnx")
        small_cnn(model)
        x = f"x={model}.x.npy"
        tnpu = check_cpu_only(c, d, model, x)
        check_conv_only(c, d, model, x)
        if tnpu:
            check_old_versions(c, d, model, x, tnpu)
        check_bad_flags(c, d, model)
        r18 = os.path.join(models, "resnet18.onnx")
        if os.path.exists(r18):
            rng = np.random.default_rng(1)
            np.save(os.path.join(d, "r18.npy"), rng.standard_normal((1, 3, 224, 224)).astype(np.float32))
            code, out, err = c.run(["info", r18, "--json"])
            name = json.loads(out)["inputs"][0]["name"] if code == 0 else "input"
            check_conv_only(c, d, r18, f"{name}={os.path.join(d, 'r18.npy')}", "ResNet-18", 20)
        else:
            print(f"note: {r18} not found; the ResNet-18 conv-only check did not run")
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
