"""tessel.compile for cpu, npu and ref; Compiled.run on numpy arrays (in place, copies where needed, the
interpreter as the reference), save and load_compiled, and every error of compile and run."""
import os
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import tessel
from conftest import DIGITS, cli_error, one_node_model, run_cli


def test_every_target_matches_the_interpreter_and_pytorch(digits_compiled, digits_images):
    torch_logits = np.load(os.path.join(os.path.dirname(DIGITS), "torch_logits.npy"))
    ref = digits_compiled["ref"]
    for i in range(5):
        x = {"image": digits_images[i:i + 1]}
        expected = ref.run(x)["logits"]
        assert np.allclose(expected, torch_logits[i:i + 1], atol=1e-4)
        for target in ("cpu", "npu"):
            got = digits_compiled[target].run(x)
            assert list(got) == ["logits"] and got["logits"].dtype == np.float32
            assert np.allclose(got["logits"], expected, atol=1e-4, rtol=1e-4), target


def test_compiled_describes_itself(digits_compiled):
    for target, c in digits_compiled.items():
        assert c.target == target
        assert c.name.startswith(DIGITS + " (" + target)
        assert [(i.name, i.shape) for i in c.inputs] == [("image", (1, 1, 8, 8))]
        assert [(o.name, o.shape, o.dtype) for o in c.outputs] == [("logits", (1, 10), np.float32)]
        assert target in repr(c)


def test_undefined_dimensions_become_one_with_a_note():
    m = tessel.load(DIGITS)
    with pytest.warns(tessel.Note, match=r"input 'image' f32\[N,1,8,8\] has undefined dimension 'N'"):
        c = tessel.compile(m, "ref")
    assert c.inputs[0].shape == (1, 1, 8, 8)


def test_cpu_outputs_are_written_in_place_and_inputs_used_in_place(relu_cpu):
    x = np.linspace(-1, 1, 1000, dtype=np.float32).reshape(1, 1000)
    y = relu_cpu.run({"x": x})["y"]
    assert np.array_equal(y, np.maximum(x, 0))
    assert type(y.base).__name__ == "PyCapsule"  # the buffer the model wrote, not a copy
    assert y.flags.writeable and y.flags.c_contiguous
    y[0, 0] = 5  # the caller's own array
    assert relu_cpu.run({"x": x})["y"][0, 0] == 0


def _status_kib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(key)


