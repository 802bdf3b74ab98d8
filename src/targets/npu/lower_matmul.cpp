// NPU operator interpreter of MatMul with a computed right operand (attention's Q Kt and P V; a MatMul whose B is a
// constant is the matrix family's, lower_conv.cpp, with weights packed at compile time). A [..., M, K] times
// B [..., K, N] (the same batch dims, or B of rank 2), ranks other than 4 (rank 4 is stored channels-last). Per batch:
// B's k x n blocks (<= DIM x DIM) loaded into the weight buffer by DMA, one load per block (rows of n words with B's
// row stride), every block in a DIM x DIM slot; then per tile of R rows by Nc columns of the result (R x Nc in
// `acc`): per K block one load of the R rows' DIM-word slice of A (`inp`) and one `gemm` per DIM-wide column block,
// accumulating; unary epilogue steps; one store of the tile.
#include <algorithm>
#include <fmt/format.h>

#include "lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

/// Batch count and matrix sizes of a MatMul with a computed B.
struct BatchedMatMul {
  int64_t batch = 1, M = 1, K = 1, N = 1;
  bool sharedB = false;  ///< B of rank 2: the same for every batch
};

BatchedMatMul shapeOf(const Node& n) {
  const Shape a = n.input(0)->type.staticShape(), b = n.input(1)->type.staticShape();
  BatchedMatMul m;
  m.M = a[a.size() - 2], m.K = a.back(), m.N = b.back();
  for (size_t i = 0; i + 2 < a.size(); ++i) m.batch *= a[i];
  m.sharedB = b.size() == 2;
  return m;
}

hw::SupportResult checkComputedMatMul(const Node& n) {
  const Shape a = n.input(0)->type.staticShape(), b = n.input(1)->type.staticShape();
  if (a.size() < 2 || a.size() == 4 || b.size() < 2 || b.size() == 4)
    return refuse(fmt::format("MatMul of ranks {} and {} with a computed B is not lowered (ranks 2, 3 and 5+: rank 4 is "
                              "stored channels-last)",
                              a.size(), b.size()));
  if (b.size() != 2 && (b.size() != a.size() || !std::equal(a.begin(), a.end() - 2, b.begin())))
    return refuse(fmt::format("MatMul of {} and {}: a computed B must have A's batch dims or rank 2", shapeToString(a),
                              shapeToString(b)));
  if (b[b.size() - 2] != a.back()) return refuse("MatMul with mismatched inner dimensions");
  return ok();
}

/// B's blocks of one batch: ceil(K / DIM) x ceil(N / DIM) slots of DIM x DIM words.
int64_t blockWords(const hw::NpuConfig& cfg, const BatchedMatMul& m) {
  const auto dim = static_cast<int64_t>(cfg.dim);
  return ((m.K + dim - 1) / dim) * ((m.N + dim - 1) / dim) * dim * dim;
}

/// Tiles of R rows of A by Nc columns of the result: each K slice of A's rows (R x DIM words) within a quarter of
/// `inp` (so the next slice loads while one is multiplied), the R x Nc result within half of `acc`. Rows first: the
/// matrix unit pays a setup and a weight shift per gemm, which R rows amortise.
struct MatMulTile {
  int64_t rows = 1, cols = 1;
};

MatMulTile tileOf(const hw::NpuConfig& cfg, const BatchedMatMul& m) {
  const auto dim = static_cast<int64_t>(cfg.dim);
  const int64_t accHalf = bufferWords(cfg, Buffer::Accumulator) / 2;
  MatMulTile t;
  t.rows = std::min({m.M, bufferWords(cfg, Buffer::Input) / 4 / dim, kMaxInstructionCount});
  if (t.rows < 1) return {0, 0};
  t.cols = std::min(m.N, std::max(dim, accHalf / t.rows / dim * dim));
  if (t.rows * t.cols > accHalf) t.rows = accHalf / t.cols;  // one column block is more than half the accumulator holds
  return t;
}

hw::SupportResult computedMatMulFits(const Node& n, const hw::NpuConfig& cfg) {
  const BatchedMatMul m = shapeOf(n);
  if (tileOf(cfg, m).rows < 1 || blockWords(cfg, m) > bufferWords(cfg, Buffer::Weight) / 2)
    return refuse(fmt::format("MatMul with a computed B of {} x {}: B's blocks ({} words) must fit half of the weight buffer "
                              "({} words) on this configuration",
                              m.K, m.N, blockWords(cfg, m), bufferWords(cfg, Buffer::Weight)));
  return ok();
}

