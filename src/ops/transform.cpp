// Data-rearranging operators: Transpose, Concat, Split, Slice, Tile, Pad, DepthToSpace, SpaceToDepth, Trilu,
// ReverseSequence. Every element type is supported (strings included): these ops only move data.
#include <algorithm>
#include <numeric>
#include <set>

#include "tessel/ops/upgrade.h"
#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

// ---------------------------------------------------------------- shared

/// Copies a `shape`-sized box: element at multi-index i goes from src[srcOffset + i.srcStrides] to
/// dst[dstOffset + i.dstStrides]. Covers transposes, slices, concatenation and splitting.
void copyBox(const Tensor& src, int64_t srcOffset, const std::vector<int64_t>& srcStrides, Tensor& dst,
             int64_t dstOffset, const std::vector<int64_t>& dstStrides, const Shape& shape) {
  if (shapeSize(shape) == 0) return;
  dispatchAny(src.dtype(), "copy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = src.data<T>();
    T* d = dst.data<T>();
    std::vector<int64_t> index(shape.size(), 0);
    int64_t so = srcOffset, dof = dstOffset, n = shapeSize(shape);
    for (int64_t i = 0; i < n; ++i) {
      d[dof] = s[so];
      for (size_t a = shape.size(); a-- > 0;) {  // odometer increment
        so += srcStrides[a];
        dof += dstStrides[a];
        if (++index[a] < shape[a]) break;
        so -= srcStrides[a] * shape[a];
        dof -= dstStrides[a] * shape[a];
        index[a] = 0;
      }
    }
  });
}

/// Calls fn(outFlat, srcFlat) for every output element, where srcFlat is computed per axis by
/// `srcCoord(axis, outCoord)` (returning -1 means "no source": fn gets srcFlat = -1).
template <class CoordFn, class Fn>
void forEachMapped(const Shape& outShape, const Shape& inShape, CoordFn srcCoord, Fn fn) {
  std::vector<int64_t> inStrides = contiguousStrides(inShape);
  std::vector<int64_t> index(outShape.size(), 0);
  int64_t n = shapeSize(outShape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (size_t a = 0; a < outShape.size() && src >= 0; ++a) {
      int64_t c = srcCoord(a, index[a]);
      src = c < 0 ? -1 : src + c * inStrides[a];
    }
    fn(i, src);
    for (size_t a = outShape.size(); a-- > 0;) {
      if (++index[a] < outShape[a]) break;
      index[a] = 0;
    }
  }
}

/// out = transpose(x, perm) for a concrete tensor.
Tensor transposeTensor(const Tensor& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> inStrides = contiguousStrides(x.shape());
  Shape outShape(perm.size());
  std::vector<int64_t> srcStrides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    outShape[i] = x.shape()[static_cast<size_t>(perm[i])];
    srcStrides[i] = inStrides[static_cast<size_t>(perm[i])];
  }
  Tensor y(x.dtype(), outShape);
  copyBox(x, 0, srcStrides, y, 0, contiguousStrides(outShape), outShape);
  return y;
}


std::optional<std::vector<int64_t>> knownInts(InferContext& ctx, size_t i) {
  if (!ctx.hasInput(i)) return std::nullopt;
  if (const Tensor* t = ctx.inputValue(i)) return t->toInt64Vector();
  return std::nullopt;
}

/// Output with the input's element type and `rank` unknown dims (or unknown rank).
TensorType unknownDims(DType t, const TensorType& in) {
  if (!in.hasRank()) return TensorType(t, std::nullopt);
  return TensorType(t, std::vector<Dim>(in.rank()));
}

// ---------------------------------------------------------------- Transpose

