// Helpers shared by operator definitions: axes, broadcasting, common inference and cost rules.
#pragma once

#include <optional>
#include <vector>

#include "tessel/ops/registry.h"

namespace tessel {

/// Maps a possibly negative axis into [0, rank); UserError naming the node when out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank, const Node& node);

/// Numpy-style broadcast of two concrete shapes; UserError naming the node when incompatible.
Shape broadcastShapes(const Shape& a, const Shape& b, const Node& node);
/// Broadcast of symbolic shapes (unknown rank -> nullopt).
std::optional<std::vector<Dim>> broadcastDims(const std::optional<std::vector<Dim>>& a,
                                              const std::optional<std::vector<Dim>>& b, const Node& node);

/// Element strides of `in` when broadcast to `out` (0 along broadcast axes), one per axis of `out`.
std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out);
/// Row-major strides of a contiguous shape.
std::vector<int64_t> contiguousStrides(const Shape& shape);

/// Output 0 has the type of input 0.
void inferSameAsInput0(InferContext& ctx);
/// Output 0 is the broadcast of all inputs, element type of input 0 (or `resultType` when given).
void inferBroadcast(InferContext& ctx, std::optional<DType> resultType = std::nullopt);

/// Cost of an element-wise op: `flopsPerElement` per output element, every input read once.
CostFn costPerElement(double flopsPerElement);
/// Bytes of a value's static type (0 when not static).
double staticBytes(const Value* v);
/// Read/write bytes of a node with no arithmetic (data movement).
Cost movementCost(const Node& node);

}  // namespace tessel
