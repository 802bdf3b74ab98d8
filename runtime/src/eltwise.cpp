// Element-wise kernels: unary math, binary ops with broadcasting, softmax and layer norm.
#include "tessel/rt/eltwise.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "tessel/rt/epilogue_avx2.h"
#include "tessel/rt/vmath.h"
#include "tessel/rt/vmath512.h"

namespace tessel::rt {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per parallel chunk: below this threads cost more than they save

inline __m256 unary_v(UnaryOp op, __m256 x) {
  switch (op) {
    case UnaryOp::Exp: return vexp(x);
    case UnaryOp::Log: return vlog(x);
    case UnaryOp::Tanh: return vtanh(x);
    case UnaryOp::Erf: return verf(x);
    case UnaryOp::Sigmoid: return vsigmoid(x);
    case UnaryOp::Relu: return _mm256_max_ps(x, _mm256_setzero_ps());
    case UnaryOp::Neg: return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
    case UnaryOp::Abs: return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    case UnaryOp::Sqrt: return _mm256_sqrt_ps(x);
    case UnaryOp::Reciprocal: return _mm256_div_ps(_mm256_set1_ps(1.0f), x);
    case UnaryOp::Gelu: return vgelu(x);
    case UnaryOp::Silu: return vsilu(x);
    case UnaryOp::HardSwish: return vhardswish(x);
  }
  return x;
}

inline __m256 binary_v(BinaryOp op, __m256 a, __m256 b) {
  switch (op) {
    case BinaryOp::Add: return _mm256_add_ps(a, b);
    case BinaryOp::Sub: return _mm256_sub_ps(a, b);
    case BinaryOp::Mul: return _mm256_mul_ps(a, b);
    case BinaryOp::Div: return _mm256_div_ps(a, b);
    case BinaryOp::Max: return _mm256_max_ps(a, b);
    case BinaryOp::Min: return _mm256_min_ps(a, b);
  }
  return a;
}

// Runs body(begin, end) over [0, n) in chunks of at least kGrain elements.
template <typename Body>
void chunked(int64_t n, ThreadPool* pool, Body body) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(thread_count(pool), n / kGrain));
  parallel_for(pool, chunks, [&](int64_t c0, int64_t c1) { body(c0 * n / chunks, c1 * n / chunks); });
}

// y[i] = f(i-th vector) over [begin, end) with a masked tail; load(i, mask) gives the operands.
template <typename F>
inline void vector_loop(int64_t begin, int64_t end, float* y, F f) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) _mm256_storeu_ps(y + i, f(i, _mm256_set1_epi32(-1)));
  if (i < end) {
    const __m256i m = vtail_mask(static_cast<int>(end - i));
    _mm256_maskstore_ps(y + i, m, f(i, m));
  }
}

}  // namespace

#if defined(__AVX512F__)
namespace {
// The transcendental ops run on 16 lanes (vmath512.h); the others stay on 8.
bool has_v512(UnaryOp op) {
  switch (op) {
    case UnaryOp::Exp: case UnaryOp::Tanh: case UnaryOp::Erf: case UnaryOp::Sigmoid: case UnaryOp::Gelu:
    case UnaryOp::Silu: case UnaryOp::HardSwish: return true;
    default: return false;
  }
}
inline __m512 unary_v512(UnaryOp op, __m512 x) {
  switch (op) {
    case UnaryOp::Exp: return vexp512(x);
    case UnaryOp::Tanh: return vtanh512(x);
    case UnaryOp::Erf: return verf512(x);
    case UnaryOp::Sigmoid: return vsigmoid512(x);
    case UnaryOp::Gelu: return vgelu512(x);
    case UnaryOp::Silu: return vsilu512(x);
    default: return vhardswish512(x);  // has_v512: HardSwish
  }
}
}  // namespace
#endif

