"""Fixtures of the Python package tests: the tessel CLI next to the module, small ONNX models made here, the
bundled digits CNN, compiled forms shared by the tests (compiling takes seconds)."""
import os
import subprocess
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = os.path.join(REPO, "examples", "digits", "digits.onnx")


def build_dir():
    """The build tree whose module is imported (tessel/_tessel*.so lives in BUILD/python/tessel)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(tessel._tessel.__file__))))


def run_cli(args):
    """Runs the tessel CLI of the same build; returns (status, stdout, stderr)."""
    p = subprocess.run([os.path.join(build_dir(), "tessel")] + args, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def cli_error(args):
    """The message of a CLI error (stderr without 'tessel: error: '), checking exit status 2."""
    status, _, err = run_cli(args)
    assert status == 2, (status, err)
    lines = [l for l in err.splitlines() if l.startswith("tessel: error: ")]
    assert len(lines) == 1, err
    return lines[0][len("tessel: error: "):]


def one_node_model(op, shape, dtype=TensorProto.FLOAT, inputs=("x",), attrs=None, out_dtype=None):
    """An ONNX model of one node over inputs of `shape`; output 'y'."""
    node = helper.make_node(op, list(inputs), ["y"], **(attrs or {}))
    graph = helper.make_graph(
        [node], f"one_{op.lower()}",
        [helper.make_tensor_value_info(name, dtype, shape) for name in inputs],
        [helper.make_tensor_value_info("y", out_dtype or dtype, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="session")
def tmp_session(tmp_path_factory):
    return tmp_path_factory.mktemp("tessel")


@pytest.fixture(scope="session")
def relu_model():
    """Relu over 1,000 floats, the one-node model of the run-overhead figure."""
    return tessel.load(one_node_model("Relu", [1, 1000]))


@pytest.fixture(scope="session")
def relu_cpu(relu_model):
    return tessel.compile(relu_model, "cpu", threads=1)


@pytest.fixture(scope="session")
def add_model():
    """y = a + b over 2x3 floats: two inputs."""
    return tessel.load(one_node_model("Add", [2, 3], inputs=("a", "b")))


@pytest.fixture(scope="session")
def digits_model():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tessel.Note)
        return tessel.load(DIGITS, input_shapes={"image": [1, 1, 8, 8]})


@pytest.fixture(scope="session")
def digits_images():
    return np.load(os.path.join(REPO, "examples", "digits", "test_images.npy")).astype(np.float32)


@pytest.fixture(scope="session")
def digits_compiled(digits_model):
    """The digits CNN for every target."""
    return {t: tessel.compile(digits_model, t) for t in ("ref", "cpu", "npu")}


def models_dir():
    """The torchvision exports (TESSEL_MODELS_DIR, see scripts/export-models.py)."""
    d = os.environ.get("TESSEL_MODELS_DIR") or os.path.join(REPO, "build", "models")
    if not os.path.exists(os.path.join(d, "resnet18.onnx")):
        pytest.fail(f"no torchvision exports in {d}: run scripts/export-models.py or set TESSEL_MODELS_DIR")
    return d
