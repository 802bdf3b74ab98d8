// Index-driven operators of any element type for generated code (the cpu target's lower_index_ops.cpp):
// ScatterElements, ScatterND, GatherND, OneHot, Compress, TopK, EyeLike and Pad. Element types are the generated
// code's (16-bit floats are not handled here); indices are int32 or int64. Each returns false, having
// written possibly part of the output, when an index is out of range or a run-time operand gives another
// shape than the planned one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace tessel::rt {

/// ScatterElements / ScatterND reductions: none (replace), add, mul, max, min.
enum class ScatterReduction { None, Add, Mul, Max, Min };

template <class T>
inline void scatter_combine(T& dst, T src, ScatterReduction r) {
  switch (r) {
    case ScatterReduction::None: dst = src; break;
    case ScatterReduction::Add: dst = static_cast<T>(dst + src); break;
    case ScatterReduction::Mul: dst = static_cast<T>(dst * src); break;
    case ScatterReduction::Max: dst = std::max(dst, src); break;
    case ScatterReduction::Min: dst = std::min(dst, src); break;
  }
}

/// The walk of GatherElements / ScatterElements: for index element i (indices of shape is, rank r <= 8) calls
/// fn(i, off) with the offset in the data (shape xs) of its position with the `axis` coordinate replaced by
/// indices[i] (negative: from the end). False, stopping there, on an index out of range.
template <class I, class Fn>
bool for_each_axis_index(const int64_t* xs, const I* idx, const int64_t* is, int r, int axis, Fn&& fn) {
  int64_t total = 1, pos[8] = {}, stride[8];
  for (int64_t a = r - 1, s = 1; a >= 0; --a) stride[a] = s, s *= xs[a];
  for (int a = 0; a < r; ++a) total *= is[a];
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0;
    for (int a = 0; a < r; ++a) {
      int64_t c = pos[a];
      if (a == axis) {
        c = static_cast<int64_t>(idx[i]);
        if (c < 0) c += xs[a];
        if (c < 0 || c >= xs[a]) return false;
      }
      off += c * stride[a];
    }
    fn(i, off);
    for (int a = r - 1; a >= 0; --a) {
      if (++pos[a] < is[a]) break;
      pos[a] = 0;
    }
  }
  return true;
}

/// y (holding a copy of the data, shape xs of rank r <= 8) gets updates[i] at the position of index element i
/// (indices of shape is) with its `axis` coordinate replaced by indices[i] (negative: from the end).
template <class T, class I>
bool scatter_elements(T* y, const int64_t* xs, const I* idx, const T* updates, const int64_t* is, int r, int axis,
                      ScatterReduction red) {
  return for_each_axis_index(xs, idx, is, r, axis, [&](int64_t i, int64_t off) { scatter_combine(y[off], updates[i], red); });
}

/// The offsets of the slices that index tuples address: data of shape xs (rank r), `batch` leading batch
/// axes, tuples of k coordinates (`tuples` per batch entry). False on a coordinate out of range.
template <class I>
bool nd_offsets(const int64_t* xs, int r, int batch, const I* idx, int64_t tuples, int k, std::vector<int64_t>& out) {
  int64_t stride[8], batches = 1;
  for (int a = r - 1, s = 1; a >= 0; --a) stride[a] = s, s *= static_cast<int>(xs[a]);
  for (int a = 0; a < batch; ++a) batches *= xs[a];
  const int64_t batch_stride = batch > 0 ? stride[batch - 1] : 0;
  out.clear();
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t t = 0; t < tuples; ++t) {
      const I* tuple = idx + (b * tuples + t) * k;
      int64_t off = b * batch_stride;
      for (int j = 0; j < k; ++j) {
        int64_t c = static_cast<int64_t>(tuple[j]);
        const int64_t dim = xs[batch + j];
        if (c < 0) c += dim;
        if (c < 0 || c >= dim) return false;
        off += c * stride[batch + j];
      }
      out.push_back(off);
    }
  return true;
}

/// GatherND: for every index tuple, the slice of `slice` elements (`bytes` each) it addresses, in order.
template <class I>
bool gather_nd(const void* x, const int64_t* xs, int r, int batch, const I* idx, int64_t tuples, int k, int64_t slice,
               int64_t bytes, void* y) {
  std::vector<int64_t> offsets;
  if (!nd_offsets(xs, r, batch, idx, tuples, k, offsets)) return false;
  for (size_t t = 0; t < offsets.size(); ++t)
    std::memcpy(static_cast<char*>(y) + static_cast<int64_t>(t) * slice * bytes,
                static_cast<const char*>(x) + offsets[t] * bytes, static_cast<size_t>(slice * bytes));
  return true;
}

/// ScatterND into y (a copy of the data): update slice t combined into the slice tuple t addresses.
template <class T, class I>
bool scatter_nd(T* y, const int64_t* xs, int r, const I* idx, int64_t tuples, int k, const T* updates, int64_t slice,
                ScatterReduction red) {
  std::vector<int64_t> offsets;
  if (!nd_offsets(xs, r, 0, idx, tuples, k, offsets)) return false;
  for (size_t t = 0; t < offsets.size(); ++t)
    for (int64_t e = 0; e < slice; ++e) scatter_combine(y[offsets[t] + e], updates[static_cast<int64_t>(t) * slice + e], red);
  return true;
}

