// Indexing operators: Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND, OneHot, NonZero,
// Unique, Compress. Every element type is supported where ONNX allows it (strings included).
#include <algorithm>
#include <numeric>
#include <type_traits>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

// ---------------------------------------------------------------- shared

/// Reads an index tensor (int32/int64) and wraps negative entries by `extent`; UserError when out of range.
std::vector<int64_t> readIndices(const Tensor& t, int64_t extent, const KernelContext& ctx, const char* what) {
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)
    ctx.fail("{} must be int32 or int64, got {}", what, dtypeName(t.dtype()));
  std::vector<int64_t> v = t.toInt64Vector();
  for (int64_t& i : v) {
    if (i < -extent || i >= extent) ctx.fail("{} value {} is out of range [-{}, {})", what, i, extent, extent);
    if (i < 0) i += extent;
  }
  return v;
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

/// Dims with `axis` replaced by the dims of `inserted` (Gather's output shape).
std::optional<std::vector<Dim>> replaceAxis(const std::vector<Dim>& d, size_t axis,
                                            const std::optional<std::vector<Dim>>& inserted) {
  if (!inserted) return std::nullopt;
  std::vector<Dim> out(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), inserted->begin(), inserted->end());
  out.insert(out.end(), d.begin() + static_cast<std::ptrdiff_t>(axis) + 1, d.end());
  return out;
}

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parseReduction(const std::string& r, const KernelContext& ctx) {
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  ctx.fail("unknown reduction '{}' (expected none, add, mul, max or min)", r);
}

template <class T>
constexpr bool kIsComplex = std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>;

/// dst = dst (reduction) src, for the scatter family.
template <class T>
void combine(T& dst, const T& src, Reduction r, const KernelContext& ctx) {
  if (r == Reduction::None) {
    dst = src;
  } else if constexpr (std::is_same_v<T, std::string>) {
    ctx.fail("reduction is not defined for string tensors");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (r == Reduction::Add || r == Reduction::Max) dst = dst || src;
    else dst = dst && src;
  } else if constexpr (kIsComplex<T>) {
    if (r == Reduction::Add) dst = dst + src;
    else if (r == Reduction::Mul) dst = dst * src;
    else ctx.fail("max/min reductions are not defined for complex tensors");
  } else {
    using C = compute_t<T>;
    C a = static_cast<C>(dst), b = static_cast<C>(src);
    C v = r == Reduction::Add ? a + b : r == Reduction::Mul ? a * b : r == Reduction::Max ? std::max(a, b) : std::min(a, b);
    dst = static_cast<T>(v);
  }
}

// ---------------------------------------------------------------- Gather

void inferGather(InferContext& ctx) {
  const TensorType& data = ctx.inputType(0);
  const TensorType& idx = ctx.inputType(1);
  if (!data.hasRank()) return ctx.setOutputType(0, TensorType(data.dtype, std::nullopt));
  int64_t axis = normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(data.rank()), ctx.node());
  ctx.setOutputType(0, TensorType(data.dtype, replaceAxis(*data.dims, static_cast<size_t>(axis), idx.dims)));
}

void gatherKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idxT = ctx.input(1);
  auto axis = static_cast<size_t>(normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node()));
  std::vector<int64_t> idx = readIndices(idxT, x.shape()[axis], ctx, "indices");
  Shape outShape(x.shape().begin(), x.shape().begin() + static_cast<std::ptrdiff_t>(axis));
  outShape.insert(outShape.end(), idxT.shape().begin(), idxT.shape().end());
  outShape.insert(outShape.end(), x.shape().begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.shape().end());
  int64_t outer = product(x.shape(), 0, axis), extent = x.shape()[axis], inner = product(x.shape(), axis + 1, x.rank());
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchAny(x.dtype(), "Gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.data<T>();
    T* d = y.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (size_t j = 0; j < idx.size(); ++j)
        std::copy_n(s + (o * extent + idx[j]) * inner, inner, d + (o * static_cast<int64_t>(idx.size()) + static_cast<int64_t>(j)) * inner);
  });
}

// ---------------------------------------------------------------- GatherElements / ScatterElements

