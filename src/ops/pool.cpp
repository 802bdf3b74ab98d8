// Pooling: MaxPool (with Indices), AveragePool, LpPool, the global pools and MaxUnpool (1-D/2-D/3-D).
#include <array>

#include "nn_common.h"
#include "tessel/ops/pool_geometry.h"

namespace tessel {
namespace {

using namespace nn;

enum class PoolKind { Max, Average, Lp };

using PoolProblem = PoolWindow;

std::vector<int64_t> poolKernelShape(const Node& node, size_t spatialRank) {
  if (!node.hasAttr("kernel_shape"))
    throw UserError(fmt::format("{}: required attribute 'kernel_shape' is missing", node.describe()));
  std::vector<int64_t> k = node.attrInts("kernel_shape");
  if (k.size() != spatialRank)
    throw UserError(fmt::format("{}: kernel_shape has {} values, the input has {} spatial axes", node.describe(), k.size(),
                                spatialRank));
  for (int64_t v : k)
    if (v < 1) throw UserError(fmt::format("{}: kernel_shape values must be >= 1", node.describe()));
  return k;
}

bool ceilModeOf(const Node& node) { return node.def() && node.def()->findAttr("ceil_mode") && node.attrInt("ceil_mode") != 0; }
bool hasDilationsAttr(const Node& node) { return node.def() && node.def()->findAttr("dilations"); }

void inferPool(InferContext& ctx) {
  const TensorType& xt = ctx.inputType(0);
  if (!xt.hasRank()) {
    ctx.setOutputType(0, TensorType(xt.dtype, std::nullopt));
    ctx.setOutputType(1, TensorType(DType::Int64, std::nullopt));
    return;
  }
  if (xt.rank() < 3 || xt.rank() > 5) ctx.fail("input must have rank 3 to 5 (N, C, spatial...), has {}", xt.toString());
  std::vector<int64_t> in = spatialExtents(xt);
  const Node& node = ctx.node();
  WindowGeometry g = readWindowGeometry(node, poolKernelShape(node, in.size()), in, hasDilationsAttr(node));
  std::vector<Dim> dims{(*xt.dims)[0], (*xt.dims)[1]};
  for (size_t d = 0; d < in.size(); ++d) {
    int64_t e = windowOutputExtent(g, d, in[d], ceilModeOf(node));
    dims.push_back(e >= 0 ? Dim::known(e) : Dim::unknown());
  }
  ctx.setOutputType(0, TensorType(xt.dtype, dims));
  ctx.setOutputType(1, TensorType(DType::Int64, dims));
}

}  // namespace

PoolWindow poolWindow(const Node& node, const Shape& xs) {
  if (xs.size() < 3 || xs.size() > 5)
    throw UserError(fmt::format("{}: input must have rank 3 to 5 (N, C, spatial...), has shape {}", node.describe(),
                                shapeToString(xs)));
  Shape in(xs.begin() + 2, xs.end());
  WindowGeometry g = readWindowGeometry(node, poolKernelShape(node, in.size()), in, hasDilationsAttr(node));
  PoolProblem p;
  p.planes = xs[0] * xs[1];
  const size_t off = 3 - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    p.in[off + d] = in[d];
    p.out[off + d] = windowOutputExtent(g, d, in[d], ceilModeOf(node));
    p.kernel[off + d] = g.kernel[d];
    p.stride[off + d] = g.strides[d];
    p.dilation[off + d] = g.dilations[d];
    p.padBegin[off + d] = g.padBegin[d];
    p.padEnd[off + d] = g.padEnd[d];
  }
  return p;
}