void unary(UnaryOp op, const float* x, float* y, int64_t n, ThreadPool* pool) {
#if defined(__AVX512F__)
  if (has_v512(op)) {
    chunked(n, pool, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i += 16) {
        const __mmask16 m = vtail_mask512(e - i);
        _mm512_mask_storeu_ps(y + i, m, unary_v512(op, _mm512_maskz_loadu_ps(m, x + i)));
      }
    });
    return;
  }
#endif
  chunked(n, pool, [&](int64_t b, int64_t e) {
    vector_loop(b, e, y, [&](int64_t i, __m256i m) { return unary_v(op, _mm256_maskload_ps(x + i, m)); });
  });
}

void binary_same(BinaryOp op, const float* a, const float* b, float* y, int64_t n, ThreadPool* pool) {
  chunked(n, pool, [&](int64_t s, int64_t e) {
    vector_loop(s, e, y, [&](int64_t i, __m256i m) {
      return binary_v(op, _mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m));
    });
  });
}

void binary_scalar(BinaryOp op, const float* a, float sc, bool scalar_first, float* y, int64_t n,
                   ThreadPool* pool) {
  const __m256 s = _mm256_set1_ps(sc);
  chunked(n, pool, [&](int64_t b, int64_t e) {
    vector_loop(b, e, y, [&](int64_t i, __m256i m) {
      const __m256 v = _mm256_maskload_ps(a + i, m);
      return scalar_first ? binary_v(op, s, v) : binary_v(op, v, s);
    });
  });
}

void binary_channel(BinaryOp op, const float* a, const float* b, float* y, int64_t outer, int64_t channels,
                    int64_t inner, ThreadPool* pool) {
  parallel_for(pool, outer * channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const __m256 s = _mm256_set1_ps(b[r % channels]);
      const float* src = a + r * inner;
      float* dst = y + r * inner;
      vector_loop(0, inner, dst, [&](int64_t i, __m256i m) { return binary_v(op, _mm256_maskload_ps(src + i, m), s); });
    }
  });
}

void binary_channel_nchwc8(BinaryOp op, const float* a, const float* b, bool b_per_image, float* y, int64_t batch,
                           int64_t channels, int64_t hw, ThreadPool* pool) {
  const int64_t blocks = channels / 8;
  parallel_for(pool, batch * blocks, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const __m256 s = _mm256_loadu_ps(b + (b_per_image ? r * 8 : r % blocks * 8));
      const float* src = a + r * hw * 8;
      float* dst = y + r * hw * 8;
      for (int64_t i = 0; i < hw; ++i) _mm256_storeu_ps(dst + i * 8, binary_v(op, _mm256_loadu_ps(src + i * 8), s));
    }
  });
}

void channel_affine(const float* x, const float* scale, const float* shift, float* y, int64_t outer,
                    int64_t channels, int64_t inner, const Epilogue& ep, ThreadPool* pool) {
  parallel_for(pool, outer * channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const __m256 s = _mm256_set1_ps(scale[r % channels]), t = _mm256_set1_ps(shift[r % channels]);
      const float* src = x + r * inner;
      vector_loop(0, inner, y + r * inner, [&](int64_t i, __m256i m) {
        return activate(_mm256_fmadd_ps(_mm256_maskload_ps(src + i, m), s, t), ep);
      });
    }
  });
}