/// OneHot: y [outer, depth, inner] is values[0] but values[1] at index idx[o, i] (truncated, negative from the
/// end; out of range leaves the row off). False when the run-time depth differs from the planned one.
template <class T, class I>
bool one_hot(const I* idx, int64_t outer, int64_t inner, double depth_value, int64_t depth, const T* values, T* y) {
  if (static_cast<int64_t>(depth_value) != depth) return false;
  std::fill_n(y, outer * depth * inner, values[0]);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto k = static_cast<int64_t>(idx[o * inner + i]);
      if (k < 0) k += depth;
      if (k >= 0 && k < depth) y[(o * depth + k) * inner + i] = values[1];
    }
  return true;
}

/// Compress along the middle axis of an [outer, n, inner_bytes] view: the entries whose condition (cn <= n
/// entries) is non-zero; false when their count differs from the planned `kept`.
template <class C>
bool compress(const void* x, const C* cond, int64_t cn, int64_t outer, int64_t n, int64_t inner_bytes, int64_t kept,
              void* y) {
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cn && i < n; ++i)
    if (cond[i] != 0) keep.push_back(i);
  if (static_cast<int64_t>(keep.size()) != kept || cn > n) return false;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t j = 0; j < keep.size(); ++j)
      std::memcpy(static_cast<char*>(y) + (o * kept + static_cast<int64_t>(j)) * inner_bytes,
                  static_cast<const char*>(x) + (o * n + keep[j]) * inner_bytes, static_cast<size_t>(inner_bytes));
  return true;
}

/// TopK along the middle axis of [outer, n, inner]: the k largest (or smallest) values and their indices, equal
/// values in ascending index order. False when the run-time k differs from the planned one.
template <class T>
bool top_k(const T* x, T* values, int64_t* indices, int64_t outer, int64_t n, int64_t inner, int64_t k_value, int64_t k,
           bool largest) {
  if (k_value != k || k > n) return false;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return x[(o * n + j) * inner + i]; };
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return largest ? at(a) > at(b) : at(a) < at(b); });
      for (int64_t j = 0; j < k; ++j) {
        values[(o * k + j) * inner + i] = at(order[static_cast<size_t>(j)]);
        indices[(o * k + j) * inner + i] = order[static_cast<size_t>(j)];
      }
    }
  return true;
}

/// EyeLike: ones on the diagonal shifted by k of a [rows, cols] matrix, zeros elsewhere.
template <class T>
void eye_like(T* y, int64_t rows, int64_t cols, int64_t k) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = static_cast<T>(j - i == k ? 1 : 0);
}

enum class PadMode { Constant, Reflect, Edge };

/// Source coordinate of output coordinate `o` along an axis of extent dim padded by `begin` (-1: the constant).
inline int64_t pad_source(int64_t o, int64_t begin, int64_t dim, PadMode mode) {
  int64_t c = o - begin;
  if (c >= 0 && c < dim) return c;
  if (mode == PadMode::Constant || dim == 0) return -1;
  if (mode == PadMode::Edge) return std::clamp<int64_t>(c, 0, dim - 1);
  if (dim == 1) return 0;
  const int64_t period = 2 * (dim - 1);  // reflect without repeating the border element
  c = ((c % period) + period) % period;
  return c < dim ? c : period - c;
}

/// Pad of x (shape xs, rank r <= 8, `bytes` per element) to y (shape ys) by run-time pads (r begins, then r
/// ends, of type I); `value` (one element, or null: zeros) fills the constant mode. False when the pads do not
/// give ys, or a non-constant mode pads an empty axis.
template <class I>
bool pad_nd(const void* x, const int64_t* xs, const I* pads, int r, PadMode mode, const void* value, int64_t bytes,
            void* y, const int64_t* ys) {
  int64_t total = 1, pos[8] = {}, stride[8], begin[8];
  for (int a = r - 1, s = 1; a >= 0; --a) stride[a] = s, s *= static_cast<int>(xs[a]);
  for (int a = 0; a < r; ++a) {
    begin[a] = static_cast<int64_t>(pads[a]);
    if (xs[a] + begin[a] + static_cast<int64_t>(pads[a + r]) != ys[a]) return false;
    if (xs[a] == 0 && ys[a] > 0 && mode != PadMode::Constant) return false;
    total *= ys[a];
  }
  const char* src = static_cast<const char*>(x);
  char* dst = static_cast<char*>(y);
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0;
    for (int a = 0; a < r && off >= 0; ++a) {
      const int64_t c = pad_source(pos[a], begin[a], xs[a], mode);
      off = c < 0 ? -1 : off + c * stride[a];
    }
    if (off >= 0) std::memcpy(dst + i * bytes, src + off * bytes, static_cast<size_t>(bytes));
    else if (value) std::memcpy(dst + i * bytes, value, static_cast<size_t>(bytes));
    else std::memset(dst + i * bytes, 0, static_cast<size_t>(bytes));
    for (int a = r - 1; a >= 0; --a) {
      if (++pos[a] < ys[a]) break;
      pos[a] = 0;
    }
  }
  return true;
}

}  // namespace tessel::rt
