// Scaled dot-product attention (the tessel.Attention operator): out = Softmax(scale * Q Kt) V.
#pragma once

#include <cstdint>

#include "tessel/rt/thread_pool.h"

namespace tessel::rt {

/// For each of `batch` (batch x heads) independent problems, with row-major Q [M x d], Kt [d x T] (K
/// already transposed), V [T x dv] and out [M x dv] consecutive per problem: out = softmax(scale Q Kt) V,
/// softmax along T. Rows are processed in blocks whose scores stay in a per-thread scratch (never the
/// whole M x T matrix); the threads split (problem, row block) pairs.
void attention(const float* q, const float* kt, const float* v, float* out, int64_t batch, int64_t M, int64_t d,
               int64_t T, int64_t dv, float scale, ThreadPool* pool = nullptr);

}  // namespace tessel::rt