void binary_broadcast(BinaryOp op, const float* a, const int64_t* a_shape, int a_rank, const float* b,
                      const int64_t* b_shape, int b_rank, float* y, const int64_t* y_shape, int y_rank,
                      ThreadPool* pool) {
  // Right-align both inputs to y's rank; broadcast dimensions get stride 0.
  int64_t as[8] = {0}, bs[8] = {0}, dims[8];
  int64_t sa = 1, sb = 1;
  for (int d = y_rank - 1; d >= 0; --d) {
    dims[d] = y_shape[d];
    const int da = d - (y_rank - a_rank), db = d - (y_rank - b_rank);
    const int64_t na = da >= 0 ? a_shape[da] : 1, nb = db >= 0 ? b_shape[db] : 1;
    as[d] = na == 1 ? 0 : sa;
    bs[d] = nb == 1 ? 0 : sb;
    sa *= na;
    sb *= nb;
  }
  const int64_t inner = y_rank > 0 ? dims[y_rank - 1] : 1;
  int64_t rows = 1;
  for (int d = 0; d + 1 < y_rank; ++d) rows *= dims[d];
  const int64_t a_in = y_rank > 0 ? as[y_rank - 1] : 0, b_in = y_rank > 0 ? bs[y_rank - 1] : 0;
  parallel_for(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t oa = 0, ob = 0, rem = r;
      for (int d = y_rank - 2; d >= 0; --d) {
        const int64_t idx = rem % dims[d];
        rem /= dims[d];
        oa += idx * as[d];
        ob += idx * bs[d];
      }
      const float* pa = a + oa;
      const float* pb = b + ob;
      vector_loop(0, inner, y + r * inner, [&](int64_t i, __m256i m) {
        const __m256 va = a_in ? _mm256_maskload_ps(pa + i, m) : _mm256_set1_ps(pa[0]);
        const __m256 vb = b_in ? _mm256_maskload_ps(pb + i, m) : _mm256_set1_ps(pb[0]);
        return binary_v(op, va, vb);
      });
    }
  });
}

namespace {
// Max of a row, vectorised.
float row_max(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = vreduce_max(m);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}
// y = exp(x - shift) over a row; returns the sum.
float exp_shifted(const float* x, float* y, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  vector_loop(0, n, y, [&](int64_t i, __m256i m) {
    __m256 e = vexp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), s));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
    acc = _mm256_add_ps(acc, e);
    return e;
  });
  return vreduce_add(acc);
}
}  // namespace

void softmax(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool* pool) {
  parallel_for(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const float sum = exp_shifted(xr, yr, cols, row_max(xr, cols));
      const __m256 inv = _mm256_set1_ps(1.0f / sum);
      vector_loop(0, cols, yr, [&](int64_t i, __m256i m) { return _mm256_mul_ps(_mm256_maskload_ps(yr + i, m), inv); });
    }
  });
}

void log_softmax(const float* x, float* y, int64_t rows, int64_t cols, ThreadPool* pool) {
  parallel_for(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const float mx = row_max(xr, cols);
      const float shift = mx + std::log(exp_shifted(xr, yr, cols, mx));
      const __m256 s = _mm256_set1_ps(shift);
      vector_loop(0, cols, yr, [&](int64_t i, __m256i m) { return _mm256_sub_ps(_mm256_maskload_ps(xr + i, m), s); });
    }
  });
}

void layer_norm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows, int64_t cols,
                float eps, ThreadPool* pool) {
  parallel_for(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      // Two passes (mean, then centred squares): stable for inputs with a large mean.
      __m256 acc = _mm256_setzero_ps();
      int64_t i = 0;
      for (; i + 8 <= cols; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(xr + i));
      double sum = vreduce_add(acc);
      for (; i < cols; ++i) sum += xr[i];
      const float mean = static_cast<float>(sum / cols);
      const __m256 mv = _mm256_set1_ps(mean);
      acc = _mm256_setzero_ps();
      for (i = 0; i + 8 <= cols; i += 8) {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(xr + i), mv);
        acc = _mm256_fmadd_ps(d, d, acc);
      }
      double sq = vreduce_add(acc);
      for (; i < cols; ++i) sq += double(xr[i] - mean) * (xr[i] - mean);
      const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / std::sqrt(sq / cols + eps)));
      vector_loop(0, cols, yr, [&](int64_t j, __m256i m) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(xr + j, m), mv), inv);
        if (gamma) v = _mm256_mul_ps(v, _mm256_maskload_ps(gamma + j, m));
        if (beta) v = _mm256_add_ps(v, _mm256_maskload_ps(beta + j, m));
        return v;
      });
    }
  });
}

}  // namespace tessel::rt
