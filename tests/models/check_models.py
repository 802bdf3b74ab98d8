#!/usr/bin/python3
"""Runs `tessel run` on the exported torchvision models, compares with PyTorch, and checks the text IR round trip."""
import filecmp
import functools
import os
import sys
import tempfile

import numpy as np

from model_check_common import inputs_ready, model_arg_parser, run_command
# Relative to the largest |PyTorch output|: float32 sums in another order differ by far less.
RELATIVE_TOLERANCE = 1e-4
TIMEOUT_SECONDS = 600


run = functools.partial(run_command, timeout=TIMEOUT_SECONDS)


def check_outputs(name, models_dir, tessel, work):
    """Runs the model and compares its output with PyTorch's; returns an error message or None."""
    output_dir = os.path.join(work, name)
    os.makedirs(output_dir, exist_ok=True)
    ok, seconds, message = run([tessel, "run", os.path.join(models_dir, f"{name}.onnx"),
                                "--input", f"input={os.path.join(models_dir, name + '.input.npy')}",
                                "--output-dir", output_dir])
    if not ok:
        return f"tessel run: {message}"
    produced = os.path.join(output_dir, "output.npy")
    if not os.path.exists(produced):
        return "tessel run wrote no output.npy"
    actual = np.load(produced)
    expected = np.load(os.path.join(models_dir, f"{name}.torch_output.npy"))
    if actual.shape != expected.shape:
        return f"output shape {actual.shape}, PyTorch's is {expected.shape}"
    scale = float(np.abs(expected).max())
    error = float(np.abs(actual.astype(np.float64) - expected).max()) if np.all(np.isfinite(actual)) else np.inf
    verdict = "ok" if error <= RELATIVE_TOLERANCE * scale else "TOO LARGE"
    print(f"{name}: run {seconds:.2f} s, max|tessel - torch| = {error:.3g} "
          f"(limit {RELATIVE_TOLERANCE:g} * {scale:.3g} = {RELATIVE_TOLERANCE * scale:.3g}) {verdict}")
    if verdict != "ok":
        return f"max error {error:.3g} exceeds {RELATIVE_TOLERANCE:g} * max|torch| = {RELATIVE_TOLERANCE * scale:.3g}"
    return None


def check_ir_round_trip(name, models_dir, tessel, work):
    """ONNX -> first/m.tir -> second/m.tir must give identical files; returns an error message or None.

    Both files get the same base name in two folders because the .tir names its weight side file
    (m.tir.bin); every file tessel writes is compared."""
    first_dir = os.path.join(work, f"{name}.ir-from-onnx")
    second_dir = os.path.join(work, f"{name}.ir-from-tir")
    for directory in (first_dir, second_dir):
        os.makedirs(directory, exist_ok=True)
    first = os.path.join(first_dir, f"{name}.tir")
    second = os.path.join(second_dir, f"{name}.tir")
    ok, seconds_a, message = run([tessel, "ir", os.path.join(models_dir, f"{name}.onnx"), "-o", first])
    if not ok:
        return f"tessel ir (from ONNX): {message}"
    ok, seconds_b, message = run([tessel, "ir", first, "-o", second])
    if not ok:
        return f"tessel ir (from .tir): {message}"
    written = sorted(os.listdir(first_dir))
    if sorted(os.listdir(second_dir)) != written:
        return f"IR round trip wrote {sorted(os.listdir(second_dir))}, first pass wrote {written}"
    for file_name in written:
        if not filecmp.cmp(os.path.join(first_dir, file_name), os.path.join(second_dir, file_name),
                           shallow=False):
            return f"text IR round trip differs: {first_dir}/{file_name} vs {second_dir}/{file_name}"
    size_kib = os.path.getsize(first) / 1024
    print(f"{name}: IR round trip identical ({', '.join(written)}; .tir {size_kib:.0f} KiB; "
          f"{seconds_a:.2f} s + {seconds_b:.2f} s)")
    return None


def main():
    args = model_arg_parser(__doc__, "keep outputs and .tir files in this directory").parse_args()
    if not inputs_ready(args, ".torch_output.npy"):
        return 2
    failures = []
    with tempfile.TemporaryDirectory(prefix="tessel-models-") as scratch:
        work = args.keep or scratch
        os.makedirs(work, exist_ok=True)
        for name in args.only:
            for check in (check_outputs, check_ir_round_trip):
                error = check(name, args.models, os.path.abspath(args.tessel), work)
                if error:
                    print(f"FAIL {name}: {error}")
                    failures.append(name)
    print(f"{len(args.only) - len(set(failures))} of {len(args.only)} models ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
