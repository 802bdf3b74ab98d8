// Shape operators: Reshape, Flatten, Squeeze, Unsqueeze, Shape, Size, Expand (views where the data is unchanged).
#include <algorithm>
#include <set>

#include "tessel/ops/upgrade.h"
#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

// ---------------------------------------------------------------- shared


/// The product of dims, or unknown when any is not known (a single dim keeps its symbol).
Dim productDim(const std::vector<Dim>& dims, size_t begin, size_t end) {
  if (end - begin == 1) return dims[begin];
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) {
    if (!dims[i].isKnown()) return Dim::unknown();
    p *= dims[i].value;
  }
  return Dim::known(p);
}

/// Normalises a list of axes against `rank`, rejecting duplicates.
std::vector<int64_t> normalizeAxes(const std::vector<int64_t>& axes, int64_t rank, const Node& node) {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, rank, node);
    if (!seen.insert(n).second)
      throw UserError(fmt::format("{}: axis {} appears more than once in axes", node.describe(), a));
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------- Reshape

/// Resolves a Reshape target (0 copies the input extent unless allowzero, -1 is inferred).
Shape resolveReshape(const Shape& in, const std::vector<int64_t>& target, bool allowZero, const Node& node) {
  Shape out(target.size());
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == -1) {
      if (inferred >= 0) throw UserError(fmt::format("{}: the target shape has more than one -1", node.describe()));
      inferred = static_cast<int64_t>(i);
      continue;
    }
    if (t < -1) throw UserError(fmt::format("{}: invalid target extent {} at position {}", node.describe(), t, i));
    if (t == 0 && !allowZero) {
      if (i >= in.size())
        throw UserError(fmt::format("{}: target position {} is 0 (copy) but the input has rank {}", node.describe(), i,
                                    in.size()));
      t = in[i];
    }
    out[i] = t;
    known *= t;
  }
  int64_t total = shapeSize(in);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0)
      throw UserError(fmt::format("{}: cannot reshape {} into [{}]", node.describe(), shapeToString(in),
                                  fmt::join(target, ",")));
    out[static_cast<size_t>(inferred)] = total / known;
  } else if (known != total) {
    throw UserError(fmt::format("{}: cannot reshape {} ({} elements) into [{}] ({} elements)", node.describe(),
                                shapeToString(in), total, fmt::join(target, ","), known));
  }
  return out;
}

/// Symbolic Reshape: 0 copies dims (symbolic or not); -1 is computed when the remaining unknown factors cancel out.
std::vector<Dim> inferReshapeDims(const TensorType& in, const std::vector<int64_t>& target, bool allowZero,
                                  InferContext& ctx) {
  std::vector<Dim> out(target.size());
  int64_t inferred = -1, knownOut = 1;
  std::multiset<std::string> outSymbols;
  bool outHasUnknown = false;
  std::vector<bool> copied(std::max(in.rank(), target.size()), false);
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == -1) {
      if (inferred >= 0) ctx.fail("the target shape has more than one -1");
      inferred = static_cast<int64_t>(i);
      continue;
    }
    if (t < -1) ctx.fail("invalid target extent {} at position {}", t, i);
    if (t == 0 && !allowZero) {
      if (!in.hasRank()) {
        out[i] = Dim::unknown();
        outHasUnknown = true;
        continue;
      }
      if (i >= in.rank()) ctx.fail("target position {} is 0 (copy) but the input has rank {}", i, in.rank());
      out[i] = (*in.dims)[i];
      copied[i] = true;  // the same factor on both sides: it cancels, known or not
      continue;
    } else {
      out[i] = Dim::known(t);
    }
    if (out[i].isKnown())
      knownOut *= out[i].value;
    else if (out[i].symbol.empty())
      outHasUnknown = true;
    else
      outSymbols.insert(out[i].symbol);
  }
  if (inferred < 0) return out;
  out[static_cast<size_t>(inferred)] = Dim::unknown();
  if (!in.hasRank() || outHasUnknown) return out;
  int64_t knownIn = 1;
  std::multiset<std::string> inSymbols;
  for (size_t i = 0; i < in.rank(); ++i) {
    const Dim& d = (*in.dims)[i];
    if (copied[i])
      continue;
    else if (d.isKnown())
      knownIn *= d.value;
    else if (d.symbol.empty())
      return out;  // an anonymous unknown factor cannot be cancelled
    else
      inSymbols.insert(d.symbol);
  }
  if (inSymbols == outSymbols && knownOut != 0 && knownIn % knownOut == 0)
    out[static_cast<size_t>(inferred)] = Dim::known(knownIn / knownOut);
  else if (inSymbols == outSymbols)
    ctx.fail("cannot reshape {} into [{}]", in.toString(), fmt::join(target, ","));
  return out;
}

