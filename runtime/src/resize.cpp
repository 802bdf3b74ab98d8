// Separable 2-D resize of NCHW planes (rt::resize_2d, resize.h): the W pass per input row, the H pass per
// output row as contiguous multiply-adds.
#include <algorithm>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/resize.h"
#include "tessel/rt/thread_pool.h"

namespace tessel::rt {
namespace {

// Output rows per task: a band reads its rows' taps, a few input rows for an upsampling (8x: about 9 input
// rows for 64 output rows), so the W pass repeats at most a row or two per band.
constexpr int64_t kBandRows = 64;

}  // namespace

void resize_2d(const float* x, float* y, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
               const int64_t* row_first, const int64_t* row_index, const float* row_weight, const int64_t* col_first,
               const int64_t* col_index, const float* col_weight, ThreadPool* pool) {
  if (planes <= 0 || OH <= 0 || OW <= 0) return;
  const int64_t bands = (OH + kBandRows - 1) / kBandRows;
  parallel_for(pool, planes * bands, [&](int64_t begin, int64_t end) {
    static thread_local AlignedBuffer scratch;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t p = task / bands, r0 = task % bands * kBandRows, r1 = std::min(OH, r0 + kBandRows);
      const float* in = x + p * H * W;
      float* out = y + p * OH * OW;
      // The input rows [lo, hi] the band reads, each interpolated along W into scratch row (row - lo).
      int64_t lo = H, hi = -1;
      for (int64_t t = row_first[r0]; t < row_first[r1]; ++t) lo = std::min(lo, row_index[t]), hi = std::max(hi, row_index[t]);
      if (hi < lo) {  // no taps: zeros
        std::fill(out + r0 * OW, out + r1 * OW, 0.0f);
        continue;
      }
      float* rows = scratch.ensure(static_cast<size_t>((hi - lo + 1) * OW));
      std::vector<bool> used(static_cast<size_t>(hi - lo + 1), false);
      for (int64_t t = row_first[r0]; t < row_first[r1]; ++t) used[static_cast<size_t>(row_index[t] - lo)] = true;
      for (int64_t i = lo; i <= hi; ++i) {
        if (!used[static_cast<size_t>(i - lo)]) continue;
        const float* src = in + i * W;
        float* dst = rows + (i - lo) * OW;
        for (int64_t c = 0; c < OW; ++c) {
          float s = 0.0f;
          for (int64_t t = col_first[c]; t < col_first[c + 1]; ++t) s += col_weight[t] * src[col_index[t]];
          dst[c] = s;
        }
      }
      for (int64_t r = r0; r < r1; ++r) {
        float* dst = out + r * OW;
        const int64_t t0 = row_first[r], t1 = row_first[r + 1];
        if (t0 == t1) {
          std::fill(dst, dst + OW, 0.0f);
          continue;
        }
        const float w0 = row_weight[t0];
        const float* a = rows + (row_index[t0] - lo) * OW;
        for (int64_t c = 0; c < OW; ++c) dst[c] = w0 * a[c];
        for (int64_t t = t0 + 1; t < t1; ++t) {
          const float w = row_weight[t];
          const float* b = rows + (row_index[t] - lo) * OW;
          for (int64_t c = 0; c < OW; ++c) dst[c] += w * b[c];
        }
      }
    }
  });
}

}  // namespace tessel::rt
