// numpy arrays <-> Tessel tensors, and TensorInfo.
#include "arrays.h"

#include <cstring>
#include <fmt/format.h>
#include <pybind11/stl.h>

namespace tessel::python {
namespace {

/// The element type of a numpy dtype, or Undefined.
DType dtypeOfNumpy(const py::dtype& dt) {
  const auto size = dt.itemsize();
  switch (dt.kind()) {
    case 'f': return size == 2 ? DType::Float16 : size == 4 ? DType::Float32 : size == 8 ? DType::Float64 : DType::Undefined;
    case 'i': return size == 1 ? DType::Int8 : size == 2 ? DType::Int16 : size == 4 ? DType::Int32 : size == 8 ? DType::Int64 : DType::Undefined;
    case 'u': return size == 1 ? DType::UInt8 : size == 2 ? DType::UInt16 : size == 4 ? DType::UInt32 : size == 8 ? DType::UInt64 : DType::Undefined;
    case 'b': return DType::Bool;
    case 'c': return size == 8 ? DType::Complex64 : size == 16 ? DType::Complex128 : DType::Undefined;
    case 'U': case 'S': case 'O': return DType::String;
    default: return DType::Undefined;
  }
}

Shape shapeOf(const py::array& a) {
  Shape s(static_cast<size_t>(a.ndim()));
  for (size_t i = 0; i < s.size(); ++i) s[i] = a.shape(static_cast<py::ssize_t>(i));
  return s;
}

/// Strings from an array of str, bytes (UTF-8) or objects that are either.
Tensor stringTensor(const std::string& role, const std::string& name, const py::array& a) {
  Tensor t(DType::String, shapeOf(a));
  py::list items = a.attr("ravel")().attr("tolist")();
  std::string* out = t.data<std::string>();
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle item = items[i];
    if (py::isinstance<py::bytes>(item)) out[i] = item.cast<std::string>();
    else if (py::isinstance<py::str>(item)) out[i] = item.cast<std::string>();
    else
      throw UserError(fmt::format("{} '{}': element {} is of type {}, not a string", role, name, i,
                                  py::str(py::type::handle_of(item).attr("__name__")).cast<std::string>()));
  }
  return t;
}

/// Releases one reference to a Python object, from any thread.
void decref(void* object) {
  py::gil_scoped_acquire gil;
  Py_DECREF(static_cast<PyObject*>(object));
}

}  // namespace

py::dtype numpyDtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return py::dtype::of<float>();
    case DType::Float64: return py::dtype::of<double>();
    case DType::Int8: return py::dtype::of<int8_t>();
    case DType::Int16: return py::dtype::of<int16_t>();
    case DType::Int32: return py::dtype::of<int32_t>();
    case DType::Int64: return py::dtype::of<int64_t>();
    case DType::UInt8: return py::dtype::of<uint8_t>();
    case DType::UInt16: case DType::BFloat16: return py::dtype::of<uint16_t>();
    case DType::UInt32: return py::dtype::of<uint32_t>();
    case DType::UInt64: return py::dtype::of<uint64_t>();
    case DType::Bool: return py::dtype::of<bool>();
    case DType::Complex64: return py::dtype::of<std::complex<float>>();
    case DType::Complex128: return py::dtype::of<std::complex<double>>();
    case DType::Float16: return py::dtype("float16");
    case DType::String: return py::dtype("O");
    case DType::Undefined: break;
  }
  throw InternalError("numpyDtype: undefined element type");
}

Tensor tensorFromArray(const std::string& role, const std::string& name, py::handle value) {
  py::array a = py::isinstance<py::array>(value) ? py::reinterpret_borrow<py::array>(value) : py::array::ensure(value);
  if (!a)
    throw UserError(fmt::format("{} '{}': expected an array (numpy.ndarray, or what numpy.asarray accepts), got {}",
                                role, name, py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>()));
  // numpy makes an object array of anything it cannot read as numbers (e.g. object()): not an array of strings.
  if (!py::isinstance<py::array>(value) && a.dtype().kind() == 'O')
    throw UserError(fmt::format("{} '{}': expected an array (numpy.ndarray, or what numpy.asarray accepts), got {}",
                                role, name, py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>()));
  const DType dtype = dtypeOfNumpy(a.dtype());
  if (dtype == DType::Undefined)
    throw UserError(fmt::format("{} '{}': numpy dtype {} has no Tessel element type", role, name,
                                py::str(a.dtype()).cast<std::string>()));
  if (dtype == DType::String) return stringTensor(role, name, a);
  // Only a C-contiguous, aligned array of the machine's byte order is used in place; others are copied once.
  constexpr int inPlace = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  if ((a.flags() & inPlace) != inPlace || a.dtype().byteorder() == '>')
    a = py::module_::import("numpy").attr("ascontiguousarray")(a, a.dtype().attr("newbyteorder")("="));
  Shape shape = shapeOf(a);
  void* data = const_cast<void*>(a.data());  // tensors given to Tessel are never written
  std::shared_ptr<void> owner(a.release().ptr(), decref);
  return Tensor::wrap(dtype, std::move(shape), data, std::move(owner));
}