/// Flat data offset of each element of `indices` (shape `idxShape`) with its `axis` coordinate replaced.
std::vector<int64_t> elementOffsets(const Shape& dataShape, const Shape& idxShape, const std::vector<int64_t>& idx,
                                    size_t axis) {
  std::vector<int64_t> dataStrides = contiguousStrides(dataShape);
  std::vector<int64_t> out(idx.size());
  std::vector<int64_t> pos(idxShape.size(), 0);
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t off = 0;
    for (size_t a = 0; a < idxShape.size(); ++a) off += (a == axis ? idx[i] : pos[a]) * dataStrides[a];
    out[i] = off;
    for (size_t a = idxShape.size(); a-- > 0;) {
      if (++pos[a] < idxShape[a]) break;
      pos[a] = 0;
    }
  }
  return out;
}

void checkElementIndexShape(const Tensor& data, const Tensor& idx, size_t axis, const KernelContext& ctx) {
  if (idx.rank() != data.rank()) ctx.fail("indices have rank {}, data has rank {} (they must match)", idx.rank(), data.rank());
  for (size_t a = 0; a < idx.rank(); ++a)
    if (a != axis && idx.shape()[a] > data.shape()[a])
      ctx.fail("indices shape {} exceeds data shape {} on axis {}", shapeToString(idx.shape()), shapeToString(data.shape()), a);
}

void inferGatherElements(InferContext& ctx) {
  const TensorType& data = ctx.inputType(0);
  const TensorType& idx = ctx.inputType(1);
  if (data.hasRank() && idx.hasRank() && data.rank() != idx.rank())
    ctx.fail("indices {} and data {} must have the same rank", idx.toString(), data.toString());
  if (data.hasRank()) normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(data.rank()), ctx.node());
  ctx.setOutputType(0, TensorType(data.dtype, idx.dims));
}

void gatherElementsKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idxT = ctx.input(1);
  auto axis = static_cast<size_t>(normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node()));
  checkElementIndexShape(x, idxT, axis, ctx);
  std::vector<int64_t> off = elementOffsets(x.shape(), idxT.shape(), readIndices(idxT, x.shape()[axis], ctx, "indices"), axis);
  Tensor& y = ctx.allocateOutput(0, x.dtype(), idxT.shape());
  dispatchAny(x.dtype(), "GatherElements", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.data<T>();
    T* d = y.data<T>();
    for (size_t i = 0; i < off.size(); ++i) d[i] = s[off[i]];
  });
}

void scatterElementsKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idxT = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  auto axis = static_cast<size_t>(normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node()));
  checkElementIndexShape(x, idxT, axis, ctx);
  if (upd.shape() != idxT.shape() || upd.dtype() != x.dtype())
    ctx.fail("updates {} {} must have the shape of indices {} and the type of data {}", dtypeName(upd.dtype()),
             shapeToString(upd.shape()), shapeToString(idxT.shape()), dtypeName(x.dtype()));
  Reduction r = ctx.hasAttr("reduction") ? parseReduction(ctx.attrString("reduction"), ctx) : Reduction::None;
  std::vector<int64_t> off = elementOffsets(x.shape(), idxT.shape(), readIndices(idxT, x.shape()[axis], ctx, "indices"), axis);
  Tensor y = x.clone();
  dispatchAny(x.dtype(), "ScatterElements", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* u = upd.data<T>();
    T* d = y.data<T>();
    for (size_t i = 0; i < off.size(); ++i) combine(d[off[i]], u[i], r, ctx);
  });
  ctx.setOutput(0, y);
}

// ---------------------------------------------------------------- GatherND / ScatterND

void inferGatherND(InferContext& ctx) {
  const TensorType& data = ctx.inputType(0);
  const TensorType& idx = ctx.inputType(1);
  int64_t b = ctx.node().attrInt("batch_dims");
  if (!data.hasRank() || !idx.hasRank() || idx.rank() == 0 || !idx.dims->back().isKnown())
    return ctx.setOutputType(0, TensorType(data.dtype, std::nullopt));
  int64_t k = idx.dims->back().value;
  auto rd = static_cast<int64_t>(data.rank()), ri = static_cast<int64_t>(idx.rank());
  if (b < 0 || b >= std::min(rd, ri)) ctx.fail("batch_dims {} must be in [0, min(data rank {}, indices rank {}))", b, rd, ri);
  if (k < 1 || b + k > rd) ctx.fail("the last indices extent {} must be in [1, data rank {} - batch_dims {}]", k, rd, b);
  std::vector<Dim> out(idx.dims->begin(), idx.dims->end() - 1);
  out.insert(out.end(), data.dims->begin() + b + k, data.dims->end());
  ctx.setOutputType(0, TensorType(data.dtype, out));
}

