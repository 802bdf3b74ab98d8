#!/usr/bin/python3
"""`tessel run`'s command line backed by ONNX Runtime: lets the conformance harness measure ORT the same way."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def to_npy(path, scratch, index):
    """ORT's side reads .npy only: converts a TensorProto .pb into one."""
    if path.endswith(".npy"):
        return path
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    converted = os.path.join(scratch, f"input_{index}.npy")
    np.save(converted, numpy_helper.to_array(tensor))
    return converted


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["run"])
    parser.add_argument("model")
    parser.add_argument("--input", action="append", default=[], help="NAME=FILE (.npy or TensorProto .pb)")
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ort-run-") as scratch:
        inputs = []
        for index, pair in enumerate(args.input):
            name, sep, path = pair.partition("=")
            if not sep:
                print(f"error: --input '{pair}' is not NAME=FILE", file=sys.stderr)
                return 2
            try:
                inputs += ["--input", f"{name}={to_npy(path, scratch, index)}"]
            except Exception as error:
                print(f"error: input '{name}' ({path}): {error}", file=sys.stderr)
                return 2
        done = subprocess.run(["node", os.path.join(HERE, "ort_bench.js"), args.model, *inputs,
                               "--warmup", "0", "--iterations", "1", "--output-dir", args.output_dir],
                              stdout=subprocess.DEVNULL)
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
