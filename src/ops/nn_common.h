// Internal helpers shared by the neural-network operator family (conv, matmul, pool): window geometry,
// a cache-blocked reference GEMM loop, and element conversion to the compute type.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tessel/ops/helpers.h"

namespace tessel::nn {

/// Padding, stride and dilation of a sliding window over the spatial axes of an NC... tensor.
struct WindowGeometry {
  std::vector<int64_t> kernel, strides, dilations, padBegin, padEnd;
  size_t spatialRank() const { return kernel.size(); }
  int64_t effectiveKernel(size_t d) const { return (kernel[d] - 1) * dilations[d] + 1; }
};

/// Reads kernel_shape/strides/dilations/pads/auto_pad of a conv or pool node. `kernel` comes from the
/// weight shape for convolutions (kernel_shape, when present, must match it). `inputSpatial` may hold -1
/// for unknown extents, which is only allowed when auto_pad is NOTSET or VALID.
WindowGeometry readWindowGeometry(const Node& node, const std::vector<int64_t>& kernel,
                                  const std::vector<int64_t>& inputSpatial, bool hasDilations = true);

/// Output extent along one spatial axis (-1 when the input extent is unknown). `ceilMode` is the pooling
/// option: windows starting inside the padded end are kept, as in PyTorch and ONNX Runtime.
int64_t windowOutputExtent(const WindowGeometry& g, size_t d, int64_t inputExtent, bool ceilMode = false);

/// Spatial extents of an input type's dims after the first two (N, C); -1 for unknown ones.
std::vector<int64_t> spatialExtents(const TensorType& t);

/// The dims of a value as -1/extent, for inference (requires a known rank).
std::vector<int64_t> knownExtents(const TensorType& t);

/// C[M,N] += A[M,K] * B[K,N], all row-major with leading dimensions lda/ldb/ldc. Blocked over N and K so
/// the panel of B stays in cache; four rows of A share each load of B; the inner loop is contiguous and
/// vectorises. Exact enough to be the oracle (plain accumulation in Acc).
template <class Acc>
void gemmAccumulate(int64_t M, int64_t N, int64_t K, const Acc* A, int64_t lda, const Acc* B, int64_t ldb, Acc* C,
                    int64_t ldc) {
  constexpr int64_t kBlockN = 512, kBlockK = 128;
  for (int64_t j0 = 0; j0 < N; j0 += kBlockN) {
    const int64_t nb = std::min(kBlockN, N - j0);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const int64_t kb = std::min(kBlockK, K - k0);
      int64_t i = 0;
      for (; i + 4 <= M; i += 4) {
        Acc* __restrict c0 = C + (i + 0) * ldc + j0;
        Acc* __restrict c1 = C + (i + 1) * ldc + j0;
        Acc* __restrict c2 = C + (i + 2) * ldc + j0;
        Acc* __restrict c3 = C + (i + 3) * ldc + j0;
        for (int64_t k = k0; k < k0 + kb; ++k) {
          const Acc a0 = A[(i + 0) * lda + k], a1 = A[(i + 1) * lda + k];
          const Acc a2 = A[(i + 2) * lda + k], a3 = A[(i + 3) * lda + k];
          const Acc* __restrict b = B + k * ldb + j0;
          for (int64_t j = 0; j < nb; ++j) {
            const Acc bj = b[j];
            c0[j] += a0 * bj;
            c1[j] += a1 * bj;
            c2[j] += a2 * bj;
            c3[j] += a3 * bj;
          }
        }
      }
      for (; i < M; ++i) {
        Acc* __restrict c = C + i * ldc + j0;
        for (int64_t k = k0; k < k0 + kb; ++k) {
          const Acc a = A[i * lda + k];
          const Acc* __restrict b = B + k * ldb + j0;
          for (int64_t j = 0; j < nb; ++j) c[j] += a * b[j];
        }
      }
    }
  }
}

/// The elements of a tensor converted to the compute type Acc (a copy; f16/bf16 become float).
template <class Acc>
std::vector<Acc> toComputeVector(const Tensor& t) {
  std::vector<Acc> out(static_cast<size_t>(t.numel()));
  dispatchNumeric(t.dtype(), "tensor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* d = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = static_cast<Acc>(static_cast<compute_t<T>>(d[i]));
  });
  return out;
}

/// Writes compute-type values into a freshly allocated tensor of dtype T.
template <class T, class Acc>
void storeFromCompute(Tensor& out, const std::vector<Acc>& values) {
  T* d = out.data<T>();
  for (size_t i = 0; i < values.size(); ++i) d[i] = static_cast<T>(static_cast<compute_t<T>>(values[i]));
}

/// Rounds half to even and saturates to the range of the quantised type Q (uint8 / int8 / int32).
template <class Q>
Q saturateRound(double v) {
  double r = std::nearbyint(v);
  r = std::clamp(r, static_cast<double>(std::numeric_limits<Q>::min()), static_cast<double>(std::numeric_limits<Q>::max()));
  return static_cast<Q>(r);
}

/// Integer accumulation core of quantised convolutions and matmuls: the values of an integer tensor
/// minus a zero point, as int32.
std::vector<int32_t> shiftedInt32(const Tensor& t, int32_t zeroPoint);
/// The zero point held by an optional scalar (or one-element) zero-point tensor; 0 when absent.
int32_t scalarZeroPoint(const KernelContext& ctx, size_t inputIndex);

}  // namespace tessel::nn
