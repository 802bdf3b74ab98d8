"""tessel.load (paths, onnx.ModelProto, bytes, text IR), Model.inputs/outputs/info/ir, and their errors."""
import json
import os
import warnings

import numpy as np
import onnx
import pytest

import tessel
from conftest import DIGITS, cli_error, one_node_model, run_cli


def test_load_path_modelproto_and_bytes_agree():
    proto = onnx.load(DIGITS)
    models = [tessel.load(DIGITS), tessel.load(proto), tessel.load(proto.SerializeToString()),
              tessel.load(__import__("pathlib").Path(DIGITS))]
    for m in models:
        assert isinstance(m, tessel.Model)
        assert [i.name for i in m.inputs] == ["image"]
        assert [o.name for o in m.outputs] == ["logits"]
        assert m.inputs[0].dtype == np.float32
        assert m.inputs[0].shape == ("N", 1, 8, 8)  # the symbolic batch as declared
    assert models[0].name == DIGITS
    assert models[1].name.startswith("<onnx.ModelProto")
    assert "digits.onnx" in repr(models[0]) and "1 input(s)" in repr(models[0])


def test_input_shapes_fix_the_declared_shape():
    m = tessel.load(DIGITS, input_shapes={"image": [4, 1, 8, 8]})
    assert m.inputs[0].shape == (4, 1, 8, 8)
    assert m.outputs[0].shape == (4, 10)
    assert repr(m.inputs[0]) == "TensorInfo(name='image', dtype=dtype('float32'), shape=(4, 1, 8, 8))"


def test_info_is_what_tessel_info_json_prints():
    with pytest.warns(tessel.Note, match="undefined dimension"):
        info = tessel.load(DIGITS).info()
    status, out, _ = run_cli(["info", DIGITS, "--json"])
    assert status == 0
    assert info == json.loads(out)
    # Independent of both: the counts from the ONNX file itself.
    proto = onnx.load(DIGITS)
    assert info["nodes"] == len(proto.graph.node)
    assert info["parameters"] == sum(int(np.prod(t.dims)) for t in proto.graph.initializer)
    assert info["inputs"][0]["declared_type"] == "f32[N,1,8,8]"


def test_ir_text_and_file_round_trip(tmp_path, digits_images):
    m = tessel.load(DIGITS, input_shapes={"image": [1, 1, 8, 8]})
    text = m.ir()
    assert text.startswith("tessel") or "graph" in text.split("\n", 3)[0] + text.split("\n", 3)[1]
    assert "Conv" in text and "Gemm" in text
    path = tmp_path / "digits.tir"
    assert m.ir(path) is None
    again = tessel.load(path)
    x = {"image": digits_images[:1]}
    a = tessel.compile(m, "ref").run(x)["logits"]
    b = tessel.compile(again, "ref").run(x)["logits"]
    assert np.array_equal(a, b)
    assert again.ir() == text  # text IR round-trips exactly


def test_missing_and_corrupt_files_raise_the_cli_message(tmp_path):
    missing = str(tmp_path / "missing.onnx")
    with pytest.raises(tessel.UserError) as e:
        tessel.load(missing)
    assert str(e.value) == cli_error(["info", missing])
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(open(DIGITS, "rb").read()[:300])
    with pytest.raises(tessel.UserError) as e:
        tessel.load(str(corrupt))
    assert str(e.value) == cli_error(["info", str(corrupt)])
    assert isinstance(e.value, ValueError)
    with pytest.raises(tessel.UserError, match="unknown model format"):
        tessel.load(str(tmp_path / "model.txt"))
    with pytest.raises(tessel.UserError, match="empty"):
        tessel.load(b"")
    with pytest.raises(tessel.UserError):
        tessel.load(b"\x08\x07garbage bytes that are no ModelProto")


def test_unsupported_operators_are_listed_in_one_message(tmp_path):
    model = one_node_model("Relu", [2])
    model.graph.node[0].op_type = "NoSuchOp"
    model.graph.node.append(onnx.helper.make_node("AlsoMissing", ["y"], ["z"]))
    path = tmp_path / "unsupported.onnx"
    onnx.save(model, str(path))
    with pytest.raises(tessel.UserError) as e:
        tessel.load(model)
    assert "NoSuchOp" in str(e.value) and "AlsoMissing" in str(e.value)
    cli = cli_error(["info", str(path)])
    assert str(e.value) == cli.replace(str(path), "<onnx.ModelProto one_relu>")


def test_bad_input_shapes(tmp_path):
    with pytest.raises(tessel.UserError) as e:
        tessel.load(DIGITS, input_shapes={"picture": [1, 1, 8, 8]})
    assert str(e.value) == cli_error(["info", DIGITS, "--input-shape", "picture:1x1x8x8"])
    with pytest.raises(tessel.UserError) as e:
        tessel.load(DIGITS, input_shapes={"image": [1, 8, 8]})
    assert str(e.value) == cli_error(["info", DIGITS, "--input-shape", "image:1x8x8"])
    for bad in ([1, -1, 8, 8], [1.5, 1, 8, 8], "1x1x8x8", [True, 1, 8, 8]):
        with pytest.raises(tessel.UserError, match=r"input_shapes\['image'\]"):
            tessel.load(DIGITS, input_shapes={"image": bad})
    with pytest.raises(TypeError):
        tessel.load(DIGITS, input_shapes=[1, 1, 8, 8])
    with pytest.raises(TypeError):
        tessel.load(DIGITS, input_shapes={1: [1]})


def test_load_rejects_what_is_not_a_model():
    with pytest.raises(TypeError, match="expected a path"):
        tessel.load(42)


def test_version_and_data_paths():
    assert tessel.__version__.count(".") == 2
    status, out, _ = run_cli(["--version"])
    assert out.split()[1] == tessel.__version__
    paths = tessel.data_paths()
    data_line = [l for l in out.splitlines() if l.startswith("data: ")][0]
    assert os.path.dirname(paths["runtime"]) == data_line[len("data: "):]
    assert os.path.isfile(os.path.join(paths["configs"], "default.json"))
