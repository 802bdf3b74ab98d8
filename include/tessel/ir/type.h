// Static types of IR values: element type plus a shape whose dimensions may be symbolic or unknown.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/ir/tensor.h"

namespace tessel {

/// One dimension of a value's shape: a known extent, a named symbol ("N"), or unknown ("?").
struct Dim {
  int64_t value = -1;  ///< >= 0 when known
  std::string symbol;  ///< non-empty for a named dynamic dimension

  static Dim known(int64_t v) { return Dim{v, {}}; }
  static Dim symbolic(std::string name) { return Dim{-1, std::move(name)}; }
  static Dim unknown() { return Dim{}; }
  bool isKnown() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  /// "224", "N" or "?"
  std::string toString() const;
};

/// Element type and (possibly partial) shape of a value. An absent `dims` means the rank is unknown.
struct TensorType {
  DType dtype = DType::Undefined;
  std::optional<std::vector<Dim>> dims;

  TensorType() = default;
  TensorType(DType t, std::optional<std::vector<Dim>> d) : dtype(t), dims(std::move(d)) {}
  /// A fully static type.
  static TensorType fromShape(DType t, const Shape& shape);

  bool hasRank() const { return dims.has_value(); }
  size_t rank() const { return dims ? dims->size() : 0; }
  /// True when the rank and every dimension are known.
  bool isStatic() const;
  /// The shape of a static type (asserts isStatic()).
  Shape staticShape() const;
  /// Number of elements when static, else -1.
  int64_t staticSize() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
  /// "f32[1,3,224,224]", "f32[N,3,?,?]", "f32[*]" (unknown rank), "i64[]" (scalar).
  std::string toString() const;
};

}  // namespace tessel
