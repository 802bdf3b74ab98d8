#!/usr/bin/python3
"""Checks the "cpu" pass pipeline on the exported torchvision models: the optimised graph (fused ops,
folded BatchNorm, ...) run by the reference interpreter must compute what the original ONNX model computes.

For each model: `tessel opt M.onnx --pipeline cpu --verify-each -o M.cpu.tir`, then `tessel run` on the
.tir and on the .onnx with the same input; max |optimised - original| <= 1e-4 * max |original|. Prints the
number of top-level nodes before and after the pipeline. Exit status 1 when any model fails."""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1")
# Relative to the largest |original output|: folding BatchNorm into weights and re-associating sums
# changes float32 rounding by far less than this.
RELATIVE_TOLERANCE = 1e-4
TIMEOUT_SECONDS = 900
# A node of the main graph in text IR: two-space indent, results, '=', an op name and '('. Constants
# ("const %w ...") and the nodes of nested bodies (deeper indent) do not match.
NODE_LINE = re.compile(r"^  %[^=]*= [A-Za-z_][\w.]*\(")


def run(command):
    """Runs a command; returns (ok, seconds, message)."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return False, TIMEOUT_SECONDS, f"timed out after {TIMEOUT_SECONDS} s: {' '.join(command)}"
    seconds = time.monotonic() - started
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return False, seconds, f"exit {done.returncode}: {lines[-1] if lines else 'no message'}"
    return True, seconds, ""


def count_nodes(tir_path):
    """Number of nodes in the main graph of a text-IR file (nodes inside fused bodies are not counted)."""
    with open(tir_path, encoding="utf-8") as f:
        return sum(1 for line in f if NODE_LINE.match(line))


def run_model(tessel, model, input_path, output_dir):
    """`tessel run` with the one input; returns (output array or None, seconds, error message)."""
    os.makedirs(output_dir, exist_ok=True)
    ok, seconds, message = run([tessel, "run", model, "--input", f"input={input_path}", "--output-dir", output_dir])
    if not ok:
        return None, seconds, f"tessel run {os.path.basename(model)}: {message}"
    produced = os.path.join(output_dir, "output.npy")
    if not os.path.exists(produced):
        return None, seconds, f"tessel run {os.path.basename(model)} wrote no output.npy"
    return np.load(produced), seconds, ""


def check_model(name, models_dir, tessel, work):
    """Optimises and runs one model; returns an error message or None."""
    onnx_path = os.path.join(models_dir, f"{name}.onnx")
    input_path = os.path.join(models_dir, f"{name}.input.npy")
    plain_tir = os.path.join(work, f"{name}.tir")
    cpu_tir = os.path.join(work, f"{name}.cpu.tir")
    ok, _, message = run([tessel, "ir", onnx_path, "-o", plain_tir])
    if not ok:
        return f"tessel ir: {message}"
    ok, opt_seconds, message = run([tessel, "opt", onnx_path, "--pipeline", "cpu", "--verify-each", "-o", cpu_tir])
    if not ok:
        return f"tessel opt --pipeline cpu: {message}"
    before, after = count_nodes(plain_tir), count_nodes(cpu_tir)
    expected, seconds_a, message = run_model(tessel, onnx_path, input_path, os.path.join(work, f"{name}.out-onnx"))
    if message:
        return message
    actual, seconds_b, message = run_model(tessel, cpu_tir, input_path, os.path.join(work, f"{name}.out-cpu"))
    if message:
        return message
    if actual.shape != expected.shape:
        return f"optimised output shape {actual.shape}, original {expected.shape}"
    scale = float(np.abs(expected).max())
    finite = np.all(np.isfinite(actual))
    error = float(np.abs(actual.astype(np.float64) - expected.astype(np.float64)).max()) if finite else np.inf
    limit = RELATIVE_TOLERANCE * scale
    verdict = "ok" if error <= limit else "TOO LARGE"
    print(f"{name}: nodes {before} -> {after}; opt {opt_seconds:.2f} s, run {seconds_a:.2f} s (onnx) / "
          f"{seconds_b:.2f} s (cpu.tir); max|cpu - onnx| = {error:.3g} (relative {error / max(scale, 1e-30):.3g}, "
          f"limit {limit:.3g}) {verdict}", flush=True)
    if verdict != "ok":
        return f"max error {error:.3g} exceeds {RELATIVE_TOLERANCE:g} * max|original| = {limit:.3g}"
    if after >= before:
        return f"the cpu pipeline did not reduce the node count ({before} -> {after})"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tessel", default=os.path.join(REPO_ROOT, "build", "tessel"))
    parser.add_argument("--models", required=True, help="OUTDIR of scripts/export-models.py")
    parser.add_argument("--only", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--keep", help="keep the .tir files and outputs in this directory")
    args = parser.parse_args()
    if not os.access(args.tessel, os.X_OK):
        print(f"error: --tessel '{args.tessel}' is not executable", file=sys.stderr)
        return 2
    missing = [n for n in args.only if not os.path.exists(os.path.join(args.models, f"{n}.input.npy"))]
    if missing:
        print(f"error: {', '.join(missing)} not exported in '{args.models}' "
              "(run scripts/export-models.py first)", file=sys.stderr)
        return 2
    failures = []
    with tempfile.TemporaryDirectory(prefix="tessel-pipeline-") as scratch:
        work = args.keep or scratch
        os.makedirs(work, exist_ok=True)
        for name in args.only:
            error = check_model(name, args.models, os.path.abspath(args.tessel), work)
            if error:
                print(f"FAIL {name}: {error}", flush=True)
                failures.append(name)
    print(f"{len(args.only) - len(failures)} of {len(args.only)} models ok through the cpu pipeline")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
