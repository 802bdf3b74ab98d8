// Linear-algebra operators: Det (determinant of square matrices, batched over leading axes).
#include <cmath>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

void inferDet(InferContext& ctx) {
  const TensorType& x = ctx.inputType(0);
  if (x.dtype != DType::Undefined && !isFloat(x.dtype)) ctx.fail("X must be floating point, found {}", dtypeName(x.dtype));
  if (!x.hasRank()) return ctx.setOutputType(0, TensorType(x.dtype, std::nullopt));
  if (x.rank() < 2) ctx.fail("X must have shape [*, M, M], found {}", x.toString());
  const Dim& rows = (*x.dims)[x.rank() - 2];
  const Dim& cols = (*x.dims)[x.rank() - 1];
  if (rows.isKnown() && cols.isKnown() && rows.value != cols.value)
    ctx.fail("X must hold square matrices, found {}", x.toString());
  ctx.setOutputType(0, TensorType(x.dtype, std::vector<Dim>(x.dims->begin(), x.dims->end() - 2)));
}

/// Determinant by Gaussian elimination with partial pivoting, in double.
double determinant(std::vector<double> a, int64_t m) {
  double det = 1;
  for (int64_t col = 0; col < m; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < m; ++r)
      if (std::abs(a[r * m + col]) > std::abs(a[pivot * m + col])) pivot = r;
    if (a[pivot * m + col] == 0) return 0;
    if (pivot != col) {
      for (int64_t c = 0; c < m; ++c) std::swap(a[pivot * m + c], a[col * m + c]);
      det = -det;
    }
    det *= a[col * m + col];
    for (int64_t r = col + 1; r < m; ++r) {
      double f = a[r * m + col] / a[col * m + col];
      for (int64_t c = col; c < m; ++c) a[r * m + c] -= f * a[col * m + c];
    }
  }
  return det;
}

void detKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2 || x.dim(-1) != x.dim(-2)) ctx.fail("X must have shape [*, M, M], found {}", shapeToString(x.shape()));
  int64_t m = x.dim(-1);
  Shape outShape(x.shape().begin(), x.shape().end() - 2);
  int64_t batch = shapeSize(outShape);
  std::vector<double> xs = x.toDoubleVector();
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchFloat(x.dtype(), ctx.node().describe(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* ys = y.data<T>();
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<double> matrix(xs.begin() + b * m * m, xs.begin() + (b + 1) * m * m);
      ys[b] = T(static_cast<compute_t<T>>(determinant(std::move(matrix), m)));
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(Det) {
  return OpDef("Det")
      .inputs(1)
      .outputs(1)
      .since(11)
      .describe("determinant of each square matrix in the last two axes")
      .infer(inferDet)
      .kernel(detKernel)
      .cost([](const Node& n) {
        Cost c = movementCost(n);
        if (Value* in = n.input(0); in && in->type.isStatic() && in->type.rank() >= 2) {
          double m = static_cast<double>(in->type.staticShape().back());
          c.flops = static_cast<double>(in->type.staticSize()) / (m * m) * (2.0 / 3.0) * m * m * m;
        }
        return c;
      });
}

}  // namespace tessel
