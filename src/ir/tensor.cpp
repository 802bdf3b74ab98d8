// Tensor storage, conversion and printing.
#include "tessel/ir/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <sstream>

namespace tessel {

int64_t shapeSize(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeToString(const Shape& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_)
    if (d < 0) throw UserError(fmt::format("tensor shape {} has a negative extent", fmt::join(shape_, "x")));
  // Refuse absurd sizes (corrupt shapes, shape arithmetic gone wrong) before the element count can overflow.
  constexpr int64_t kMaxElements = int64_t{1} << 36;
  numel_ = 1;
  for (int64_t d : shape_) {
    if (d != 0 && numel_ > kMaxElements / d)
      throw UserError(fmt::format("a tensor of shape {} is too large (more than 2^36 elements)", fmt::join(shape_, "x")));
    numel_ *= d;
  }
  TESSEL_ASSERT(dtype != DType::Undefined, "tensor of undefined dtype");
  if (dtype == DType::String) {
    auto* strings = new std::string[static_cast<size_t>(std::max<int64_t>(numel_, 1))];
    buffer_ = std::shared_ptr<void>(strings, [](void* p) { delete[] static_cast<std::string*>(p); });
    data_ = strings;
    return;
  }
  size_t bytes = std::max<size_t>(nbytes(), 1);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw UserError(fmt::format("out of memory allocating a {} tensor of {} bytes", dtypeName(dtype), bytes));
  std::memset(p, 0, rounded);
  buffer_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  data_ = p;
}

Tensor Tensor::wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner) {
  TESSEL_ASSERT(dtype != DType::Undefined && dtype != DType::String, "Tensor::wrap: numeric element types only");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  for (int64_t d : t.shape_) TESSEL_ASSERT(d >= 0, "Tensor::wrap: negative extent");
  t.numel_ = shapeSize(t.shape_);
  t.buffer_ = std::move(owner);
  t.data_ = data;
  return t;
}

int64_t Tensor::dim(int64_t i) const {
  int64_t r = static_cast<int64_t>(shape_.size());
  if (i < 0) i += r;
  TESSEL_ASSERT(i >= 0 && i < r, fmt::format("axis {} out of range for rank {}", i, r));
  return shape_[static_cast<size_t>(i)];
}

void Tensor::checkType(DType requested) const {
  TESSEL_ASSERT(requested == dtype_ || (requested == DType::Bool && dtype_ == DType::Bool),
                fmt::format("tensor holds {}, accessed as {}", dtypeName(dtype_), dtypeName(requested)));
}

Tensor Tensor::reshaped(Shape shape) const {
  TESSEL_ASSERT(shapeSize(shape) == numel_, fmt::format("reshape of {} elements to {}", numel_, shapeToString(shape)));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(dtype_, shape_);
  if (dtype_ == DType::String) {
    for (int64_t i = 0; i < numel_; ++i) t.data<std::string>()[i] = data<std::string>()[i];
  } else {
    std::memcpy(t.data_, data_, nbytes());
  }
  return t;
}

namespace {
template <class To>
To convertScalar(double v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_integral_v<To>) {
    if (std::isnan(v)) return To(0);
    // Saturate like the common implementations do for out-of-range float->int.
    if (v >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (v <= static_cast<double>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    return static_cast<To>(v);
  } else {
    return To(static_cast<compute_t<To>>(v));
  }
}

std::string numberToString(double v, DType from) {
  if (isInteger(from) || from == DType::Bool) return fmt::format("{}", static_cast<int64_t>(v));
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  return fmt::format("{}", static_cast<float>(v));
}

double parseNumber(const std::string& s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (lower == "inf" || lower == "+inf" || lower == "infinity") return std::numeric_limits<double>::infinity();
  if (lower == "-inf" || lower == "-infinity") return -std::numeric_limits<double>::infinity();
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) throw UserError(fmt::format("cannot convert string '{}' to a number", s));
  return v;
}
}  // namespace

Tensor Tensor::castTo(DType to) const {
  if (to == dtype_) return *this;
  Tensor out(to, shape_);
  if (to == DType::String) {
    auto* dst = out.data<std::string>();
    for (int64_t i = 0; i < numel_; ++i) dst[i] = numberToString(elementAsDouble(i), dtype_);
    return out;
  }
  dispatchNumeric(to, "Cast", [&](auto tag) {
    using To = typename decltype(tag)::type;
    To* dst = out.data<To>();
    if (dtype_ == DType::String) {
      const auto* src = data<std::string>();
      for (int64_t i = 0; i < numel_; ++i) dst[i] = convertScalar<To>(parseNumber(src[i]));
      return;
    }
    dispatchNumeric(dtype_, "Cast", [&](auto ftag) {
      using From = typename decltype(ftag)::type;
      const From* src = data<From>();
      if constexpr (std::is_integral_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool>) {
        for (int64_t i = 0; i < numel_; ++i) dst[i] = static_cast<To>(src[i]);  // wraps like C (ONNX behaviour)
      } else if constexpr (std::is_same_v<From, int64_t> || std::is_same_v<From, uint64_t>) {
        for (int64_t i = 0; i < numel_; ++i) {
          if constexpr (std::is_same_v<To, bool>) dst[i] = src[i] != 0;
          else dst[i] = To(static_cast<compute_t<To>>(src[i]));
        }
      } else {
        for (int64_t i = 0; i < numel_; ++i)
          dst[i] = convertScalar<To>(static_cast<double>(static_cast<compute_t<From>>(src[i])));
      }
    });
  });
  return out;
}

std::vector<int64_t> Tensor::toInt64Vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  if (!isInteger(dtype_) && dtype_ != DType::Bool)
    throw UserError(fmt::format("expected an integer tensor, got {}", dtypeName(dtype_)));
  dispatchNumeric(dtype_, "toInt64Vector", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* d = data<T>();
    for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = static_cast<int64_t>(d[i]);
  });
  return v;
}

double Tensor::elementAsDouble(int64_t i) const {
  return dispatchNumeric(dtype_, "elementAsDouble", [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<compute_t<T>>(data<T>()[i]));
  });
}

std::vector<double> Tensor::toDoubleVector() const {
  std::vector<double> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = elementAsDouble(i);
  return v;
}

bool Tensor::identical(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (dtype_ == DType::String) {
    for (int64_t i = 0; i < numel_; ++i)
      if (data<std::string>()[i] != other.data<std::string>()[i]) return false;
    return true;
  }
  return std::memcmp(data_, other.data_, nbytes()) == 0;
}

std::string Tensor::summary(int maxValues) const {
  if (!defined()) return "<undefined>";
  std::ostringstream os;
  os << dtypeName(dtype_) << "[" << shapeToString(shape_) << "] [";
  int64_t n = std::min<int64_t>(numel_, maxValues);
  for (int64_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    if (dtype_ == DType::String) os << '"' << data<std::string>()[i] << '"';
    else if (dtype_ == DType::Complex64) os << data<std::complex<float>>()[i].real() << "+" << data<std::complex<float>>()[i].imag() << "i";
    else if (dtype_ == DType::Complex128) os << data<std::complex<double>>()[i].real() << "+" << data<std::complex<double>>()[i].imag() << "i";
    else os << fmt::format("{:.6g}", elementAsDouble(i));
  }
  if (numel_ > n) os << ", ...";
  os << "]";
  return os.str();
}

}  // namespace tessel
