#!/usr/bin/python3
"""Conformance harness: runs `tessel run` on every ONNX backend node test and compares outputs with numpy."""
import argparse
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TESSEL = os.path.join(REPO_ROOT, "build", "tessel")
DEFAULT_SUITE = os.path.join(REPO_ROOT, "build", "onnx-suite")
DEFAULT_EXPECTED = os.path.join(REPO_ROOT, "tests", "conformance", "expected_pass.txt")
# shared/ sits beside the repository (also in CI's fresh clone).
DEFAULT_ORT_REPORT = os.path.join(os.path.dirname(REPO_ROOT), "shared", "reference",
                                  "ort-node-suite.tsv")
RTOL = 1e-3
ATOL = 1e-7
MAX_REASON_CHARS = 160
STRING_KINDS = ("U", "S", "O")
# Exit codes of the CLI contract: 2 = bad input or unsupported model, 1 = internal error.
EXIT_UNSUPPORTED = 2


@dataclass
class Result:
    """Outcome of one test: status is pass, fail, unsupported, error or timeout."""
    test: str
    status: str
    reason: str = ""


def one_line(text, limit=MAX_REASON_CHARS):
    """Squeezes a message into one short TSV-safe line."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def last_message(stderr, stdout):
    """The most telling line a failed run printed: its last stderr line that says 'error', else its last line."""
    for stream in (stderr, stdout):
        lines = [line for line in stream.splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower()]
        if errors or lines:
            return (errors or lines)[-1]
    return "no message"


def graph_input_names(model):
    """The model's real inputs: graph inputs that are not initializers, in order."""
    initializers = {init.name for init in model.graph.initializer}
    initializers |= {init.name for init in model.graph.sparse_initializer}
    return [vi.name for vi in model.graph.input if vi.name not in initializers]


def value_kind(value_info):
    """'tensor', 'sequence', 'map', 'optional' or 'sparse' for a graph input/output."""
    kind = value_info.type.WhichOneof("value")
    return {"tensor_type": "tensor", "sequence_type": "sequence", "map_type": "map",
            "optional_type": "optional", "sparse_tensor_type": "sparse"}.get(kind, str(kind))


def numbered_files(directory, prefix):
    """prefix_0.pb, prefix_1.pb, ... in numeric order."""
    pattern = re.compile(re.escape(prefix) + r"_(\d+)\.pb$")
    found = [(int(m.group(1)), name) for name in os.listdir(directory)
             if (m := pattern.match(name))]
    return [os.path.join(directory, name) for _, name in sorted(found)]


def load_tensor(path):
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return tensor


def input_arguments(model, data_dir):
    """--input NAME=FILE pairs, matching input_i.pb to the i-th real graph input."""
    names = graph_input_names(model)
    by_name = {vi.name: vi for vi in model.graph.input}
    files = numbered_files(data_dir, "input")
    if len(files) > len(names):
        raise ValueError(f"{len(files)} input files but the model has {len(names)} inputs")
    arguments = []
    for position, path in enumerate(files):
        name = names[position]
        if value_kind(by_name[name]) == "tensor":
            name = load_tensor(path).name or name
        arguments += ["--input", f"{name}={path}"]
    return arguments


def as_text(value):
    """ONNX string tensors load as bytes objects; .npy strings are str."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def compare_arrays(expected, actual):
    """None when actual matches expected, else a short reason."""
    if expected.shape != actual.shape:
        return f"shape {list(actual.shape)}, expected {list(expected.shape)}"
    expected_kind = "string" if expected.dtype.kind in STRING_KINDS else expected.dtype.kind
    actual_kind = "string" if actual.dtype.kind in STRING_KINDS else actual.dtype.kind
    if expected_kind != actual_kind:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if expected_kind == "string":
        mismatched = np.vectorize(lambda a, b: as_text(a) != as_text(b), otypes=[bool])(expected, actual)
        bad = int(mismatched.sum()) if mismatched.size else 0
        return f"{bad} of {expected.size} strings differ" if bad else None
    if expected_kind in ("f", "c"):
        close = np.isclose(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    else:
        close = actual == expected
    if close.all():
        return None
    worst = ""
    if expected_kind == "f":
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        diff = np.where(close, 0.0, np.nan_to_num(diff, nan=np.inf))
        flat = int(np.argmax(diff))
        worst = f"; worst at {flat}: got {actual.flat[flat]}, expected {expected.flat[flat]}"
    return f"{int((~close).sum())} of {expected.size} values differ{worst}"


def bfloat16_bits_to_float32(bits):
    """onnx loads bfloat16 tensors as their uint16 bit patterns; .npy has no bfloat16, so a float
    output is compared by value (a uint16 output is compared bit for bit, as is)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def check_outputs(model, data_dir, output_dir):
    """None when every output_i.pb matches <output_dir>/<name>.npy, else a reason."""
    outputs = list(model.graph.output)
    for position, path in enumerate(numbered_files(data_dir, "output")):
        value_info = outputs[position]
        if value_kind(value_info) != "tensor":
            return f"output '{value_info.name}' is a {value_kind(value_info)}, the harness compares tensors only"
        expected_proto = load_tensor(path)
        expected = numpy_helper.to_array(expected_proto)
        produced = os.path.join(output_dir, value_info.name + ".npy")
        if not os.path.exists(produced):
            return f"output '{value_info.name}' was not written ({os.path.basename(produced)})"
        try:
            actual = np.load(produced, allow_pickle=False)
        except ValueError as error:
            return f"output '{value_info.name}': unreadable .npy: {error}"
        declared = value_info.type.tensor_type.elem_type
        # onnx 1.12's generator stores bfloat16 outputs as UINT16 .pb files; the model says BFLOAT16.
        bfloat16 = onnx.TensorProto.BFLOAT16 in (declared, expected_proto.data_type)
        if bfloat16 and expected.dtype == np.uint16 and actual.dtype.kind == "f":
            expected = bfloat16_bits_to_float32(expected)
        mismatch = compare_arrays(expected, actual)
        if mismatch:
            return f"output '{value_info.name}': {mismatch}"
    return None


