// Tensor: a dense, contiguous, row-major array of one element type, with a shared (immutable by convention) buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/support/dtype.h"

namespace tessel {

/// A concrete shape: one extent per axis, row-major.
using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar).
int64_t shapeSize(const Shape& shape);
/// "1x3x224x224" ("scalar" for rank 0).
std::string shapeToString(const Shape& shape);

/// A dense tensor. Copies are shallow (they share the buffer); once a tensor has been handed to someone
/// else it is treated as immutable. Use clone() for a private copy.
class Tensor {
 public:
  Tensor() = default;
  /// A zero-initialised tensor (strings: empty strings).
  Tensor(DType dtype, Shape shape);

  /// A tensor holding the given values (values.size() must equal shapeSize(shape)).
  template <class T>
  static Tensor fromVector(Shape shape, const std::vector<T>& values) {
    Tensor t(dtypeOf<T>(), std::move(shape));
    TESSEL_ASSERT(static_cast<int64_t>(values.size()) == t.numel(), "fromVector: size mismatch");
    T* d = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
    return t;
  }
  /// A tensor over memory it does not own (no copy), e.g. a numpy array: `owner` keeps `data` alive for as long
  /// as a copy of the tensor exists. Numeric and bool element types only; the extents must be non-negative.
  static Tensor wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner);
  /// A rank-0 tensor.
  template <class T>
  static Tensor scalar(T value) {
    return fromVector<T>({}, {value});
  }

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  /// Extent of axis i; negative i counts from the end.
  int64_t dim(int64_t i) const;
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtypeSize(dtype_); }

  template <class T>
  T* data() {
    checkType(dtypeOf<T>());
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    checkType(dtypeOf<T>());
    return static_cast<const T*>(data_);
  }
  void* rawData() { return data_; }
  /// True when no other tensor shares this one's buffer (a caller may then hand the buffer out to be written).
  bool ownsBufferAlone() const { return buffer_.use_count() == 1; }
  const void* rawData() const { return data_; }

  /// Same buffer, new shape (same element count).
  Tensor reshaped(Shape shape) const;
  /// A deep copy with its own buffer.
  Tensor clone() const;
  /// Converts every element to another dtype (ONNX Cast semantics for numeric types and strings).
  Tensor castTo(DType dtype) const;
  /// Elements of an integer tensor as int64 (for shape-like inputs).
  std::vector<int64_t> toInt64Vector() const;
  /// Elements of any real numeric tensor as double.
  std::vector<double> toDoubleVector() const;
  /// Element i of a real numeric tensor as double.
  double elementAsDouble(int64_t i) const;
  /// Exact equality of dtype, shape and bytes (NaNs compare by bit pattern).
  bool identical(const Tensor& other) const;
  /// "f32[1x10] [0.1, 0.2, ...]" with at most `maxValues` values.
  std::string summary(int maxValues = 6) const;

 private:
  void checkType(DType requested) const;

  DType dtype_ = DType::Undefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<void> buffer_;
  void* data_ = nullptr;
};

}  // namespace tessel
