// The element-wise engine: broadcast loop planning, dtype families and shared inference rules.
#include "elementwise_engine.h"

namespace tessel::elementwise {

bool inTypeSet(DType t, TypeSet set) {
  switch (set) {
    case TypeSet::Float: return isFloat(t);
    case TypeSet::Signed: return isFloat(t) || isSignedInt(t);
    case TypeSet::Numeric: return isNumeric(t);
    case TypeSet::Integer: return isInteger(t);
    case TypeSet::Unsigned: return isUnsignedInt(t);
    case TypeSet::Bool: return t == DType::Bool;
    case TypeSet::NumericOrBool: return isNumeric(t) || t == DType::Bool;
    case TypeSet::Any: return t != DType::Undefined;
  }
  return false;
}

std::string typeSetName(TypeSet set) {
  switch (set) {
    case TypeSet::Float: return "a floating-point type (f16, bf16, f32, f64)";
    case TypeSet::Signed: return "a signed integer or floating-point type";
    case TypeSet::Numeric: return "a numeric type (integer or floating-point)";
    case TypeSet::Integer: return "an integer type";
    case TypeSet::Unsigned: return "an unsigned integer type (u8, u16, u32, u64)";
    case TypeSet::Bool: return "bool";
    case TypeSet::NumericOrBool: return "a numeric type or bool";
    case TypeSet::Any: return "any type";
  }
  return "?";
}

BroadcastLoop::BroadcastLoop(const Shape& out, const std::vector<Shape>& inputs) {
  total_ = shapeSize(out);
  const size_t operands = inputs.size() + 1;
  std::vector<std::vector<int64_t>> full(operands);
  full[0] = contiguousStrides(out);
  for (size_t k = 0; k < inputs.size(); ++k) full[k + 1] = broadcastStrides(inputs[k], out);
  strides_.assign(operands, {});
  for (size_t axis = 0; axis < out.size(); ++axis) {
    const int64_t extent = out[axis];
    if (extent == 1) continue;  // contributes nothing to addressing
    bool mergeable = !extents_.empty();
    // Merge into the previous kept axis when every operand steps through both as one run.
    for (size_t k = 0; k < operands && mergeable; ++k)
      mergeable = strides_[k].back() == full[k][axis] * extent;
    if (mergeable) {
      extents_.back() *= extent;
      for (size_t k = 0; k < operands; ++k) strides_[k].back() = full[k][axis];
      continue;
    }
    extents_.push_back(extent);
    for (size_t k = 0; k < operands; ++k) strides_[k].push_back(full[k][axis]);
  }
  if (extents_.empty()) {  // scalar output (or all extents 1): a single element
    extents_.push_back(1);
    for (auto& s : strides_) s.push_back(0);
  }
}

Shape broadcastInputShapes(const KernelContext& ctx) {
  Shape shape = ctx.input(0).shape();
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i)) shape = broadcastShapes(shape, ctx.input(i).shape(), ctx.node());
  return shape;
}

void requireType(const KernelContext& ctx, size_t i, TypeSet set) {
  DType t = ctx.input(i).dtype();
  if (!inTypeSet(t, set))
    ctx.fail("input {} has element type {}; expected {}", i, dtypeName(t), typeSetName(set));
}

void requireSameTypes(const KernelContext& ctx) {
  DType t = ctx.input(0).dtype();
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    if (ctx.hasInput(i) && ctx.input(i).dtype() != t)
      ctx.fail("input {} has element type {} but input 0 has {}; they must match", i,
               dtypeName(ctx.input(i).dtype()), dtypeName(t));
}

void checkInputType(InferContext& ctx, size_t i, TypeSet set) {
  DType t = ctx.inputType(i).dtype;
  if (t != DType::Undefined && !inTypeSet(t, set))
    ctx.fail("input {} has element type {}; expected {}", i, dtypeName(t), typeSetName(set));
}

InferFn inferUnary(TypeSet set) {
  return [set](InferContext& ctx) {
    checkInputType(ctx, 0, set);
    ctx.setOutputType(0, ctx.inputType(0));
  };
}

InferFn inferPredicate(TypeSet set) {
  return [set](InferContext& ctx) {
    checkInputType(ctx, 0, set);
    ctx.setOutputType(0, TensorType(DType::Bool, ctx.inputType(0).dims));
  };
}

InferFn inferBroadcasting(TypeSet set, bool boolResult) {
  return [set, boolResult](InferContext& ctx) {
    if (ctx.numInputs() == 0) ctx.fail("expected at least one input");
    checkInputType(ctx, 0, set);
    DType t = ctx.inputType(0).dtype;
    for (size_t i = 1; i < ctx.numInputs(); ++i) {
      if (!ctx.hasInput(i)) continue;
      DType ti = ctx.inputType(i).dtype;
      if (t != DType::Undefined && ti != DType::Undefined && ti != t)
        ctx.fail("input {} has element type {} but input 0 has {}; they must match", i, dtypeName(ti),
                 dtypeName(t));
    }
    inferBroadcast(ctx, boolResult ? std::optional<DType>(DType::Bool) : std::nullopt);
  };
}

}  // namespace tessel::elementwise
