// Scaled dot-product attention: per (problem, row block), scores = scale Q_rows Kt in a per-thread
// scratch, softmax along the key axis in place, then out_rows = scores V. The M x T score matrix never
// exists as a whole, so long sequences need no arena for it and the scores stay in cache.
#include "tessel/rt/attention.h"

#include <algorithm>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/eltwise.h"
#include "tessel/rt/gemm.h"

namespace tessel::rt {

void attention(const float* q, const float* kt, const float* v, float* out, int64_t batch, int64_t M, int64_t d,
               int64_t T, int64_t dv, float scale, ThreadPool* pool) {
  if (batch <= 0 || M <= 0 || dv <= 0) return;
  // Rows per block: the block's scores (rows x T floats) within 64 KiB, at least one GEMM row panel.
  constexpr int64_t kScoreFloats = 16 * 1024;
  const int64_t rows = std::clamp<int64_t>(kScoreFloats / std::max<int64_t>(T, 1) / kGemmMR * kGemmMR, kGemmMR, M);
  const int64_t blocks = (M + rows - 1) / rows;
  const Epilogue none{};
  parallel_for(pool, batch * blocks, [&](int64_t i0, int64_t i1) {
    static thread_local AlignedBuffer scores_buf;
    float* scores = scores_buf.ensure(static_cast<size_t>(rows * std::max<int64_t>(T, 1)));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / blocks, r0 = (i % blocks) * rows, n = std::min(rows, M - r0);
      sgemm(false, false, n, T, d, scale, q + (b * M + r0) * d, d, kt + b * d * T, T, 0.0f, scores, T, none, nullptr);
      softmax(scores, scores, n, T, nullptr);
      sgemm(false, false, n, dv, T, 1.0f, scores, T, v + b * T * dv, dv, 0.0f, out + (b * M + r0) * dv, dv, none,
            nullptr);
    }
  });
}

}  // namespace tessel::rt