namespace {

PoolProblem poolProblemFor(const KernelContext& ctx, const Shape& xs) { return poolWindow(ctx.node(), xs); }

/// Offset of spatial index (i0, i1, i2) in a plane, row-major or column-major (MaxPool storage_order 1).
int64_t planeOffset(const PoolProblem& p, int64_t i0, int64_t i1, int64_t i2, bool columnMajor) {
  return columnMajor ? i0 + i1 * p.in[0] + i2 * p.in[0] * p.in[1] : (i0 * p.in[1] + i1) * p.in[2] + i2;
}

/// Runs one pooling kind over every plane; Indices (flat over the whole input) when `indices` is set.
template <class T>
void poolPlanes(const PoolProblem& p, PoolKind kind, const T* x, T* y, int64_t* indices, bool countIncludePad,
                double lpPower, bool columnMajor) {
  using Acc = compute_t<T>;
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const T* src = x + plane * p.inSize();
    int64_t o = plane * p.outSize();
    for (int64_t o0 = 0; o0 < p.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < p.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < p.out[2]; ++o2, ++o) {
          const std::array<int64_t, 3> start{o0 * p.stride[0] - p.padBegin[0], o1 * p.stride[1] - p.padBegin[1],
                                             o2 * p.stride[2] - p.padBegin[2]};
          Acc best = std::numeric_limits<Acc>::lowest();
          int64_t bestAt = -1, valid = 0, padded = 0;
          double sum = 0;
          for (int64_t k0 = 0; k0 < p.kernel[0]; ++k0)
            for (int64_t k1 = 0; k1 < p.kernel[1]; ++k1)
              for (int64_t k2 = 0; k2 < p.kernel[2]; ++k2) {
                const int64_t i0 = start[0] + k0 * p.dilation[0], i1 = start[1] + k1 * p.dilation[1],
                              i2 = start[2] + k2 * p.dilation[2];
                const bool inPadded = i0 < p.in[0] + p.padEnd[0] && i1 < p.in[1] + p.padEnd[1] && i2 < p.in[2] + p.padEnd[2];
                padded += inPadded ? 1 : 0;
                if (i0 < 0 || i1 < 0 || i2 < 0 || i0 >= p.in[0] || i1 >= p.in[1] || i2 >= p.in[2]) continue;
                ++valid;
                const Acc v = static_cast<Acc>(src[(i0 * p.in[1] + i1) * p.in[2] + i2]);
                if (kind == PoolKind::Max) {
                  if (bestAt < 0 || v > best) {
                    best = v;
                    bestAt = plane * p.inSize() + planeOffset(p, i0, i1, i2, columnMajor);
                  }
                } else if (kind == PoolKind::Average) {
                  sum += static_cast<double>(v);
                } else {
                  sum += std::pow(std::fabs(static_cast<double>(v)), lpPower);
                }
              }
          if (kind == PoolKind::Max) {
            y[o] = static_cast<T>(best);
            if (indices) indices[o] = bestAt;
          } else if (kind == PoolKind::Average) {
            const int64_t divisor = countIncludePad ? padded : valid;
            y[o] = static_cast<T>(static_cast<Acc>(divisor > 0 ? sum / static_cast<double>(divisor) : 0.0));
          } else {
            y[o] = static_cast<T>(static_cast<Acc>(std::pow(sum, 1.0 / lpPower)));
          }
        }
  }
}

Shape poolOutputShape(const Shape& xs, const PoolProblem& p) {
  Shape s{xs[0], xs[1]};
  for (size_t d = 3 - (xs.size() - 2); d < 3; ++d) s.push_back(p.out[d]);
  return s;
}

void maxPoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  PoolProblem p = poolProblemFor(ctx, x.shape());
  const int64_t storageOrder = ctx.attrInt("storage_order");
  if (storageOrder != 0 && storageOrder != 1) ctx.fail("storage_order must be 0 or 1, is {}", storageOrder);
  Shape outShape = poolOutputShape(x.shape(), p);
  int64_t* indices = nullptr;
  if (ctx.numOutputs() > 1 && ctx.outputRequested(1)) indices = ctx.allocateOutput(1, DType::Int64, outShape).data<int64_t>();
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchNumeric(x.dtype(), "MaxPool input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      ctx.fail("MaxPool does not accept bool tensors");
    } else {
      poolPlanes<T>(p, PoolKind::Max, x.data<T>(), y.data<T>(), indices, false, 1.0, storageOrder == 1);
    }
  });
}