void inferReshape(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  const TensorType& shapeType = ctx.inputType(1);
  if (shapeType.hasRank() && shapeType.rank() != 1) ctx.fail("the shape input must be 1-D, got {}", shapeType.toString());
  bool allowZero = ctx.node().attrInt("allowzero") != 0;
  if (const Tensor* target = ctx.inputValue(1)) {
    std::vector<int64_t> t = target->toInt64Vector();
    if (in.isStatic()) {
      ctx.setOutputType(0, TensorType::fromShape(in.dtype, resolveReshape(in.staticShape(), t, allowZero, ctx.node())));
    } else {
      ctx.setOutputType(0, TensorType(in.dtype, inferReshapeDims(in, t, allowZero, ctx)));
    }
    return;
  }
  if (shapeType.hasRank() && (*shapeType.dims)[0].isKnown())
    ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>(static_cast<size_t>((*shapeType.dims)[0].value))));
  else
    ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
}

void reshapeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape out = resolveReshape(x.shape(), ctx.input(1).toInt64Vector(), ctx.attrInt("allowzero") != 0, ctx.node());
  ctx.setOutput(0, x.reshaped(out));
}

// ---------------------------------------------------------------- Flatten

void inferFlatten(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!in.hasRank()) {
    ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>(2)));
    return;
  }
  int64_t r = static_cast<int64_t>(in.rank());
  int64_t axis = ctx.node().attrInt("axis");
  if (axis < -r || axis > r) ctx.fail("axis {} is out of range [-{}, {}]", axis, r, r);
  if (axis < 0) axis += r;
  const auto& d = *in.dims;
  auto a = static_cast<size_t>(axis);
  Dim outer = a == 0 ? Dim::known(1) : productDim(d, 0, a);
  Dim inner = a == d.size() ? Dim::known(1) : productDim(d, a, d.size());
  ctx.setOutputType(0, TensorType(in.dtype, std::vector<Dim>{outer, inner}));
}

void flattenKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t r = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis");
  if (axis < -r || axis > r) ctx.fail("axis {} is out of range [-{}, {}]", axis, r, r);
  if (axis < 0) axis += r;
  int64_t outer = 1, inner = 1;  // computed separately so that zero extents keep the other factor
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= x.shape()[static_cast<size_t>(i)];
  ctx.setOutput(0, x.reshaped({outer, inner}));
}

// ---------------------------------------------------------------- Squeeze / Unsqueeze

std::optional<std::vector<int64_t>> axesInput(InferContext& ctx, size_t i) {
  if (!ctx.hasInput(i)) return std::vector<int64_t>{};
  if (const Tensor* t = ctx.inputValue(i)) return t->toInt64Vector();
  return std::nullopt;
}

void inferSqueeze(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  auto axes = axesInput(ctx, 1);
  if (!in.hasRank() || !axes) {
    ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
    return;
  }
  const auto& d = *in.dims;
  std::vector<Dim> out;
  if (axes->empty()) {
    for (const Dim& dim : d) {
      if (!dim.isKnown()) {  // whether it is 1 decides the rank
        ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
        return;
      }
      if (dim.value != 1) out.push_back(dim);
    }
  } else {
    std::vector<int64_t> norm = normalizeAxes(*axes, static_cast<int64_t>(d.size()), ctx.node());
    for (size_t i = 0; i < d.size(); ++i) {
      bool squeezed = std::binary_search(norm.begin(), norm.end(), static_cast<int64_t>(i));
      if (squeezed && d[i].isKnown() && d[i].value != 1)
        ctx.fail("cannot squeeze axis {} of extent {} (input {})", i, d[i].value, in.toString());
      if (!squeezed) out.push_back(d[i]);
    }
  }
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

void squeezeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape out;
  if (!ctx.hasInput(1) || ctx.input(1).numel() == 0) {
    for (int64_t d : x.shape())
      if (d != 1) out.push_back(d);
  } else {
    std::vector<int64_t> norm = normalizeAxes(ctx.input(1).toInt64Vector(), static_cast<int64_t>(x.rank()), ctx.node());
    for (size_t i = 0; i < x.rank(); ++i) {
      bool squeezed = std::binary_search(norm.begin(), norm.end(), static_cast<int64_t>(i));
      if (squeezed && x.shape()[i] != 1) ctx.fail("cannot squeeze axis {} of extent {}", i, x.shape()[i]);
      if (!squeezed) out.push_back(x.shape()[i]);
    }
  }
  ctx.setOutput(0, x.reshaped(out));
}