/// Shared geometry of GatherND/ScatterND: batches, index tuples per batch, slice size, data offsets.
struct NdGeometry {
  int64_t batches = 1, tuplesPerBatch = 1, sliceSize = 1;
  std::vector<int64_t> dataOffsets;  ///< one per index tuple (batch included)
};

NdGeometry ndGeometry(const Tensor& data, const Tensor& idxT, int64_t b, const KernelContext& ctx) {
  auto rd = static_cast<int64_t>(data.rank()), ri = static_cast<int64_t>(idxT.rank());
  if (ri < 1) ctx.fail("indices must have rank >= 1");
  int64_t k = idxT.shape().back();
  if (b < 0 || b >= std::min(rd, ri)) ctx.fail("batch_dims {} must be in [0, min(data rank {}, indices rank {}))", b, rd, ri);
  if (k < 1 || b + k > rd) ctx.fail("the last indices extent {} must be in [1, data rank {} - batch_dims {}]", k, rd, b);
  for (int64_t i = 0; i < b; ++i)
    if (data.shape()[static_cast<size_t>(i)] != idxT.shape()[static_cast<size_t>(i)])
      ctx.fail("batch axis {} has extent {} in data but {} in indices", i, data.shape()[static_cast<size_t>(i)],
               idxT.shape()[static_cast<size_t>(i)]);
  NdGeometry g;
  auto bs = static_cast<size_t>(b);
  g.batches = product(data.shape(), 0, bs);
  g.tuplesPerBatch = product(idxT.shape(), bs, idxT.rank() - 1);
  g.sliceSize = product(data.shape(), bs + static_cast<size_t>(k), data.rank());
  int64_t batchStride = product(data.shape(), bs, data.rank());
  std::vector<int64_t> strides = contiguousStrides(data.shape());
  std::vector<int64_t> raw = idxT.toInt64Vector();
  for (int64_t t = 0; t < g.batches * g.tuplesPerBatch; ++t) {
    int64_t off = (t / std::max<int64_t>(g.tuplesPerBatch, 1)) * batchStride;
    for (int64_t j = 0; j < k; ++j) {
      auto axis = static_cast<size_t>(b + j);
      int64_t v = raw[static_cast<size_t>(t * k + j)], extent = data.shape()[axis];
      if (v < -extent || v >= extent) ctx.fail("index {} is out of range [-{}, {}) for axis {}", v, extent, extent, axis);
      off += (v < 0 ? v + extent : v) * strides[axis];
    }
    g.dataOffsets.push_back(off);
  }
  return g;
}

void gatherNDKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idxT = ctx.input(1);
  int64_t b = ctx.attrInt("batch_dims");
  NdGeometry g = ndGeometry(x, idxT, b, ctx);
  Shape outShape(idxT.shape().begin(), idxT.shape().end() - 1);
  outShape.insert(outShape.end(), x.shape().begin() + b + idxT.shape().back(), x.shape().end());
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchAny(x.dtype(), "GatherND", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.data<T>();
    T* d = y.data<T>();
    for (size_t t = 0; t < g.dataOffsets.size(); ++t)
      std::copy_n(s + g.dataOffsets[t], g.sliceSize, d + static_cast<int64_t>(t) * g.sliceSize);
  });
}

void scatterNDKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idxT = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  NdGeometry g = ndGeometry(x, idxT, 0, ctx);
  Shape expected(idxT.shape().begin(), idxT.shape().end() - 1);
  expected.insert(expected.end(), x.shape().begin() + idxT.shape().back(), x.shape().end());
  if (upd.shape() != expected || upd.dtype() != x.dtype())
    ctx.fail("updates are {}[{}], expected {}[{}]", dtypeName(upd.dtype()), shapeToString(upd.shape()),
             dtypeName(x.dtype()), shapeToString(expected));
  Reduction r = parseReduction(ctx.attrString("reduction"), ctx);
  Tensor y = x.clone();
  dispatchAny(x.dtype(), "ScatterND", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* u = upd.data<T>();
    T* d = y.data<T>();
    for (size_t t = 0; t < g.dataOffsets.size(); ++t)
      for (int64_t e = 0; e < g.sliceSize; ++e)
        combine(d[g.dataOffsets[t] + e], u[static_cast<int64_t>(t) * g.sliceSize + e], r, ctx);
  });
  ctx.setOutput(0, y);
}

