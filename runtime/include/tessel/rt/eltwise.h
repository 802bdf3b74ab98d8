// Element-wise kernels: vectorised unary math over arrays and binary ops with broadcasting.
#pragma once

#include <cstdint>

#include "tessel/rt/epilogue.h"
#include "tessel/rt/thread_pool.h"

namespace tessel::rt {

/// Unary element-wise operations (errors of the transcendental ones: see vmath.h).
enum class UnaryOp : uint8_t { Exp, Log, Tanh, Erf, Sigmoid, Relu, Neg, Abs, Sqrt, Reciprocal, Gelu, Silu, HardSwish };
/// Binary element-wise operations.
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Max, Min };

/// y[i] = op(x[i]) for i < n (in place allowed).
void unary(UnaryOp op, const float* x, float* y, int64_t n, ThreadPool* pool = nullptr);

/// y[i] = a[i] op b[i] (same shape; in place allowed).
void binary_same(BinaryOp op, const float* a, const float* b, float* y, int64_t n, ThreadPool* pool = nullptr);
/// y[i] = a[i] op s, or s op a[i] when scalar_first.
void binary_scalar(BinaryOp op, const float* a, float s, bool scalar_first, float* y, int64_t n,
                   ThreadPool* pool = nullptr);
/// Per-channel broadcast: a is [outer][channels][inner], b is [channels]; y = a op b[c].
void binary_channel(BinaryOp op, const float* a, const float* b, float* y, int64_t outer, int64_t channels,
                    int64_t inner, ThreadPool* pool = nullptr);
/// The same in NCHWc8: y = op(a, b) over a [batch][channels / 8][hw][8] (channels a multiple of 8) and b one
/// value per (image, channel), [batch][channels], or [channels] for every image when b_per_image is false
/// (squeeze-and-excitation's scale inside a blocked region).
void binary_channel_nchwc8(BinaryOp op, const float* a, const float* b, bool b_per_image, float* y, int64_t batch,
                           int64_t channels, int64_t hw, ThreadPool* pool = nullptr);
/// y = act(x * scale[c] + shift[c]) over x [outer][channels][inner] with ep's activation (bias and residual
/// unused): inference BatchNormalization and the activation after it in one pass (in place allowed).
void channel_affine(const float* x, const float* scale, const float* shift, float* y, int64_t outer,
                    int64_t channels, int64_t inner, const Epilogue& ep, ThreadPool* pool = nullptr);
/// General numpy broadcasting for rank <= 8. Shapes are right-aligned; y_shape is the broadcast shape.
void binary_broadcast(BinaryOp op, const float* a, const int64_t* a_shape, int a_rank, const float* b,
                      const int64_t* b_shape, int b_rank, float* y, const int64_t* y_shape, int y_rank,
                      ThreadPool* pool = nullptr);

/// Softmax along the contiguous inner axis: x and y are [rows][cols].
void softmax(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool* pool = nullptr);
/// LogSoftmax along the contiguous inner axis.
void log_softmax(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool* pool = nullptr);
/// LayerNorm over the contiguous inner axis: y = (x - mean) / sqrt(var + eps) * gamma + beta
/// (gamma/beta have cols entries; either may be null meaning 1 / 0).
void layer_norm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t cols,
                float eps, ThreadPool* pool = nullptr);

}  // namespace tessel::rt
