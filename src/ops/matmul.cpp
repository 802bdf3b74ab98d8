// Matrix products: Gemm, MatMul (batched, broadcasting, 1-D operands), MatMulInteger, QLinearMatMul.
#include "nn_common.h"

namespace tessel {
namespace {

using namespace nn;

// -------------------------------------------------------------------------------------- batched matmul

/// Shapes of a numpy-style matmul: operands promoted to rank >= 2, broadcast batch, the result shape.
struct MatMulShapes {
  int64_t M = 0, K = 0, N = 0;
  Shape batch;              // broadcast batch extents
  Shape aBatch, bBatch;     // each operand's batch extents
  Shape result;             // with the promoted axes of 1-D operands removed
};

MatMulShapes matmulShapes(const Shape& a, const Shape& b, const Node& node) {
  if (a.empty() || b.empty())
    throw UserError(fmt::format("{}: MatMul operands must have rank >= 1, got {} and {}", node.describe(),
                                shapeToString(a), shapeToString(b)));
  Shape pa = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape pb = b.size() == 1 ? Shape{b[0], 1} : b;
  MatMulShapes s;
  s.M = pa[pa.size() - 2];
  s.K = pa.back();
  s.N = pb.back();
  if (pb[pb.size() - 2] != s.K)
    throw UserError(fmt::format("{}: inner dimensions differ: A is {} and B is {} (A's last axis must equal B's "
                                "second-to-last)", node.describe(), shapeToString(a), shapeToString(b)));
  s.aBatch.assign(pa.begin(), pa.end() - 2);
  s.bBatch.assign(pb.begin(), pb.end() - 2);
  s.batch = broadcastShapes(s.aBatch, s.bBatch, node);
  s.result = s.batch;
  if (a.size() != 1) s.result.push_back(s.M);
  if (b.size() != 1) s.result.push_back(s.N);
  return s;
}

/// y[batch..., M, N] = a[..., M, K] x b[..., K, N] with batch broadcasting, accumulated in Acc.
template <class Acc>
std::vector<Acc> batchedMatMul(const MatMulShapes& s, const Acc* a, const Acc* b) {
  const int64_t batches = shapeSize(s.batch);
  std::vector<int64_t> aStrides = broadcastStrides(s.aBatch, s.batch), bStrides = broadcastStrides(s.bBatch, s.batch);
  std::vector<Acc> y(static_cast<size_t>(batches * s.M * s.N));
  Shape index(s.batch.size(), 0);
  for (int64_t i = 0; i < batches; ++i) {
    int64_t aOff = 0, bOff = 0;
    for (size_t d = 0; d < index.size(); ++d) {
      aOff += index[d] * aStrides[d];
      bOff += index[d] * bStrides[d];
    }
    gemmAccumulate<Acc>(s.M, s.N, s.K, a + aOff * s.M * s.K, s.K, b + bOff * s.K * s.N, s.N, y.data() + i * s.M * s.N, s.N);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < s.batch[d]) break;
      index[d] = 0;
    }
  }
  return y;
}

void inferMatMulLike(InferContext& ctx, size_t aIdx, size_t bIdx, DType outType) {
  const TensorType& at = ctx.inputType(aIdx);
  const TensorType& bt = ctx.inputType(bIdx);
  if (!at.hasRank() || !bt.hasRank()) return ctx.setOutputType(0, TensorType(outType, std::nullopt));
  if (at.rank() == 0 || bt.rank() == 0) ctx.fail("operands must have rank >= 1, got {} and {}", at.toString(), bt.toString());
  std::vector<Dim> a = *at.dims, b = *bt.dims;
  const bool aVec = a.size() == 1, bVec = b.size() == 1;
  if (aVec) a.insert(a.begin(), Dim::known(1));
  if (bVec) b.push_back(Dim::known(1));
  const Dim& ka = a.back();
  const Dim& kb = b[b.size() - 2];
  if (ka.isKnown() && kb.isKnown() && ka.value != kb.value)
    ctx.fail("inner dimensions differ: A is {} and B is {}", at.toString(), bt.toString());
  auto batchA = std::vector<Dim>(a.begin(), a.end() - 2), batchB = std::vector<Dim>(b.begin(), b.end() - 2);
  std::vector<Dim> dims = *broadcastDims(batchA, batchB, ctx.node());
  if (!aVec) dims.push_back(a[a.size() - 2]);
  if (!bVec) dims.push_back(b.back());
  ctx.setOutputType(0, TensorType(outType, dims));
}

