#!/usr/bin/python3
"""Compiled-model conformance: every ONNX backend node test (--select all, the default; or only those whose
operators all have a compiled kernel in the cpu target: --select compiled-ops) is compiled with
`tessel compile MODEL.onnx -o X.so` and run with `tessel run X.so` on the test's inputs; outputs are
compared with the test's expected outputs at run_node_suite.py's tolerances.

Statuses: pass (every step compiled), pass-host (passes, but some step runs through the host's reference
interpreter), fail (wrong outputs), refused (`tessel compile` exits 2, e.g. string tensors; counted apart,
not a failure unless the test is listed), error (any other exit, including `tessel run X.so` refusing a
library it was given) and timeout. The check fails when a test listed in --expected
(tests/conformance/expected_compiled_pass.txt: a name alone must pass with no host step, a name followed
by `pass-host` must pass either way) does not, or when a selected test that passes with the interpreter
(--interp-expected, expected_pass.txt) fails, errs or times out compiled.
"""
import argparse
import collections
import concurrent.futures
import ctypes
import os
import re
import sys
import tempfile
import time

import onnx

import run_node_suite as suite_harness
from run_node_suite import Result, one_line

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EXPECTED = os.path.join(HERE, "expected_compiled_pass.txt")

# Operators the cpu target lowers to a runtime kernel (or, for the alias ops, to no code at all), read
# off src/targets/cpu/lowering.cpp, Lowerer::lowerNode (and the registry traits it asks: the activations
# marked fusibleEpilogue, the View ops). A node of these types can still go through the
# host interpreter when its attributes are outside the kernel's reach (e.g. Softmax on another axis
# than the last, MatMul with a non-constant B is refused); the report names every such step.
COMPILED_OPS = frozenset({
    "Conv",                                            # lowerConv
    "Gemm", "MatMul",                                  # lowerGemm
    "MaxPool", "AveragePool", "GlobalAveragePool",     # lowerPool
    "Concat",                                          # lowerConcat
    "BatchNormalization",                              # lowerBatchNorm (one output)
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",  # View trait, inference Dropout
    "Softmax", "LogSoftmax",                           # last axis
    "Exp", "Log", "Erf", "Neg", "Abs", "Sqrt", "Reciprocal",              # kUnaryKernelOps
    "Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "HardSigmoid", "Clip",  # activationOf (registry)
    "Add", "Sub", "Mul", "Div", "Max", "Min",          # kBinaryKernelOps (two inputs)
    "Gelu",                                            # activationOf (approximate none)
    "LayerNormalization", "Transpose", "Split",        # lower_tensor_ops.cpp
    "Gather", "Slice", "Cast",                         # any element type (lowerTypedNode)
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "Where",
    "Expand",                                          # lowerBroadcastOp
})
# Constant nodes are not steps: the lowering reads them as weights where they are used.
IGNORED_OPS = frozenset({"Constant"})
STATUSES = ("pass", "pass-host", "fail", "refused", "error", "timeout")
PASSING = ("pass", "pass-host")
HOST_KERNEL = b"host interpreter"  # the `kernel` of a step run by the host's reference interpreter
FIRST_COMPILE_TIMEOUT = 900.0      # a cold cache builds the runtime library first
CONST_SUFFIX = "+const"             # names the variant of a test whose inputs but the first are constants


def graph_ops(model):
    """The operator types of a model's nodes (without Constant); None if a node is outside the ONNX domain."""
    ops = set()
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type not in IGNORED_OPS:
            ops.add(node.op_type)
    return ops


def select_tests(tests, ops=COMPILED_OPS):
    """Test directories whose graph has at least one node and only operators in OPS (every test when OPS
    is None)."""
    if ops is None:
        return list(tests)
    selected = []
    for test_dir in tests:
        try:
            model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
        except Exception:  # noqa: BLE001 - run_node_suite.py reports broken suite files
            continue
        found = graph_ops(model)
        if found and found <= ops:
            selected.append(test_dir)
    return selected


