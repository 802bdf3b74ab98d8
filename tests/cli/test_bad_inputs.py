#!/usr/bin/python3
"""Bad input to the `tessel` CLI ends in one clear message and the right exit status, never a crash.

One table (CASES): each row is a command line, the exit status it must end with and fragments its output must
contain (and, where a silent wrong answer was the bug, fragments it must not). The fixtures are built first:
small models, a compiled .so, data files of the wrong size/shape/type, a tuning file naming a kernel that does
not exist. Usage: test_bad_inputs.py --tessel build/tessel
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
DIGITS = os.path.join(REPO, "examples/digits/digits.onnx")


def save(nodes, inputs, outputs, path, inits=(), opset=13):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)


def vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def build_fixtures(d, tessel):
    j = lambda n: os.path.join(d, n)
    save([helper.make_node("Relu", ["x"], ["y"], name="relu1")], [vi("x", [2, 3])], [vi("y", [2, 3])], j("relu.onnx"))
    w = numpy_helper.from_array(np.random.rand(64, 64).astype(np.float32), "w")
    save([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", [1, 64])], [vi("y", [1, 64])],
         j("big.onnx"), [w])
    big = open(j("big.onnx"), "rb").read()
    open(j("truncated.onnx"), "wb").write(big[: len(big) // 2])
    open(j("corrupt.onnx"), "wb").write(b"\x0a\xff\xff\xff\xff\x0f garbage" + bytes(range(256)))
    open(j("empty.onnx"), "wb").write(b"")
    save([helper.make_node("Relu", ["b_out"], ["a_out"], name="node_a"),
          helper.make_node("Relu", ["a_out"], ["b_out"], name="node_b"),
          helper.make_node("Add", ["x", "a_out"], ["y"], name="node_c")], [vi("x", [2])], [vi("y", [2])], j("cycle.onnx"))
    save([helper.make_node("Conv", ["x", "conv1.weight"], ["y"], name="conv1")], [vi("x", [1, 1, 4, 4])],
         [vi("y", None)], j("missing.onnx"))
    save([helper.make_node("Relu", ["x"], ["a"], name="ok"), helper.make_node("FrobnicateA", ["a"], ["b"], name="f1"),
          helper.make_node("FrobnicateA", ["b"], ["c"], name="f2"), helper.make_node("WibbleB", ["c"], ["y"], name="w1")],
         [vi("x", [2])], [vi("y", [2])], j("unknown.onnx"))
    save([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm1")], [vi("x", [2, 3])], [vi("y", None)],
         j("badshape.onnx"), [numpy_helper.from_array(np.ones((4, 5), np.float32), "w")])
    # A 5x5 kernel over a 3x3 input without padding: ONNX has no empty convolution output.
    save([helper.make_node("Conv", ["x", "w"], ["y"], name="bigk")], [vi("x", [1, 1, 3, 3])], [vi("y", None)],
         j("bigkernel.onnx"), [numpy_helper.from_array(np.ones((2, 1, 5, 5), np.float32), "w")])
    # A small conv model for the tuning file.
    save([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], [vi("x", [1, 8, 16, 16])],
         [vi("y", None)], j("conv.onnx"), [numpy_helper.from_array(np.random.rand(8, 8, 3, 3).astype(np.float32), "w")])
    # A node no compiled code path takes (Einsum runs on the host interpreter): --no-host-fallback refuses it.
    save([helper.make_node("Einsum", ["x", "x"], ["y"], name="ein", equation="ij,ij->i")], [vi("x", [2, 3])],
         [vi("y", None)], j("host.onnx"))
    np.save(j("rank3.npy"), np.zeros((2, 3, 1), np.float32))
    np.save(j("int.npy"), np.zeros((2, 3), np.int64))
    np.save(j("size.npy"), np.zeros((2, 4), np.float32))
    np.save(j("small.npy"), np.zeros((2,), np.float32))
    np.save(j("transposed.npy"), np.zeros((3, 2), np.float32))
    np.save(j("good.npy"), np.ones((2, 3), np.float32))
    open(j("bad.npy"), "wb").write(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'")
    np.savez(j("two.npz"), a=np.zeros((2, 3), np.float32), b=np.zeros((2, 3), np.float32))
    open(j("bad.npz"), "wb").write(b"PK\x03\x04 not really a zip file")
    open(j("bad.tir"), "w").write("tessel.model opset{\"\": 13}\ngraph @main(%x: f32[2]) -> (%y: f32[2]) {\n"
                                  "  %y = Relu(%x, \n}\n")
    open(j("undef.tir"), "w").write("tessel.model opset{\"\": 13}\ngraph @main(%x: f32[2]) -> (%y: f32[2]) {\n"
                                    "  %y = Relu(%nope) : f32[2]\n}\n")
    def compile_fixture(args):
        p = subprocess.run([tessel, "compile"] + args, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"fixture: tessel compile {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
    compile_fixture([j("relu.onnx"), "-o", j("relu.so")])
    # A real tuning file (--tune on this machine), then one of its kernel names replaced by one that does not exist.
    # NCHW: --tune times the NCHW convs' candidates (in mode auto an AVX2 build blocks this conv's region).
    compile_fixture([j("conv.onnx"), "-o", j("conv.so"), "--tune", "--tuning-file", j("tuning.json"), "--layout", "nchw"])
    tuning = json.load(open(j("tuning.json")))
    key = next(iter(tuning["conv_kernels"]))
    tuning["conv_kernels"][key] = "conv2d_frobnicate"
    json.dump(tuning, open(j("tuning-unknown.json"), "w"))
    tuning["conv_kernels"] = {"1 2 3": "conv2d_nchw_im2col_gemm_avx2"}
    json.dump(tuning, open(j("tuning-badkey.json"), "w"))


def cases(j):
    """(name, argv, exit status, fragments that must appear, fragments that must not appear, extra environment)."""
    relu, so, digits = j("relu.onnx"), j("relu.so"), DIGITS
    T = []
    add = lambda name, argv, status, *must, absent=(), env=None: T.append((name, argv, status, must, absent, env))
    # Model files.
    add("truncated protobuf", ["run", j("truncated.onnx")], 2, "truncated.onnx")
    add("corrupt protobuf", ["info", j("corrupt.onnx")], 2, "not a valid ONNX model")
    add("empty file", ["info", j("empty.onnx")], 2, "empty")
    add("missing file", ["info", j("nope.onnx")], 2, "nope.onnx")
    add("graph with a cycle", ["run", j("cycle.onnx")], 2, "cycle", "node_a", "node_b")
    add("missing initializer", ["run", j("missing.onnx")], 2, "conv1", "conv1.weight")
    add("unknown ops, all listed", ["run", j("unknown.onnx")], 2, "2 unsupported operator types",
        "FrobnicateA (nodes 'f1', 'f2')", "WibbleB (node 'w1')")
    add("incompatible shapes", ["run", j("badshape.onnx")], 2, "mm1")
    add("conv kernel larger than the padded input (run)", ["run", j("bigkernel.onnx")], 2, "'bigk'",
        "larger than the padded input (3 + pads 0 + 0 = 3)", absent=("1x2x0x0",))
    add("conv kernel larger than the padded input (compile)", ["compile", j("bigkernel.onnx"), "-o", j("bk.so")], 2,
        "'bigk'", "larger than the padded input")
    add("compile --no-host-fallback with a host node", ["compile", j("host.onnx"), "-o", j("host.so"),
                                                          "--no-host-fallback"], 2,
        "--no-host-fallback", "node 'ein' (Einsum): no compiled kernel for Einsum")
    add("malformed text IR", ["run", j("bad.tir")], 2, "bad.tir:4:1: expected")
    add("undefined value in text IR", ["run", j("undef.tir")], 2, "undef.tir:3:", "nope")
    add("unknown model format", ["info", j("bad.npy")], 2, "unknown model format")
    # Inputs of the interpreter path.
    add("input of wrong rank", ["run", relu, "--input", f"x={j('rank3.npy')}"], 2, "input 'x'", "rank")
    add("input of wrong dtype", ["run", relu, "--input", f"x={j('int.npy')}"], 2, "input 'x'", "element type")
    add("input of wrong size", ["run", relu, "--input", f"x={j('size.npy')}"], 2, "input 'x'", "axis 1")
    add("unknown input name", ["run", relu, "--input", f"nope={j('size.npy')}"], 2, "no input named 'nope'")
    add("malformed .npy", ["run", relu, "--input", f"x={j('bad.npy')}"], 2, "bad.npy")
    add("missing input file", ["run", relu, "--input", f"x={j('missing.npy')}"], 2, "missing.npy")
    add("malformed --input", ["run", relu, "--input", "x"], 2, "NAME=FILE")
    add("--input given twice", ["run", relu, "--input", f"x={j('good.npy')}", "--input", f"x={j('good.npy')}"], 2,
        "--input 'x' is given twice")
    add(".npz without the input's array", ["run", relu, "--input", f"x={j('two.npz')}"], 2, "two.npz", "'a', 'b'",
        "none is named 'x'")
    add(".npz of arrays named after no input", ["run", relu, "--input", j("two.npz")], 2, "no input named 'a'")
    add("malformed .npz", ["run", relu, "--input", f"x={j('bad.npz')}"], 2, "bad.npz", "not a valid .npz")
    # Inputs of compiled models: these ran on garbage (exit 0) or crashed (SIGSEGV) before.
    add("bench .so: too few elements", ["bench", so, "--input", f"x={j('small.npy')}", "--iterations", "1"], 2,
        "input 'x': expected f32[2,3], got f32[2]")
    add("bench .so: wrong shape", ["bench", so, "--input", f"x={j('transposed.npy')}", "--iterations", "1"], 2,
        "input 'x'", "axis 0 has size 3 instead of 2")
    add("bench .so: wrong dtype", ["bench", so, "--input", f"x={j('int.npy')}", "--iterations", "1"], 2,
        "input 'x'", "wrong element type")
    add("bench .so: wrong input name", ["bench", so, "--input", f"nope={j('good.npy')}", "--iterations", "1"], 2,
        "no input named 'nope'", "its inputs: 'x'")
    add("run .so: wrong input name", ["run", so, "--input", f"nope={j('good.npy')}"], 2, "no input named 'nope'",
        absent=("not given; using random",))
    add("run .so: --input-shape", ["run", so, "--input-shape", "x:4x3"], 2, "--input-shape applies to model files")
    # Flags.
    for cmd, target in (("run", so), ("bench", so)):
        for value in ("0", "-1", "1000", "two"):
            add(f"{cmd} --threads {value}", [cmd, target, "--threads", value], 2, "--threads",
                f"expected a whole number from 1 to", f"got '{value}'")
    add("compile --threads 1000", ["compile", relu, "--threads", "1000", "-o", j("t.so")], 2,
        "expected a whole number from 1 to 256, got '1000'")
    add("compile --isa avx3", ["compile", relu, "--isa", "avx3", "-o", j("isa.so")], 2, "--isa", "avx3")
    add("bench --isa avx3", ["bench", relu, "--isa", "avx3"], 2, "--isa", "avx3")
    add("tune --isa for the npu", ["tune", relu, "--target", "npu", "--hw", "default", "--isa", "avx2", "-o",
                                   j("t.json")], 2, "--isa does not apply to tessel tune --target npu")
    add("tune --isa avx3", ["tune", relu, "--target", "cpu", "--isa", "avx3", "-o", j("t.json")], 2, "--isa", "avx3")
    # --isa avx512 needs a --march with AVX-512F: haswell has none (whatever this machine has).
    add("compile --isa avx512 --march haswell", ["compile", relu, "--isa", "avx512", "--march", "haswell", "-o",
                                                  j("isa.so")], 2, "--isa avx512: -march=haswell has no AVX-512F")
    add("--input-shape given twice", ["run", relu, "--input-shape", "x:2x3", "--input-shape", "x:2x3"], 2,
        "--input-shape 'x' is given twice")
    add("bad --input-shape", ["run", relu, "--input-shape", "x:2xq"], 2, "NAME:DIMS")
    add("--input-shape wrong rank", ["run", relu, "--input-shape", "x:2x3x4"], 2, "rank")
    add("--input-shape of no input", ["run", relu, "--input-shape", "q:2x3"], 2, "names 'q'", "inputs: 'x'")
    add("bad flag", ["run", relu, "--frobnicate"], 2, "--frobnicate")
    add("unknown command", ["frobnicate"], 2, "unknown command 'frobnicate'")
    add("unknown kernel in a tuning file", ["compile", j("conv.onnx"), "-o", j("c2.so"), "--layout", "nchw",
                                            "--tuning-file", j("tuning-unknown.json")], 2, "tuning-unknown.json", "'conv2d_frobnicate'",
        "not an NCHW convolution kernel")
    add("malformed geometry in a tuning file", ["compile", j("conv.onnx"), "-o", j("c3.so"), "--layout", "nchw",
                                                "--tuning-file", j("tuning-badkey.json")], 2,
        "'1 2 3' is not a conv geometry")
    add("tuning file for another model", ["compile", relu, "-o", j("c4.so"), "--tuning-file", j("tuning.json")], 2,
        "written for another model")
    add("unknown hardware configuration", ["partition", relu, "--hw", "frobnicate"], 2, "'frobnicate'",
        "default, edge, no-grouped-conv, tiny")
    add("--plot to a non-picture", ["bench", so, "--plot", j("x.txt")], 2, "--plot", ".svg, .png or .pdf")
    add("--render into a missing directory", ["partition", relu, "--hw", "default", "--render", j("no/dir/x.svg")], 2,
        "directory", "does not exist")
    # Flags before the model path (they swallowed it: "model is required").
    add("--input-shape before the model", ["run", "--input-shape", "x:2x3", relu, "-q"], 0, absent=("required",))
    add("--input before the model", ["run", "--input", f"x={j('good.npy')}", relu, "-q"], 0, absent=("required",))
    add("compile: --input-shape before the model", ["compile", "--input-shape", "x:2x3", relu, "-o", j("r2.so")], 0)
    # Places Tessel cannot write.
    add("unwritable cache directory", ["compile", relu, "-o", j("cache.so")], 2, "cache directory '/proc/tessel-cache",
        "TESSEL_CACHE_DIR", absent=("internal error",), env={"TESSEL_CACHE_DIR": "/proc/tessel-cache"})
    add("-o into /proc", ["compile", relu, "-o", "/proc/x.so"], 2, "cannot write '/proc/x.so'",
        absent=("generated code",))
    add("-o into a missing directory", ["compile", relu, "-o", j("no/such/x.so")], 2, "does not exist")
    # Compare.
    add("compare: one artifact, no --target", ["compare", relu], 2, "two artifacts")
    add("compare: one target", ["compare", relu, "--target", "ref"], 2, "at least two targets")
    add("compare: unknown target", ["compare", relu, "--target", "ref,gpu"], 2, "unknown target 'gpu'")
    add("compare: negative tolerance", ["compare", relu, so, "--atol", "-1"], 2, "tolerances must be non-negative")
    add("compare: wrong input", ["compare", relu, so, "--input", f"x={j('size.npy')}"], 2, "input 'x'")
    # A symbolic batch dimension: counted, fused, lowered and compiled at 1, with one note (was 0 FLOPs, nothing
    # fused, 0 NPU subgraphs with exit 0; the README's compile example failed).
    note = "undefined dimension 'N' (axis 0); using 1"
    add("symbolic batch: info", ["info", digits], 0, note, "f32[N,1,8,8] (counted as f32[1,1,8,8])",
        absent=("FLOPs:      0 ",))
    add("symbolic batch: opt fuses", ["opt", digits, "--pipeline", "cpu"], 0, note, "tessel.FusedConv")
    add("symbolic batch: compile --target npu", ["compile", digits, "--target", "npu", "--hw", "default", "-o",
                                                 j("digits.tnpu")], 0, note, absent=(" 0 NPU subgraph",))
    add("symbolic batch: README compile example", ["compile", digits, "-o", j("digits.so")], 0, note)
    add("symbolic batch: --input-shape overrides", ["info", digits, "--input-shape", "image:4x1x8x8"], 0,
        "f32[4,1,8,8]", "logits                   f32[4,10]", absent=("undefined dimension",))
    add("good model still works", ["run", relu, "-q"], 0)
    return T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", default=os.path.join(REPO, "build/tessel"))
    tessel = os.path.abspath(ap.parse_args().tessel)
    failures = []
    with tempfile.TemporaryDirectory() as d:
        j = lambda n: os.path.join(d, n)
        build_fixtures(d, tessel)
        table = cases(j)
        for name, argv, status, must, absent, env in table:
            p = subprocess.run([tessel] + argv, capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, **(env or {})))
            text = p.stdout + p.stderr
            problems = []
            if p.returncode != status:
                problems.append(f"exit status {p.returncode}, expected {status}")
            problems += [f"message lacks {f!r}" for f in must if f not in text]
            problems += [f"message has {f!r}" for f in absent if f in text]
            if "Segmentation" in text or "Aborted" in text or p.returncode < 0:
                problems.append("crashed")
            if status == 2 and "tessel: error:" not in text:
                problems.append("no 'tessel: error:' line")
            if problems:
                failures.append(name)
                print(f"FAIL {name}: {'; '.join(problems)}\n  tessel {' '.join(argv)}\n  output: {text.strip()[:600]}")
            else:
                last = text.strip().splitlines()[-1][:150] if text.strip() else "(no output)"
                print(f"ok   {name}: {last}")
    print(f"{len(table) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
