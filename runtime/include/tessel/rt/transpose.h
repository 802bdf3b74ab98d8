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

}  // namespace tessel::rt