def host_steps(library):
    """Operators of the library's steps that run through the host interpreter (ABI: tessel_model_step);
    None if the library cannot be inspected."""
    class StepInfo(ctypes.Structure):
        _fields_ = [("node", ctypes.c_char_p), ("op", ctypes.c_char_p), ("kernel", ctypes.c_char_p),
                    ("rank", ctypes.c_int32), ("dims", ctypes.POINTER(ctypes.c_int64)),
                    ("flops", ctypes.c_double)]
    try:
        lib = ctypes.CDLL(os.path.abspath(library))
    except OSError:
        return None
    try:
        if not hasattr(lib, "tessel_model_num_steps"):
            return None
        lib.tessel_model_step.restype = ctypes.POINTER(StepInfo)
        lib.tessel_model_step.argtypes = [ctypes.c_int32]
        ops = []
        for i in range(lib.tessel_model_num_steps()):
            step = lib.tessel_model_step(i)
            if step and step.contents.kernel == HOST_KERNEL:
                ops.append(step.contents.op.decode())
        return ops
    finally:
        import _ctypes
        _ctypes.dlclose(lib._handle)


def const_variant(test_dir, work_dir):
    """The test with every real input but the first turned into an initializer holding its
    test_data_set_0 value (node tests feed weights, biases, shapes and axes as inputs; real models have
    them constant, which is what the cpu lowering needs). Written as WORK_DIR/<test>+const with a data
    set of input_0.pb and the outputs; None when the test has one input, a first input that is not
    float32, or several data sets."""
    test = os.path.basename(test_dir)
    data_dirs = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    if len(data_dirs) != 1:
        return None
    data_dir = os.path.join(test_dir, data_dirs[0])
    model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    names = suite_harness.graph_input_names(model)
    files = suite_harness.numbered_files(data_dir, "input")
    if len(names) < 2 or len(files) != len(names):
        return None
    by_name = {vi.name: vi for vi in model.graph.input}
    if any(suite_harness.value_kind(by_name[name]) != "tensor" for name in names):
        return None
    if by_name[names[0]].type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        return None  # compiled models take float32 inputs: the variant would be refused again
    for name, path in zip(names[1:], files[1:]):
        tensor = suite_harness.load_tensor(path)
        tensor.name = name
        model.graph.initializer.append(tensor)
    frozen = set(names[1:])
    kept = [vi for vi in model.graph.input if vi.name not in frozen]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.ir_version = max(model.ir_version, 4)  # initializers need not be graph inputs from IR 4 on
    variant_dir = os.path.join(work_dir, test + CONST_SUFFIX)
    variant_data = os.path.join(variant_dir, "test_data_set_0")
    os.makedirs(variant_data)
    onnx.save(model, os.path.join(variant_dir, "model.onnx"))
    os.symlink(os.path.abspath(files[0]), os.path.join(variant_data, "input_0.pb"))
    for path in suite_harness.numbered_files(data_dir, "output"):
        os.symlink(os.path.abspath(path), os.path.join(variant_data, os.path.basename(path)))
    return variant_dir


def base_name(test):
    """The suite test a result belongs to (a +const variant belongs to its test)."""
    return test[:-len(CONST_SUFFIX)] if test.endswith(CONST_SUFFIX) else test


def compile_test(test_dir, tessel, timeout, work_dir, compile_timeout=None):
    """The test as given and, when that was refused, erred (e.g. test data that does not match the declared
    inputs) or ran a step through the host interpreter, its +const variant: a list of one or two Results."""
    results = [compile_and_run(test_dir, tessel, timeout, work_dir, compile_timeout)]
    if results[0].status in ("refused", "pass-host", "error") or "host interpreter:" in results[0].reason:
        try:
            variant = const_variant(test_dir, work_dir)
        except Exception as error:  # noqa: BLE001 - a harness problem: report it on the variant
            return results + [Result(os.path.basename(test_dir) + CONST_SUFFIX, "error",
                                     one_line(f"harness cannot write the variant: {error}"))]
        if variant:
            results.append(compile_and_run(variant, tessel, timeout, work_dir))
    return results


