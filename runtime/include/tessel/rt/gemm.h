// Single-precision GEMM: C[MxN] = alpha * op(A) * op(B) + beta * C, then a fused Epilogue.
// Packed panels + MC/KC/NC cache blocking + a 6x16 AVX2 FMA micro-kernel; threaded over M/N blocks.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessel/rt/epilogue.h"
#include "tessel/rt/thread_pool.h"

namespace tessel::rt {

/// Register tile of the micro-kernel sgemm_6x16_avx2.
inline constexpr int kGemmMR = 6;
inline constexpr int kGemmNR = 16;

/// Floats needed by pack_a for an M x K operand (M rounded up to 6).
size_t packed_a_size(int64_t M, int64_t K);
/// Packs op(A) (M x K; A is K x M when trans_a) into 6-row panels, each K x 6 contiguous.
void pack_a(bool trans_a, int64_t M, int64_t K, const float* A, int64_t lda, float* packed);

/// Floats needed by pack_b for a K x N operand (N rounded up to 16).
size_t packed_b_size(int64_t N, int64_t K);
/// Packs op(B) (K x N; B is N x K when trans_b) into 16-column panels, each K x 16 contiguous.
void pack_b(bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb, float* packed);

/// Source of B panels computed on the fly (e.g. implicit im2col): fills dst[k * 16 + j] for
/// k in [0, K) and columns j0 + j, j < nr, zero for j in [nr, 16).
struct BPanelPacker {
  virtual ~BPanelPacker() = default;
  /// Packs one 16-column panel starting at column j0 with nr <= 16 real columns.
  virtual void pack_panel(int64_t j0, int nr, float* dst) const = 0;
};

/// C = alpha * op(A) * op(B) + beta * C, then ep (bias, residual, activation). beta == 0 never
/// reads C. Any M, N, K >= 0. pool may be null (single thread).
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           const Epilogue& ep = {}, ThreadPool* pool = nullptr);

/// As sgemm with B pre-packed by pack_b (weights of FC layers). M == 1 takes a GEMV fast path.
void sgemm_packed_b(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* packed_b, float beta, float* C, int64_t ldc,
                    const Epilogue& ep = {}, ThreadPool* pool = nullptr);

/// As sgemm with A pre-packed by pack_a (conv weights: C[Cout x HW] = W[Cout x K] * X[K x HW]).
void sgemm_packed_a(int64_t M, int64_t N, int64_t K, float alpha, const float* packed_a, bool trans_b,
                    const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                    const Epilogue& ep = {}, ThreadPool* pool = nullptr);

/// As sgemm_packed_a with B produced panel by panel by `b` (no materialised B matrix).
void sgemm_packed_a_custom_b(int64_t M, int64_t N, int64_t K, float alpha, const float* packed_a,
                             const BPanelPacker& b, float beta, float* C, int64_t ldc,
                             const Epilogue& ep = {}, ThreadPool* pool = nullptr);

/// Batched MatMul with numpy broadcasting resolved at compile time: for b < batch,
/// C + b * M * N = A[a_offsets[b]] (M x K, row-major) * B[b_offsets[b]] (K x N, row-major). The batches
/// run on the pool's threads when there are at least as many as threads, else each GEMM is threaded.
void matmul_batched(const float* A, const int64_t* a_offsets, const float* B, const int64_t* b_offsets, float* C,
                    int64_t batch, int64_t M, int64_t N, int64_t K, ThreadPool* pool = nullptr);

/// Register tile of sgemm_tile: 12 x 32 with AVX-512 (two 6-row A panels by two 16-column B panels),
/// 12 x 16 with AVX2 (two 6x16 passes over the same B panel, which stays in L1: Winograd reads its V half as
/// often as with 6-row tiles; ResNet-50's Winograd layers 11.8-12.1 -> 10.6-11.4 ms, Zen 5, 1 thread).
/// Packed operands sized for it round rows up to kGemmTileRowsMax on every ISA, so a packing computed by one
/// build (the compiler's) fits another (the model's).
#if defined(__AVX512F__)
inline constexpr int kGemmTileRows = 12, kGemmTileCols = 32;
#else
inline constexpr int kGemmTileRows = 12, kGemmTileCols = 16;
#endif
inline constexpr int kGemmTileRowsMax = 12;

/// One register tile, no epilogue: c[r * ldc + j] = sum_k A[r][k] * B[k][j] for r < kGemmTileRows and
/// j < ncols (16, or with AVX-512 16 or 32). `a` is the first of kGemmTileRows / 6 packed A panels
/// (k-major, 6 floats per k; a_panel_stride floats apart), `b` the first of ncols / 16 packed B panels
/// (16 floats per k; b_panel_stride apart). Rows beyond the real ones must be zero-padded panels.
/// `a_next`, when given, is the next call's A (same panel stride), prefetched into L1 on the way
/// (weights streamed from L3 otherwise stall each tile's first loads).
void sgemm_tile(int64_t K, const float* a, int64_t a_panel_stride, const float* b, int64_t b_panel_stride,
                float* c, int64_t ldc, int ncols, const float* a_next = nullptr);

/// C = alpha * A * B + beta * C with both operands pre-packed (pack_a / pack_b layouts); single threaded
/// without a pool (for callers that already parallelise at a coarser level), else split over the pool.
void sgemm_packed_ab(int64_t M, int64_t N, int64_t K, float alpha, const float* packed_a,
                     const float* packed_b, float beta, float* C, int64_t ldc, const Epilogue& ep = {},
                     ThreadPool* pool = nullptr);

}  // namespace tessel::rt