def run_tessel(command, timeout):
    """Runs the CLI in its own process group so a timeout also ends what it spawned."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, errors="replace", start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return None, "", ""
    return process.returncode, stdout, stderr


def run_test(test_dir, tessel, timeout, program=None):
    """Runs every test_data_set_* of one test and returns its Result. PROGRAM is what `tessel run` gets:
    the test's model.onnx (default) or a library compiled from it (run_node_suite_compiled.py)."""
    test = os.path.basename(test_dir)
    model_path = os.path.join(test_dir, "model.onnx")
    program = program or model_path
    try:
        model = onnx.load(model_path, load_external_data=False)
    except Exception as error:  # a broken suite file is the harness's problem, not Tessel's
        return Result(test, "error", one_line(f"harness cannot load model.onnx: {error}"))
    data_dirs = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    if not data_dirs:
        return Result(test, "error", "no test_data_set_* directory")
    for data_name in data_dirs:
        data_dir = os.path.join(test_dir, data_name)
        with tempfile.TemporaryDirectory(prefix=f"tessel-{test}-") as output_dir:
            try:
                arguments = input_arguments(model, data_dir)
            except Exception as error:
                return Result(test, "error", one_line(f"harness: {error}"))
            command = [tessel, "run", program, *arguments, "--output-dir", output_dir]
            code, stdout, stderr = run_tessel(command, timeout)
            if code is None:
                return Result(test, "timeout", f"no answer within {timeout:g} s")
            if code != 0:
                status = "unsupported" if code == EXIT_UNSUPPORTED else "error"
                message = last_message(stderr, stdout).replace(program, os.path.basename(program))
                return Result(test, status, one_line(f"exit {code}: {message}"))
            try:
                mismatch = check_outputs(model, data_dir, output_dir)
            except Exception as error:  # e.g. an output .npy numpy cannot compare: report, go on
                mismatch = f"harness cannot compare outputs: {type(error).__name__}: {error}"
            if mismatch:
                return Result(test, "fail", one_line(mismatch))
    return Result(test, "pass")


def find_tests(suite, pattern):
    """Test directories under SUITE/node (or SUITE itself) whose names match the filter."""
    node_dir = os.path.join(suite, "node")
    root = node_dir if os.path.isdir(node_dir) else suite
    if not os.path.isdir(root):
        raise SystemExit(f"error: suite directory '{suite}' does not exist "
                         "(generate it with scripts/gen-node-suite.sh)")
    regex = re.compile(pattern) if pattern else None
    tests = [os.path.join(root, name) for name in sorted(os.listdir(root))
             if os.path.isfile(os.path.join(root, name, "model.onnx"))]
    return [t for t in tests if regex is None or regex.search(os.path.basename(t))]


def read_name_list(path):
    """Test names, one per line; '#' starts a comment."""
    if not os.path.exists(path):
        return []
    names = []
    with open(path) as f:
        for line in f:
            name = line.split("#", 1)[0].strip()
            if name:
                names.append(name)
    return names


def read_ort_passes(path):
    """Names of the tests ONNX Runtime passes, from its TSV report; None if there is none."""
    if not path or not os.path.exists(path):
        return None
    passes = set()
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if not line.startswith("#") and len(fields) >= 2 and fields[1] == "pass":
                passes.add(fields[0])
    return passes