void averageOrLpPoolKernel(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = ctx.input(0);
  PoolProblem p = poolProblemFor(ctx, x.shape());
  Tensor& y = ctx.allocateOutput(0, x.dtype(), poolOutputShape(x.shape(), p));
  const bool includePad = kind == PoolKind::Average && ctx.attrInt("count_include_pad") != 0;
  const double power = kind == PoolKind::Lp ? static_cast<double>(ctx.attrInt("p")) : 1.0;
  dispatchFloat(x.dtype(), "pooling input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    poolPlanes<T>(p, kind, x.data<T>(), y.data<T>(), nullptr, includePad, power, false);
  });
}

Cost poolCost(const Node& node) {
  Cost c = movementCost(node);
  const Value* y = node.output(0);
  if (y && y->type.isStatic() && node.hasAttr("kernel_shape")) {
    double window = 1;
    for (int64_t k : node.attrInts("kernel_shape")) window *= static_cast<double>(k);
    c.flops = window * static_cast<double>(y->type.staticSize());
  }
  return c;
}

}  // namespace

TESSEL_REGISTER_OP(MaxPool) {
  return OpDef("MaxPool")
      .inputs(1)
      .outputs(1, 2)
      .since(1)
      .attr("auto_pad", AttrKind::String, std::string("NOTSET"))
      .attr("ceil_mode", AttrKind::Int, int64_t{0})
      .optionalAttr("dilations", AttrKind::Ints)
      .requiredAttr("kernel_shape", AttrKind::Ints)
      .optionalAttr("pads", AttrKind::Ints)
      .attr("storage_order", AttrKind::Int, int64_t{0})
      .optionalAttr("strides", AttrKind::Ints)
      .describe("max over sliding windows; optional Indices output (flat input offsets)")
      .traits({OpTrait::ChannelsFirst, OpTrait::SlidingWindow})
      .infer(inferPool)
      .kernel(maxPoolKernel)
      .cost(poolCost);
}

TESSEL_REGISTER_OP(AveragePool) {
  return OpDef("AveragePool")
      .inputs(1)
      .outputs(1)
      .since(1)
      .attr("auto_pad", AttrKind::String, std::string("NOTSET"))
      .attr("ceil_mode", AttrKind::Int, int64_t{0})
      .attr("count_include_pad", AttrKind::Int, int64_t{0})
      .requiredAttr("kernel_shape", AttrKind::Ints)
      .optionalAttr("pads", AttrKind::Ints)
      .optionalAttr("strides", AttrKind::Ints)
      .describe("mean over sliding windows, padding counted when count_include_pad")
      .traits({OpTrait::ChannelsFirst, OpTrait::SlidingWindow})
      .infer(inferPool)
      .kernel([](KernelContext& ctx) { averageOrLpPoolKernel(ctx, PoolKind::Average); })
      .cost(poolCost);
}

TESSEL_REGISTER_OP(LpPool) {
  return OpDef("LpPool")
      .inputs(1)
      .outputs(1)
      .since(2)
      .attr("auto_pad", AttrKind::String, std::string("NOTSET"))
      .requiredAttr("kernel_shape", AttrKind::Ints)
      .attr("p", AttrKind::Int, int64_t{2})
      .optionalAttr("pads", AttrKind::Ints)
      .optionalAttr("strides", AttrKind::Ints)
      .describe("(sum |x|^p)^(1/p) over sliding windows")
      .traits({OpTrait::ChannelsFirst, OpTrait::SlidingWindow})
      .infer(inferPool)
      .kernel([](KernelContext& ctx) { averageOrLpPoolKernel(ctx, PoolKind::Lp); })
      .cost(poolCost);
}

// --------------------------------------------------------------------------------------- global pools

