#!/usr/bin/python3
"""`tessel compare` passes correct builds and flags an injected error: a model and the same model with 1e-3 added
to one output element (an ONNX Add), compiled; the report must name that element, its error and exit 1.
Also --target ref,cpu,npu, --json, .npz inputs/outputs (written by tessel and by numpy), tolerances, and input
shapes taken from a compiled artifact. The bundled digits CNN always; ResNet-18 when TESSEL_MODELS_DIR has it.
Usage: test_compare.py --tessel build/tessel"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_checks import Checks  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
INJECTED = 1e-3


def with_injected_error(src, dst, index):
    """Copies model `src` to `dst` with INJECTED added to element `index` of its (only) output."""
    m = onnx.load(src)
    out = m.graph.output[0].name
    raw = out + "_before_injection"
    for node in m.graph.node:
        node.output[:] = [raw if o == out else o for o in node.output]
    shape = [1] * (len(index) - 1) + [m.graph.output[0].type.tensor_type.shape.dim[-1].dim_value]
    delta = np.zeros(shape, np.float32)
    delta[tuple(0 for _ in index[:-1]) + (index[-1],)] = INJECTED
    m.graph.initializer.append(numpy_helper.from_array(delta, "injected_error"))
    m.graph.node.append(helper.make_node("Add", [raw, "injected_error"], [out], name="inject"))
    onnx.save(m, dst)


class CompareChecks(Checks):
    def compile(self, args):
        code, out, err = self.run(["compile"] + args)
        if code != 0:
            raise SystemExit(f"tessel compile {' '.join(args)} failed:\n{out}{err}")

    def compare_json(self, args):
        code, out, err = self.run(["compare"] + args + ["--json"])
        try:
            return code, json.loads(out), err
        except json.JSONDecodeError:
            return code, {}, out + err


def check_model(c, d, model, tag, index, inputs):
    """A correct build passes, the injected error is found at `index` with its size; `inputs` are --input args."""
    j = lambda n: os.path.join(d, f"{tag}.{n}")
    bad = j("injected.onnx")
    with_injected_error(model, bad, index)
    c.compile([model, "-o", j("so")])
    c.compile([bad, "-o", j("injected.so")])
    code, out, err = c.run(["compare", model, j("so")] + inputs)
    c.check(f"{tag}: a correct .so passes", code == 0 and "PASS: every output" in out, out + err)
    code, out, err = c.run(["compare", model, j("injected.so")] + inputs)
    c.check(f"{tag}: the injected error fails with exit 1", code == 1 and "FAIL" in out and
            f"worst [{','.join(map(str, index))}]" in out, out + err)
    code, res, err = c.compare_json([model, j("injected.so")] + inputs)
    o = res["comparisons"][0]["outputs"][0] if code == 1 and res else {}
    ok = (not res.get("pass", True) and o.get("worst", {}).get("index") == list(index) and o.get("mismatches") == 1
          and abs(o["max_abs_error"] - INJECTED) < 1e-5 and abs(o["worst"]["actual"] - o["worst"]["expected"] - INJECTED) < 1e-5)
    c.check(f"{tag}: --json names the worst element and its error ({INJECTED})", ok, res or err)
    code, out, err = c.run(["compare", model, j("injected.so"), "--atol", "2e-3"] + inputs)
    c.check(f"{tag}: --atol 2e-3 accepts the 1e-3 error", code == 0, out + err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", default=os.path.join(REPO, "build/tessel"))
    c = CompareChecks(os.path.abspath(ap.parse_args().tessel))
    digits = os.path.join(REPO, "examples/digits/digits.onnx")
    with tempfile.TemporaryDirectory() as d:
        j = lambda n: os.path.join(d, n)
        check_model(c, d, digits, "digits", (0, 7), [])

        # --json keys of a passing comparison, and the three targets built from one model.
        code, res, err = c.compare_json([digits, "--target", "ref,cpu,npu", "--hw", "default"])
        keys = {"atol", "rtol", "seed", "inputs", "comparisons", "pass"}
        out_keys = {"name", "pass", "elements", "mismatches", "max_abs_error", "max_rel_error", "mean_abs_error", "worst"}
        ok = (code == 0 and res.get("pass") is True and keys <= set(res) and len(res["comparisons"]) == 2 and
              all(out_keys <= set(cmp["outputs"][0]) for cmp in res["comparisons"]) and
              [cmp["actual"].split(" ")[1] for cmp in res["comparisons"]] == ["(cpu)", "(npu,"] and
              res["inputs"][0]["shape"] == [1, 1, 8, 8] and res["inputs"][0]["given"] is False)
        c.check("--target ref,cpu,npu passes, --json keys", ok, res or err)

        # A .tnpu against the interpreter; shapes of the model's symbolic batch taken from the compiled files.
        c.compile([digits, "--input-shape", "image:3x1x8x8", "--target", "npu", "--hw", "tiny", "-o", j("d3.tnpu")])
        code, res, err = c.compare_json([digits, j("d3.tnpu")])
        c.check(".tnpu (tiny) vs the interpreter, batch 3 from the .tnpu", code == 0 and res["pass"] and
                res["inputs"][0]["shape"] == [3, 1, 8, 8], res or err)

        # .npz: tessel writes inputs and reference outputs; numpy reads them; they feed run and compare back.
        code, out, err = c.run(["compare", digits, j("digits.so"), "--seed", "7", "--save-inputs", j("in.npz"),
                                "--save-outputs", j("ref.npz")])
        saved_in, saved_out = np.load(j("in.npz")), np.load(j("ref.npz"))
        c.check("--save-inputs/--save-outputs write .npz numpy reads", code == 0 and list(saved_in) == ["image"] and
                list(saved_out) == ["logits"] and saved_out["logits"].shape == (1, 10), out + err)
        code, out, err = c.run(["run", j("digits.so"), "--input", j("in.npz"), "-o", j("run-npz"), "-q"])
        c.check("run --input FILE.npz reproduces the saved outputs", code == 0 and
                np.allclose(np.load(j("run-npz/logits.npy")), saved_out["logits"], atol=1e-5), out + err)
        code, out, err = c.run(["compare", j("ref.npz"), j("digits.so"), "--input", j("in.npz")])
        c.check("saved outputs (.npz) as the reference: pass", code == 0, out + err)
        code, out, err = c.run(["compare", j("ref.npz"), j("digits.injected.so"), "--input", j("in.npz")])
        c.check("saved outputs (.npz) as the reference: the injected error fails", code == 1, out + err)
        x = np.random.default_rng(3).standard_normal((2, 1, 8, 8)).astype(np.float32)
        np.save(j("x.npy"), x)
        np.savez_compressed(j("xz.npz"), image=x)
        code1, _, e1 = c.run(["run", digits, "--input", f"image={j('x.npy')}", "-o", j("o-npy"), "-q"])
        code2, _, e2 = c.run(["run", digits, "--input", f"image={j('xz.npz')}", "-o", j("o-npz"), "-q"])
        c.check("numpy's savez_compressed .npz as --input NAME=FILE", code1 == 0 and code2 == 0 and
                np.array_equal(np.load(j("o-npy/logits.npy")), np.load(j("o-npz/logits.npy"))), e1 + e2)

        models = os.environ.get("TESSEL_MODELS_DIR", "")
        resnet = os.path.join(models, "resnet18.onnx")
        if os.path.exists(resnet):
            check_model(c, d, resnet, "resnet18", (0, 123),
                        ["--input", f"input={os.path.join(models, 'resnet18.input.npy')}"])
        else:
            print("note: TESSEL_MODELS_DIR has no resnet18.onnx; the ResNet-18 comparisons were not run")
    return c.summary()


if __name__ == "__main__":
    sys.exit(main())