def write_expected(path, old_names, selected, results):
    """Keeps the list's entries for tests not run now; the run tests are in it iff they pass."""
    passing = {r.test for r in results if r.status == "pass"}
    names = sorted((set(old_names) - selected) | passing)
    header = []
    if os.path.exists(path):
        with open(path) as f:
            header = [line for line in f if line.startswith("#")]
    if not header:
        header = ["# ONNX node tests Tessel must pass (tests/conformance/run_node_suite.py).\n"]
    with open(path, "w") as f:
        f.writelines(header)
        f.writelines(name + "\n" for name in names)
    return len(names)


def write_report(path, results, tessel, how="`tessel run`",
                 statuses="pass, fail, unsupported, error, timeout"):
    with open(path, "w") as f:
        f.write(f"# Tessel ({tessel}, {how}) on the ONNX 1.12 backend node suite: test, status, reason.\n")
        f.write(f"# Compared with rtol {RTOL:g}, atol {ATOL:g}; statuses: {statuses}.\n")
        for r in sorted(results, key=lambda r: r.test):
            f.write(f"{r.test}\t{r.status}\t{r.reason}\n")


def print_newly_passing(results, expected_set, expected_path):
    """Lists the passing tests that the expected-pass file does not name yet."""
    newly_passing = [r.test for r in results if r.status == "pass" and r.test not in expected_set]
    if newly_passing:
        print(f"newly passing, not in {expected_path} ({len(newly_passing)}):")
        for name in newly_passing:
            print(f"  {name}")


def ort_comparison(results, ort_passes):
    ran = {r.test for r in results}
    ours = {r.test for r in results if r.status == "pass"}
    theirs = ort_passes & ran
    return (f"ORT passes {len(theirs)}; Tessel passes {len(ours)}; both: {len(ours & theirs)}; "
            f"only Tessel: {len(ours - theirs)}; only ORT: {len(theirs - ours)}")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tessel", default=DEFAULT_TESSEL, help="the tessel CLI (default: %(default)s)")
    parser.add_argument("--suite", default=DEFAULT_SUITE,
                        help="OUTDIR of scripts/gen-node-suite.sh, or its node/ folder (default: %(default)s)")
    parser.add_argument("--expected", default=DEFAULT_EXPECTED, help="tests that must pass (default: %(default)s)")
    parser.add_argument("--filter", help="run only tests whose name matches this regex (re.search)")
    parser.add_argument("--report", help="write test<TAB>status<TAB>reason for every test to this TSV")
    parser.add_argument("--update-expected", action="store_true",
                        help="rewrite --expected with every test that passes now")
    parser.add_argument("--ort-report", default=DEFAULT_ORT_REPORT,
                        help="ONNX Runtime's TSV report to compare with (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per test (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="tests run in parallel (default: %(default)s)")
    return parser.parse_args(argv)


def executable_or_none(path):
    """Absolute path of an executable --tessel, or None after printing the error."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        print(f"error: --tessel '{path}' is not an executable file", file=sys.stderr)
        return None
    return os.path.abspath(path)


def main(argv=None):
    args = parse_args(argv)
    tessel = executable_or_none(args.tessel)
    if tessel is None:
        return 2
    tests = find_tests(args.suite, args.filter)
    if not tests:
        which = f"match filter '{args.filter}'" if args.filter else "(expected OUTDIR/node/<test>/model.onnx)"
        print(f"error: no tests in '{args.suite}' {which}", file=sys.stderr)
        return 2
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda t: run_test(t, tessel, args.timeout), tests))

    expected = read_name_list(args.expected)
    selected = {r.test for r in results}
    suite_names = {os.path.basename(t) for t in find_tests(args.suite, None)}
    for name in sorted(set(expected) - suite_names):
        print(f"warning: '{name}' in {args.expected} is not in the suite")
    expected_set = set(expected)
    failures = [r for r in results if r.status != "pass"]
    regressions = [r for r in failures if r.test in expected_set]
    for r in failures:
        marker = "REGRESSION " if r.test in expected_set else ""
        print(f"{marker}{r.test}: {r.status}: {r.reason}")
    print_newly_passing(results, expected_set, args.expected)
    if args.report:
        write_report(args.report, results, tessel)
    if args.update_expected:
        count = write_expected(args.expected, expected, selected, results)
        print(f"wrote {count} tests to {args.expected}")
    if regressions:
        print(f"{len(regressions)} test(s) of {args.expected} failed")
    ort_passes = read_ort_passes(args.ort_report)
    if ort_passes is None:
        print(f"ORT comparison skipped: no report at {args.ort_report}")
    else:
        print(ort_comparison(results, ort_passes))
    print(f"{len(results) - len(failures)} passed, {len(failures)} failed")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
