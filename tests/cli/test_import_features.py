#!/usr/bin/python3
"""ONNX import features through the real CLI, checked against numpy: external-data weights, dynamic
dimensions fixed with --input-shape, old-opset models upgraded by the registry, graph inputs with defaults.
Usage: test_import_features.py --tessel build/tessel"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def run(tessel, args):
    p = subprocess.run([tessel] + args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", default=os.path.join(os.path.dirname(__file__), "../../build/tessel"))
    tessel = os.path.abspath(ap.parse_args().tessel)
    failures, count = [], 0

    def check(name, ok, detail=""):
        nonlocal count
        count += 1
        print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
        if not ok:
            failures.append(name)

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        j = lambda n: os.path.join(d, n)
        # 1. External data: a MatMul weight stored in a side file.
        w = rng.standard_normal((32, 16)).astype(np.float32)
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
                              [numpy_helper.from_array(w, "w")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        os.makedirs(j("ext"))
        onnx.save_model(m, j("ext/model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
        x = rng.standard_normal((3, 32)).astype(np.float32)
        np.save(j("x.npy"), x)
        code, out = run(tessel, ["run", j("ext/model.onnx"), "--input", f"x={j('x.npy')}", "-o", j("out1"), "-q"])
        ok = code == 0 and np.allclose(np.load(j("out1/y.npy")), x @ w, rtol=1e-5, atol=1e-5)
        check("external data weights", ok, out)
        os.rename(j("ext/weights.bin"), j("ext/moved.bin"))
        code, out = run(tessel, ["run", j("ext/model.onnx"), "--input", f"x={j('x.npy')}"])
        check("missing external data file is a clear error", code == 2 and "weights.bin" in out, out)

        # 2. Dynamic dims: info shows the symbolic dim; a random input takes 1 for it, with a note naming it and
        # --input-shape; a given input's size fixes it; --input-shape overrides it.
        os.rename(j("ext/moved.bin"), j("ext/weights.bin"))
        code, out = run(tessel, ["info", j("ext/model.onnx")])
        check("info shows symbolic dims", code == 0 and "f32[N,32]" in out, out)
        code, out = run(tessel, ["run", j("ext/model.onnx"), "-o", j("out1b")])
        ok = code == 0 and np.load(j("out1b/y.npy")).shape == (1, 16) and "undefined dimension 'N'" in out and \
            "--input-shape x:" in out and out.count("note: input 'x' f32[N,32]") == 1
        check("a dynamic dim of a random input is 1, with one note", ok, out)
        code, out = run(tessel, ["run", j("ext/model.onnx"), "--input", f"x={j('x.npy')}", "-o", j("out1c")])
        ok = code == 0 and np.allclose(np.load(j("out1c/y.npy")), x @ w, rtol=1e-5, atol=1e-5) and "undefined" not in out
        check("a given input's size fixes the dynamic dim, no note", ok, out)
        p = subprocess.run([tessel, "info", j("ext/model.onnx"), "--json"], capture_output=True, text=True, timeout=60)
        code, out = p.returncode, p.stdout + p.stderr
        info = json.loads(p.stdout) if code == 0 else {}
        check("info counts FLOPs at the default dim", code == 0 and info.get("flops") == 2 * 32 * 16 and
              info["inputs"][0]["declared_type"] == "f32[N,32]" and info["inputs"][0]["shape"] == [1, 32], out)
        code, out = run(tessel, ["run", j("ext/model.onnx"), "--input-shape", "x:5x32", "-o", j("out2"), "-q"])
        check("--input-shape fixes the dynamic dim", code == 0 and np.load(j("out2/y.npy")).shape == (5, 16), out)

        # 3. Old opsets: Split with the 'split' attribute (opset 11) and Unsqueeze with 'axes' (opset 11).
        nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[10, 22]),
                 helper.make_node("Unsqueeze", ["b"], ["y"], axes=[0])]
        g = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 32])],
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), j("old.onnx"))
        code, out = run(tessel, ["run", j("old.onnx"), "--input", f"x={j('x.npy')}", "-o", j("out3"), "-q"])
        ok = code == 0 and np.array_equal(np.load(j("out3/a.npy")), x[:, :10]) and \
            np.array_equal(np.load(j("out3/y.npy")), x[None, :, 10:])
        check("opset-11 Split/Unsqueeze attributes upgraded", ok, out)

        # 4. A graph input with an initializer default: used when not given, overridden when given.
        bias = np.arange(4, dtype=np.float32)
        g = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y"])], "dflt",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("bias", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [numpy_helper.from_array(bias, "bias")])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7), j("dflt.onnx"))
        xs = np.ones(4, np.float32)
        np.save(j("x4.npy"), xs)
        np.save(j("b4.npy"), np.full(4, 10, np.float32))
        code, out = run(tessel, ["run", j("dflt.onnx"), "--input", f"x={j('x4.npy')}", "-o", j("out4"), "-q"])
        check("input default from its initializer", code == 0 and np.array_equal(np.load(j("out4/y.npy")), xs + bias), out)
        code, out = run(tessel, ["run", j("dflt.onnx"), "--input", f"x={j('x4.npy')}", "--input", f"bias={j('b4.npy')}",
                                 "-o", j("out5"), "-q"])
        check("input default overridden", code == 0 and np.array_equal(np.load(j("out5/y.npy")), xs + 10), out)
    print(f"{count - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