// ---------------------------------------------------------------- OneHot

void inferOneHot(InferContext& ctx) {
  const TensorType& idx = ctx.inputType(0);
  DType valueType = ctx.inputType(2).dtype;
  if (!idx.hasRank()) return ctx.setOutputType(0, TensorType(valueType, std::nullopt));
  auto r = static_cast<int64_t>(idx.rank());
  int64_t axis = ctx.node().attrInt("axis");
  if (axis < -r - 1 || axis > r) ctx.fail("axis {} is out of range [{}, {}]", axis, -r - 1, r);
  if (axis < 0) axis += r + 1;
  Dim depth = Dim::unknown();
  if (const Tensor* d = ctx.inputValue(1)) {
    if (d->numel() != 1) ctx.fail("depth must have exactly one element, got {}", d->numel());
    depth = Dim::known(static_cast<int64_t>(d->elementAsDouble(0)));
  }
  std::vector<Dim> out = *idx.dims;
  out.insert(out.begin() + axis, depth);
  ctx.setOutputType(0, TensorType(valueType, out));
}

void oneHotKernel(KernelContext& ctx) {
  const Tensor& idxT = ctx.input(0);
  const Tensor& depthT = ctx.input(1);
  const Tensor& values = ctx.input(2);
  if (depthT.numel() != 1) ctx.fail("depth must have exactly one element, got {}", depthT.numel());
  if (values.numel() != 2) ctx.fail("values must hold [off_value, on_value], got {} elements", values.numel());
  auto depth = static_cast<int64_t>(depthT.elementAsDouble(0));
  if (depth < 1) ctx.fail("depth must be positive, got {}", depth);
  auto r = static_cast<int64_t>(idxT.rank());
  int64_t axis = ctx.attrInt("axis");
  if (axis < -r - 1 || axis > r) ctx.fail("axis {} is out of range [{}, {}]", axis, -r - 1, r);
  if (axis < 0) axis += r + 1;
  std::vector<double> idx = idxT.toDoubleVector();
  Shape outShape = idxT.shape();
  outShape.insert(outShape.begin() + axis, depth);
  int64_t inner = product(idxT.shape(), static_cast<size_t>(axis), idxT.rank());
  Tensor& y = ctx.allocateOutput(0, values.dtype(), outShape);
  dispatchAny(values.dtype(), "OneHot", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* v = values.data<T>();
    T* d = y.data<T>();
    std::fill_n(d, y.numel(), v[0]);
    for (size_t i = 0; i < idx.size(); ++i) {
      auto k = static_cast<int64_t>(idx[i]);  // float indices truncate, as ONNX Runtime does
      if (k < 0) k += depth;
      if (k < 0 || k >= depth) continue;  // out of range: the row stays all off_value
      int64_t outer = static_cast<int64_t>(i) / inner, in = static_cast<int64_t>(i) % inner;
      d[(outer * depth + k) * inner + in] = v[1];
    }
  });
}

// ---------------------------------------------------------------- NonZero / Compress

template <class T>
bool isNonZero(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) return !v.empty();
  else if constexpr (kIsComplex<T>) return v != T{};
  else return static_cast<compute_t<T>>(v) != compute_t<T>{};
}

void inferNonZero(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  Dim rank = in.hasRank() ? Dim::known(static_cast<int64_t>(in.rank())) : Dim::unknown();
  ctx.setOutputType(0, TensorType(DType::Int64, std::vector<Dim>{rank, Dim::unknown()}));
}

void nonZeroKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> flat;
  dispatchAny(x.dtype(), "NonZero", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < x.numel(); ++i)
      if (isNonZero(x.data<T>()[i])) flat.push_back(i);
  });
  auto n = static_cast<int64_t>(flat.size());
  Tensor& y = ctx.allocateOutput(0, DType::Int64, {static_cast<int64_t>(x.rank()), n});
  std::vector<int64_t> strides = contiguousStrides(x.shape());
  for (size_t a = 0; a < x.rank(); ++a)
    for (int64_t j = 0; j < n; ++j)
      y.data<int64_t>()[static_cast<int64_t>(a) * n + j] = (flat[static_cast<size_t>(j)] / strides[a]) % x.shape()[a];
}