/// Unsqueeze output dims: `axes` index the output (rank = input rank + number of axes).
template <class D>
std::vector<D> unsqueezeDims(const std::vector<D>& in, const std::vector<int64_t>& axes, D one, const Node& node) {
  int64_t outRank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<int64_t> norm = normalizeAxes(axes, outRank, node);
  std::vector<D> out;
  size_t next = 0;
  for (int64_t i = 0; i < outRank; ++i) {
    if (std::binary_search(norm.begin(), norm.end(), i))
      out.push_back(one);
    else
      out.push_back(in[next++]);
  }
  return out;
}

void inferUnsqueeze(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  auto axes = axesInput(ctx, 1);
  if (!ctx.hasInput(1)) ctx.fail("the axes input is required");
  if (!in.hasRank() || !axes) {
    ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
    return;
  }
  ctx.setOutputType(0, TensorType(in.dtype, unsqueezeDims(*in.dims, *axes, Dim::known(1), ctx.node())));
}

void unsqueezeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.setOutput(0, x.reshaped(unsqueezeDims<int64_t>(x.shape(), ctx.input(1).toInt64Vector(), 1, ctx.node())));
}

// ---------------------------------------------------------------- Shape / Size

/// The [start, end) range of Shape-15 for a tensor of rank r (clamped like Python slicing).
std::pair<int64_t, int64_t> shapeRange(const Node& node, int64_t r) {
  auto clampAxis = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
  int64_t start = clampAxis(node.attrInt("start"));
  int64_t end = node.hasAttr("end") ? clampAxis(node.attrInt("end")) : r;
  return {start, std::max(start, end)};
}

void inferShape(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!in.hasRank()) {
    ctx.setOutputType(0, TensorType(DType::Int64, std::vector<Dim>{Dim::unknown()}));
    return;
  }
  auto [start, end] = shapeRange(ctx.node(), static_cast<int64_t>(in.rank()));
  ctx.setOutputType(0, TensorType::fromShape(DType::Int64, {end - start}));
  std::vector<int64_t> values;
  for (int64_t i = start; i < end; ++i) {
    const Dim& d = (*in.dims)[static_cast<size_t>(i)];
    if (!d.isKnown()) return;
    values.push_back(d.value);
  }
  ctx.setOutputValue(0, Tensor::fromVector<int64_t>({end - start}, values));
}

void shapeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  auto [start, end] = shapeRange(ctx.node(), static_cast<int64_t>(x.rank()));
  std::vector<int64_t> values(x.shape().begin() + start, x.shape().begin() + end);
  ctx.setOutput(0, Tensor::fromVector<int64_t>({end - start}, values));
}

void inferSize(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  ctx.setOutputType(0, TensorType::fromShape(DType::Int64, {}));
  if (in.isStatic()) ctx.setOutputValue(0, Tensor::scalar<int64_t>(in.staticSize()));
}

void sizeKernel(KernelContext& ctx) { ctx.setOutput(0, Tensor::scalar<int64_t>(ctx.input(0).numel())); }

// ---------------------------------------------------------------- Expand

void inferExpand(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  const TensorType& shapeType = ctx.inputType(1);
  if (shapeType.hasRank() && shapeType.rank() != 1) ctx.fail("the shape input must be 1-D, got {}", shapeType.toString());
  if (const Tensor* target = ctx.inputValue(1)) {
    std::vector<Dim> dims;
    for (int64_t v : target->toInt64Vector()) {
      if (v < 0) ctx.fail("negative extent {} in the target shape", v);
      dims.push_back(Dim::known(v));
    }
    ctx.setOutputType(0, TensorType(in.dtype, broadcastDims(in.dims, dims, ctx.node())));
    return;
  }
  ctx.setOutputType(0, TensorType(in.dtype, std::nullopt));
}

void expandKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape target = ctx.input(1).toInt64Vector();
  for (int64_t v : target)
    if (v < 0) ctx.fail("negative extent {} in the target shape", v);
  Shape outShape = broadcastShapes(x.shape(), target, ctx.node());
  std::vector<int64_t> strides = broadcastStrides(x.shape(), outShape);
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchAny(x.dtype(), "Expand", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    std::vector<int64_t> index(outShape.size(), 0);
    int64_t offset = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      dst[i] = src[offset];
      for (size_t a = outShape.size(); a-- > 0;) {  // odometer increment
        offset += strides[a];
        if (++index[a] < outShape[a]) break;
        offset -= strides[a] * outShape[a];
        index[a] = 0;
      }
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(Reshape) {
  return OpDef("Reshape")
      .inputs(2)
      .outputs(1)
      .since(5)
      .attr("allowzero", AttrKind::Int, int64_t{0})
      .describe("same data, new shape (0 copies an input extent unless allowzero, -1 is inferred)")
      .traits({OpTrait::View, OpTrait::NoOpOnSameType})
      .infer(inferReshape)
      .kernel(reshapeKernel)
      .cost([](const Node&) { return Cost{}; });
}

TESSEL_REGISTER_OP(Flatten) {
  return OpDef("Flatten")
      .inputs(1)
      .outputs(1)
      .since(1)
      .attr("axis", AttrKind::Int, int64_t{1})
      .describe("reshape to 2-D: [prod(dims[:axis]), prod(dims[axis:])]")
      .traits({OpTrait::View, OpTrait::NoOpOnSameType})
      .infer(inferFlatten)
      .kernel(flattenKernel)
      .cost([](const Node&) { return Cost{}; });
}

TESSEL_REGISTER_OP(Squeeze) {
  return OpDef("Squeeze")
      .inputs(1, 2)
      .outputs(1)
      .since(1)
      .optionalAttr("axes", AttrKind::Ints)  // opset < 13; moved to input 1 by the upgrade
      .describe("removes axes of extent 1 (the given ones, or all)")
      .traits({OpTrait::View, OpTrait::NoOpOnSameType})
      .infer(inferSqueeze)
      .kernel(squeezeKernel)
      .cost([](const Node&) { return Cost{}; })
      .upgrade([](UpgradeContext& ctx) { moveIntsAttrToInput(ctx, "axes", 1); });
}

TESSEL_REGISTER_OP(Unsqueeze) {
  return OpDef("Unsqueeze")
      .inputs(1, 2)  // 1 only before the upgrade moves the legacy attribute into input 1
      .outputs(1)
      .since(1)
      .optionalAttr("axes", AttrKind::Ints)  // opset < 13; moved to input 1 by the upgrade
      .describe("inserts axes of extent 1 at the given output positions")
      .traits({OpTrait::View, OpTrait::NoOpOnSameType})
      .infer(inferUnsqueeze)
      .kernel(unsqueezeKernel)
      .cost([](const Node&) { return Cost{}; })
      .upgrade([](UpgradeContext& ctx) { moveIntsAttrToInput(ctx, "axes", 1); });
}

TESSEL_REGISTER_OP(Shape) {
  return OpDef("Shape")
      .inputs(1)
      .outputs(1)
      .since(1)
      .attr("start", AttrKind::Int, int64_t{0})
      .optionalAttr("end", AttrKind::Int)
      .describe("the input's shape (dims[start:end]) as a 1-D int64 tensor")
      .infer(inferShape)
      .kernel(shapeKernel)
      .cost([](const Node&) { return Cost{}; });
}

TESSEL_REGISTER_OP(Size) {
  return OpDef("Size")
      .inputs(1)
      .outputs(1)
      .since(1)
      .describe("number of elements of the input as an int64 scalar")
      .infer(inferSize)
      .kernel(sizeKernel)
      .cost([](const Node&) { return Cost{}; });
}

TESSEL_REGISTER_OP(Expand) {
  return OpDef("Expand")
      .inputs(2)
      .outputs(1)
      .since(8)
      .describe("broadcasts the input to the given shape (bidirectional numpy broadcasting)")
      .traits({OpTrait::NoOpOnSameType})
      .infer(inferExpand)
      .kernel(expandKernel)
      .cost(movementCost);
}

}  // namespace tessel