std::vector<int64_t> transposePerm(const Node& node, size_t rank) {
  std::vector<int64_t> perm(rank);
  if (!node.hasAttr("perm")) {
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
    return perm;
  }
  perm = node.attrInts("perm");
  std::vector<int64_t> sorted = perm;
  for (int64_t& p : sorted)
    if (p < 0) p += static_cast<int64_t>(rank);
  std::sort(sorted.begin(), sorted.end());
  bool ok = sorted.size() == rank;
  for (size_t i = 0; ok && i < rank; ++i) ok = sorted[i] == static_cast<int64_t>(i);
  if (!ok)
    throw UserError(fmt::format("{}: perm [{}] is not a permutation of the {} axes of the input", node.describe(),
                                fmt::join(node.attrInts("perm"), ","), rank));
  for (int64_t& p : perm)
    if (p < 0) p += static_cast<int64_t>(rank);
  return perm;
}

void inferTranspose(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!in.hasRank()) {
    ctx.setOutputType(0, in);
    return;
  }
  std::vector<int64_t> perm = transposePerm(ctx.node(), in.rank());
  std::vector<Dim> out;
  for (int64_t p : perm) out.push_back((*in.dims)[static_cast<size_t>(p)]);
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

void transposeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.setOutput(0, transposeTensor(x, transposePerm(ctx.node(), x.rank())));
}

// ---------------------------------------------------------------- Concat

void inferConcat(InferContext& ctx) {
  std::optional<std::vector<Dim>> out;
  DType dtype = ctx.inputType(0).dtype;
  int64_t axis = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const TensorType& t = ctx.inputType(i);
    if (t.dtype != dtype) ctx.fail("input {} has element type {}, input 0 has {}", i, dtypeName(t.dtype), dtypeName(dtype));
    if (!t.hasRank()) continue;
    if (!out) {
      out = *t.dims;
      axis = normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(t.rank()), ctx.node());
      continue;
    }
    if (t.rank() != out->size()) ctx.fail("input {} has rank {}, expected {}", i, t.rank(), out->size());
    for (size_t a = 0; a < out->size(); ++a) {
      Dim& o = (*out)[a];
      const Dim& d = (*t.dims)[a];
      if (static_cast<int64_t>(a) == axis) {
        o = o.isKnown() && d.isKnown() ? Dim::known(o.value + d.value) : Dim::unknown();
      } else if (o.isKnown() && d.isKnown() && o.value != d.value) {
        ctx.fail("input {} has extent {} on axis {}, expected {} (only axis {} may differ)", i, d.value, a, o.value, axis);
      } else if (!o.isKnown() && d.isKnown()) {
        o = d;
      }
    }
  }
  // An input of unknown rank makes the concatenated extent unknown.
  for (size_t i = 0; out && i < ctx.numInputs(); ++i)
    if (!ctx.inputType(i).hasRank()) (*out)[static_cast<size_t>(axis)] = Dim::unknown();
  ctx.setOutputType(0, TensorType(dtype, out));
}

void concatKernel(KernelContext& ctx) {
  const Tensor& first = ctx.input(0);
  int64_t axis = normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(first.rank()), ctx.node());
  auto ax = static_cast<size_t>(axis);
  Shape outShape = first.shape();
  outShape[ax] = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor& t = ctx.input(i);
    if (t.dtype() != first.dtype()) ctx.fail("input {} has element type {}, input 0 has {}", i, dtypeName(t.dtype()), dtypeName(first.dtype()));
    if (t.rank() != first.rank()) ctx.fail("input {} has rank {}, expected {}", i, t.rank(), first.rank());
    for (size_t a = 0; a < t.rank(); ++a)
      if (a != ax && t.shape()[a] != first.shape()[a])
        ctx.fail("input {} has shape {}, incompatible with input 0 {} (only axis {} may differ)", i,
                 shapeToString(t.shape()), shapeToString(first.shape()), axis);
    outShape[ax] += t.shape()[ax];
  }
  Tensor& y = ctx.allocateOutput(0, first.dtype(), outShape);
  std::vector<int64_t> outStrides = contiguousStrides(outShape);
  int64_t offset = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor& t = ctx.input(i);
    copyBox(t, 0, contiguousStrides(t.shape()), y, offset * outStrides[ax], outStrides, t.shape());
    offset += t.shape()[ax];
  }
}

// ---------------------------------------------------------------- Split

