// Operators that make tensors from attributes or shapes: Constant, ConstantOfShape, EyeLike, Range, and
// Identity.
#include <cmath>

#include "elementwise_engine.h"

namespace tessel {
namespace {

using namespace elementwise;

// ---------------------------------------------------------------------------------------- Constant

/// The attributes of Constant that can carry its value (exactly one must be present).
constexpr const char* kConstantValueAttrs[] = {"value",        "value_float",  "value_floats", "value_int",
                                               "value_ints",   "value_string", "value_strings"};

/// The tensor a Constant node produces, from whichever value attribute it has.
Tensor constantValue(const Node& node) {
  std::vector<std::string> present;
  for (const char* name : kConstantValueAttrs)
    if (node.hasAttr(name)) present.emplace_back(name);
  if (present.size() != 1)
    throw UserError(fmt::format("{}: expected exactly one of value, value_float(s), value_int(s), value_string(s); "
                                "found {}",
                                node.describe(), present.empty() ? "none" : fmt::format("{}", fmt::join(present, ", "))));
  const std::string& name = present[0];
  if (name == "value") return node.attrTensor(name);
  if (name == "value_float") return Tensor::scalar<float>(node.attrFloat(name));
  if (name == "value_int") return Tensor::scalar<int64_t>(node.attrInt(name));
  if (name == "value_string") return Tensor::scalar<std::string>(node.attrString(name));
  if (name == "value_floats") {
    auto v = node.attrFloats(name);
    return Tensor::fromVector<float>({static_cast<int64_t>(v.size())}, v);
  }
  if (name == "value_ints") {
    auto v = node.attrInts(name);
    return Tensor::fromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
  }
  auto v = node.attrStrings(name);
  return Tensor::fromVector<std::string>({static_cast<int64_t>(v.size())}, v);
}

TESSEL_REGISTER_OP(Constant) {
  OpDef def("Constant");
  def.inputs(0).outputs(1).since(1).describe("y = the tensor given by one value attribute");
  def.optionalAttr("value", AttrKind::Tensor)
      .optionalAttr("value_float", AttrKind::Float)
      .optionalAttr("value_floats", AttrKind::Floats)
      .optionalAttr("value_int", AttrKind::Int)
      .optionalAttr("value_ints", AttrKind::Ints)
      .optionalAttr("value_string", AttrKind::String)
      .optionalAttr("value_strings", AttrKind::Strings);
  return def
      .infer([](InferContext& ctx) {
        Tensor t = constantValue(ctx.node());
        ctx.setOutputType(0, TensorType::fromShape(t.dtype(), t.shape()));
        ctx.setOutputValue(0, t);
      })
      .kernel([](KernelContext& ctx) { ctx.setOutput(0, constantValue(ctx.node())); })
      .cost(movementCost);
}

// ---------------------------------------------------------------------------------------- ConstantOfShape

/// The fill value of ConstantOfShape: its `value` attribute (one element) or f32 zero.
Tensor fillValue(const Node& node) {
  if (!node.hasAttr("value")) return Tensor::scalar<float>(0.f);
  const Tensor& v = node.attrTensor("value");
  if (v.numel() != 1)
    throw UserError(fmt::format("{}: attribute 'value' must hold exactly one element, it holds {}", node.describe(),
                                v.numel()));
  return v;
}

void inferConstantOfShape(InferContext& ctx) {
  DType dtype = fillValue(ctx.node()).dtype();
  const TensorType& shapeType = ctx.inputType(0);
  if (shapeType.dtype != DType::Undefined && shapeType.dtype != DType::Int64)
    ctx.fail("input 'input' (the shape) must be i64, got {}", dtypeName(shapeType.dtype));
  if (const Tensor* shape = ctx.inputValue(0)) {
    std::vector<Dim> dims;
    for (int64_t d : shape->toInt64Vector()) {
      if (d < 0) ctx.fail("shape has a negative extent {}", d);
      dims.push_back(Dim::known(d));
    }
    ctx.setOutputType(0, TensorType(dtype, dims));
  } else if (shapeType.isStatic() && shapeType.rank() == 1) {
    ctx.setOutputType(0, TensorType(dtype, std::vector<Dim>(static_cast<size_t>((*shapeType.dims)[0].value))));
  } else {
    ctx.setOutputType(0, TensorType(dtype, std::nullopt));
  }
}

void constantOfShapeKernel(KernelContext& ctx) {
  const Tensor& shapeTensor = ctx.input(0);
  if (shapeTensor.dtype() != DType::Int64 || shapeTensor.rank() > 1)
    ctx.fail("input 'input' must be a 1-D i64 shape, got {}[{}]", dtypeName(shapeTensor.dtype()),
             shapeToString(shapeTensor.shape()));
  Shape shape = shapeTensor.toInt64Vector();
  for (int64_t d : shape)
    if (d < 0) ctx.fail("shape {} has a negative extent", fmt::join(shape, "x"));
  Tensor value = fillValue(ctx.node());
  dispatchAny(value.dtype(), ctx.node().describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor& y = ctx.allocateOutput(0, value.dtype(), shape);
    const T v = value.data<T>()[0];
    T* out = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) out[i] = v;
  });
}

