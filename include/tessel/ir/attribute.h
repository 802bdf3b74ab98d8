// Typed node attributes (the ONNX attribute kinds), including nested graphs for control flow.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessel/ir/tensor.h"

namespace tessel {

class Graph;

/// Kind of an attribute; the order matches the alternatives of AttrValue.
enum class AttrKind : uint8_t { Int, Float, String, Tensor, Graph, Ints, Floats, Strings, Tensors, Graphs };

/// An attribute value. Graph attributes own their subgraph (shared so that cloning a node is cheap;
/// Graph::clone deep-copies them).
using AttrValue = std::variant<int64_t, float, std::string, Tensor, std::shared_ptr<Graph>, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, std::vector<Tensor>,
                               std::vector<std::shared_ptr<Graph>>>;

inline AttrKind attrKindOf(const AttrValue& v) { return static_cast<AttrKind>(v.index()); }
/// "int", "float", "string", "tensor", "graph", "ints", "floats", "strings", "tensors", "graphs".
std::string_view attrKindName(AttrKind k);

}  // namespace tessel