/// Part sizes: from the split input, or equal parts (the last one smaller when not divisible, as opset 18).
std::vector<int64_t> splitSizes(const std::optional<std::vector<int64_t>>& split, int64_t extent, size_t parts,
                                const Node& node) {
  if (split && !split->empty()) {
    if (split->size() != parts)
      throw UserError(fmt::format("{}: split has {} entries but the node has {} outputs", node.describe(),
                                  split->size(), parts));
    int64_t sum = 0;
    for (int64_t s : *split) {
      if (s < 0) throw UserError(fmt::format("{}: negative split size {}", node.describe(), s));
      sum += s;
    }
    if (extent >= 0 && sum != extent)
      throw UserError(fmt::format("{}: split sizes [{}] add up to {} but the axis has extent {}", node.describe(),
                                  fmt::join(*split, ","), sum, extent));
    return *split;
  }
  if (extent < 0) return {};
  auto n = static_cast<int64_t>(parts);
  int64_t chunk = (extent + n - 1) / n;
  std::vector<int64_t> sizes;
  for (int64_t i = 0, left = extent; i < n; ++i, left -= chunk) sizes.push_back(std::clamp<int64_t>(left, 0, chunk));
  return sizes;
}

void inferSplit(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!in.hasRank()) {
    for (size_t i = 0; i < ctx.numOutputs(); ++i) ctx.setOutputType(i, in);
    return;
  }
  int64_t axis = normalizeAxis(ctx.node().attrInt("axis"), static_cast<int64_t>(in.rank()), ctx.node());
  auto ax = static_cast<size_t>(axis);
  std::optional<std::vector<int64_t>> split;
  if (ctx.hasInput(1)) {
    split = knownInts(ctx, 1);
    if (!split) {  // sizes only known at run time
      for (size_t i = 0; i < ctx.numOutputs(); ++i) {
        std::vector<Dim> d = *in.dims;
        d[ax] = Dim::unknown();
        ctx.setOutputType(i, TensorType(in.dtype, d));
      }
      return;
    }
  }
  const Dim& extent = (*in.dims)[ax];
  std::vector<int64_t> sizes = splitSizes(split, extent.isKnown() ? extent.value : -1, ctx.numOutputs(), ctx.node());
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    std::vector<Dim> d = *in.dims;
    d[ax] = sizes.empty() ? Dim::unknown() : Dim::known(sizes[i]);
    ctx.setOutputType(i, TensorType(in.dtype, d));
  }
}

void splitKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = normalizeAxis(ctx.attrInt("axis"), static_cast<int64_t>(x.rank()), ctx.node());
  auto ax = static_cast<size_t>(axis);
  std::optional<std::vector<int64_t>> split;
  if (ctx.hasInput(1)) split = ctx.input(1).toInt64Vector();
  std::vector<int64_t> sizes = splitSizes(split, x.shape()[ax], ctx.numOutputs(), ctx.node());
  std::vector<int64_t> inStrides = contiguousStrides(x.shape());
  int64_t offset = 0;
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    Shape s = x.shape();
    s[ax] = sizes[i];
    Tensor& y = ctx.allocateOutput(i, x.dtype(), s);
    copyBox(x, offset * inStrides[ax], inStrides, y, 0, contiguousStrides(s), s);
    offset += sizes[i];
  }
}

// ---------------------------------------------------------------- Slice

struct AxisSlice {
  int64_t start = 0, step = 1, count = 0;
};

/// Clamps one axis's start/end like ONNX Slice-13 (negative steps walk backwards; INT_MAX ends clamp).
AxisSlice sliceAxis(int64_t start, int64_t end, int64_t step, int64_t dim) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  AxisSlice s;
  s.step = step;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    s.count = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    s.count = start > end ? (start - end + (-step) - 1) / (-step) : 0;
  }
  s.start = start;
  return s;
}

struct SliceParams {
  std::vector<int64_t> starts, ends, axes, steps;
};

