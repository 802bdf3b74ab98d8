"""tessel.compare: any two of Model, Compiled, a path and outputs given as a dict, as `tessel compare --json`."""
import json

import numpy as np
import pytest

import tessel
from conftest import DIGITS, cli_error, run_cli


def test_compare_model_with_each_compiled_form(digits_model, digits_compiled, digits_images):
    x = {"image": digits_images[:1]}
    for target in ("cpu", "npu"):
        report = tessel.compare(digits_model, digits_compiled[target], inputs=x, atol=1e-4, rtol=1e-4)
        assert report["pass"] is True
        (comparison,) = report["comparisons"]
        assert comparison["reference"] == DIGITS + " (ref)"
        assert comparison["actual"] == digits_compiled[target].name
        (out,) = comparison["outputs"]
        assert out["name"] == "logits" and out["elements"] == 10 and out["mismatches"] == 0
        assert out["max_abs_error"] <= 1e-4
    assert report["inputs"] == [{"name": "image", "dtype": "f32", "shape": [1, 1, 8, 8], "given": True}]


def test_compare_is_what_tessel_compare_json_prints(digits_compiled, digits_images, tmp_path):
    so = str(tmp_path / "d.so")
    digits_compiled["cpu"].save(so)
    np.save(tmp_path / "x.npy", digits_images[:1])
    report = tessel.compare(DIGITS, so, inputs={"image": digits_images[:1]})
    status, out, err = run_cli(["compare", DIGITS, so, "--input", f"image={tmp_path / 'x.npy'}", "--json"])
    assert status in (0, 1), err
    assert report == json.loads(out)
    # Random inputs: the same seeded values as the CLI's, with a note.
    with pytest.warns(tessel.Note, match="input 'image' not given; using random"):
        report = tessel.compare(digits_compiled["cpu"], DIGITS, seed=7)
    status, out, _ = run_cli(["compare", so, DIGITS, "--seed", "7", "--json"])
    expected = json.loads(out)
    expected["comparisons"][0]["reference"] = digits_compiled["cpu"].name
    assert report == expected


def test_outputs_given_as_a_dict_and_a_mismatch(digits_compiled, digits_images, tmp_path):
    x = {"image": digits_images[:1]}
    ref = digits_compiled["ref"].run(x)
    assert tessel.compare(ref, digits_compiled["cpu"], inputs=x, atol=1e-4)["pass"]
    wrong = {"logits": ref["logits"].copy()}
    wrong["logits"][0, 7] += 0.01
    report = tessel.compare(wrong, digits_compiled["cpu"], inputs=x, atol=1e-4, rtol=0)
    assert report["pass"] is False  # a mismatch is a result, not an exception
    out = report["comparisons"][0]["outputs"][0]
    assert out["worst"]["index"] == [0, 7] and out["mismatches"] == 1
    assert abs(out["max_abs_error"] - 0.01) < 1e-3
    missing = tessel.compare({"other": ref["logits"]}, digits_compiled["cpu"], inputs=x)
    assert missing["pass"] is False and "problem" in missing["comparisons"][0]["outputs"][0]
    np.savez(tmp_path / "ref.npz", **ref)
    assert tessel.compare(str(tmp_path / "ref.npz"), digits_compiled["npu"], inputs=x, atol=1e-4)["pass"]


def test_compare_errors(digits_model, digits_compiled, digits_images):
    x = {"image": digits_images[:1]}
    with pytest.raises(tessel.UserError, match=r"atol=-1 rtol=1e-05: tolerances must be non-negative"):
        tessel.compare(digits_model, digits_compiled["cpu"], atol=-1)
    with pytest.raises(tessel.UserError, match="tolerances must be non-negative"):
        tessel.compare(digits_model, digits_compiled["cpu"], rtol=float("nan"))
    with pytest.raises(tessel.UserError, match="both sides are saved outputs"):
        tessel.compare({"logits": np.zeros((1, 10), np.float32)}, {"logits": np.zeros((1, 10), np.float32)})
    with pytest.raises(TypeError, match="compare: b must be"):
        tessel.compare(digits_model, 3)
    with pytest.raises(tessel.UserError) as e:
        tessel.compare(digits_model, digits_compiled["cpu"], inputs={"image": x["image"][0]})
    assert "input 'image'" in str(e.value)
    with pytest.raises(tessel.UserError) as e:
        tessel.compare("missing.onnx", digits_compiled["cpu"])
    assert str(e.value) == cli_error(["compare", "missing.onnx", DIGITS])
    with pytest.raises(tessel.UserError, match="output 'logits': expected an array"):
        tessel.compare({"logits": object()}, digits_compiled["cpu"])
