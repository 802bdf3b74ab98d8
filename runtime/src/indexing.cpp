// Gather and strided copies on raw bytes (the element type only sets the row size).
#include "tessel/rt/indexing.h"

#include <cstring>
#include <vector>

namespace tessel::rt {

bool gather(const void* data, int64_t outer, int64_t axis_dim, int64_t inner_bytes, const int64_t* idx64,
            const int32_t* idx32, int64_t n, void* out, ThreadPool* pool) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = idx64 ? idx64[i] : idx32[i];
    if (k < -axis_dim || k >= axis_dim) return false;
    rows[i] = k < 0 ? k + axis_dim : k;
  }
  const char* src = static_cast<const char*>(data);
  char* dst = static_cast<char*>(out);
  parallel_for(pool, outer * n, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t o = j / n, i = j % n;
      std::memcpy(dst + j * inner_bytes, src + (o * axis_dim + rows[i]) * inner_bytes, static_cast<size_t>(inner_bytes));
    }
  });
  return true;
}

void strided_copy(const void* x, const int64_t* x_shape, const int64_t* starts, const int64_t* steps,
                  const int64_t* y_shape, int rank, int64_t elem_bytes, void* y, ThreadPool* pool) {
  int64_t total = 1;
  for (int a = 0; a < rank; ++a) total *= y_shape[a];
  if (total == 0) return;
  std::vector<int64_t> xstride(rank, elem_bytes);
  for (int a = rank - 2; a >= 0; --a) xstride[a] = xstride[a + 1] * x_shape[a + 1];
  int64_t base = 0;
  for (int a = 0; a < rank; ++a) base += starts[a] * xstride[a];
  const int64_t inner = rank > 0 ? y_shape[rank - 1] : 1, rows = total / inner;
  const int64_t step = rank > 0 ? steps[rank - 1] * xstride[rank - 1] : elem_bytes;
  const char* src = static_cast<const char*>(x);
  char* dst = static_cast<char*>(y);
  parallel_for(pool, rows, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(rank > 1 ? rank - 1 : 1, 0);
    int64_t rem = r0, off = base;
    for (int a = rank - 2; a >= 0; --a) {
      idx[a] = rem % y_shape[a];
      rem /= y_shape[a];
      off += idx[a] * steps[a] * xstride[a];
    }
    for (int64_t r = r0; r < r1; ++r) {
      char* d = dst + r * inner * elem_bytes;
      if (step == elem_bytes) {
        std::memcpy(d, src + off, static_cast<size_t>(inner * elem_bytes));
      } else {
        for (int64_t j = 0; j < inner; ++j) std::memcpy(d + j * elem_bytes, src + off + j * step, static_cast<size_t>(elem_bytes));
      }
      for (int a = rank - 2; a >= 0; --a) {
        off += steps[a] * xstride[a];
        if (++idx[a] < y_shape[a]) break;
        off -= y_shape[a] * steps[a] * xstride[a];
        idx[a] = 0;
      }
    }
  });
}

}  // namespace tessel::rt