/// Reads and validates starts/ends/axes/steps; axes are normalised against `rank`.
SliceParams sliceParams(const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                        const std::optional<std::vector<int64_t>>& axes, const std::optional<std::vector<int64_t>>& steps,
                        int64_t rank, const Node& node) {
  SliceParams p{starts, ends, {}, {}};
  if (starts.size() != ends.size())
    throw UserError(fmt::format("{}: starts has {} entries but ends has {}", node.describe(), starts.size(), ends.size()));
  if (axes) {
    if (axes->size() != starts.size())
      throw UserError(fmt::format("{}: axes has {} entries, starts has {}", node.describe(), axes->size(), starts.size()));
    std::set<int64_t> seen;
    for (int64_t a : *axes) {
      int64_t n = normalizeAxis(a, rank, node);
      if (!seen.insert(n).second) throw UserError(fmt::format("{}: axis {} is sliced twice", node.describe(), a));
      p.axes.push_back(n);
    }
  } else {
    for (size_t i = 0; i < starts.size(); ++i) p.axes.push_back(static_cast<int64_t>(i));
    if (static_cast<int64_t>(starts.size()) > rank)
      throw UserError(fmt::format("{}: {} starts for a tensor of rank {}", node.describe(), starts.size(), rank));
  }
  p.steps = steps ? *steps : std::vector<int64_t>(starts.size(), 1);
  if (p.steps.size() != starts.size())
    throw UserError(fmt::format("{}: steps has {} entries, starts has {}", node.describe(), p.steps.size(), starts.size()));
  for (int64_t s : p.steps)
    if (s == 0) throw UserError(fmt::format("{}: a slice step is 0", node.describe()));
  return p;
}

void inferSlice(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  auto starts = knownInts(ctx, 1), ends = knownInts(ctx, 2);
  auto axes = knownInts(ctx, 3), steps = knownInts(ctx, 4);
  bool complete = starts && ends && (!ctx.hasInput(3) || axes) && (!ctx.hasInput(4) || steps);
  if (!in.hasRank() || !complete) {
    ctx.setOutputType(0, unknownDims(in.dtype, in));
    return;
  }
  SliceParams p = sliceParams(*starts, *ends, axes, steps, static_cast<int64_t>(in.rank()), ctx.node());
  std::vector<Dim> out = *in.dims;
  for (size_t i = 0; i < p.axes.size(); ++i) {
    Dim& d = out[static_cast<size_t>(p.axes[i])];
    if (d.isKnown())
      d = Dim::known(sliceAxis(p.starts[i], p.ends[i], p.steps[i], d.value).count);
    else if (p.starts[i] == 0 && p.steps[i] == 1 && p.ends[i] == INT64_MAX)
      ;  // the whole axis: keep the symbol
    else
      d = Dim::unknown();
  }
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

void sliceKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::optional<std::vector<int64_t>> axes, steps;
  if (ctx.hasInput(3)) axes = ctx.input(3).toInt64Vector();
  if (ctx.hasInput(4)) steps = ctx.input(4).toInt64Vector();
  SliceParams p = sliceParams(ctx.input(1).toInt64Vector(), ctx.input(2).toInt64Vector(), axes, steps,
                              static_cast<int64_t>(x.rank()), ctx.node());
  std::vector<int64_t> inStrides = contiguousStrides(x.shape());
  std::vector<int64_t> srcStrides = inStrides;
  Shape outShape = x.shape();
  int64_t offset = 0;
  for (size_t i = 0; i < p.axes.size(); ++i) {
    auto a = static_cast<size_t>(p.axes[i]);
    AxisSlice s = sliceAxis(p.starts[i], p.ends[i], p.steps[i], x.shape()[a]);
    outShape[a] = s.count;
    srcStrides[a] = inStrides[a] * s.step;
    if (s.count > 0) offset += s.start * inStrides[a];
  }
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  copyBox(x, offset, srcStrides, y, 0, contiguousStrides(outShape), outShape);
}

// ---------------------------------------------------------------- Tile

