// Names of attribute kinds.
#include "tessel/ir/attribute.h"

#include <array>

namespace tessel {

std::string_view attrKindName(AttrKind k) {
  static constexpr std::array<std::string_view, 10> kNames = {"int",  "float",  "string",  "tensor",  "graph",
                                                              "ints", "floats", "strings", "tensors", "graphs"};
  return kNames[static_cast<size_t>(k)];
}

}  // namespace tessel
