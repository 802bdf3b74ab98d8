// The softmax family along one axis: Softmax, LogSoftmax, Hardmax (with the opset < 13 "coerce to 2-D" form).
#include <cmath>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

/// Before opset 13 these ops flattened the input to 2-D [prod(dims[:axis]), prod(dims[axis:])] and
/// normalised each row; from 13 on they normalise along the single axis. The upgrade hook records the
/// old semantics in Tessel's own attribute `coerce_2d` (1 = legacy rows), so one definition serves both.
constexpr const char* kCoerce2d = "coerce_2d";

/// The input viewed as [outer, len, inner] with the normalised extent in the middle.
struct SoftmaxLayout {
  int64_t outer = 1, len = 1, inner = 1;
};

SoftmaxLayout softmaxLayout(const Shape& shape, const Node& node) {
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = normalizeAxis(node.attrInt("axis"), rank, node);
  SoftmaxLayout l;
  if (rank == 0) return l;
  bool coerce = node.attrInt(kCoerce2d) != 0;
  for (int64_t a = 0; a < rank; ++a) {
    if (a < axis) l.outer *= shape[a];
    else if (a == axis || coerce) l.len *= shape[a];
    else l.inner *= shape[a];
  }
  return l;
}

void inferSoftmax(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (in.dtype != DType::Undefined && !isFloat(in.dtype))
    ctx.fail("input must be a floating-point tensor, found {}", dtypeName(in.dtype));
  if (in.hasRank()) normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(in.rank()), ctx.node());
  ctx.setOutputType(0, in);
}

template <class T>
void softmaxRows(SoftmaxKind kind, const SoftmaxLayout& l, const T* x, T* y) {
  std::vector<double> row(l.len);
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      const int64_t base = o * l.len * l.inner + i;
      double maxValue = -std::numeric_limits<double>::infinity();
      int64_t argMax = 0;
      for (int64_t k = 0; k < l.len; ++k) {
        row[k] = static_cast<double>(static_cast<compute_t<T>>(x[base + k * l.inner]));
        if (row[k] > maxValue) {  // strict: the first maximum wins, as Hardmax requires
          maxValue = row[k];
          argMax = k;
        }
      }
      if (kind == SoftmaxKind::Hardmax) {
        for (int64_t k = 0; k < l.len; ++k) y[base + k * l.inner] = T(k == argMax ? 1.f : 0.f);
        continue;
      }
      // Shift by the maximum so exp never overflows (softmax_large_number).
      double sum = 0;
      for (int64_t k = 0; k < l.len; ++k) sum += std::exp(row[k] - maxValue);
      double logSum = std::log(sum);
      for (int64_t k = 0; k < l.len; ++k) {
        double v = kind == SoftmaxKind::Softmax ? std::exp(row[k] - maxValue) / sum : row[k] - maxValue - logSum;
        y[base + k * l.inner] = T(static_cast<compute_t<T>>(v));
      }
    }
}

void softmaxKernel(KernelContext& ctx, SoftmaxKind kind) {
  const Tensor& x = ctx.input(0);
  SoftmaxLayout l = softmaxLayout(x.shape(), ctx.node());
  Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
  if (x.numel() == 0) return;
  dispatchFloat(x.dtype(), ctx.node().describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmaxRows<T>(kind, l, x.data<T>(), y.data<T>());
  });
}

void upgradeSoftmax(UpgradeContext& ctx) {
  if (ctx.opsetVersion >= 13) return;
  ctx.node.setAttr(kCoerce2d, int64_t{1});
  if (!ctx.node.hasAttr("axis")) ctx.node.setAttr("axis", int64_t{1});  // the legacy default
}

OpDef softmaxOp(const char* name, SoftmaxKind kind, double flops, const char* doc) {
  return OpDef(name)
      .inputs(1)
      .outputs(1)
      .since(1)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr(kCoerce2d, AttrKind::Int, int64_t{0})
      .describe(doc)
      .infer(inferSoftmax)
      .kernel([kind](KernelContext& ctx) { softmaxKernel(ctx, kind); })
      .cost(costPerElement(flops))
      .upgrade(upgradeSoftmax);
}

}  // namespace

TESSEL_REGISTER_OP(Softmax) {
  return softmaxOp("Softmax", SoftmaxKind::Softmax, 5, "exp(x - max) / sum(exp(x - max)) along axis");
}
TESSEL_REGISTER_OP(LogSoftmax) {
  return softmaxOp("LogSoftmax", SoftmaxKind::LogSoftmax, 5, "x - max - log(sum(exp(x - max))) along axis");
}
TESSEL_REGISTER_OP(Hardmax) {
  return softmaxOp("Hardmax", SoftmaxKind::Hardmax, 1, "one-hot of the first maximum along axis");
}

}  // namespace tessel
