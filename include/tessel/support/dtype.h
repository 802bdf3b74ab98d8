// Element types of tensors (the ONNX TensorProto data types) and compile-time dispatch over them.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "tessel/support/error.h"
#include "tessel/support/half.h"

namespace tessel {

/// Element type. Numeric values equal ONNX's TensorProto::DataType so conversion is a cast.
enum class DType : uint8_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
};

/// Size in bytes of one element (strings: sizeof(std::string), they are stored as objects).
size_t dtypeSize(DType t);
/// Short lower-case name used in the text IR and reports: f32, f16, bf16, f64, i8..i64, u8..u64, bool, str, c64, c128.
std::string_view dtypeName(DType t);
/// Parses a dtypeName(); returns Undefined when unknown.
DType parseDType(std::string_view name);
/// The numpy dtype descriptor ('<f4', '|b1', ...) used by .npy files; empty when numpy has none.
std::string_view dtypeNumpyDescr(DType t);

inline bool isFloat(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
inline bool isSignedInt(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64;
}
inline bool isUnsignedInt(DType t) {
  return t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}
inline bool isInteger(DType t) { return isSignedInt(t) || isUnsignedInt(t); }
inline bool isNumeric(DType t) { return isFloat(t) || isInteger(t); }

/// Maps a C++ element type to its DType.
template <class T> constexpr DType dtypeOf();
template <> constexpr DType dtypeOf<float>() { return DType::Float32; }
template <> constexpr DType dtypeOf<double>() { return DType::Float64; }
template <> constexpr DType dtypeOf<float16>() { return DType::Float16; }
template <> constexpr DType dtypeOf<bfloat16>() { return DType::BFloat16; }
template <> constexpr DType dtypeOf<int8_t>() { return DType::Int8; }
template <> constexpr DType dtypeOf<int16_t>() { return DType::Int16; }
template <> constexpr DType dtypeOf<int32_t>() { return DType::Int32; }
template <> constexpr DType dtypeOf<int64_t>() { return DType::Int64; }
template <> constexpr DType dtypeOf<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtypeOf<uint16_t>() { return DType::UInt16; }
template <> constexpr DType dtypeOf<uint32_t>() { return DType::UInt32; }
template <> constexpr DType dtypeOf<uint64_t>() { return DType::UInt64; }
template <> constexpr DType dtypeOf<bool>() { return DType::Bool; }
template <> constexpr DType dtypeOf<std::string>() { return DType::String; }
template <> constexpr DType dtypeOf<std::complex<float>>() { return DType::Complex64; }
template <> constexpr DType dtypeOf<std::complex<double>>() { return DType::Complex128; }

/// Tag carrying a C++ element type through a generic lambda: `[&](auto tag) { using T = typename decltype(tag)::type; }`.
template <class T> struct TypeTag { using type = T; };

[[noreturn]] void throwUnsupportedDType(DType t, std::string_view what);

/// Calls fn(TypeTag<T>{}) for the C++ type of a real numeric dtype (floats incl. f16/bf16, ints, bool).
/// Throws UserError naming `what` for strings, complex and undefined.
template <class Fn>
decltype(auto) dispatchNumeric(DType t, std::string_view what, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    case DType::Float16: return fn(TypeTag<float16>{});
    case DType::BFloat16: return fn(TypeTag<bfloat16>{});
    case DType::Int8: return fn(TypeTag<int8_t>{});
    case DType::Int16: return fn(TypeTag<int16_t>{});
    case DType::Int32: return fn(TypeTag<int32_t>{});
    case DType::Int64: return fn(TypeTag<int64_t>{});
    case DType::UInt8: return fn(TypeTag<uint8_t>{});
    case DType::UInt16: return fn(TypeTag<uint16_t>{});
    case DType::UInt32: return fn(TypeTag<uint32_t>{});
    case DType::UInt64: return fn(TypeTag<uint64_t>{});
    case DType::Bool: return fn(TypeTag<bool>{});
    default: throwUnsupportedDType(t, what);
  }
}

/// Like dispatchNumeric but only for floating types (f32, f64, f16, bf16).
template <class Fn>
decltype(auto) dispatchFloat(DType t, std::string_view what, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(TypeTag<float>{});
    case DType::Float64: return fn(TypeTag<double>{});
    case DType::Float16: return fn(TypeTag<float16>{});
    case DType::BFloat16: return fn(TypeTag<bfloat16>{});
    default: throwUnsupportedDType(t, what);
  }
}

/// Every dtype including strings and complex numbers.
template <class Fn>
decltype(auto) dispatchAny(DType t, std::string_view what, Fn&& fn) {
  switch (t) {
    case DType::String: return fn(TypeTag<std::string>{});
    case DType::Complex64: return fn(TypeTag<std::complex<float>>{});
    case DType::Complex128: return fn(TypeTag<std::complex<double>>{});
    default: return dispatchNumeric(t, what, std::forward<Fn>(fn));
  }
}

/// The arithmetic type for computing on T: float for f16/bf16, T otherwise.
template <class T> struct ComputeType { using type = T; };
template <> struct ComputeType<float16> { using type = float; };
template <> struct ComputeType<bfloat16> { using type = float; };
template <class T> using compute_t = typename ComputeType<T>::type;

}  // namespace tessel
