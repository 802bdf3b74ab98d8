"""Tessel from Python: load a model (ONNX file, onnx.ModelProto, PyTorch module), compile it for the CPU or the
simulated NPU, run it on numpy arrays, compare it with other runs, simulate it and see how it was partitioned.

A thin layer over Tessel's C++ library (the same code as the ``tessel`` command line): errors carry the CLI's
messages, as tessel.UserError (bad input, a ValueError) or tessel.InternalError (a bug in Tessel, a RuntimeError).
See docs/python.md for a worked example.
"""

import io
import os

from tessel._tessel import (
    Compiled,
    InternalError,
    Model,
    Note,
    TensorInfo,
    UserError,
    __version__,
    compare,
    compile,
    data_paths,
    load_compiled,
    partition,
)
from tessel import _tessel

__all__ = [
    "Compiled", "InternalError", "Model", "Note", "TensorInfo", "UserError", "__version__", "compare", "compile",
    "data_paths", "from_torch", "load", "load_compiled", "partition",
]


def load(model, input_shapes=None):
    """Loads a model and returns a tessel.Model.

    model: a path (str or os.PathLike) to an ONNX file (.onnx) or a text IR file (.tir), an onnx.ModelProto, or
    the bytes of a serialised ModelProto. input_shapes: {input name: shape} fixing input shapes, as the CLI's
    --input-shape (dimensions the model leaves undefined otherwise become 1 when the model is compiled).
    Raises tessel.UserError for an unreadable, corrupt or unsupported model (all unsupported operators in one
    message).
    """
    if isinstance(model, (str, os.PathLike)):
        return _tessel._load_path(os.fspath(model), input_shapes)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _tessel._load_bytes(bytes(model), "<ONNX bytes>", input_shapes)
    if hasattr(model, "SerializeToString") and hasattr(model, "graph"):
        name = f"<onnx.ModelProto {model.graph.name}>" if model.graph.name else "<onnx.ModelProto>"
        return _tessel._load_bytes(model.SerializeToString(), name, input_shapes)
    raise TypeError(f"load: expected a path, an onnx.ModelProto or bytes, got {type(model).__name__}")


def from_torch(module, example_inputs, input_names=None, output_names=None, opset_version=13, input_shapes=None):
    """Exports a PyTorch module with torch.onnx.export and loads the result as a tessel.Model.

    example_inputs: a tensor or a tuple of tensors the module is traced with (their shapes become the model's
    input shapes). input_names / output_names: names for the model's inputs and outputs (default: torch's,
    "input.1", ...). opset_version: the ONNX opset to export (Tessel imports opsets 1 to 17).
    """
    import torch  # only needed here

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    buffer = io.BytesIO()
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            torch.onnx.export(module, tuple(example_inputs), buffer, input_names=input_names,
                              output_names=output_names, opset_version=opset_version)
    finally:
        module.train(was_training)
    return _tessel._load_bytes(buffer.getvalue(), f"<torch {type(module).__name__}>", input_shapes)
