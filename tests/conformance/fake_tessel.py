#!/usr/bin/python3
"""A stand-in for `tessel run` and `tessel compile` used to test the conformance harnesses: its behaviour is
chosen by the test's name.

It answers from the test's own output_i.pb files (the oracle). For test directories named test_fake_*
(never in the real suite) it then spoils the answer when the name asks for it: wrong_value, wrong_shape, wrong_dtype, missing_output, nan_mismatch,
int_off_by_one, crash (exit 1), unsupported (exit 2), hang (sleeps). Before answering it checks that
the harness passed exactly the model's non-initializer inputs, by name, with input_<position>.pb.

`compile MODEL -o X.so` writes the model's path into X.so (`run X.so` answers for that model); it exits 2
for names with compile_refused, and for names with needs_const while the model has more than one
non-initializer input; it exits 1 for names with compile_crash.
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper


def fail(message, code=3):
    print(f"fake tessel: {message}", file=sys.stderr)
    sys.exit(code)


def parse_inputs(pairs):
    inputs = []
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep:
            fail(f"--input '{pair}' is not NAME=FILE", 2)
        inputs.append((name, path))
    return inputs


def check_inputs(model, inputs, data_dir):
    """The harness must pass real inputs in order, each with the input_<i>.pb of its position."""
    initializers = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in initializers]
    given = [name for name, _ in inputs]
    if given != names[:len(given)]:
        fail(f"inputs {given}, expected {names}")
    for position, (name, path) in enumerate(inputs):
        want = os.path.join(data_dir, f"input_{position}.pb")
        if os.path.abspath(path) != os.path.abspath(want):
            fail(f"input '{name}' given file {path}, expected {want}")


def spoil(test, array):
    """Returns the array a buggy compiler would produce for this test name."""
    if "wrong_value" in test:
        return array + np.asarray(1, dtype=array.dtype)
    if "wrong_shape" in test:
        return array.reshape(-1)[:-1] if array.size > 1 else np.concatenate([array.reshape(-1)] * 2)
    if "wrong_dtype" in test:
        return array.astype(np.int32 if array.dtype.kind == "f" else np.float32)
    if "nan_mismatch" in test:
        spoiled = array.copy()
        spoiled.flat[0] = np.nan
        return spoiled
    if "int_off_by_one" in test:
        spoiled = array.copy()
        spoiled.flat[-1] += 1
        return spoiled
    if "tiny_error" in test:  # within rtol 1e-3: must still pass
        return (array * (1 + 1e-5)).astype(array.dtype)
    return array


def real_inputs(model):
    initializers = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in initializers]


def fake_compile(model_path, output):
    """Writes MODEL's path into OUTPUT, or refuses/crashes as the test's name asks."""
    test = os.path.basename(os.path.dirname(os.path.abspath(model_path)))
    model = onnx.load(model_path)
    if test.startswith("test_fake_"):
        if "compile_crash" in test:
            fail("internal error: simulated compile crash", 1)
        if "compile_refused" in test:
            fail("error: cpu target: input 'a' is i64[2,3]; compiled models take float32 inputs", 2)
        if "needs_const" in test and len(real_inputs(model)) > 1:
            fail("error: cpu target: no code path for 1 node(s): node 'n' (Add) (needs a constant B)", 2)
    with open(output, "w") as f:
        f.write(os.path.abspath(model_path))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("model")
    parser.add_argument("--input", action="append", default=[])
    parser.add_argument("--output-dir")
    parser.add_argument("-o", dest="output")
    args = parser.parse_args()
    if args.command == "compile":
        fake_compile(args.model, args.output)
        return
    if args.command != "run" or not args.output_dir:
        fail(f"unknown command {args.command} or no --output-dir", 2)
    if args.model.endswith(".so"):  # written by fake_compile
        with open(args.model) as f:
            args.model = f.read()
    test_dir = os.path.dirname(os.path.abspath(args.model))
    test = os.path.basename(test_dir)
    data_dir = os.path.join(test_dir, "test_data_set_0")
    model = onnx.load(args.model)
    check_inputs(model, parse_inputs(args.input), data_dir)
    if not test.startswith("test_fake_"):
        test = ""  # a real suite test: answer like a perfect compiler
    if "crash" in test:
        fail("internal error: simulated crash", 1)
    if "unsupported" in test:
        fail(f"model '{args.model}': operator Foo is not supported", 2)
    if "hang" in test:
        time.sleep(60)
    outputs = sorted(f for f in os.listdir(data_dir) if re.match(r"output_\d+\.pb$", f))
    for file_name in outputs:
        position = int(re.search(r"\d+", file_name).group())
        tensor = onnx.TensorProto()
        with open(os.path.join(data_dir, file_name), "rb") as f:
            tensor.ParseFromString(f.read())
        if "missing_output" in test and position == len(outputs) - 1:
            continue
        name = model.graph.output[position].name
        array = numpy_helper.to_array(tensor)
        if "bf16_as_float" in test and array.dtype == np.uint16:  # .npy has no bfloat16: answer in float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        if array.dtype.kind == "O":  # strings come as bytes objects; a C++ writer would use '<U'
            array = np.vectorize(lambda b: b.decode() if isinstance(b, bytes) else str(b))(array)
            array = array.astype(str)
        np.save(os.path.join(args.output_dir, name + ".npy"), spoil(test, array))


if __name__ == "__main__":
    main()
