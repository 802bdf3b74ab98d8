// Logic and comparison operators with numpy broadcasting: And Or Xor Not, Equal Greater Less (and the
// -OrEqual forms), and Where (element-wise selection).
#include "elementwise_engine.h"

namespace tessel {
namespace {

using namespace elementwise;

#define TESSEL_LOGICAL_BINARY(Op, version, doc, ...)                                                      \
  TESSEL_REGISTER_OP(Op) {                                                                               \
    return OpDef(#Op).inputs(2).outputs(1).since(version).describe(doc)                                  \
        .traits({OpTrait::Elementwise, OpTrait::Commutative})                                            \
        .infer(inferBroadcasting(TypeSet::Bool, true))                                                   \
        .kernel(comparisonKernel<TypeSet::Bool>(__VA_ARGS__))                                            \
        .cost(costPerElement(1));                                                                        \
  }

TESSEL_LOGICAL_BINARY(And, 7, "c = a and b", [](bool a, bool b) { return a && b; })
TESSEL_LOGICAL_BINARY(Or, 7, "c = a or b", [](bool a, bool b) { return a || b; })
TESSEL_LOGICAL_BINARY(Xor, 7, "c = a xor b", [](bool a, bool b) { return a != b; })
#undef TESSEL_LOGICAL_BINARY

TESSEL_REGISTER_OP(Not) {
  return OpDef("Not").inputs(1).outputs(1).since(1).describe("y = not x")
      .traits({OpTrait::Elementwise})
      .infer(inferPredicate(TypeSet::Bool))
      .kernel(predicateKernelWith<TypeSet::Bool>([](const KernelContext&) { return [](auto x) { return !x; }; }))
      .cost(costPerElement(1));
}

#define TESSEL_COMPARISON(Op, version, set, doc, ...)                                                     \
  TESSEL_REGISTER_OP(Op) {                                                                               \
    return OpDef(#Op).inputs(2).outputs(1).since(version).describe(doc)                                  \
        .traits({OpTrait::Elementwise})                                                                  \
        .infer(inferBroadcasting(set, true))                                                             \
        .kernel(comparisonKernel<set>(__VA_ARGS__))                                                      \
        .cost(costPerElement(1));                                                                        \
  }

// Equal also compares bools and (since opset 19) strings.
TESSEL_COMPARISON(Equal, 7, TypeSet::Any, "c = (a == b)", [](const auto& a, const auto& b) { return a == b; })
TESSEL_COMPARISON(Greater, 7, TypeSet::Numeric, "c = (a > b)", [](auto a, auto b) { return a > b; })
TESSEL_COMPARISON(Less, 7, TypeSet::Numeric, "c = (a < b)", [](auto a, auto b) { return a < b; })
TESSEL_COMPARISON(GreaterOrEqual, 12, TypeSet::Numeric, "c = (a >= b)", [](auto a, auto b) { return a >= b; })
TESSEL_COMPARISON(LessOrEqual, 12, TypeSet::Numeric, "c = (a <= b)", [](auto a, auto b) { return a <= b; })
#undef TESSEL_COMPARISON

// ---------------------------------------------------------------------------------------- Where

void inferWhere(InferContext& ctx) {
  checkInputType(ctx, 0, TypeSet::Bool);
  DType tx = ctx.inputType(1).dtype, ty = ctx.inputType(2).dtype;
  if (tx != DType::Undefined && ty != DType::Undefined && tx != ty)
    ctx.fail("X has element type {} but Y has {}; they must match", dtypeName(tx), dtypeName(ty));
  auto dims = broadcastDims(ctx.inputType(0).dims, ctx.inputType(1).dims, ctx.node());
  dims = broadcastDims(dims, ctx.inputType(2).dims, ctx.node());
  ctx.setOutputType(0, TensorType(tx != DType::Undefined ? tx : ty, dims));
}

void whereKernel(KernelContext& ctx) {
  requireType(ctx, 0, TypeSet::Bool);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  if (x.dtype() != y.dtype())
    ctx.fail("X has element type {} but Y has {}; they must match", dtypeName(x.dtype()), dtypeName(y.dtype()));
  Shape shape = broadcastInputShapes(ctx);
  dispatchAny(x.dtype(), ctx.node().describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor& out = ctx.allocateOutput(0, x.dtype(), shape);
    mapTernary<bool, T, T, T>(ctx.input(0), x, y, out,
                              [](bool c, const auto& a, const auto& b) { return c ? a : b; });
  });
}

TESSEL_REGISTER_OP(Where) {
  return OpDef("Where").inputs(3).outputs(1).since(9)
      .describe("out = X where condition else Y (numpy broadcasting of all three)")
      .traits({OpTrait::Elementwise})
      .infer(inferWhere)
      .kernel(whereKernel)
      .cost(costPerElement(1));
}

}  // namespace
}  // namespace tessel