namespace {

void inferGlobalPool(InferContext& ctx) {
  const TensorType& xt = ctx.inputType(0);
  if (!xt.hasRank()) return ctx.setOutputType(0, xt);
  if (xt.rank() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), has {}", xt.toString());
  std::vector<Dim> dims{(*xt.dims)[0], (*xt.dims)[1]};
  dims.resize(xt.rank(), Dim::known(1));
  ctx.setOutputType(0, TensorType(xt.dtype, dims));
}

void globalPoolKernel(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = ctx.input(0);
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), has shape {}", shapeToString(x.shape()));
  Shape outShape(x.rank(), 1);
  outShape[0] = x.dim(0);
  outShape[1] = x.dim(1);
  const int64_t planes = x.dim(0) * x.dim(1), area = x.numel() / std::max<int64_t>(1, planes);
  const double power = kind == PoolKind::Lp ? static_cast<double>(ctx.attrInt("p")) : 1.0;
  Tensor& y = ctx.allocateOutput(0, x.dtype(), outShape);
  dispatchFloat(x.dtype(), "global pooling input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = compute_t<T>;
    const T* src = x.data<T>();
    for (int64_t pl = 0; pl < planes; ++pl) {
      const T* row = src + pl * area;
      Acc best = std::numeric_limits<Acc>::lowest();
      double sum = 0;
      for (int64_t i = 0; i < area; ++i) {
        const Acc v = static_cast<Acc>(row[i]);
        best = std::max(best, v);
        sum += kind == PoolKind::Lp ? std::pow(std::fabs(static_cast<double>(v)), power) : static_cast<double>(v);
      }
      double r = kind == PoolKind::Max ? static_cast<double>(best)
                 : kind == PoolKind::Average ? sum / static_cast<double>(area)
                                             : std::pow(sum, 1.0 / power);
      y.data<T>()[pl] = static_cast<T>(static_cast<Acc>(r));
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(GlobalAveragePool) {
  return OpDef("GlobalAveragePool").inputs(1).outputs(1).since(1)
      .describe("mean over all spatial axes (kept as extent 1)")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferGlobalPool)
      .kernel([](KernelContext& ctx) { globalPoolKernel(ctx, PoolKind::Average); })
      .cost(costPerElement(0));
}

TESSEL_REGISTER_OP(GlobalMaxPool) {
  return OpDef("GlobalMaxPool").inputs(1).outputs(1).since(1)
      .describe("max over all spatial axes (kept as extent 1)")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferGlobalPool)
      .kernel([](KernelContext& ctx) { globalPoolKernel(ctx, PoolKind::Max); })
      .cost(costPerElement(0));
}

TESSEL_REGISTER_OP(GlobalLpPool) {
  return OpDef("GlobalLpPool").inputs(1).outputs(1).since(2)
      .attr("p", AttrKind::Int, int64_t{2})
      .describe("(sum |x|^p)^(1/p) over all spatial axes (kept as extent 1)")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferGlobalPool)
      .kernel([](KernelContext& ctx) { globalPoolKernel(ctx, PoolKind::Lp); })
      .cost(costPerElement(0));
}

// ------------------------------------------------------------------------------------------- MaxUnpool