def _peak_rss_growth(run):
    """How far the resident set grew above its size before run() (bytes): the peak is reset first."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    before = _status_kib("VmRSS")
    run()
    return (_status_kib("VmHWM") - before) * 1024


def test_a_contiguous_input_is_not_copied_a_strided_one_is():
    n = 1 << 24  # 64 MiB of floats
    big = tessel.compile(tessel.load(one_node_model("Relu", [1, n])), "cpu", threads=1)
    x = np.ones((1, n), np.float32)
    strided = np.ones((1, 2 * n), np.float32)[:, ::2]  # every other float: not contiguous, copied once
    big.run({"x": x})  # warm up
    mib = 1 << 20
    # A run holds its new output (64 MiB); a copied input would be another 64 MiB.
    in_place = _peak_rss_growth(lambda: big.run({"x": x}))
    copied = _peak_rss_growth(lambda: big.run({"x": strided}))
    assert 48 * mib < in_place < 96 * mib, in_place / mib
    assert copied > 112 * mib, copied / mib  # the measure sees a copy when there is one


def test_non_contiguous_misaligned_and_foreign_inputs_give_the_same_result(add_model):
    c = tessel.compile(add_model, "cpu")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    expected = a + b
    raw = np.zeros(6 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(2, 3)  # 1-byte offset: misaligned
    raw[...] = a
    assert not raw.flags.aligned
    cases = [np.asfortranarray(a), a.T.copy().T, raw, a.astype(">f4"), a.tolist()]
    for given in cases[:4]:
        assert np.array_equal(c.run({"a": given, "b": b})["y"], expected)
    with pytest.raises(tessel.UserError, match=r"input 'a': expected f32\[2,3\], got f64"):
        c.run({"a": cases[4], "b": b})  # a list of Python floats is float64: no silent cast
    import torch
    assert np.array_equal(c.run({"a": torch.from_numpy(a), "b": b})["y"], expected)


def test_every_dtype_round_trips_through_the_interpreter(tmp_path):
    for np_type, onnx_type in ((np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE),
                               (np.int64, TensorProto.INT64), (np.int32, TensorProto.INT32),
                               (np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8),
                               (np.float16, TensorProto.FLOAT16), (np.bool_, TensorProto.BOOL)):
        c = tessel.compile(tessel.load(one_node_model("Identity", [3], dtype=onnx_type)), "ref")
        x = np.array([1, 0, 1], dtype=np_type)
        y = c.run({"x": x})["y"]
        assert y.dtype == np_type and np.array_equal(y, x), np_type
        y[0] = 0  # an output that shares its input's buffer is a copy: writing it leaves the input alone
        assert x[0] == 1
    strings = tessel.compile(tessel.load(one_node_model("Identity", [2], dtype=TensorProto.STRING)), "ref")
    out = strings.run({"x": np.array(["a", "bc"])})["y"]
    assert out.dtype == object and out.tolist() == ["a", "bc"]
    assert strings.run({"x": np.array([b"a", b"bc"])})["y"].tolist() == ["a", "bc"]
    with pytest.raises(tessel.UserError, match="input 'x': element 1 is of type int, not a string"):
        strings.run({"x": np.array(["a", 3], dtype=object)})


def test_save_and_load_compiled(digits_compiled, digits_images, tmp_path):
    x = {"image": digits_images[:1]}
    so, tnpu, tir = str(tmp_path / "d.so"), str(tmp_path / "d.tnpu"), str(tmp_path / "d.tir")
    digits_compiled["cpu"].save(so)
    digits_compiled["npu"].save(tnpu)
    digits_compiled["ref"].save(tir)
    expected = digits_compiled["ref"].run(x)["logits"]
    for path, target in ((so, "cpu"), (tnpu, "npu")):
        c = tessel.load_compiled(path)
        assert c.target == target and c.name == f"{path} ({target})"
        assert np.allclose(c.run(x)["logits"], expected, atol=1e-4)
    assert np.array_equal(tessel.compile(tessel.load(tir), "ref").run(x)["logits"], expected)
    # The CLI runs what Python saved.
    np.save(tmp_path / "x.npy", digits_images[:1])
    for path in (so, tnpu):
        status, _, err = run_cli(["run", path, "--input", f"image={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out"), "-q"])
        assert status == 0, err
        assert np.allclose(np.load(tmp_path / "out" / "logits.npy"), expected, atol=1e-4)
    assert tessel.load_compiled(so, threads=1).bench(iterations=2)["threads"] == 1
    assert tessel.load_compiled(tnpu, hw="default").target == "npu"


def test_load_compiled_errors(tmp_path, digits_compiled):
    tnpu = str(tmp_path / "d.tnpu")
    digits_compiled["npu"].save(tnpu)
    with pytest.raises(tessel.UserError) as e:
        tessel.load_compiled(tnpu, hw="tiny")
    assert str(e.value) == cli_error(["run", tnpu, "--hw", "tiny"])
    with pytest.raises(tessel.UserError, match="not a compiled model"):
        tessel.load_compiled(DIGITS)
    fake = tmp_path / "fake.so"
    fake.write_bytes(b"not an ELF file")
    with pytest.raises(tessel.UserError) as e:
        tessel.load_compiled(str(fake))
    assert str(e.value) == cli_error(["run", str(fake)])
    broken = tmp_path / "broken.tnpu"
    broken.write_bytes(open(tnpu, "rb").read()[:100])
    with pytest.raises(tessel.UserError) as e:
        tessel.load_compiled(str(broken))
    assert str(e.value) == cli_error(["run", str(broken)])
    with pytest.raises(tessel.UserError, match="threads applies to target 'cpu', not 'npu'"):
        tessel.load_compiled(tnpu, threads=1)


def test_run_errors_name_the_input_and_match_the_cli(digits_compiled, tmp_path):
    cpu = digits_compiled["cpu"]
    so = str(tmp_path / "d.so")
    cpu.save(so)
    good = np.zeros((1, 1, 8, 8), np.float32)
    bad_inputs = {
        "wrong dtype": ({"image": good.astype(np.float64)}, good.astype(np.float64)),
        "wrong shape": ({"image": np.zeros((1, 1, 8, 9), np.float32)}, np.zeros((1, 1, 8, 9), np.float32)),
        "wrong rank": ({"image": np.zeros((8, 8), np.float32)}, np.zeros((8, 8), np.float32)),
    }
    for case, (feeds, array) in bad_inputs.items():
        np.save(tmp_path / "bad.npy", array)
        expected = cli_error(["run", so, "--input", f"image={tmp_path / 'bad.npy'}"])
        for target, c in digits_compiled.items():
            with pytest.raises(tessel.UserError) as e:
                c.run(feeds)
            assert str(e.value) == expected, (case, target)
            assert "input 'image'" in str(e.value)
    np.save(tmp_path / "x.npy", good)
    expected = cli_error(["run", so, "--input", f"picture={tmp_path / 'x.npy'}"])
    with pytest.raises(tessel.UserError) as e:
        cpu.run({"image": good, "picture": good})
    assert str(e.value) == expected
    with pytest.raises(tessel.UserError, match=r"missing input 'image' \(expected f32\[1,1,8,8\]\)"):
        cpu.run({})
    with pytest.raises(tessel.UserError, match="input 'image': numpy dtype datetime64.* has no Tessel element type"):
        cpu.run({"image": np.zeros((1, 1, 8, 8), "datetime64[s]")})
    with pytest.raises(tessel.UserError, match=r"input 'image': expected an array .* got object"):
        cpu.run({"image": object()})
    with pytest.raises(TypeError, match="expected a dict"):
        cpu.run([good])
    with pytest.raises(TypeError, match="keys are input names"):
        cpu.run({0: good})


def test_bad_input_raises_before_any_work(tmp_session):
    """A wrong input of a model that takes seconds to run raises at once (the checks come first)."""
    from conftest import models_dir
    ref = tessel.compile(tessel.load(os.path.join(models_dir(), "resnet18.onnx")), "ref")
    x = np.load(os.path.join(models_dir(), "resnet18.input.npy"))
    started = time.perf_counter()
    ref.run({"input": x})
    run_seconds = time.perf_counter() - started
    bad = {"input": x, "extra": x}, {"input": x[:, :2]}, {"input": x.astype(np.float64)}
    for feeds in bad:
        started = time.perf_counter()
        with pytest.raises(tessel.UserError):
            ref.run(feeds)
        assert time.perf_counter() - started < run_seconds / 10


def test_compile_errors(relu_model, tmp_path):
    for kwargs, message in (
            ({"target": "gpu"}, "unknown target 'gpu' (known: cpu, npu, ref)"),
            ({"target": "cpu", "hw": "default"}, "hw applies to target 'npu', not 'cpu'"),
            ({"target": "npu", "threads": 2}, "threads applies to target 'cpu', not 'npu'"),
            ({"target": "ref", "tuning_file": "t.json"}, "tuning_file applies to target 'cpu', not 'ref'"),
            ({"threads": 0}, "threads=0: expected a whole number from 1 to 256"),
            ({"threads": 257}, "threads=257: expected a whole number from 1 to 256"),
            ({"threads": "2"}, "threads='2': expected a whole number"),
            ({"threads": True}, "threads=True: expected a whole number"),
    ):
        with pytest.raises(tessel.UserError) as e:
            tessel.compile(relu_model, **kwargs)
        assert str(e.value).startswith(message), kwargs
    with pytest.raises(tessel.UserError) as e:
        tessel.compile(relu_model, "npu", hw="nonexistent")
    assert str(e.value) == cli_error(["compile", DIGITS, "--target", "npu", "--hw", "nonexistent"])
    with pytest.raises(tessel.UserError, match=r"hw \(a dict\)"):
        tessel.compile(relu_model, "npu", hw={"name": "broken"})
    missing = str(tmp_path / "missing-tuning.json")
    with pytest.raises(tessel.UserError) as e:
        tessel.compile(relu_model, "cpu", tuning_file=missing)
    assert str(e.value) == cli_error(["compile", DIGITS, "--tuning-file", missing, "-o", str(tmp_path / "x.so")])
    with pytest.raises(TypeError):
        tessel.compile("model.onnx")
    unsupported = one_node_model("Relu", [4], dtype=TensorProto.FLOAT)
    unsupported.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"  # fixed to 1 with a note: fine
    with pytest.warns(tessel.Note):
        assert tessel.compile(tessel.load(unsupported), "cpu").inputs[0].shape == (1,)


def test_compile_for_npu_with_a_config_dict_and_by_name(relu_model):
    import json
    config = json.load(open(os.path.join(tessel.data_paths()["configs"], "tiny.json")))
    a = tessel.compile(relu_model, "npu", hw=config)
    b = tessel.compile(relu_model, "npu", hw="tiny")
    x = {"x": np.linspace(-1, 1, 1000, dtype=np.float32).reshape(1, 1000)}
    assert np.array_equal(a.run(x)["y"], np.maximum(x["x"], 0))
    assert a.simulate(x)["cycles"] == b.simulate(x)["cycles"]


def test_save_errors(digits_compiled, tmp_path):
    nowhere = str(tmp_path / "no" / "such" / "dir" / "m")
    for target, suffix in (("cpu", ".so"), ("npu", ".tnpu"), ("ref", ".tir")):
        with pytest.raises(tessel.UserError, match="cannot write|cannot open|cannot create"):
            digits_compiled[target].save(nowhere + suffix)
    with pytest.raises(tessel.UserError, match=r"must end in \.tnpu"):
        digits_compiled["npu"].save(str(tmp_path / "m.bin"))
    with pytest.raises(tessel.UserError, match=r"ending in \.tir"):
        digits_compiled["ref"].save(str(tmp_path / "m.onnx"))
    with pytest.raises(TypeError):
        digits_compiled["cpu"].save(42)
