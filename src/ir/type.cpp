// Printing and queries of static value types.
#include "tessel/ir/type.h"

#include <fmt/format.h>

namespace tessel {

std::string Dim::toString() const {
  if (isKnown()) return std::to_string(value);
  return symbol.empty() ? "?" : symbol;
}

TensorType TensorType::fromShape(DType t, const Shape& shape) {
  std::vector<Dim> dims;
  dims.reserve(shape.size());
  for (int64_t d : shape) dims.push_back(Dim::known(d));
  return TensorType(t, std::move(dims));
}

bool TensorType::isStatic() const {
  if (!dims) return false;
  for (const Dim& d : *dims)
    if (!d.isKnown()) return false;
  return true;
}

Shape TensorType::staticShape() const {
  TESSEL_ASSERT(isStatic(), "staticShape() of a dynamic type " + toString());
  Shape s;
  for (const Dim& d : *dims) s.push_back(d.value);
  return s;
}

int64_t TensorType::staticSize() const { return isStatic() ? shapeSize(staticShape()) : -1; }

std::string TensorType::toString() const {
  std::string s(dtypeName(dtype));
  if (!dims) return s + "[*]";
  s += '[';
  for (size_t i = 0; i < dims->size(); ++i) {
    if (i) s += ',';
    s += (*dims)[i].toString();
  }
  return s + ']';
}

}  // namespace tessel