void inferTile(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  auto repeats = knownInts(ctx, 1);
  if (!in.hasRank() || !repeats) {
    ctx.setOutputType(0, unknownDims(in.dtype, in));
    return;
  }
  if (repeats->size() != in.rank()) ctx.fail("repeats has {} entries, the input has rank {}", repeats->size(), in.rank());
  std::vector<Dim> out = *in.dims;
  for (size_t i = 0; i < out.size(); ++i) {
    if ((*repeats)[i] < 0) ctx.fail("negative repeat count {} on axis {}", (*repeats)[i], i);
    if (out[i].isKnown())
      out[i] = Dim::known(out[i].value * (*repeats)[i]);
    else if ((*repeats)[i] != 1)
      out[i] = Dim::unknown();
  }
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

void tileKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> repeats = ctx.input(1).toInt64Vector();
  if (repeats.size() != x.rank()) ctx.fail("repeats has {} entries, the input has rank {}", repeats.size(), x.rank());
  Shape outShape = x.shape();
  for (size_t i = 0; i < outShape.size(); ++i) {
    if (repeats[i] < 0) ctx.fail("negative repeat count {} on axis {}", repeats[i], i);
    outShape[i] *= repeats[i];
  }
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchAny(x.dtype(), "Tile", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.data<T>();
    T* d = y.data<T>();
    forEachMapped(outShape, x.shape(), [&](size_t a, int64_t c) { return c % x.shape()[a]; },
                  [&](int64_t o, int64_t i) { d[o] = s[i]; });
  });
}

// ---------------------------------------------------------------- Pad

/// Source coordinate of output coordinate `o` along an axis padded by `begin` (-1: use the constant).
int64_t padSource(int64_t o, int64_t begin, int64_t dim, const std::string& mode) {
  int64_t c = o - begin;
  if (c >= 0 && c < dim) return c;
  if (mode == "constant" || dim == 0) return -1;
  if (mode == "edge") return std::clamp<int64_t>(c, 0, dim - 1);
  if (dim == 1) return 0;
  int64_t period = 2 * (dim - 1);  // reflect without repeating the border element
  c = ((c % period) + period) % period;
  return c < dim ? c : period - c;
}

void inferPad(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  auto pads = knownInts(ctx, 1);
  std::optional<std::vector<int64_t>> axes;
  if (ctx.hasInput(3) && !(axes = knownInts(ctx, 3))) pads.reset();
  if (!in.hasRank() || !pads) {
    ctx.setOutputType(0, unknownDims(in.dtype, in));
    return;
  }
  auto r = static_cast<int64_t>(in.rank());
  std::vector<int64_t> ax(static_cast<size_t>(r));
  std::iota(ax.begin(), ax.end(), 0);
  if (axes)
    for (int64_t& a : (ax = *axes)) a = normalizeAxis(a, r, ctx.node());
  if (pads->size() != 2 * ax.size()) ctx.fail("pads has {} entries, expected {} (begin and end per axis)", pads->size(), 2 * ax.size());
  std::vector<Dim> out = *in.dims;
  for (size_t i = 0; i < ax.size(); ++i) {
    Dim& d = out[static_cast<size_t>(ax[i])];
    int64_t delta = (*pads)[i] + (*pads)[i + ax.size()];
    if (d.isKnown()) {
      if (d.value + delta < 0) ctx.fail("pads [{}] remove more than the {} elements of axis {}", fmt::join(*pads, ","), d.value, ax[i]);
      d = Dim::known(d.value + delta);
    } else if (delta != 0) {
      d = Dim::unknown();
    }
  }
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

void padKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto r = static_cast<int64_t>(x.rank());
  std::vector<int64_t> pads = ctx.input(1).toInt64Vector();
  std::vector<int64_t> ax(static_cast<size_t>(r));
  std::iota(ax.begin(), ax.end(), 0);
  if (ctx.hasInput(3))
    for (int64_t& a : (ax = ctx.input(3).toInt64Vector())) a = normalizeAxis(a, r, ctx.node());
  if (pads.size() != 2 * ax.size()) ctx.fail("pads has {} entries, expected {} (begin and end per axis)", pads.size(), 2 * ax.size());
  std::string mode = ctx.attrString("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge") ctx.fail("unknown mode '{}' (expected constant, reflect or edge)", mode);
  std::vector<int64_t> begin(static_cast<size_t>(r), 0);
  Shape outShape = x.shape();
  for (size_t i = 0; i < ax.size(); ++i) {
    auto a = static_cast<size_t>(ax[i]);
    begin[a] = pads[i];
    outShape[a] += pads[i] + pads[i + ax.size()];
    if (outShape[a] < 0) ctx.fail("pads [{}] remove more than the {} elements of axis {}", fmt::join(pads, ","), x.shape()[a], a);
    if (x.shape()[a] == 0 && outShape[a] > 0 && mode != "constant") ctx.fail("cannot {}-pad the empty axis {}", mode, a);
  }
  Tensor fill = ctx.hasInput(2) && ctx.input(2).numel() > 0 ? ctx.input(2).castTo(x.dtype()) : Tensor(x.dtype(), {1});
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchAny(x.dtype(), "Pad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.data<T>();
    T* d = y.data<T>();
    T value = fill.data<T>()[0];
    forEachMapped(outShape, x.shape(), [&](size_t a, int64_t c) { return padSource(c, begin[a], x.shape()[a], mode); },
                  [&](int64_t o, int64_t i) { d[o] = i < 0 ? value : s[i]; });
  });
}

