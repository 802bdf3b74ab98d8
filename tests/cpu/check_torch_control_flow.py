#!/usr/bin/python3
"""A recurrent model with control flow, as a PyTorch user exports it: torch.jit.script of a loop over
time around an LSTM cell and a data-dependent branch (ONNX Loop and If nodes, the cell's weights captured
from the main graph), exported at opsets 13 and 17. Each export must compile with
`tessel compile --no-host-fallback` (no node left to the host interpreter, none listed in --json's
host_steps), and the compiled .so must match ONNX Runtime (bench/ort/ort_bench.js) and PyTorch on inputs
that take each branch.

usage: tests/cpu/check_torch_control_flow.py --tessel build/tessel
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORT_BENCH = os.path.join(ROOT, "bench", "ort", "ort_bench.js")
OPSETS = (13, 17)
TOLERANCE = 1e-5  # max |compiled - reference| over the output


class RecurrentBranch(torch.nn.Module):
    """h, c = LSTMCell(x[t], (h, c)) for every t; then a head chosen by the sign of h's sum."""

    def __init__(self):
        super().__init__()
        self.cell = torch.nn.LSTMCell(8, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.zeros(x.shape[1], 16)
        c = torch.zeros(x.shape[1], 16)
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
        if h.sum() > 0:
            y = self.head(h)
        else:
            y = -self.head(c) * 2.0
        return y


def ops_of(path):
    import onnx
    return sorted({n.op_type for n in onnx.load(path).graph.node})


def inputs_for_both_branches(model):
    """Inputs [5, 2, 8] whose runs take the then-branch and the else-branch (found by trying seeds)."""
    found = {}
    for seed in range(200):
        x = torch.randn(5, 2, 8, generator=torch.Generator().manual_seed(seed))
        h = torch.zeros(2, 16)
        c = torch.zeros(2, 16)
        with torch.no_grad():
            for t in range(5):
                h, c = model.cell(x[t], (h, c))
        found.setdefault(bool(h.sum() > 0), x)
        if len(found) == 2:
            return [found[True], found[False]]
    raise RuntimeError("no seed found an input for each branch")


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tessel", default=os.path.join(ROOT, "build", "tessel"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the exporter's notes on scripted code
    torch.manual_seed(0)
    module = RecurrentBranch().eval()
    scripted = torch.jit.script(module)
    xs = inputs_for_both_branches(module)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="tessel-torch-cf-") as work:
        for opset in OPSETS:
            model = os.path.join(work, f"recurrent_branch_{opset}.onnx")
            torch.onnx.export(scripted, (xs[0],), model, opset_version=opset, input_names=["x"], output_names=["y"])
            ops = ops_of(model)
            if "Loop" not in ops or "If" not in ops:
                print(f"  opset {opset}: FAIL: the export has no Loop and If nodes ({', '.join(ops)})")
                failures += 1
                continue
            library = os.path.join(work, f"recurrent_branch_{opset}.so")
            try:
                report = json.loads(run([args.tessel, "compile", model, "-o", library, "--no-host-fallback", "--json"]))
            except RuntimeError as error:
                print(f"  opset {opset}: FAIL: {error}")
                failures += 1
                continue
            if report.get("host_steps"):
                print(f"  opset {opset}: FAIL: host steps {report['host_steps']}")
                failures += 1
            for branch, x in zip(("then", "else"), xs):
                x_path = os.path.join(work, f"x_{branch}.npy")
                np.save(x_path, x.numpy())
                with torch.no_grad():
                    expected = module(x).numpy()
                outs = {}
                for who, command in (
                        ("tessel", [args.tessel, "run", library, "--input", f"x={x_path}", "-q", "--output-dir"]),
                        ("ort", ["node", ORT_BENCH, model, "--input", f"x={x_path}", "--warmup", "0",
                                 "--iterations", "1", "--output-dir"])):
                    out_dir = os.path.join(work, f"{who}_{opset}_{branch}")
                    try:
                        run(command + [out_dir])
                        outs[who] = np.load(os.path.join(out_dir, "y.npy"))
                    except RuntimeError as error:
                        print(f"  opset {opset}, {branch}-branch input: FAIL: {error}")
                        failures += 1
                if len(outs) != 2:
                    continue
                vs_ort = float(np.abs(outs["tessel"] - outs["ort"]).max())
                vs_torch = float(np.abs(outs["tessel"] - expected).max())
                ok = vs_ort <= TOLERANCE and vs_torch <= TOLERANCE
                failures += not ok
                print(f"  opset {opset} ({', '.join(ops)}), {branch}-branch input: compiled with "
                      f"{report['kernel_calls']} kernel calls and no host step; max |diff| vs ONNX Runtime "
                      f"{vs_ort:.3g}, vs PyTorch {vs_torch:.3g}: {'ok' if ok else 'FAIL'}")
    print(f"PyTorch control-flow model: {'PASS' if failures == 0 else f'{failures} FAILURE(S)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
