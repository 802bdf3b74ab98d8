#!/usr/bin/python3
"""Bad input to the `tessel` CLI ends in exit status 2 and one clear message, never a crash.

Each case builds a broken model / file / command line, runs the real CLI and checks the exit status and
that the message names the problem. Usage: test_bad_inputs.py --tessel build/tessel
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def relu_model(path):
    node = helper.make_node("Relu", ["x"], ["y"], name="relu1")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def cycle_model(path):
    a = helper.make_node("Relu", ["b_out"], ["a_out"], name="node_a")
    b = helper.make_node("Relu", ["a_out"], ["b_out"], name="node_b")
    c = helper.make_node("Add", ["x", "a_out"], ["y"], name="node_c")
    g = helper.make_graph([a, b, c], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def missing_initializer_model(path):
    node = helper.make_node("Conv", ["x", "conv1.weight"], ["y"], name="conv1")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def unknown_ops_model(path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("FrobnicateA", ["a"], ["b"], name="f1"),
             helper.make_node("FrobnicateA", ["b"], ["c"], name="f2"),
             helper.make_node("WibbleB", ["c"], ["y"], name="w1")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def bad_shape_model(path):
    w = numpy_helper.from_array(np.ones((4, 5), np.float32), "w")
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm1")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


class Runner:
    def __init__(self, tessel):
        self.tessel = tessel
        self.failures = []
        self.count = 0

    def expect(self, name, args, status, *fragments):
        self.count += 1
        p = subprocess.run([self.tessel] + args, capture_output=True, text=True, timeout=60)
        text = p.stdout + p.stderr
        problems = []
        if p.returncode != status:
            problems.append(f"exit status {p.returncode}, expected {status}")
        for f in fragments:
            if f not in text:
                problems.append(f"message lacks {f!r}")
        if "Segmentation" in text or "Aborted" in text or p.returncode < 0:
            problems.append("crashed")
        if problems:
            self.failures.append(name)
            print(f"FAIL {name}: {'; '.join(problems)}\n  output: {text.strip()[:400]}")
        else:
            print(f"ok   {name}: {text.strip().splitlines()[-1][:150] if text.strip() else '(no output)'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", default=os.path.join(os.path.dirname(__file__), "../../build/tessel"))
    args = ap.parse_args()
    r = Runner(os.path.abspath(args.tessel))
    with tempfile.TemporaryDirectory() as d:
        j = lambda n: os.path.join(d, n)
        relu_model(j("relu.onnx"))
        data = open(j("relu.onnx"), "rb").read()
        # A large model so truncation cuts through tensor data.
        w = numpy_helper.from_array(np.random.rand(64, 64).astype(np.float32), "w")
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), j("big.onnx"))
        big = open(j("big.onnx"), "rb").read()
        open(j("truncated.onnx"), "wb").write(big[: len(big) // 2])
        open(j("corrupt.onnx"), "wb").write(b"\x0a\xff\xff\xff\xff\x0f garbage" + bytes(range(256)))
        open(j("empty.onnx"), "wb").write(b"")
        cycle_model(j("cycle.onnx"))
        missing_initializer_model(j("missing.onnx"))
        unknown_ops_model(j("unknown.onnx"))
        bad_shape_model(j("badshape.onnx"))
        np.save(j("rank3.npy"), np.zeros((2, 3, 1), np.float32))
        np.save(j("int.npy"), np.zeros((2, 3), np.int64))
        np.save(j("size.npy"), np.zeros((2, 4), np.float32))
        open(j("bad.npy"), "wb").write(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'")
        open(j("bad.tir"), "w").write("tessel.model opset{\"\": 13}\ngraph @main(%x: f32[2]) -> (%y: f32[2]) {\n"
                                      "  %y = Relu(%x, \n}\n")
        open(j("undef.tir"), "w").write("tessel.model opset{\"\": 13}\ngraph @main(%x: f32[2]) -> (%y: f32[2]) {\n"
                                        "  %y = Relu(%nope) : f32[2]\n}\n")

        r.expect("truncated protobuf", ["run", j("truncated.onnx")], 2, "truncated.onnx")
        r.expect("corrupt protobuf", ["info", j("corrupt.onnx")], 2, "not a valid ONNX model")
        r.expect("empty file", ["info", j("empty.onnx")], 2, "empty")
        r.expect("missing file", ["info", j("nope.onnx")], 2, "nope.onnx")
        r.expect("graph with a cycle", ["run", j("cycle.onnx")], 2, "cycle", "node_a", "node_b")
        r.expect("missing initializer", ["run", j("missing.onnx")], 2, "conv1", "conv1.weight")
        r.expect("unknown ops, all listed", ["run", j("unknown.onnx")], 2, "2 unsupported operator types",
                 "FrobnicateA (nodes 'f1', 'f2')", "WibbleB (node 'w1')")
        r.expect("incompatible shapes", ["run", j("badshape.onnx")], 2, "mm1")
        r.expect("input of wrong rank", ["run", j("relu.onnx"), "--input", f"x={j('rank3.npy')}"], 2, "input 'x'", "rank")
        r.expect("input of wrong dtype", ["run", j("relu.onnx"), "--input", f"x={j('int.npy')}"], 2, "input 'x'", "element type")
        r.expect("input of wrong size", ["run", j("relu.onnx"), "--input", f"x={j('size.npy')}"], 2, "input 'x'", "axis 1")
        r.expect("unknown input name", ["run", j("relu.onnx"), "--input", f"nope={j('size.npy')}"], 2, "no input named 'nope'")
        r.expect("malformed .npy", ["run", j("relu.onnx"), "--input", f"x={j('bad.npy')}"], 2, "bad.npy")
        r.expect("missing input file", ["run", j("relu.onnx"), "--input", f"x={j('missing.npy')}"], 2, "missing.npy")
        r.expect("malformed --input", ["run", j("relu.onnx"), "--input", "x"], 2, "NAME=FILE")
        r.expect("malformed text IR", ["run", j("bad.tir")], 2, "bad.tir:4:1: expected")
        r.expect("undefined value in text IR", ["run", j("undef.tir")], 2, "undef.tir:3:", "nope")
        r.expect("bad flag", ["run", j("relu.onnx"), "--frobnicate"], 2, "--frobnicate")
        r.expect("unknown command", ["frobnicate"], 2, "unknown command 'frobnicate'")
        r.expect("bad --input-shape", ["run", j("relu.onnx"), "--input-shape", "x:2xq"], 2, "NAME:DIMS")
        r.expect("--input-shape wrong rank", ["run", j("relu.onnx"), "--input-shape", "x:2x3x4"], 2, "rank")
        r.expect("unknown model format", ["info", j("bad.npy")], 2, "unknown model format")
        r.expect("good model still works", ["run", j("relu.onnx"), "-q"], 0)
    print(f"{r.count - len(r.failures)} passed, {len(r.failures)} failed")
    return 1 if r.failures else 0


if __name__ == "__main__":
    sys.exit(main())