/// Pad-2 kept pads/value as attributes; opset 11 made them inputs.
void upgradePad(UpgradeContext& ctx) {
  if (ctx.node.hasAttr("pads")) moveIntsAttrToInput(ctx, "pads", 1);
  if (ctx.node.hasAttr("value")) {
    float v = ctx.node.attrFloat("value");
    ctx.node.removeAttr("value");
    ctx.node.addInput(ctx.addConstant(ctx.node.name() + "_value", Tensor::scalar<float>(v)));
  }
}

// ---------------------------------------------------------------- DepthToSpace / SpaceToDepth

void checkRank4(const TensorType& t, InferContext& ctx) {
  if (t.hasRank() && t.rank() != 4) ctx.fail("expected a 4-D NCHW input, got {}", t.toString());
}

Dim scaleDim(const Dim& d, int64_t mul, int64_t div, InferContext& ctx, const char* what) {
  if (!d.isKnown()) return Dim::unknown();
  if (d.value % div != 0) ctx.fail("{} extent {} is not divisible by {}", what, d.value, div);
  return Dim::known(d.value / div * mul);
}

void inferDepthToSpace(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  checkRank4(in, ctx);
  int64_t b = ctx.node().attrInt("blocksize");
  if (b <= 0) ctx.fail("blocksize must be positive, got {}", b);
  if (!in.hasRank()) return ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>(4)));
  const auto& d = *in.dims;
  ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>{d[0], scaleDim(d[1], 1, b * b, ctx, "channel"),
                                                             scaleDim(d[2], b, 1, ctx, "height"),
                                                             scaleDim(d[3], b, 1, ctx, "width")}));
}

void depthToSpaceKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t b = ctx.attrInt("blocksize");
  if (x.rank() != 4 || b <= 0 || x.dim(1) % (b * b) != 0)
    ctx.fail("expected a 4-D input whose channels ({}) divide by blocksize^2 = {}", x.rank() == 4 ? x.dim(1) : -1, b * b);
  int64_t n = x.dim(0), c = x.dim(1) / (b * b), h = x.dim(2), w = x.dim(3);
  bool crd = ctx.attrString("mode") == "CRD";
  if (!crd && ctx.attrString("mode") != "DCR") ctx.fail("unknown mode '{}' (expected DCR or CRD)", ctx.attrString("mode"));
  Tensor t = crd ? transposeTensor(x.reshaped({n, c, b, b, h, w}), {0, 1, 4, 2, 5, 3})
                 : transposeTensor(x.reshaped({n, b, b, c, h, w}), {0, 3, 4, 1, 5, 2});
  ctx.setOutput(0, t.reshaped({n, c, h * b, w * b}));
}