void inferCompress(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!ctx.node().hasAttr("axis")) return ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>{Dim::unknown()}));
  if (!in.hasRank()) return ctx.setOutputType(0, in);
  auto axis = static_cast<size_t>(normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(in.rank()), ctx.node()));
  std::vector<Dim> out = *in.dims;
  out[axis] = Dim::unknown();
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

void compressKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cond = ctx.input(1);
  if (cond.rank() != 1) ctx.fail("condition must be 1-D, got shape {}", shapeToString(cond.shape()));
  Tensor flat = x;
  size_t axis = 0;
  if (ctx.hasAttr("axis"))
    axis = static_cast<size_t>(normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node()));
  else
    flat = x.reshaped({x.numel()});
  int64_t extent = flat.shape()[axis];
  if (cond.numel() > extent) ctx.fail("condition has {} entries but the axis has only {}", cond.numel(), extent);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i)
    if (cond.elementAsDouble(i) != 0) keep.push_back(i);
  Shape outShape = flat.shape();
  outShape[axis] = static_cast<int64_t>(keep.size());
  int64_t outer = product(flat.shape(), 0, axis), inner = product(flat.shape(), axis + 1, flat.rank());
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchAny(x.dtype(), "Compress", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = flat.data<T>();
    T* d = y.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (size_t j = 0; j < keep.size(); ++j)
        std::copy_n(s + (o * extent + keep[j]) * inner, inner,
                    d + (o * static_cast<int64_t>(keep.size()) + static_cast<int64_t>(j)) * inner);
  });
}

// ---------------------------------------------------------------- Unique

void inferUnique(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  std::vector<Dim> y{Dim::unknown()};
  Dim slices = Dim::unknown();
  if (ctx.node().hasAttr("axis") && in.hasRank()) {
    auto axis = static_cast<size_t>(normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(in.rank()), ctx.node()));
    y = *in.dims;
    y[axis] = Dim::unknown();
    slices = (*in.dims)[axis];
  } else if (in.isStatic()) {
    slices = Dim::known(in.staticSize());
  }
  ctx.setOutputType(0, TensorType(in.dtype, ctx.node().hasAttr("axis") && !in.hasRank() ? std::nullopt : std::optional(y)));
  ctx.setOutputType(1, TensorType(DType::Int64, std::vector<Dim>{Dim::unknown()}));
  ctx.setOutputType(2, TensorType(DType::Int64, std::vector<Dim>{slices}));
  ctx.setOutputType(3, TensorType(DType::Int64, std::vector<Dim>{Dim::unknown()}));
}

/// Groups equal slices: returns, per unique slice (in output order), the ids of its members (ascending).
template <class T>
std::vector<std::vector<int64_t>> groupSlices(const T* s, int64_t outer, int64_t count, int64_t inner, bool sorted) {
  auto at = [&](int64_t slice, int64_t e) -> const T& { return s[((e / inner) * count + slice) * inner + e % inner]; };
  int64_t len = outer * inner;
  auto less = [&](int64_t a, int64_t b) {
    for (int64_t e = 0; e < len; ++e) {
      if (at(a, e) < at(b, e)) return true;
      if (at(b, e) < at(a, e)) return false;
    }
    return false;
  };
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), less);
  std::vector<std::vector<int64_t>> groups;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || less(order[i - 1], order[i])) groups.emplace_back();
    groups.back().push_back(order[i]);
  }
  if (!sorted)  // order of first occurrence
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return groups;
}

void uniqueKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool hasAxis = ctx.hasAttr("axis");
  Tensor src = hasAxis ? x : x.reshaped({x.numel()});
  size_t axis = hasAxis ? static_cast<size_t>(normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node())) : 0;
  int64_t count = src.shape()[axis];
  int64_t outer = product(src.shape(), 0, axis), inner = product(src.shape(), axis + 1, src.rank());
  bool sorted = ctx.attrInt("sorted") != 0;
  dispatchAny(x.dtype(), "Unique", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsComplex<T>) {
      ctx.fail("Unique is not defined for complex tensors");
    } else {
      auto groups = groupSlices<T>(src.data<T>(), outer, count, inner, sorted);
      auto u = static_cast<int64_t>(groups.size());
      Shape yShape = src.shape();
      yShape[axis] = u;
      Tensor y(x.dtype(), yShape), first(DType::Int64, {u}), inverse(DType::Int64, {count}), counts(DType::Int64, {u});
      for (int64_t g = 0; g < u; ++g) {
        const auto& members = groups[static_cast<size_t>(g)];
        first.data<int64_t>()[g] = members.front();
        counts.data<int64_t>()[g] = static_cast<int64_t>(members.size());
        for (int64_t m : members) inverse.data<int64_t>()[m] = g;
        for (int64_t o = 0; o < outer; ++o)
          std::copy_n(src.data<T>() + (o * count + members.front()) * inner, inner, y.data<T>() + (o * u + g) * inner);
      }
      std::vector<Tensor> results{y, first, inverse, counts};
      for (size_t i = 0; i < ctx.numOutputs(); ++i) ctx.setOutput(i, results[i]);  // trailing outputs are optional
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(Gather) {
  return OpDef("Gather").inputs(2).outputs(1).since(1)
      .attr("axis", AttrKind::Int, int64_t{0})
      .describe("takes entries of data along axis at the given indices (negative indices count from the end)")
      .infer(inferGather).kernel(gatherKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(GatherElements) {
  return OpDef("GatherElements").inputs(2).outputs(1).since(11)
      .attr("axis", AttrKind::Int, int64_t{0})
      .describe("out[i] = data[i with its axis coordinate replaced by indices[i]]")
      .infer(inferGatherElements).kernel(gatherElementsKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(GatherND) {
  return OpDef("GatherND").inputs(2).outputs(1).since(11)
      .attr("batch_dims", AttrKind::Int, int64_t{0})
      .describe("gathers slices of data addressed by the last axis of indices (after batch_dims batch axes)")
      .infer(inferGatherND).kernel(gatherNDKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(ScatterElements) {
  return OpDef("ScatterElements").inputs(3).outputs(1).since(11)
      .attr("axis", AttrKind::Int, int64_t{0})
      .attr("reduction", AttrKind::String, std::string("none"))
      .describe("copy of data with data[i with axis coordinate indices[i]] (reduction)= updates[i]")
      .infer(inferSameAsInput0).kernel(scatterElementsKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(Scatter) {
  return OpDef("Scatter").inputs(3).outputs(1).since(9)
      .attr("axis", AttrKind::Int, int64_t{0})
      .describe("deprecated alias of ScatterElements without reduction")
      .infer(inferSameAsInput0).kernel(scatterElementsKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(ScatterND) {
  return OpDef("ScatterND").inputs(3).outputs(1).since(11)
      .attr("reduction", AttrKind::String, std::string("none"))
      .describe("copy of data with the slices addressed by indices replaced (or reduced) by updates")
      .infer(inferSameAsInput0).kernel(scatterNDKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(OneHot) {
  return OpDef("OneHot").inputs(3).outputs(1).since(9)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .describe("one-hot encoding: on_value where index == position along axis, off_value elsewhere")
      .infer(inferOneHot).kernel(oneHotKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(NonZero) {
  return OpDef("NonZero").inputs(1).outputs(1).since(9)
      .describe("coordinates of the non-zero elements, one row per axis (row-major order)")
      .infer(inferNonZero).kernel(nonZeroKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(Compress) {
  return OpDef("Compress").inputs(2).outputs(1).since(9)
      .optionalAttr("axis", AttrKind::Int)
      .describe("keeps the slices along axis (or elements of the flattened input) where condition is true")
      .infer(inferCompress).kernel(compressKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(Unique) {
  return OpDef("Unique").inputs(1).outputs(1, 4).since(11)
      .attr("sorted", AttrKind::Int, int64_t{1})
      .optionalAttr("axis", AttrKind::Int)
      .describe("unique elements (or slices along axis), with first indices, inverse indices and counts")
      .infer(inferUnique).kernel(uniqueKernel).cost(movementCost);
}

}  // namespace tessel
