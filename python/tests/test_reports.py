"""The reports: Compiled.bench, Compiled.simulate and trace, tessel.partition, each the CLI's --json object; the
errors of calling them for the wrong target; the exception classes."""
import json

import numpy as np
import pytest

import tessel
from conftest import DIGITS, cli_error, run_cli


def test_bench_is_what_tessel_bench_json_prints(relu_cpu, tmp_path):
    report = relu_cpu.bench(iterations=50, warmup=3)
    so = str(tmp_path / "relu.so")
    relu_cpu.save(so)
    status, out, err = run_cli(["bench", so, "--threads", "1", "--iterations", "50", "--warmup", "3", "--json"])
    assert status == 0, err
    cli = json.loads(out)
    assert set(report) == set(cli)
    for key in ("hash", "threads", "warmup", "iterations", "gflops"):
        assert report[key] == cli[key], key
    assert report["threads"] == 1 and report["iterations"] == 50 and report["model"] == relu_cpu.name
    assert 0 < report["min_ms"] <= report["median_ms"] <= report["p90_ms"] <= report["max_ms"]


def test_bench_profile_has_one_row_per_kernel_call(digits_compiled, digits_images):
    report = digits_compiled["cpu"].bench(inputs={"image": digits_images[:1]}, iterations=5, profile=True)
    layers = report["profile"]["layers"]
    assert [l["index"] for l in layers] == list(range(len(layers))) and len(layers) >= 4
    assert any(l["op"].startswith("conv") or "Conv" in l["op"] for l in layers)
    assert abs(sum(l["share"] for l in layers) - 1) < 1e-6


def test_simulate_and_trace_are_what_tessel_sim_prints(digits_compiled, digits_images, tmp_path):
    npu = digits_compiled["npu"]
    x = digits_images[:1]
    summary = npu.simulate({"image": x})
    tnpu = str(tmp_path / "d.tnpu")
    npu.save(tnpu)
    np.save(tmp_path / "x.npy", x)
    status, out, err = run_cli(["sim", tnpu, "--input", f"image={tmp_path / 'x.npy'}", "--json"])
    assert status == 0, err
    assert summary == json.loads(out)
    assert summary["cycles"] > 0 and summary["hazards"] == 0 and summary["npu_calls"] >= 1
    # Random inputs, seeded as the CLI's --seed.
    status, out, _ = run_cli(["sim", tnpu, "--seed", "3", "--json"])
    assert npu.simulate(seed=3) == json.loads(out)
    # The per-node profile, as --profile adds it.
    status, out, err = run_cli(["sim", tnpu, "--seed", "3", "--json", "--profile"])
    assert status == 0, err
    profiled = npu.simulate(seed=3, profile=True)
    assert profiled == json.loads(out) and "profile" not in summary
    assert profiled["profile"]["totals"]["busy"]["MM"] == profiled["units"]["MM"]["busy"] > 0
    trace = tmp_path / "trace.json"
    npu.trace(str(trace), {"image": x})
    status, _, err = run_cli(["sim", tnpu, "--input", f"image={tmp_path / 'x.npy'}", "--trace", str(tmp_path / "cli.json")])
    assert status == 0, err
    assert json.load(open(trace)) == json.load(open(tmp_path / "cli.json"))
    assert any(e.get("ph") == "X" for e in json.load(open(trace))["traceEvents"])
    with pytest.raises(tessel.UserError, match="cannot write trace"):
        npu.trace(str(tmp_path / "no" / "dir" / "t.json"))


def test_reports_for_the_wrong_target_raise(digits_compiled):
    with pytest.raises(tessel.UserError, match="bench\\(\\) is for models compiled for 'cpu'.*compiled for 'npu'"):
        digits_compiled["npu"].bench()
    with pytest.raises(tessel.UserError, match="simulate\\(\\) is for models compiled for 'npu'.*'ref'"):
        digits_compiled["ref"].simulate()
    with pytest.raises(tessel.UserError, match="trace\\(\\) is for models compiled for 'npu'.*'cpu'"):
        digits_compiled["cpu"].trace("t.json")
    with pytest.raises(tessel.UserError, match="iterations 0: must be at least 1"):
        digits_compiled["cpu"].bench(iterations=0)
    with pytest.raises(tessel.UserError, match="warmup -1: must not be negative"):
        digits_compiled["cpu"].bench(warmup=-1)
    with pytest.raises(tessel.UserError, match="input 'image'"):
        digits_compiled["npu"].simulate({"image": np.zeros((2, 1, 8, 8), np.float32)})
    with pytest.raises(tessel.UserError, match="the model has no input named 'x'"):
        digits_compiled["cpu"].bench({"x": np.zeros(1, np.float32)})


def test_partition_is_what_tessel_partition_json_prints(digits_model):
    for hw in ("default", "no-grouped-conv"):
        report = tessel.partition(digits_model, hw)
        status, out, err = run_cli(["partition", DIGITS, "--hw", hw, "--json", "--input-shape", "image:1x1x8x8"])
        assert status == 0, err
        assert report == json.loads(out)
    report = tessel.partition(digits_model)
    assert report["hw_config"] == "default"
    assert sum(report["nodes_per_device"].values()) == len(report["placements"]) > 0
    assert "Conv" in {p["op"] for p in report["placements"]}
    with pytest.raises(tessel.UserError) as e:
        tessel.partition(digits_model, "nonexistent")
    assert str(e.value) == cli_error(["partition", DIGITS, "--hw", "nonexistent"])
    with pytest.raises(TypeError):
        tessel.partition(digits_model, 3)


def test_exception_classes_and_translation():
    assert issubclass(tessel.UserError, ValueError) and issubclass(tessel.InternalError, RuntimeError)
    assert issubclass(tessel.Note, UserWarning)
    assert tessel.UserError.__module__ == "tessel"
    raise_for_test = tessel._tessel._raise_for_test
    with pytest.raises(tessel.UserError, match="^bad model$"):
        raise_for_test("user", "bad model")
    with pytest.raises(tessel.InternalError, match="broken invariant"):
        raise_for_test("internal", "broken invariant")
    with pytest.raises(tessel.InternalError, match="^index 3$"):
        raise_for_test("std", "index 3")
    with pytest.raises(MemoryError):
        raise_for_test("bad_alloc", "")
    with pytest.raises(ValueError, match="kind:"):
        raise_for_test("nothing", "")
