#!/usr/bin/python3
"""Tests run_node_suite.py against fake_tessel.py on a small synthetic suite: right tests pass, wrong ones fail."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.join(HERE, "run_node_suite.py")
COMPILED_HARNESS = os.path.join(HERE, "run_node_suite_compiled.py")
CPU_TARGET = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src", "targets", "cpu")
FAKE_TESSEL = os.path.join(HERE, "fake_tessel.py")
PYTHON = "/usr/bin/python3"
# Generous, so a loaded machine does not time out the quick fakes; fake_tessel's hang sleeps 60 s.
TIMEOUT_SECONDS = 10

# test name -> status the harness must report (fake_tessel.py spoils outputs by name).
EXPECTED_STATUS = {
    "test_fake_good_add": "pass",
    "test_fake_initializer_not_an_input": "pass",
    "test_fake_unnamed_pb": "pass",
    "test_fake_tiny_error": "pass",
    "test_fake_nan_output_good": "pass",
    "test_fake_string_good": "pass",
    "test_fake_three_inputs_in_order": "pass",
    "test_fake_wrong_value": "fail",
    "test_fake_wrong_shape": "fail",
    "test_fake_wrong_dtype": "fail",
    "test_fake_missing_output": "fail",
    "test_fake_nan_mismatch": "fail",
    "test_fake_int_off_by_one": "fail",
    "test_fake_bf16_as_float": "pass",
    "test_fake_bf16_as_float_proto": "pass",
    "test_fake_bf16_as_bits": "pass",
    "test_fake_bf16_as_float_wrong_value": "fail",
    "test_fake_crash": "error",
    "test_fake_unsupported": "unsupported",
    "test_fake_hang": "timeout",
}


def tensor_info(name, array):
    dtype = onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[array.dtype] if array.dtype.kind != "O" else TensorProto.STRING
    return helper.make_tensor_value_info(name, dtype, list(array.shape))


def write_test(suite, name, nodes, inputs, outputs, initializers=(), name_input_pbs=True):
    """Writes SUITE/node/NAME/{model.onnx,test_data_set_0/*.pb} the way ONNX's generator does."""
    test_dir = os.path.join(suite, "node", name)
    data_dir = os.path.join(test_dir, "test_data_set_0")
    os.makedirs(data_dir)
    init_protos = [numpy_helper.from_array(a, n) for n, a in initializers]
    graph_inputs = [tensor_info(n, a) for n, a in inputs] + [tensor_info(n, a) for n, a in initializers]
    graph = helper.make_graph(nodes, name, graph_inputs, [tensor_info(n, a) for n, a in outputs],
                              initializer=init_protos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, os.path.join(test_dir, "model.onnx"))
    for kind, values in (("input", inputs), ("output", outputs)):
        for position, (value_name, array) in enumerate(values):
            pb_name = value_name if (name_input_pbs or kind == "output") else ""
            with open(os.path.join(data_dir, f"{kind}_{position}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(array, pb_name).SerializeToString())


def build_suite(suite):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    add = [helper.make_node("Add", ["a", "b"], ["sum"])]
    for name in ("test_fake_good_add", "test_fake_tiny_error", "test_fake_wrong_value",
                 "test_fake_wrong_shape", "test_fake_wrong_dtype", "test_fake_nan_mismatch",
                 "test_fake_crash", "test_fake_unsupported", "test_fake_hang"):
        write_test(suite, name, add, [("a", a), ("b", b)], [("sum", a + b)])
    write_test(suite, "test_fake_initializer_not_an_input", add, [("a", a)], [("sum", a + b)],
               initializers=[("b", b)])
    write_test(suite, "test_fake_unnamed_pb", add, [("a", a), ("b", b)], [("sum", a + b)],
               name_input_pbs=False)
    with_nan = a.copy()
    with_nan[0, 0] = np.nan
    write_test(suite, "test_fake_nan_output_good", [helper.make_node("Identity", ["a"], ["y"])],
               [("a", with_nan)], [("y", with_nan)])
    words = np.array([b"tessel", b"onnx"], dtype=object)
    write_test(suite, "test_fake_string_good", [helper.make_node("Identity", ["s"], ["t"])],
               [("s", words)], [("t", words)])
    c = rng.standard_normal((2, 3)).astype(np.float32)
    write_test(suite, "test_fake_three_inputs_in_order",
               [helper.make_node("Sum", ["z", "a", "m"], ["total"])],
               [("z", a), ("a", b), ("m", c)], [("total", a + b + c)])
    write_test(suite, "test_fake_missing_output",
               [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Sub", ["a", "b"], ["diff"])],
               [("a", a), ("b", b)], [("sum", a + b), ("diff", a - b)])
    write_bfloat16_test(suite, "test_fake_bf16_as_float", TensorProto.UINT16)
    write_bfloat16_test(suite, "test_fake_bf16_as_float_proto", TensorProto.BFLOAT16)
    write_bfloat16_test(suite, "test_fake_bf16_as_float_wrong_value", TensorProto.UINT16)
    write_bfloat16_test(suite, "test_fake_bf16_as_bits", TensorProto.UINT16)
    ints = np.arange(6, dtype=np.int64).reshape(2, 3)
    write_test(suite, "test_fake_int_off_by_one", [helper.make_node("Identity", ["i"], ["o"])],
               [("i", ints)], [("o", ints)])


# run_node_suite_compiled.py on its own synthetic suite: test name -> status (absent: not selected).
COMPILED_STATUS = {
    "test_fake_good_add": "pass",
    "test_fake_good_constant_add": "pass",
    "test_fake_wrong_value": "fail",
    "test_fake_compile_refused": "refused",
    "test_fake_compile_refused+const": "refused",
    "test_fake_compile_crash": "error",
    "test_fake_compile_crash+const": "error",  # a test whose given form errs is also tried with constant inputs
    "test_fake_unsupported": "error",  # `tessel run X.so` exits 2 on a library that compiled
    "test_fake_unsupported+const": "error",
    "test_fake_needs_const_add": "refused",
    "test_fake_needs_const_add+const": "pass",
    "test_fake_needs_const_wrong_value": "refused",
    "test_fake_needs_const_wrong_value+const": "fail",
}
COMPILED_NOT_SELECTED = ("test_fake_sum", "test_fake_add_then_softplus")


def build_compiled_suite(suite):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    add = [helper.make_node("Add", ["a", "b"], ["sum"])]
    for name in ("test_fake_good_add", "test_fake_wrong_value", "test_fake_compile_refused",
                 "test_fake_compile_crash", "test_fake_unsupported", "test_fake_needs_const_add",
                 "test_fake_needs_const_wrong_value"):
        write_test(suite, name, add, [("a", a), ("b", b)], [("sum", a + b)])
    constant = helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(b, "b"))
    write_test(suite, "test_fake_good_constant_add", [constant] + add, [("a", a)], [("sum", a + b)])
    write_test(suite, "test_fake_sum", [helper.make_node("Sum", ["a", "b"], ["sum"])],
               [("a", a), ("b", b)], [("sum", a + b)])
    # An operator without a compiled kernel anywhere in the graph: the test is not selected.
    write_test(suite, "test_fake_add_then_softplus", add + [helper.make_node("Softplus", ["sum"], ["y"])],
               [("a", a), ("b", b)], [("y", np.log1p(np.exp(a + b)))])


def write_bfloat16_test(suite, name, proto_type):
    """Cast float -> bfloat16. ONNX 1.12's generator writes the expected output as a UINT16 .pb of
    the bit patterns; a BFLOAT16 .pb is tried too. The model's output is declared BFLOAT16."""
    x = np.array([1.0, -2.5, 3.140625, 1e-3], dtype=np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bfloat16
    write_test(suite, name, [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
               [("x", x)], [("y", x)])
    model_path = os.path.join(suite, "node", name, "model.onnx")
    model = onnx.load(model_path)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.BFLOAT16
    onnx.save(model, model_path)
    expected = TensorProto(name="y", data_type=proto_type, dims=[4])
    expected.int32_data.extend(int(b) for b in bits)  # both types keep their bits in int32_data
    with open(os.path.join(suite, "node", name, "test_data_set_0", "output_0.pb"), "wb") as f:
        f.write(expected.SerializeToString())


def read_report(path):
    statuses = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                test, status, _reason = line.rstrip("\n").split("\t")
                statuses[test] = status
    return statuses


class HarnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="tessel-harness-test-")
        cls.suite = os.path.join(cls.work, "suite")
        build_suite(cls.suite)
        cls.ort_report = os.path.join(cls.work, "ort.tsv")
        with open(cls.ort_report, "w") as f:
            f.write("# fake ORT report\n")
            f.write("test_fake_good_add\tpass\t\ntest_fake_wrong_value\tpass\t\n"
                    "test_fake_crash\tfail\twrong\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def run_harness(self, *extra, expected_names=(), ort=None, with_hang=False):
        """Runs the harness on the synthetic suite; the hanging test only when asked (it costs the timeout)."""
        expected = os.path.join(self.work, "expected.txt")
        with open(expected, "w") as f:
            f.write("# header comment kept by --update-expected\n")
            f.writelines(n + "\n" for n in expected_names)
        report = os.path.join(self.work, "report.tsv")
        command = [PYTHON, HARNESS, "--tessel", FAKE_TESSEL, "--suite", self.suite,
                   "--expected", expected, "--report", report, "--timeout", str(TIMEOUT_SECONDS),
                   "--ort-report", ort or self.ort_report, *extra]
        if not with_hang and "--filter" not in extra:
            command += ["--filter", "^(?!test_fake_hang$)"]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        self.elapsed = time.monotonic() - started
        return done, report, expected

    def test_statuses_of_every_test(self):
        done, report, _ = self.run_harness(with_hang=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertEqual(read_report(report), EXPECTED_STATUS)
        passed = sum(1 for s in EXPECTED_STATUS.values() if s == "pass")
        lines = done.stdout.splitlines()
        self.assertEqual(lines[-1], f"{passed} passed, {len(EXPECTED_STATUS) - passed} failed")
        self.assertLess(self.elapsed, 55, "the hanging test was not cut at the timeout")
        for test, status in EXPECTED_STATUS.items():
            failure_lines = [line for line in lines if line.startswith(test + ":")]
            self.assertEqual(len(failure_lines), 0 if status == "pass" else 1, test)

    def test_failure_reasons_are_specific(self):
        done, _, _ = self.run_harness("--filter", "wrong_shape|wrong_dtype|missing|crash|unsupported")
        out = done.stdout
        self.assertIn("test_fake_wrong_shape: fail: output 'sum': shape [5], expected [2, 3]", out)
        self.assertIn("test_fake_wrong_dtype: fail: output 'sum': dtype int32, expected float32", out)
        self.assertIn("test_fake_missing_output: fail: output 'diff' was not written", out)
        self.assertIn("test_fake_crash: error: exit 1: fake tessel: internal error", out)
        self.assertIn("test_fake_unsupported: unsupported: exit 2:", out)

    def test_expected_failure_exits_nonzero(self):
        done, _, _ = self.run_harness(expected_names=["test_fake_good_add", "test_fake_wrong_value"])
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("REGRESSION test_fake_wrong_value: fail", done.stdout)
        self.assertNotIn("  test_fake_good_add\n", done.stdout)  # not "newly passing": it is listed
        self.assertIn("  test_fake_tiny_error\n", done.stdout)

    def test_expected_passing_exits_zero(self):
        done, _, _ = self.run_harness(expected_names=["test_fake_good_add", "test_fake_string_good"])
        self.assertEqual(done.returncode, 0, done.stdout)
        self.assertNotIn("REGRESSION", done.stdout)

    def test_update_expected_lists_passing_tests(self):
        done, _, expected = self.run_harness("--update-expected", expected_names=["test_fake_crash"])
        with open(expected) as f:
            content = f.read().splitlines()
        self.assertEqual(content[0], "# header comment kept by --update-expected")
        want = sorted(t for t, s in EXPECTED_STATUS.items() if s == "pass")
        self.assertEqual(content[1:], want)
        self.assertEqual(done.returncode, 1)  # crash was listed before the update: still reported

    def test_update_with_filter_keeps_other_entries(self):
        _, _, expected = self.run_harness("--update-expected", "--filter", "good_add|wrong_value",
                                          expected_names=["test_fake_wrong_value", "test_fake_hang"])
        with open(expected) as f:
            names = [line for line in f.read().splitlines() if not line.startswith("#")]
        self.assertEqual(names, ["test_fake_good_add", "test_fake_hang"])

    def test_ort_comparison_line(self):
        done, _, _ = self.run_harness()
        passed = sum(1 for s in EXPECTED_STATUS.values() if s == "pass")
        self.assertIn(f"ORT passes 2; Tessel passes {passed}; both: 1; only Tessel: {passed - 1}; "
                      "only ORT: 1", done.stdout)

    def test_filter_selects_tests(self):
        done, report, _ = self.run_harness("--filter", "^test_fake_good")
        self.assertEqual(set(read_report(report)), {"test_fake_good_add"})
        self.assertEqual(done.stdout.splitlines()[-1], "1 passed, 0 failed")

    def test_missing_tessel_is_an_error(self):
        done = subprocess.run([PYTHON, HARNESS, "--tessel", os.path.join(self.work, "nope"),
                               "--suite", self.suite], capture_output=True, text=True)
        self.assertEqual(done.returncode, 2)
        self.assertIn("is not an executable file", done.stderr)


class CompiledHarnessTest(unittest.TestCase):
    """run_node_suite_compiled.py: selection by operator, compile/run statuses, +const variants, and when it fails."""
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="tessel-compiled-harness-test-")
        cls.suite = os.path.join(cls.work, "suite")
        build_compiled_suite(cls.suite)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work)

    def write_list(self, name, names):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write("# header comment kept by --update-expected\n")
            f.writelines(n + "\n" for n in names)
        return path

    def run_harness(self, *extra, expected_names=(), interp_names=()):
        expected = self.write_list("expected.txt", expected_names)
        interp = self.write_list("interp.txt", interp_names)
        report = os.path.join(self.work, "report.tsv")
        command = [PYTHON, COMPILED_HARNESS, "--tessel", FAKE_TESSEL, "--suite", self.suite, "--select", "compiled-ops",
                   "--expected", expected, "--interp-expected", interp, "--report", report,
                   "--timeout", str(TIMEOUT_SECONDS), *extra]
        return subprocess.run(command, capture_output=True, text=True), report, expected

    def test_statuses_and_selection(self):
        done, report, _ = self.run_harness()
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertEqual(read_report(report), COMPILED_STATUS)
        for name in COMPILED_NOT_SELECTED:
            self.assertNotIn(name, done.stdout)
        last = done.stdout.splitlines()[-1]
        counts = {s: list(COMPILED_STATUS.values()).count(s) for s in ("pass", "fail", "refused", "error")}
        self.assertTrue(last.startswith("selected 8 of 10 suite tests (operators with a compiled kernel) and 5 "
                                        "+const variants (1 pass, 1 fail, 1 refused, 2 error); in all "
                                        f"{counts['pass']} pass, 0 pass-host, {counts['fail']} fail, {counts['refused']} refused, "
                                        f"{counts['error']} error, 0 timeout;"), last)
        self.assertIn("test_fake_compile_refused: refused: compile exit 2: fake tessel: error: cpu target: "
                      "input 'a' is i64[2,3]", done.stdout)
        self.assertIn("test_fake_compile_crash: error: compile exit 1: fake tessel: internal error", done.stdout)
        self.assertIn("test_fake_unsupported: error: run: exit 2:", done.stdout)
        self.assertIn("refused, by reason:", done.stdout)

    def test_interpreter_pass_that_fails_compiled_fails_the_check(self):
        done, _, _ = self.run_harness(interp_names=["test_fake_wrong_value", "test_fake_good_add"])
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("COMPILED ONLY test_fake_wrong_value: fail", done.stdout)
        self.assertIn("1 test(s) failed that must pass", done.stdout)

    def test_failing_const_variant_fails_the_check(self):
        done, _, _ = self.run_harness(interp_names=["test_fake_needs_const_wrong_value"])
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("COMPILED ONLY test_fake_needs_const_wrong_value+const: fail", done.stdout)

    def test_refusal_and_crash_of_interpreter_passes(self):
        done, _, _ = self.run_harness("--filter", "refused|crash",
                                      interp_names=["test_fake_compile_refused", "test_fake_good_add"])
        self.assertEqual(done.returncode, 0, done.stdout)  # a refusal is counted, not a failure
        done, _, _ = self.run_harness("--filter", "refused|crash", interp_names=["test_fake_compile_crash"])
        self.assertEqual(done.returncode, 1, done.stdout)

    def test_listed_test_must_pass(self):
        done, _, _ = self.run_harness("--filter", "good_add|refused",
                                      expected_names=["test_fake_good_add", "test_fake_compile_refused"])
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertIn("REGRESSION test_fake_compile_refused: refused", done.stdout)
        self.assertNotIn("REGRESSION test_fake_good_add", done.stdout)

    def test_update_expected_lists_compiled_passes(self):
        done, _, expected = self.run_harness("--update-expected")
        with open(expected) as f:
            content = f.read().splitlines()
        self.assertEqual(content[0], "# header comment kept by --update-expected")
        self.assertEqual(content[1:], sorted(t for t, s in COMPILED_STATUS.items() if s == "pass"))
        again, _, _ = self.run_harness(expected_names=content[1:])
        self.assertEqual(again.returncode, 0, again.stdout)

    def test_op_set_is_the_lowering_code(self):
        """Every operator the harness selects on is one the cpu lowering (lowering.cpp, lower_*.cpp,
        element_expressions.cpp) names, or
        one whose registry definition (src/ops) carries a trait the lowering dispatches on: activations
        (fusibleEpilogue) and views (OpTrait::View). A removed kernel or trait shows here."""
        sys.path.insert(0, HERE)
        import run_node_suite_compiled
        lowering = ""
        for name in sorted(os.listdir(CPU_TARGET)):
            if name in ("lowering.cpp", "element_expressions.cpp") or (name.startswith("lower_") and name.endswith(".cpp")):
                with open(os.path.join(CPU_TARGET, name)) as f:
                    lowering += f.read()
        definitions = {}  # op name -> the text of its definition, up to the next registration
        ops_dir = os.path.join(CPU_TARGET, "..", "..", "ops")
        for name in sorted(os.listdir(ops_dir)):
            with open(os.path.join(ops_dir, name)) as f:
                for part in f.read().split("TESSEL_REGISTER_OP(")[1:]:
                    op = part.split(")", 1)[0]
                    definitions[op] = part
        lowered_by_trait = {op for op, text in definitions.items()
                            if "fusibleEpilogue(" in text or "OpTrait::View" in text}
        self.assertTrue({"Relu", "Clip", "Reshape"} <= lowered_by_trait, sorted(lowered_by_trait))
        missing = sorted(op for op in run_node_suite_compiled.COMPILED_OPS
                         if f'"{op}"' not in lowering and op not in lowered_by_trait)
        self.assertEqual(missing, [])


if __name__ == "__main__":
    unittest.main()
