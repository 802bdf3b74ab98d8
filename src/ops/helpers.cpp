// Shared helpers for operator definitions.
#include "tessel/ops/helpers.h"

namespace tessel {

int64_t normalizeAxis(int64_t axis, int64_t rank, const Node& node) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw UserError(fmt::format("{}: axis {} is out of range for a tensor of rank {}", node.describe(), axis, rank));
  return a;
}

Shape broadcastShapes(const Shape& a, const Shape& b, const Node& node) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw UserError(fmt::format("{}: shapes {} and {} cannot be broadcast together", node.describe(),
                                  shapeToString(a), shapeToString(b)));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::optional<std::vector<Dim>> broadcastDims(const std::optional<std::vector<Dim>>& a,
                                              const std::optional<std::vector<Dim>>& b, const Node& node) {
  if (!a || !b) return std::nullopt;
  size_t r = std::max(a->size(), b->size());
  std::vector<Dim> out(r);
  for (size_t i = 0; i < r; ++i) {
    Dim da = i < r - a->size() ? Dim::known(1) : (*a)[i - (r - a->size())];
    Dim db = i < r - b->size() ? Dim::known(1) : (*b)[i - (r - b->size())];
    if (da.isKnown() && db.isKnown()) {
      if (da.value != db.value && da.value != 1 && db.value != 1)
        throw UserError(fmt::format("{}: dimensions {} and {} cannot be broadcast together (axis {})",
                                    node.describe(), da.value, db.value, i));
      out[i] = da.value == 1 ? db : da;
    } else if (da.isKnown() && da.value == 1) {
      out[i] = db;
    } else if (db.isKnown() && db.value == 1) {
      out[i] = da;
    } else if (!da.isKnown() && !db.isKnown() && da.symbol == db.symbol) {
      out[i] = da;
    } else if (da.isKnown()) {
      out[i] = da;
    } else if (db.isKnown()) {
      out[i] = db;
    } else {
      out[i] = Dim::unknown();
    }
  }
  return out;
}

std::vector<int64_t> contiguousStrides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> inStrides = contiguousStrides(in);
  std::vector<int64_t> s(out.size(), 0);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : inStrides[i];
  return s;
}

void inferSameAsInput0(InferContext& ctx) { ctx.setOutputType(0, ctx.inputType(0)); }

void inferBroadcast(InferContext& ctx, std::optional<DType> resultType) {
  std::optional<std::vector<Dim>> dims = ctx.inputType(0).dims;
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i)) dims = broadcastDims(dims, ctx.inputType(i).dims, ctx.node());
  ctx.setOutputType(0, TensorType(resultType.value_or(ctx.inputType(0).dtype), dims));
}

double staticBytes(const Value* v) {
  if (!v || !v->type.isStatic()) return 0;
  return static_cast<double>(v->type.staticSize()) * static_cast<double>(dtypeSize(v->type.dtype));
}

Cost movementCost(const Node& node) {
  Cost c;
  for (Value* v : node.inputs()) c.bytesRead += staticBytes(v);
  for (Value* v : node.outputs()) c.bytesWritten += staticBytes(v);
  return c;
}

CostFn costPerElement(double flopsPerElement) {
  return [flopsPerElement](const Node& node) {
    Cost c = movementCost(node);
    if (Value* out = node.output(0); out && out->type.isStatic())
      c.flops = flopsPerElement * static_cast<double>(out->type.staticSize());
    return c;
  };
}

}  // namespace tessel