void lowerComputedMatMul(const Node& n, LowerContext& ctx) {
  const BatchedMatMul m = shapeOf(n);
  const auto dim = static_cast<int64_t>(ctx.cfg.dim);
  const MatMulTile t = tileOf(ctx.cfg, m);
  const int64_t kBlocks = (m.K + dim - 1) / dim, nBlocks = (m.N + dim - 1) / dim;
  TESSEL_ASSERT(t.rows >= 1, fmt::format("npu lowering: {}: no tile fits (the partition checks computedMatMulFits)", n.describe()));
  const TensorLoc& a = ctx.loc(n.input(0));
  const TensorLoc& b = ctx.loc(n.input(1));
  const TensorLoc& y = ctx.loc(ctx.resultValue(n));
  const std::vector<EpilogueStep> epilogue = ctx.epilogue(n);
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  auto u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  uint32_t tile = 0;
  int32_t w = -1;  // B's blocks of the current batch (one region, loaded by the batch's first tile)
  for (int64_t bt = 0; bt < m.batch; ++bt) {
    const bool loadB = bt == 0 || !m.sharedB;
    for (int64_t m0 = 0; m0 < m.M; m0 += t.rows)
      for (int64_t n0 = 0; n0 < m.N; n0 += t.cols) {
        ctx.beginTile(n, tile++);
        const int64_t rr = std::min(t.rows, m.M - m0), nc = std::min(t.cols, m.N - n0);
        if (loadB && m0 == 0 && n0 == 0) {
          w = ctx.region(Buffer::Weight, u64(blockWords(ctx.cfg, m)));
          const int64_t bRow0 = m.sharedB ? 0 : bt * m.K;
          for (int64_t kb = 0; kb < kBlocks; ++kb)
            for (int64_t jb = 0; jb < nBlocks; ++jb) {
              const int64_t kk = std::min(dim, m.K - kb * dim), nn = std::min(dim, m.N - jb * dim);
              ctx.emit(makeLoad(ctx.at(w, u64((kb * nBlocks + jb) * dim * dim), u64(nn), 0),
                                b.addr + u64((bRow0 + kb * dim) * b.pixelStride() + jb * dim), u64(b.pixelStride()), 0,
                                u32(kk), 1, u32(nn)),
                       w);
            }
        }
        const int32_t acc = ctx.region(Buffer::Accumulator, u64(rr * nc));
        for (int64_t kb = 0; kb < kBlocks; ++kb) {
          const int64_t kk = std::min(dim, m.K - kb * dim);
          const int32_t in = ctx.region(Buffer::Input, u64(rr * kk));  // the tile's rows, K slice kb
          ctx.emit(makeLoad(ctx.at(in, 0, u64(kk), 0), a.addr + u64((bt * m.M + m0) * a.pixelStride() + kb * dim),
                            u64(a.pixelStride()), 0, u32(rr), 1, u32(kk)),
                   in);
          for (int64_t j = 0; j < nc; j += dim) {
            const int64_t jb = (n0 + j) / dim;
            Instruction gm;
            gm.opcode = Opcode::Gemm;
            gm.srcA = ctx.at(in, 0, u64(kk), 0);
            gm.srcB = ctx.at(w, u64((kb * nBlocks + jb) * dim * dim));
            gm.dst = ctx.at(acc, u64(j), u64(nc), 0);
            gm.outer = u32(rr), gm.inner = 1;
            gm.gemmK = u32(kk), gm.gemmN = u32(std::min(dim, m.N - n0 - j));
            gm.accumulate = kb > 0;
            ctx.emit(gm, acc, in, w);
          }
        }
        const SramOperand result = ctx.at(acc, 0, u64(nc), 0);
        applyUnarySteps(ctx, epilogue, acc, result, u32(rr), 1, u32(nc));
        ctx.emit(makeStore(result, y.addr + u64((bt * m.M + m0) * y.pixelStride() + n0), u64(y.pixelStride()), 0, u32(rr), 1,
                           u32(nc)),
                 -1, acc);
      }
  }
}

/// Matrix-unit work: batch x M x K x N multiply-adds.
void computedMatMulWork(const Node& n, const hw::NpuConfig&, SubgraphWork& w) {
  const BatchedMatMul m = shapeOf(n);
  w.macs += static_cast<uint64_t>(m.batch * m.M * m.K * m.N);
}

}  // namespace

/// Registered under kComputedMatMulLowering (findLowering picks it for a MatMul whose B is not a constant).
const RegisterOpLowering kComputedMatMul({kComputedMatMulLowering}, {OpFamily::Elementwise, checkComputedMatMul,
                                                                     lowerComputedMatMul, computedMatMulFits,
                                                                     computedMatMulWork});

}  // namespace tessel::npu::lower