void inferSpaceToDepth(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  checkRank4(in, ctx);
  int64_t b = ctx.node().attrInt("blocksize");
  if (b <= 0) ctx.fail("blocksize must be positive, got {}", b);
  if (!in.hasRank()) return ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>(4)));
  const auto& d = *in.dims;
  ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>{d[0], scaleDim(d[1], b * b, 1, ctx, "channel"),
                                                             scaleDim(d[2], 1, b, ctx, "height"),
                                                             scaleDim(d[3], 1, b, ctx, "width")}));
}

void spaceToDepthKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t b = ctx.attrInt("blocksize");
  if (x.rank() != 4 || b <= 0 || x.dim(2) % b != 0 || x.dim(3) % b != 0)
    ctx.fail("expected a 4-D input whose height and width divide by blocksize {}", b);
  int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2) / b, w = x.dim(3) / b;
  Tensor t = transposeTensor(x.reshaped({n, c, h, b, w, b}), {0, 3, 5, 1, 2, 4});
  ctx.setOutput(0, t.reshaped({n, c * b * b, h, w}));
}

// ---------------------------------------------------------------- Trilu

/// Trilu and ReverseSequence: the output has the input's type, which must have rank >= 2.
void inferSameTypeRankAtLeast2(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (in.hasRank() && in.rank() < 2) ctx.fail("expected a tensor of rank >= 2, got {}", in.toString());
  ctx.setOutputType(0, in);
}

void triluKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) ctx.fail("expected a tensor of rank >= 2, got rank {}", x.rank());
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    std::vector<int64_t> kv = ctx.input(1).toInt64Vector();
    if (kv.size() != 1) ctx.fail("k must be a scalar, got {} values", kv.size());
    k = kv[0];
  }
  bool upper = ctx.attrInt("upper") != 0;
  int64_t rows = x.dim(-2), cols = x.dim(-1);
  Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
  dispatchAny(x.dtype(), "Trilu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.data<T>();
    T* d = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t col = i % cols, row = (i / cols) % rows;
      bool keep = upper ? col - row >= k : col - row <= k;
      if (keep) d[i] = s[i];
    }
  });
}

// ---------------------------------------------------------------- ReverseSequence

void reverseSequenceKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto r = static_cast<int64_t>(x.rank());
  if (r < 2) ctx.fail("expected a tensor of rank >= 2, got rank {}", r);
  auto batchAxis = static_cast<size_t>(normalizeAxis(ctx.attrInt("batch_axis"), r, ctx.node()));
  auto timeAxis = static_cast<size_t>(normalizeAxis(ctx.attrInt("time_axis"), r, ctx.node()));
  if (batchAxis == timeAxis) ctx.fail("batch_axis and time_axis must differ");
  std::vector<int64_t> lens = ctx.input(1).toInt64Vector();
  if (static_cast<int64_t>(lens.size()) != x.shape()[batchAxis])
    ctx.fail("sequence_lens has {} entries, the batch axis has {}", lens.size(), x.shape()[batchAxis]);
  for (int64_t l : lens)
    if (l < 0 || l > x.shape()[timeAxis]) ctx.fail("sequence length {} is outside [0, {}]", l, x.shape()[timeAxis]);
  Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
  std::vector<int64_t> strides = contiguousStrides(x.shape());
  dispatchAny(x.dtype(), "ReverseSequence", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.data<T>();
    T* d = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t b = (i / strides[batchAxis]) % x.shape()[batchAxis];
      int64_t t = (i / strides[timeAxis]) % x.shape()[timeAxis];
      int64_t src = t < lens[static_cast<size_t>(b)] ? i + (lens[static_cast<size_t>(b)] - 1 - 2 * t) * strides[timeAxis] : i;
      d[i] = s[src];
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(Transpose) {
  return OpDef("Transpose").inputs(1).outputs(1).since(1)
      .optionalAttr("perm", AttrKind::Ints)
      .describe("permutes the axes (default: reverses them)")
      .infer(inferTranspose).kernel(transposeKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(Concat) {
  return OpDef("Concat").inputs(1, kVariadic).outputs(1).since(4)
      .requiredAttr("axis", AttrKind::Int)
      .describe("joins the inputs along axis")
      .infer(inferConcat).kernel(concatKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(Split) {
  return OpDef("Split").inputs(1, 2).outputs(1, kVariadic).since(2)
      .attr("axis", AttrKind::Int, int64_t{0})
      .optionalAttr("split", AttrKind::Ints)        // opset < 13; moved to input 1 by the upgrade
      .optionalAttr("num_outputs", AttrKind::Int)   // opset 18; the node's output count says the same
      .describe("splits the input along axis into parts of the given sizes (or equal parts)")
      .infer(inferSplit).kernel(splitKernel).cost(movementCost)
      .upgrade([](UpgradeContext& ctx) { moveIntsAttrToInput(ctx, "split", 1); });
}

TESSEL_REGISTER_OP(Slice) {
  return OpDef("Slice").inputs(1, 5).outputs(1).since(1)
      .optionalAttr("starts", AttrKind::Ints)  // Slice-1 attributes, moved to inputs by the upgrade
      .optionalAttr("ends", AttrKind::Ints)
      .optionalAttr("axes", AttrKind::Ints)
      .describe("strided sub-tensor: starts/ends/axes/steps (negative steps and clamped bounds allowed)")
      .infer(inferSlice).kernel(sliceKernel).cost(movementCost)
      .upgrade([](UpgradeContext& ctx) {
        moveIntsAttrToInput(ctx, "starts", 1);
        moveIntsAttrToInput(ctx, "ends", 2);
        moveIntsAttrToInput(ctx, "axes", 3);
      });
}

TESSEL_REGISTER_OP(Tile) {
  return OpDef("Tile").inputs(2).outputs(1).since(6)
      .describe("repeats the input repeats[i] times along each axis i")
      .infer(inferTile).kernel(tileKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(Pad) {
  return OpDef("Pad").inputs(1, 4).outputs(1).since(2)
      .attr("mode", AttrKind::String, std::string("constant"))
      .optionalAttr("pads", AttrKind::Ints)     // Pad-2 attributes, moved to inputs by the upgrade
      .optionalAttr("value", AttrKind::Float)
      .describe("pads (or crops, with negative pads) each axis: constant, reflect or edge")
      .infer(inferPad).kernel(padKernel).cost(movementCost).upgrade(upgradePad);
}

TESSEL_REGISTER_OP(DepthToSpace) {
  return OpDef("DepthToSpace").inputs(1).outputs(1).since(1)
      .requiredAttr("blocksize", AttrKind::Int)
      .attr("mode", AttrKind::String, std::string("DCR"))
      .describe("moves channel blocks into spatial blocks (DCR or CRD order)")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferDepthToSpace).kernel(depthToSpaceKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(SpaceToDepth) {
  return OpDef("SpaceToDepth").inputs(1).outputs(1).since(1)
      .requiredAttr("blocksize", AttrKind::Int)
      .describe("moves spatial blocks into channels")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferSpaceToDepth).kernel(spaceToDepthKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(Trilu) {
  return OpDef("Trilu").inputs(1, 2).outputs(1).since(14)
      .attr("upper", AttrKind::Int, int64_t{1})
      .describe("keeps the upper (or lower) triangle of the last two axes, offset by diagonal k")
      .infer(inferSameTypeRankAtLeast2).kernel(triluKernel).cost(movementCost);
}

TESSEL_REGISTER_OP(ReverseSequence) {
  return OpDef("ReverseSequence").inputs(2).outputs(1).since(10)
      .attr("batch_axis", AttrKind::Int, int64_t{1})
      .attr("time_axis", AttrKind::Int, int64_t{0})
      .describe("reverses the first sequence_lens[b] time steps of each batch entry b")
      .infer(inferSameTypeRankAtLeast2).kernel(reverseSequenceKernel).cost(movementCost);
}

}  // namespace tessel