namespace {

/// The default output shape of MaxUnpool: the shape MaxPool's input had, from kernel/strides/pads.
std::vector<int64_t> unpoolDefaultSpatial(const Node& node, const std::vector<int64_t>& in) {
  WindowGeometry g = readWindowGeometry(node, poolKernelShape(node, in.size()), in, false);
  std::vector<int64_t> out;
  for (size_t d = 0; d < in.size(); ++d)
    out.push_back(in[d] < 0 ? -1 : (in[d] - 1) * g.strides[d] - g.padBegin[d] - g.padEnd[d] + g.kernel[d]);
  return out;
}

void inferMaxUnpool(InferContext& ctx) {
  const TensorType& xt = ctx.inputType(0);
  if (!xt.hasRank()) return ctx.setOutputType(0, xt);
  if (xt.rank() < 3) ctx.fail("input must have rank >= 3, has {}", xt.toString());
  std::vector<Dim> dims(xt.rank(), Dim::unknown());
  if (ctx.hasInput(2)) {
    if (const Tensor* shape = ctx.inputValue(2)) {
      std::vector<int64_t> s = shape->toInt64Vector();
      if (s.size() != xt.rank()) ctx.fail("output_shape has {} values, expected {}", s.size(), xt.rank());
      for (size_t i = 0; i < s.size(); ++i) dims[i] = Dim::known(s[i]);
    }
  } else {
    dims[0] = (*xt.dims)[0];
    dims[1] = (*xt.dims)[1];
    std::vector<int64_t> out = unpoolDefaultSpatial(ctx.node(), spatialExtents(xt));
    for (size_t d = 0; d < out.size(); ++d) dims[2 + d] = out[d] >= 0 ? Dim::known(out[d]) : Dim::unknown();
  }
  ctx.setOutputType(0, TensorType(xt.dtype, dims));
}

/// Copies the spatial planes of `src` into the larger or smaller `dst` at the same coordinates (the
/// remainder of `dst` stays zero).
template <class T>
void copyPlanesAligned(const Tensor& src, Tensor& dst) {
  const Shape& ss = src.shape();
  const Shape& ds = dst.shape();
  std::vector<int64_t> sStrides = contiguousStrides(ss), dStrides = contiguousStrides(ds);
  Shape index(ss.size(), 0);
  for (int64_t i = 0; i < src.numel(); ++i) {
    int64_t at = 0;
    bool inside = true;
    for (size_t d = 0; d < ss.size(); ++d) {
      inside &= index[d] < ds[d];
      at += index[d] * dStrides[d];
    }
    if (inside) dst.data<T>()[at] = src.data<T>()[i];
    for (size_t d = ss.size(); d-- > 0;) {
      if (++index[d] < ss[d]) break;
      index[d] = 0;
    }
  }
}

void maxUnpoolKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  if (x.rank() < 3) ctx.fail("input must have rank >= 3, has shape {}", shapeToString(x.shape()));
  if (indices.shape() != x.shape())
    ctx.fail("indices have shape {}, expected the input's shape {}", shapeToString(indices.shape()), shapeToString(x.shape()));
  // Indices address the default-sized result (the ONNX reference); an explicit output_shape then pads
  // (or crops) each spatial axis at its end.
  Shape defaultShape{x.dim(0), x.dim(1)};
  for (int64_t e : unpoolDefaultSpatial(ctx.node(), Shape(x.shape().begin() + 2, x.shape().end()))) defaultShape.push_back(e);
  Shape outShape = defaultShape;
  if (ctx.hasInput(2)) {
    outShape = ctx.input(2).toInt64Vector();
    if (outShape.size() != x.rank()) ctx.fail("output_shape has {} values, expected {}", outShape.size(), x.rank());
  }
  Tensor unpooled(x.dtype(), defaultShape);
  std::vector<int64_t> idx = indices.toInt64Vector();
  dispatchNumeric(x.dtype(), "MaxUnpool input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t at = idx[static_cast<size_t>(i)];
      if (at < 0 || at >= unpooled.numel())
        ctx.fail("index {} is outside the unpooled tensor {} ({} elements)", at, shapeToString(defaultShape), unpooled.numel());
      unpooled.data<T>()[at] = x.data<T>()[i];
    }
    if (outShape == defaultShape) {
      ctx.setOutput(0, unpooled);
    } else {
      copyPlanesAligned<T>(unpooled, ctx.allocateOutput(0, x.dtype(), outShape));
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(MaxUnpool) {
  return OpDef("MaxUnpool")
      .inputs(2, 3)
      .outputs(1)
      .since(9)
      .requiredAttr("kernel_shape", AttrKind::Ints)
      .optionalAttr("pads", AttrKind::Ints)
      .optionalAttr("strides", AttrKind::Ints)
      .describe("scatters values to the positions recorded by MaxPool's Indices, zeros elsewhere")
      .traits({OpTrait::ChannelsFirst, OpTrait::SlidingWindow})
      .infer(inferMaxUnpool)
      .kernel(maxUnpoolKernel)
      .cost(movementCost);
}

}  // namespace tessel
