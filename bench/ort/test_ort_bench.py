#!/usr/bin/python3
"""Tests bench/ort against numpy: the JS .npy reader/writer round trip and ort_bench.js on a tiny Add model."""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
HAS_ORT = os.path.isdir(os.path.join(HERE, "node_modules", "onnxruntime-node"))

# Reads every argv[1..] .npy with npy.js and writes it back as <file>.copy.npy.
ROUND_TRIP_JS = """
const { readNpy, writeNpy } = require(process.argv[1]);
for (const file of process.argv.slice(2)) writeNpy(file + '.copy.npy', readNpy(file));
"""


class NpyRoundTripTest(unittest.TestCase):
    def test_numpy_arrays_survive_a_js_round_trip(self):
        rng = np.random.default_rng(0)
        arrays = {
            "f32_4d": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
            "f64_1d": rng.standard_normal(7),
            "f16": rng.standard_normal((3, 2)).astype(np.float16),
            "i64": rng.integers(-2**62, 2**62, size=(4, 3), dtype=np.int64),
            "u8": rng.integers(0, 255, size=(5,), dtype=np.uint8),
            "i32": rng.integers(-1000, 1000, size=(2, 2), dtype=np.int32),
            "bool": rng.integers(0, 2, size=(3, 3)).astype(bool),
            "scalar": np.array(3.5, dtype=np.float32),
            "empty": np.zeros((0, 4), dtype=np.float32),
            "long_shape": np.ones((1,) * 30, dtype=np.int8),  # header past one 64-byte block
        }
        with tempfile.TemporaryDirectory() as work:
            files = []
            for name, array in arrays.items():
                files.append(os.path.join(work, name + ".npy"))
                np.save(files[-1], array)
            subprocess.run(["node", "-e", ROUND_TRIP_JS, os.path.join(HERE, "npy.js"), *files], check=True)
            for name, array in arrays.items():
                copy_path = os.path.join(work, name + ".npy.copy.npy")
                copy = np.load(copy_path)
                self.assertEqual(copy.dtype, array.dtype, name)
                self.assertEqual(copy.shape, array.shape, name)
                np.testing.assert_array_equal(copy, array, err_msg=name)
                with open(copy_path, "rb") as f:
                    header_end = f.read().index(b"\n") + 1
                self.assertEqual(header_end % 64, 0, f"{name}: data not 64-byte aligned")

    def test_fortran_order_is_refused(self):
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "f.npy")
            np.save(path, np.asfortranarray(np.ones((2, 3), np.float32)))
            done = subprocess.run(["node", "-e", ROUND_TRIP_JS, os.path.join(HERE, "npy.js"), path],
                                  capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("Fortran-order", done.stderr)


@unittest.skipUnless(HAS_ORT, "run `npm install --ignore-scripts` in bench/ort first")
class OrtBenchTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.TemporaryDirectory()
        self.model = os.path.join(self.work.name, "add.onnx")
        graph = helper.make_graph(
            [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Relu", ["sum"], ["relu"])],
            "add", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b")],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("sum", "relu")])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), self.model)
        rng = np.random.default_rng(1)
        self.a = rng.standard_normal((2, 3)).astype(np.float32)
        self.b = rng.standard_normal((2, 3)).astype(np.float32)
        np.save(os.path.join(self.work.name, "a.npy"), self.a)
        np.save(os.path.join(self.work.name, "b.npy"), self.b)

    def tearDown(self):
        self.work.cleanup()

    def bench(self, *extra):
        return subprocess.run(["node", os.path.join(HERE, "ort_bench.js"), self.model,
                               "--input", f"a={self.work.name}/a.npy", *extra],
                              capture_output=True, text=True)

    def test_outputs_and_json(self):
        out_dir = os.path.join(self.work.name, "out")
        done = self.bench("--input", f"b={self.work.name}/b.npy", "--threads", "2", "--warmup", "1",
                          "--iterations", "7", "--json", "--output-dir", out_dir)
        self.assertEqual(done.returncode, 0, done.stderr)
        result = json.loads(done.stdout)
        self.assertEqual(set(result), {"median_ms", "min_ms", "p90_ms", "threads"})
        self.assertEqual(result["threads"], 2)
        self.assertLessEqual(result["min_ms"], result["median_ms"])
        self.assertLessEqual(result["median_ms"], result["p90_ms"])
        np.testing.assert_array_equal(np.load(os.path.join(out_dir, "sum.npy")), self.a + self.b)
        np.testing.assert_array_equal(np.load(os.path.join(out_dir, "relu.npy")), np.maximum(self.a + self.b, 0))

    def test_missing_input_is_a_usage_error(self):
        done = self.bench()
        self.assertEqual(done.returncode, 2)
        self.assertIn("no --input for model input(s) b", done.stderr)


if __name__ == "__main__":
    unittest.main()
