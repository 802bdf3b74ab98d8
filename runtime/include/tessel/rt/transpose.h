// Transpose (ONNX semantics): y = x with its axes permuted.
#pragma once

#include <cstdint>

#include "tessel/rt/thread_pool.h"

namespace tessel::rt {

/// y[j...] = x[i...] with y's axis k being x's axis perm[k]; x has `rank` (<= 8) dims x_shape, both
/// row-major and dense. Axes of size 1 and runs of axes that stay adjacent are merged first; a kept
/// innermost axis copies contiguous rows, otherwise 8 x 8 blocks are transposed.
void transpose(const float* x, const int64_t* x_shape, const int64_t* perm, int rank, float* y,
               ThreadPool* pool = nullptr);

/// y's plane p = the `plane` floats at src[p], for p < n: a channel Concat and the channel shuffle after it
/// (Reshape to [N, G, C/G, H, W], Transpose [0, 2, 1, 3, 4], ShuffleNet's) as one copy of each plane from
/// wherever the Concat's inputs are; a null src[p] is a plane its producer wrote in place. Threads take contiguous
/// runs of output planes.
void gather_planes(const float* const* src, float* y, int64_t n, int64_t plane, ThreadPool* pool = nullptr);

}  // namespace tessel::rt