Cost matmulCost(const Node& node, size_t aIdx) {
  Cost c = movementCost(node);
  const Value* a = node.input(aIdx);
  const Value* y = node.output(0);
  if (a && y && a->type.isStatic() && y->type.isStatic())
    c.flops = 2.0 * static_cast<double>(a->type.staticShape().back()) * static_cast<double>(y->type.staticSize());
  return c;
}

void matmulKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != b.dtype()) ctx.fail("A is {} but B is {}; both must have the same type", dtypeName(a.dtype()), dtypeName(b.dtype()));
  MatMulShapes s = matmulShapes(a.shape(), b.shape(), ctx.node());
  dispatchNumeric(a.dtype(), "MatMul input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("MatMul does not accept bool tensors");
    } else {
      using Acc = compute_t<T>;
      std::vector<Acc> y;
      if constexpr (std::is_same_v<T, Acc>) {
        y = batchedMatMul<Acc>(s, a.data<T>(), b.data<T>());
      } else {
        y = batchedMatMul<Acc>(s, toComputeVector<Acc>(a).data(), toComputeVector<Acc>(b).data());
      }
      storeFromCompute<T>(ctx.allocateOutput(0, a.dtype(), s.result), y);
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(MatMul) {
  return OpDef("MatMul")
      .inputs(2)
      .outputs(1)
      .since(1)
      .describe("numpy matmul: batched, broadcasting, 1-D operands promoted")
      .infer([](InferContext& ctx) { inferMatMulLike(ctx, 0, 1, ctx.inputType(0).dtype); })
      .kernel(matmulKernel)
      .cost([](const Node& n) { return matmulCost(n, 0); });
}

// ------------------------------------------------------------------------------------ quantised matmul

namespace {

/// Zero points along one axis of a quantised operand: a scalar, or one value per row (A) / column (B).
std::vector<int32_t> axisZeroPoints(const KernelContext& ctx, size_t idx, int64_t extent, const char* what) {
  std::vector<int32_t> z(static_cast<size_t>(extent), 0);
  if (!ctx.hasInput(idx)) return z;
  const Tensor& t = ctx.input(idx);
  if (t.numel() != 1 && t.numel() != extent)
    ctx.fail("{} zero point must be a scalar or have {} values, has shape {}", what, extent, shapeToString(t.shape()));
  for (int64_t i = 0; i < extent; ++i) z[static_cast<size_t>(i)] = static_cast<int32_t>(t.elementAsDouble(t.numel() == 1 ? 0 : i));
  return z;
}

/// int32 products of (a - a_zero_point) and (b - b_zero_point); zero points scalar or per row / column.
std::vector<int32_t> integerMatMul(KernelContext& ctx, const MatMulShapes& s, size_t aIdx, size_t azIdx, size_t bIdx,
                                   size_t bzIdx) {
  std::vector<int32_t> a = shiftedInt32(ctx.input(aIdx), 0), b = shiftedInt32(ctx.input(bIdx), 0);
  std::vector<int32_t> az = axisZeroPoints(ctx, azIdx, s.M, "A"), bz = axisZeroPoints(ctx, bzIdx, s.N, "B");
  for (size_t i = 0; i < a.size(); ++i) a[i] -= az[static_cast<size_t>((static_cast<int64_t>(i) / s.K) % s.M)];
  for (size_t i = 0; i < b.size(); ++i) b[i] -= bz[static_cast<size_t>(static_cast<int64_t>(i) % s.N)];
  return batchedMatMul<int32_t>(s, a.data(), b.data());
}

void matmulIntegerKernel(KernelContext& ctx) {
  MatMulShapes s = matmulShapes(ctx.input(0).shape(), ctx.input(1).shape(), ctx.node());
  std::vector<int32_t> y = integerMatMul(ctx, s, 0, 2, 1, 3);
  std::copy(y.begin(), y.end(), ctx.allocateOutput(0, DType::Int32, s.result).data<int32_t>());
}

/// One scale per row (A) or column (B), or a scalar.
std::vector<float> axisScales(const KernelContext& ctx, size_t idx, int64_t extent, const char* what) {
  const Tensor& t = ctx.input(idx);
  if (t.numel() != 1 && t.numel() != extent)
    ctx.fail("{} scale must be a scalar or have {} values, has shape {}", what, extent, shapeToString(t.shape()));
  std::vector<float> v(static_cast<size_t>(extent));
  for (int64_t i = 0; i < extent; ++i) v[static_cast<size_t>(i)] = static_cast<float>(t.elementAsDouble(t.numel() == 1 ? 0 : i));
  return v;
}

void qlinearMatMulKernel(KernelContext& ctx) {
  MatMulShapes s = matmulShapes(ctx.input(0).shape(), ctx.input(3).shape(), ctx.node());
  std::vector<int32_t> acc = integerMatMul(ctx, s, 0, 2, 3, 5);
  std::vector<float> aScale = axisScales(ctx, 1, s.M, "A"), bScale = axisScales(ctx, 4, s.N, "B");
  const float yScale = static_cast<float>(ctx.input(6).elementAsDouble(0));
  const int32_t yZero = scalarZeroPoint(ctx, 7);
  const DType outType = ctx.input(7).dtype();
  Tensor& out = ctx.allocateOutput(0, outType, s.result);
  dispatchNumeric(outType, "QLinearMatMul output", [&](auto tag) {
    using Q = typename decltype(tag)::type;
    if constexpr (std::is_same_v<Q, uint8_t> || std::is_same_v<Q, int8_t>) {
      Q* d = out.data<Q>();
      for (size_t i = 0; i < acc.size(); ++i) {
        const int64_t n = static_cast<int64_t>(i) % s.N, m = (static_cast<int64_t>(i) / s.N) % s.M;
        const float scale = aScale[static_cast<size_t>(m)] * bScale[static_cast<size_t>(n)] / yScale;
        d[i] = saturateRound<Q>(std::nearbyint(static_cast<float>(acc[i]) * scale) + yZero);
      }
    } else {
      ctx.fail("y_zero_point must be uint8 or int8, is {}", dtypeName(outType));
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(MatMulInteger) {
  return OpDef("MatMulInteger")
      .inputs(2, 4)
      .outputs(1)
      .since(10)
      .describe("int32 matmul of (A - a_zero_point) and (B - b_zero_point)")
      .infer([](InferContext& ctx) { inferMatMulLike(ctx, 0, 1, DType::Int32); })
      .kernel(matmulIntegerKernel)
      .cost([](const Node& n) { return matmulCost(n, 0); });
}

TESSEL_REGISTER_OP(QLinearMatMul) {
  return OpDef("QLinearMatMul")
      .inputs(8)
      .outputs(1)
      .since(10)
      .describe("quantised matmul: requantised int32 product of zero-point-shifted A and B")
      .infer([](InferContext& ctx) { inferMatMulLike(ctx, 0, 3, ctx.inputType(7).dtype); })
      .kernel(qlinearMatMulKernel)
      .cost([](const Node& n) { return matmulCost(n, 0); });
}

// ------------------------------------------------------------------------------------------------ Gemm

namespace {

/// Copies a 2-D operand into a row-major [rows, cols] matrix of the compute type, transposing if asked.
template <class Acc>
std::vector<Acc> gemmOperand(const Tensor& t, bool transpose) {
  std::vector<Acc> v = toComputeVector<Acc>(t);
  if (!transpose) return v;
  const int64_t r = t.dim(0), c = t.dim(1);
  std::vector<Acc> out(v.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[static_cast<size_t>(j * r + i)] = v[static_cast<size_t>(i * c + j)];
  return out;
}

void gemmKernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.rank() != 2 || b.rank() != 2) ctx.fail("A and B must be 2-D, got {} and {}", shapeToString(a.shape()), shapeToString(b.shape()));
  const bool ta = ctx.attrInt("transA") != 0, tb = ctx.attrInt("transB") != 0;
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t N = tb ? b.dim(0) : b.dim(1), Kb = tb ? b.dim(1) : b.dim(0);
  if (K != Kb) ctx.fail("inner dimensions differ: op(A) is {}x{} and op(B) is {}x{}", M, K, Kb, N);
  Shape cStrides{0, 0};
  if (ctx.hasInput(2)) {
    const Shape& cs = ctx.input(2).shape();
    if (cs.size() > 2 || broadcastShapes(cs, {M, N}, ctx.node()) != Shape{M, N})
      ctx.fail("C of shape {} cannot be broadcast to {}x{}", shapeToString(cs), M, N);
    cStrides = broadcastStrides(cs, {M, N});
  }
  dispatchNumeric(a.dtype(), "Gemm input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("Gemm does not accept bool tensors");
    } else {
      using Acc = compute_t<T>;
      std::vector<Acc> av = gemmOperand<Acc>(a, ta), bv = gemmOperand<Acc>(b, tb);
      std::vector<Acc> y(static_cast<size_t>(M * N));
      gemmAccumulate<Acc>(M, N, K, av.data(), K, bv.data(), N, y.data(), N);
      const Acc alpha = static_cast<Acc>(ctx.attrFloat("alpha")), beta = static_cast<Acc>(ctx.attrFloat("beta"));
      std::vector<Acc> c = ctx.hasInput(2) ? toComputeVector<Acc>(ctx.input(2)) : std::vector<Acc>{};
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          Acc& v = y[static_cast<size_t>(i * N + j)];
          v = alpha * v;
          if (!c.empty()) v += beta * c[static_cast<size_t>(i * cStrides[0] + j * cStrides[1])];
        }
      storeFromCompute<T>(ctx.allocateOutput(0, a.dtype(), {M, N}), y);
    }
  });
}

void inferGemm(InferContext& ctx) {
  const TensorType& at = ctx.inputType(0);
  const TensorType& bt = ctx.inputType(1);
  if (!at.hasRank() || !bt.hasRank()) return ctx.setOutputType(0, TensorType(at.dtype, std::nullopt));
  if (at.rank() != 2 || bt.rank() != 2) ctx.fail("A and B must be 2-D, got {} and {}", at.toString(), bt.toString());
  const bool ta = ctx.node().attrInt("transA") != 0, tb = ctx.node().attrInt("transB") != 0;
  const Dim& k1 = (*at.dims)[ta ? 0 : 1];
  const Dim& k2 = (*bt.dims)[tb ? 1 : 0];
  if (k1.isKnown() && k2.isKnown() && k1.value != k2.value)
    ctx.fail("inner dimensions differ: A is {} (transA={}) and B is {} (transB={})", at.toString(), ta, bt.toString(), tb);
  std::vector<Dim> dims{(*at.dims)[ta ? 1 : 0], (*bt.dims)[tb ? 0 : 1]};
  if (ctx.hasInput(2) && ctx.inputType(2).hasRank()) {
    if (ctx.inputType(2).rank() > 2) ctx.fail("C must have rank <= 2, is {}", ctx.inputType(2).toString());
    broadcastDims(dims, ctx.inputType(2).dims, ctx.node());
  }
  ctx.setOutputType(0, TensorType(at.dtype, dims));
}

}  // namespace

TESSEL_REGISTER_OP(Gemm) {
  return OpDef("Gemm")
      .inputs(2, 3)
      .outputs(1)
      .since(7)
      .attr("alpha", AttrKind::Float, 1.0f)
      .attr("beta", AttrKind::Float, 1.0f)
      .attr("transA", AttrKind::Int, int64_t{0})
      .attr("transB", AttrKind::Int, int64_t{0})
      .describe("Y = alpha * op(A) op(B) + beta * C, C broadcast to [M, N] and optional")
      .infer(inferGemm)
      .kernel(gemmKernel)
      .cost([](const Node& node) {
        Cost c = movementCost(node);
        const Value* a = node.input(0);
        const Value* y = node.output(0);
        if (a && y && a->type.isStatic() && y->type.isStatic()) {
          Shape as = a->type.staticShape();
          double k = static_cast<double>(node.attrInt("transA") ? as[0] : as[1]);
          c.flops = 2.0 * k * static_cast<double>(y->type.staticSize());
        }
        return c;
      });
}

}  // namespace tessel