TESSEL_REGISTER_OP(ConstantOfShape) {
  return OpDef("ConstantOfShape").inputs(1).outputs(1).since(9)
      .optionalAttr("value", AttrKind::Tensor)
      .describe("y = a tensor of the given shape filled with `value` (default f32 0)")
      .infer(inferConstantOfShape)
      .kernel(constantOfShapeKernel)
      .cost(movementCost);
}

// ---------------------------------------------------------------------------------------- EyeLike

DType eyeLikeType(const Node& node, DType inputType) {
  if (!node.hasAttr("dtype")) return inputType;
  int64_t d = node.attrInt("dtype");
  DType t = static_cast<DType>(d);
  if (d < 1 || d > 16 || !(isNumeric(t) || t == DType::Bool))
    throw UserError(fmt::format("{}: attribute 'dtype' is {}, expected a numeric or bool element type",
                                node.describe(), d));
  return t;
}

void inferEyeLike(InferContext& ctx) {
  const TensorType& x = ctx.inputType(0);
  if (x.hasRank() && x.rank() != 2) ctx.fail("input must be 2-D, got rank {}", x.rank());
  DType t = x.dtype == DType::Undefined && !ctx.node().hasAttr("dtype") ? DType::Undefined
                                                                         : eyeLikeType(ctx.node(), x.dtype);
  ctx.setOutputType(0, TensorType(t, x.dims));
}

void eyeLikeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) ctx.fail("input must be 2-D, got shape {}", shapeToString(x.shape()));
  DType t = eyeLikeType(ctx.node(), x.dtype());
  const int64_t k = ctx.attrInt("k"), rows = x.dim(0), cols = x.dim(1);
  dispatchTypeSet<TypeSet::NumericOrBool>(ctx, t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor& y = ctx.allocateOutput(0, t, x.shape());
    T* out = y.data<T>();
    for (int64_t r = 0; r < rows; ++r)
      if (int64_t c = r + k; c >= 0 && c < cols) out[r * cols + c] = T(1);
  });
}

TESSEL_REGISTER_OP(EyeLike) {
  return OpDef("EyeLike").inputs(1).outputs(1).since(9)
      .optionalAttr("dtype", AttrKind::Int)
      .attr("k", AttrKind::Int, int64_t{0})
      .describe("y = a 2-D tensor shaped like x with ones on the k-th diagonal")
      .infer(inferEyeLike)
      .kernel(eyeLikeKernel)
      .cost(movementCost);
}

// ---------------------------------------------------------------------------------------- Range

/// Element count of Range: max(ceil((limit - start) / delta), 0).
int64_t rangeCount(double start, double limit, double delta) {
  return std::max<int64_t>(static_cast<int64_t>(std::ceil((limit - start) / delta)), 0);
}

void rangeKernel(KernelContext& ctx) {
  requireSameTypes(ctx);
  for (size_t i = 0; i < 3; ++i)
    if (ctx.input(i).numel() != 1 || ctx.input(i).rank() > 1)
      ctx.fail("input {} ({}) must be a scalar, got shape {}", i, i == 0 ? "start" : i == 1 ? "limit" : "delta",
               shapeToString(ctx.input(i).shape()));
  dispatchTypeSet<TypeSet::Numeric>(ctx, ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C start = load(ctx.input(0).data<T>()[0]), limit = load(ctx.input(1).data<T>()[0]),
            delta = load(ctx.input(2).data<T>()[0]);
    if (delta == C(0)) ctx.fail("delta must be non-zero");
    const int64_t n = rangeCount(static_cast<double>(start), static_cast<double>(limit), static_cast<double>(delta));
    Tensor& y = ctx.allocateOutput(0, ctx.input(0).dtype(), {n});
    T* out = y.data<T>();
    // start + i * delta (not repeated addition) keeps float ranges free of accumulated rounding.
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<C>(i) * delta);
  });
}

void inferRange(InferContext& ctx) {
  for (size_t i = 0; i < 3; ++i) checkInputType(ctx, i, TypeSet::Numeric);
  ctx.setOutputType(0, TensorType(ctx.inputType(0).dtype, std::vector<Dim>{Dim::unknown()}));
}

TESSEL_REGISTER_OP(Range) {
  return OpDef("Range").inputs(3).outputs(1).since(11)
      .describe("y = [start, start + delta, ...) up to limit (exclusive)")
      .infer(inferRange)
      .kernel(rangeKernel)
      .cost(costPerElement(1));
}

// ---------------------------------------------------------------------------------------- Identity

TESSEL_REGISTER_OP(Identity) {
  return OpDef("Identity").inputs(1).outputs(1).since(1).describe("y = x")
      .traits({OpTrait::View, OpTrait::NoOpOnSameType})
      .infer(inferSameAsInput0)
      .kernel([](KernelContext& ctx) { ctx.setOutput(0, ctx.input(0)); })
      .cost(movementCost);
}

}  // namespace
}  // namespace tessel
