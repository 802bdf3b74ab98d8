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
  // With a problem per thread or more, each task is a whole problem and packs its Kt and V once for all its
  // row blocks (ViT-B/16: 12 heads of 197 rows in 3 blocks; unpacked, each block's two GEMMs packed them
  // again: 8 ms of packing a run, Zen 2); otherwise the tasks are (problem, row block) pairs.
  const bool whole = batch >= thread_count(pool);
  const int64_t per_task = whole ? blocks : 1;
  parallel_for(pool, batch * blocks / per_task, [&](int64_t i0, int64_t i1) {
    static thread_local AlignedBuffer scores_buf, kt_buf, v_buf;
    float* scores = scores_buf.ensure(static_cast<size_t>(rows * std::max<int64_t>(T, 1)));
    float* kt_packed = kt_buf.ensure(packed_b_size(T, d));
    float* v_packed = v_buf.ensure(packed_b_size(dv, T));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i * per_task / blocks;
      pack_b(false, T, d, kt + b * d * T, T, kt_packed);
      pack_b(false, dv, T, v + b * T * dv, dv, v_packed);
      for (int64_t blk = i * per_task % blocks; blk < i * per_task % blocks + per_task; ++blk) {
        const int64_t r0 = blk * rows, n = std::min(rows, M - r0);
        sgemm_packed_b(false, n, T, d, scale, q + (b * M + r0) * d, d, kt_packed, 0.0f, scores, T, none, nullptr);
        softmax(scores, scores, n, T, nullptr);
        sgemm_packed_b(false, n, dv, T, 1.0f, scores, T, v_packed, 0.0f, out + (b * M + r0) * dv, dv, none, nullptr);
      }
    }
  });
}

}  // namespace tessel::rt
