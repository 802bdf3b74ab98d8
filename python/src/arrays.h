// numpy arrays <-> Tessel tensors: zero-copy for C-contiguous, aligned arrays of numeric types (the tensor keeps the
// array alive, an array returned keeps its tensor alive); strings and other layouts are copied.
#pragma once

#include <map>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"

namespace tessel::python {

namespace py = pybind11;

/// The numpy dtype of an element type (bfloat16: uint16 bit patterns, strings: object).
py::dtype numpyDtype(DType dtype);

/// A tensor for the value given as `role` `name` (e.g. input 'x'): anything numpy.asarray accepts (a numpy array, a
/// torch tensor, a list); UserError naming it when numpy cannot convert it or its dtype has no Tessel element type.
Tensor tensorFromArray(const std::string& role, const std::string& name, py::handle value);

/// The tensors of a {name: array} dict of `role`s ("input", "output"); TypeError for anything else, or a key that
/// is not a string.
std::map<std::string, Tensor> tensorsFromDict(const std::string& role, py::handle arrays);

/// A numpy array of a tensor: zero-copy when no one else shares its buffer (read-write, it is the caller's alone),
/// else a copy, so that writing into it never changes a model's constant or another output.
py::array arrayFromTensor(const Tensor& tensor);

/// {name: array} of outputs in order.
py::dict dictFromTensors(const std::vector<std::string>& names, const std::vector<Tensor>& tensors);

/// Name, numpy dtype and shape of a model input or output, as Model.inputs / Compiled.inputs list them; a shape
/// entry is an int, or a str for a dimension the model leaves open (its symbol, or "?"); dtype and shape are None
/// when not known.
struct TensorInfo {
  std::string name;
  py::object dtype;
  py::object shape;
  static TensorInfo of(const Value& value);
  static TensorInfo of(const std::string& name, DType dtype, const Shape& shape);
};

/// TensorInfo of every non-constant input / every output of a graph.
std::vector<TensorInfo> inputInfos(const Graph& graph);
std::vector<TensorInfo> outputInfos(const Graph& graph);

/// Registers tessel.TensorInfo.
void registerTensorInfo(py::module_& m);

}  // namespace tessel::python