def compile_and_run(test_dir, tessel, timeout, work_dir, compile_timeout=None):
    """Compiles one test's model to a .so in WORK_DIR, runs it on every data set; returns a Result."""
    test = os.path.basename(test_dir)
    model_path = os.path.join(test_dir, "model.onnx")
    library = os.path.join(work_dir, test + ".so")
    compile_timeout = compile_timeout or timeout
    code, stdout, stderr = suite_harness.run_tessel([tessel, "compile", model_path, "-o", library],
                                                    compile_timeout)
    if code is None:
        return Result(test, "timeout", f"compile: no answer within {compile_timeout:g} s")
    if code != 0:
        message = suite_harness.last_message(stderr, stdout).replace(model_path, "model.onnx")
        return Result(test, "refused" if code == suite_harness.EXIT_UNSUPPORTED else "error",
                      one_line(f"compile exit {code}: {message}"))
    if not os.path.isfile(library):
        return Result(test, "error", f"compile exit 0 but wrote no {os.path.basename(library)}")
    steps = host_steps(library)
    result = suite_harness.run_test(test_dir, tessel, timeout, program=library)
    try:
        os.remove(library)
    except OSError:
        pass
    if result.status == "unsupported":  # the library compiled: running it on the test's inputs must work
        result = Result(test, "error", one_line(f"run: {result.reason}"))
    if steps is None:
        note = "steps not inspectable"
    else:
        note = f"host interpreter: {', '.join(steps)}" if steps else ""
    status = "pass-host" if result.status == "pass" and steps else result.status
    if note:
        result = Result(result.test, status, one_line("; ".join(r for r in (result.reason, note) if r)))
    return result


def read_expected(path):
    """--expected: test name -> the weakest status it must reach ("pass", or "pass-host")."""
    expected = {}
    for line in suite_harness.read_name_list(path):
        fields = line.split()
        expected[fields[0]] = fields[1] if len(fields) > 1 and fields[1] == "pass-host" else "pass"
    return expected


def meets(result, expected):
    """Whether a result reaches what --expected asks of it."""
    return result.status == "pass" or (expected == "pass-host" and result.status == "pass-host")


def write_expected(path, old, ran, results):
    """Keeps the entries of tests not run now; a run test is listed iff it passes, with `pass-host` when a
    step ran on the host."""
    entries = {name: status for name, status in old.items() if name not in ran}
    entries.update({r.test: r.status for r in results if r.status in PASSING})
    header = []
    if os.path.exists(path):
        with open(path) as f:
            header = [line for line in f if line.startswith("#")]
    with open(path, "w") as f:
        f.writelines(header or ["# ONNX node tests that must pass compiled by the cpu target "
                                "(tests/conformance/run_node_suite_compiled.py --update-expected).\n"])
        for name in sorted(entries):
            f.write(name + ("  pass-host\n" if entries[name] == "pass-host" else "\n"))
    return len(entries)


def refusal_kind(reason):
    """Groups refusal messages for the summary: the message without names, numbers and shapes."""
    text = re.sub(r"^compile exit 2: (error: )?", "", reason)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\b[a-z]+\d*\[[^\]]*\]", "T[…]", text)
    text = re.sub(r"\d+ node\(s\)", "N node(s)", text)
    return text


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tessel", default=suite_harness.DEFAULT_TESSEL, help="the tessel CLI (default: %(default)s)")
    parser.add_argument("--suite", default=suite_harness.DEFAULT_SUITE,
                        help="OUTDIR of scripts/gen-node-suite.sh, or its node/ folder (default: %(default)s)")
    parser.add_argument("--expected", default=DEFAULT_EXPECTED,
                        help="tests that must pass compiled (default: %(default)s)")
    parser.add_argument("--interp-expected", default=suite_harness.DEFAULT_EXPECTED,
                        help="tests that pass with the interpreter; a selected one must not fail compiled "
                             "(default: %(default)s)")
    parser.add_argument("--select", choices=("all", "compiled-ops"), default="all",
                        help="all suite tests (default), or those whose operators all have a compiled kernel")
    parser.add_argument("--filter", help="run only selected tests whose name matches this regex (re.search)")
    parser.add_argument("--report", help="write test<TAB>status<TAB>reason for every selected test to this TSV")
    parser.add_argument("--update-expected", action="store_true",
                        help="rewrite --expected with every selected test that passes compiled now")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per compile and per run (default: %(default)s; the first compile gets "
                             f"{FIRST_COMPILE_TIMEOUT:g} s, it may build the runtime library)")
    parser.add_argument("--jobs", type=int, default=2, help="tests compiled and run in parallel (default: %(default)s)")
    parser.add_argument("--work-dir", help="where the .so files go (default: a temporary directory)")
    return parser.parse_args(argv)


def run_all(tests, tessel, timeout, jobs, work_dir):
    """The first test alone (it warms the runtime-object cache), then the rest over JOBS workers."""
    if not tests:
        return []
    results = compile_test(tests[0], tessel, timeout, work_dir, max(timeout, FIRST_COMPILE_TIMEOUT))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for rest in pool.map(lambda t: compile_test(t, tessel, timeout, work_dir), tests[1:]):
            results += rest
    return results


