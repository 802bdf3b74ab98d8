// 2-D pooling (max, average with both count_include_pad modes, ceil_mode, global average), NCHW and NCHWc8.
#pragma once

#include <cstdint>

#include "tessel/rt/thread_pool.h"

namespace tessel::rt {

/// Geometry of one pooling (ONNX MaxPool/AveragePool attributes plus the input shape).
struct Pool2dShape {
  int64_t batch = 1, channels = 0, in_h = 0, in_w = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool ceil_mode = false;
  bool count_include_pad = false;  ///< average only: divide by the window clipped to the padded input

  /// Output extent along one axis (ceil_mode drops a last window that starts inside the end padding).
  static int64_t out_extent(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1, bool ceil_mode) {
    const int64_t span = in + p0 + p1 - k;
    int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (out - 1) * s >= in + p0) --out;
    return out;
  }
  int64_t out_h() const { return out_extent(in_h, kernel_h, stride_h, pad_top, pad_bottom, ceil_mode); }
  int64_t out_w() const { return out_extent(in_w, kernel_w, stride_w, pad_left, pad_right, ceil_mode); }
};

/// Max pooling, NCHW. Windows never reading a real input give -inf.
void maxpool2d_nchw(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool = nullptr);
/// Average pooling, NCHW.
void avgpool2d_nchw(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool = nullptr);
/// Max pooling, NCHWc8 (channels in vector lanes).
void maxpool2d_nchwc8(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool = nullptr);
/// Average pooling, NCHWc8.
void avgpool2d_nchwc8(const Pool2dShape& s, const float* in, float* out, ThreadPool* pool = nullptr);
/// Global average pooling: [N][C][HW] -> [N][C].
void global_avgpool_nchw(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                         ThreadPool* pool = nullptr);
/// Global average pooling in NCHWc8: [N][CB][HW][8] -> [N][CB][8].
void global_avgpool_nchwc8(int64_t batch, int64_t channels, int64_t hw, const float* in, float* out,
                           ThreadPool* pool = nullptr);

}  // namespace tessel::rt