std::map<std::string, Tensor> tensorsFromDict(const std::string& role, py::handle arrays) {
  if (!py::isinstance<py::dict>(arrays))
    throw py::type_error(fmt::format("{}s: expected a dict {{{} name: array}}, got {}", role, role,
                                     py::str(py::type::handle_of(arrays).attr("__name__")).cast<std::string>()));
  std::map<std::string, Tensor> out;
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(arrays)) {
    if (!py::isinstance<py::str>(key))
      throw py::type_error(fmt::format("{}s: keys are {} names (str), got {}", role, role, py::repr(key).cast<std::string>()));
    std::string name = key.cast<std::string>();
    out.emplace(name, tensorFromArray(role, name, value));
  }
  return out;
}

py::array arrayFromTensor(const Tensor& tensor) {
  const Shape& shape = tensor.shape();
  if (tensor.dtype() == DType::String) {
    py::list items;
    for (int64_t i = 0; i < tensor.numel(); ++i) items.append(py::str(tensor.data<std::string>()[i]));
    py::array flat = py::module_::import("numpy").attr("array")(items, py::dtype("O"));
    return flat.attr("reshape")(py::tuple(py::cast(shape)));
  }
  if (!tensor.ownsBufferAlone()) {
    py::array copy(numpyDtype(tensor.dtype()), shape);
    if (tensor.nbytes() > 0) std::memcpy(copy.mutable_data(), tensor.rawData(), tensor.nbytes());
    return copy;
  }
  auto* kept = new Tensor(tensor);
  py::capsule owner(kept, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(numpyDtype(tensor.dtype()), shape, {}, kept->rawData(), owner);
}

py::dict dictFromTensors(const std::vector<std::string>& names, const std::vector<Tensor>& tensors) {
  TESSEL_ASSERT(names.size() == tensors.size(), "dictFromTensors: names and tensors differ in number");
  py::dict out;
  for (size_t i = 0; i < names.size(); ++i) out[py::str(names[i])] = arrayFromTensor(tensors[i]);
  return out;
}

TensorInfo TensorInfo::of(const Value& value) {
  TensorInfo info{value.name(), py::none(), py::none()};
  if (value.type.dtype != DType::Undefined) info.dtype = numpyDtype(value.type.dtype);
  if (value.type.hasRank()) {
    py::list dims;
    for (const Dim& d : *value.type.dims) {
      if (d.isKnown()) dims.append(d.value);
      else dims.append(d.toString());
    }
    info.shape = py::tuple(dims);
  }
  return info;
}

TensorInfo TensorInfo::of(const std::string& name, DType dtype, const Shape& shape) {
  return {name, numpyDtype(dtype), py::tuple(py::cast(shape))};
}

std::vector<TensorInfo> inputInfos(const Graph& graph) {
  std::vector<TensorInfo> out;
  for (const Value* v : graph.inputs())
    if (!v->isConstant()) out.push_back(TensorInfo::of(*v));
  return out;
}

std::vector<TensorInfo> outputInfos(const Graph& graph) {
  std::vector<TensorInfo> out;
  for (const Value* v : graph.outputs()) out.push_back(TensorInfo::of(*v));
  return out;
}

void registerTensorInfo(py::module_& m) {
  py::class_<TensorInfo>(m, "TensorInfo",
                         "Name, element type (a numpy dtype; bfloat16 as uint16 bit patterns, strings as object) and "
                         "shape of a model input or output. A shape entry is an int, or a str naming a dimension the "
                         "model leaves open ('N', '?'); dtype or shape is None when the model does not say.")
      .def_readonly("name", &TensorInfo::name, "The input's or output's name.")
      .def_readonly("dtype", &TensorInfo::dtype, "numpy dtype of the elements, or None.")
      .def_readonly("shape", &TensorInfo::shape, "Tuple of extents (int, or str for an open dimension), or None.")
      .def("__repr__", [](const TensorInfo& t) {
        return fmt::format("TensorInfo(name={}, dtype={}, shape={})", py::repr(py::str(t.name)).cast<std::string>(),
                           py::repr(t.dtype).cast<std::string>(), py::repr(t.shape).cast<std::string>());
      })
      .def("__eq__", [](const TensorInfo& a, const TensorInfo& b) {
        return a.name == b.name && a.dtype.equal(b.dtype) && a.shape.equal(b.shape);
      });
}

}  // namespace tessel::python