def main(argv=None):
    args = parse_args(argv)
    tessel = suite_harness.executable_or_none(args.tessel)
    if tessel is None:
        return 2
    all_tests = suite_harness.find_tests(args.suite, None)
    ops = None if args.select == "all" else COMPILED_OPS
    tests = select_tests(all_tests, ops)
    if args.filter:
        regex = re.compile(args.filter)
        tests = [t for t in tests if regex.search(os.path.basename(t))]
    if not tests:
        print(f"error: no test in '{args.suite}' has only operators with a compiled kernel"
              + (f" and matches filter '{args.filter}'" if args.filter else ""), file=sys.stderr)
        return 2
    started = time.monotonic()
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
        results = run_all(tests, tessel, args.timeout, args.jobs, args.work_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="tessel-compiled-suite-") as work_dir:
            results = run_all(tests, tessel, args.timeout, args.jobs, work_dir)
    elapsed = time.monotonic() - started

    expected = read_expected(args.expected)
    expected_set = set(expected)
    interp_passes = set(suite_harness.read_name_list(args.interp_expected))
    suite_names = {os.path.basename(t) for t in all_tests}
    selected_names = {os.path.basename(t) for t in select_tests(all_tests, ops)}
    for name in sorted(expected_set):
        if base_name(name) not in suite_names:
            print(f"warning: '{name}' in {args.expected} is not in the suite")
        elif base_name(name) not in selected_names:
            print(f"warning: '{name}' in {args.expected} is not selected (an operator without a compiled kernel)")

    bad = []
    for r in results:
        listed = r.test in expected_set and not meets(r, expected[r.test])
        if r.status == "pass" or (r.status == "pass-host" and not listed):
            continue
        broken = r.status not in ("refused", "pass-host") and base_name(r.test) in interp_passes
        marker = "REGRESSION " if listed else "COMPILED ONLY " if broken else ""
        if listed or broken:
            bad.append(r)
        print(f"{marker}{r.test}: {r.status}: {r.reason}")
    newly = [r.test for r in results if r.status in PASSING and r.test not in expected_set]
    if newly:
        print(f"newly passing, not in {args.expected} ({len(newly)}):")
        for name in newly:
            print(f"  {name}")
    through_host = [r for r in results if "host interpreter:" in r.reason]
    if through_host:
        print(f"{len(through_host)} selected test(s) ran a step through the host interpreter, not a compiled kernel:")
        for r in through_host:
            print(f"  {r.test}: {r.status}")
    if args.report:
        suite_harness.write_report(args.report, results, tessel, how="`tessel compile` + `tessel run X.so`",
                                   statuses=", ".join(STATUSES))
    if args.update_expected:
        if not os.path.exists(args.expected):
            with open(args.expected, "w") as f:
                f.write("# ONNX node tests that must pass compiled by the cpu target "
                        "(tests/conformance/run_node_suite_compiled.py --update-expected).\n")
        count = write_expected(args.expected, expected, {r.test for r in results}, results)
        print(f"wrote {count} tests to {args.expected}")

    counts = collections.Counter(r.status for r in results)
    variants = [r for r in results if r.test.endswith(CONST_SUFFIX)]
    variant_counts = collections.Counter(r.status for r in variants)
    variant_breakdown = ", ".join(f"{variant_counts[s]} {s}" for s in STATUSES if variant_counts[s])
    refusals = collections.Counter(refusal_kind(r.reason) for r in results if r.status == "refused")
    if refusals:
        print("refused, by reason:")
        for kind, count in refusals.most_common():
            print(f"  {count:4d}  {kind}")
    if bad:
        print(f"{len(bad)} test(s) failed that must pass (listed in {os.path.basename(args.expected)}, "
              f"or passing with the interpreter)")
    what = "" if ops is None else " (operators with a compiled kernel)"
    print(f"selected {len(tests)} of {len(all_tests)} suite tests{what} and "
          f"{len(variants)} {CONST_SUFFIX} variants" + (f" ({variant_breakdown})" if variant_breakdown else "")
          + "; in all "
          + ", ".join(f"{counts[s]} {s}" for s in STATUSES) + f"; {elapsed:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
