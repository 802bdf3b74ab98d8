// Index-driven data movement of any element type: Gather along an axis and strided Slice copies.
#pragma once

#include <cstdint>

#include "tessel/rt/thread_pool.h"

namespace tessel::rt {

/// ONNX Gather: data is [outer][axis_dim][inner] with `inner_bytes` bytes per inner row (any element
/// type), the n indices (int64, or int32 when idx64 is null) select rows of the axis: out is
/// [outer][n][inner]. Negative indices count from the end. Returns false, writing nothing, when an index
/// is outside [-axis_dim, axis_dim).
bool gather(const void* data, int64_t outer, int64_t axis_dim, int64_t inner_bytes, const int64_t* idx64,
            const int32_t* idx32, int64_t n, void* out, ThreadPool* pool = nullptr);

/// y = x[starts[0] :: steps[0], ..., starts[r-1] :: steps[r-1]] with y's shape y_shape: a strided copy of
/// rank r (<= 8) of elements of `elem_bytes` bytes (ONNX Slice after its starts/ends/steps are resolved).
void strided_copy(const void* x, const int64_t* x_shape, const int64_t* starts, const int64_t* steps,
                  const int64_t* y_shape, int rank, int64_t elem_bytes, void* y, ThreadPool* pool = nullptr);

}  // namespace tessel::rt
