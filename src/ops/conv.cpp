// Convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv (1-D/2-D/3-D, groups, dilations, auto_pad),
// as im2col per group + a blocked GEMM loop, plus the window geometry shared with pooling.
#include <array>

#include "nn_common.h"
#include "tessel/ops/conv_geometry.h"

namespace tessel::nn {

WindowGeometry readWindowGeometry(const Node& node, const std::vector<int64_t>& kernel,
                                  const std::vector<int64_t>& inputSpatial, bool hasDilations) {
  const size_t r = kernel.size();
  auto listAttr = [&](const char* name, size_t expected, int64_t fill) {
    std::vector<int64_t> v = node.hasAttr(name) ? node.attrInts(name) : std::vector<int64_t>(expected, fill);
    if (v.empty()) v.assign(expected, fill);
    if (v.size() != expected)
      throw UserError(fmt::format("{}: attribute '{}' has {} values, expected {} for {} spatial axes", node.describe(),
                                  name, v.size(), expected, r));
    return v;
  };
  WindowGeometry g;
  g.kernel = kernel;
  g.strides = listAttr("strides", r, 1);
  g.dilations = hasDilations ? listAttr("dilations", r, 1) : std::vector<int64_t>(r, 1);
  std::vector<int64_t> pads = listAttr("pads", 2 * r, 0);
  g.padBegin.assign(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(r));
  g.padEnd.assign(pads.begin() + static_cast<std::ptrdiff_t>(r), pads.end());
  for (size_t d = 0; d < r; ++d) {
    if (g.strides[d] < 1 || g.dilations[d] < 1 || g.padBegin[d] < 0 || g.padEnd[d] < 0)
      throw UserError(fmt::format("{}: strides and dilations must be >= 1 and pads >= 0", node.describe()));
  }
  std::string autoPad = node.hasAttr("auto_pad") ? node.attrString("auto_pad") : "NOTSET";
  if (autoPad == "NOTSET") return g;
  if (autoPad != "VALID" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    throw UserError(fmt::format("{}: auto_pad '{}' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER",
                                node.describe(), autoPad));
  for (size_t d = 0; d < r; ++d) {
    g.padBegin[d] = g.padEnd[d] = 0;
    if (autoPad == "VALID" || inputSpatial[d] < 0) continue;
    int64_t out = (inputSpatial[d] + g.strides[d] - 1) / g.strides[d];
    int64_t total = std::max<int64_t>(0, (out - 1) * g.strides[d] + g.effectiveKernel(d) - inputSpatial[d]);
    g.padBegin[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    g.padEnd[d] = total - g.padBegin[d];
  }
  return g;
}

int64_t windowOutputExtent(const WindowGeometry& g, size_t d, int64_t inputExtent, bool ceilMode) {
  if (inputExtent < 0) return -1;
  int64_t span = inputExtent + g.padBegin[d] + g.padEnd[d] - g.effectiveKernel(d);
  if (span < 0) return 0;
  int64_t out = (ceilMode ? (span + g.strides[d] - 1) / g.strides[d] : span / g.strides[d]) + 1;
  // A last window that would start inside the end padding is dropped.
  if (ceilMode && (out - 1) * g.strides[d] >= inputExtent + g.padBegin[d]) --out;
  return out;
}

std::vector<int64_t> knownExtents(const TensorType& t) {
  std::vector<int64_t> v;
  for (const Dim& d : *t.dims) v.push_back(d.isKnown() ? d.value : -1);
  return v;
}

std::vector<int64_t> spatialExtents(const TensorType& t) {
  std::vector<int64_t> all = knownExtents(t);
  return std::vector<int64_t>(all.begin() + 2, all.end());
}

std::vector<int32_t> shiftedInt32(const Tensor& t, int32_t zeroPoint) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  dispatchNumeric(t.dtype(), "quantised tensor", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      const T* d = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = static_cast<int32_t>(d[i]) - zeroPoint;
    } else {
      throwUnsupportedDType(t.dtype(), "quantised tensor (expected an integer type)");
    }
  });
  return out;
}

int32_t scalarZeroPoint(const KernelContext& ctx, size_t inputIndex) {
  if (!ctx.hasInput(inputIndex)) return 0;
  const Tensor& z = ctx.input(inputIndex);
  if (z.numel() != 1) ctx.fail("input {} (zero point) must hold one value, has shape {}", inputIndex, shapeToString(z.shape()));
  return static_cast<int32_t>(z.elementAsDouble(0));
}

}  // namespace tessel::nn

namespace tessel {
namespace {

using namespace nn;

using ConvProblem = ConvWindow;

ConvProblem makeProblem(const Shape& xShape, int64_t outChannels, int64_t groups, const WindowGeometry& g,
                        const std::vector<int64_t>& outSpatial) {
  ConvProblem p;
  p.batch = xShape[0];
  p.inChannels = xShape[1];
  p.outChannels = outChannels;
  p.groups = groups;
  const size_t r = g.spatialRank(), off = 3 - r;
  for (size_t d = 0; d < r; ++d) {
    p.in[off + d] = xShape[2 + d];
    p.out[off + d] = outSpatial[d];
    p.kernel[off + d] = g.kernel[d];
    p.stride[off + d] = g.strides[d];
    p.dilation[off + d] = g.dilations[d];
    p.pad[off + d] = g.padBegin[d];
  }
  return p;
}

/// Unfolds channels [c0, c0+channels) of one image into col[(c, kd, kh, kw), (od, oh, ow)].
template <class Acc>
void im2col(const ConvProblem& p, const Acc* image, int64_t channels, Acc* col) {
  const int64_t outSize = p.outSize();
  Acc* row = col;
  for (int64_t c = 0; c < channels; ++c) {
    const Acc* plane = image + c * p.inSize();
    for (int64_t kd = 0; kd < p.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < p.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < p.kernel[2]; ++kw, row += outSize) {
          Acc* dst = row;
          for (int64_t od = 0; od < p.out[0]; ++od) {
            const int64_t id = od * p.stride[0] + kd * p.dilation[0] - p.pad[0];
            for (int64_t oh = 0; oh < p.out[1]; ++oh, dst += p.out[2]) {
              const int64_t ih = oh * p.stride[1] + kh * p.dilation[1] - p.pad[1];
              if (id < 0 || id >= p.in[0] || ih < 0 || ih >= p.in[1]) {
                std::fill(dst, dst + p.out[2], Acc{});
                continue;
              }
              const Acc* src = plane + (id * p.in[1] + ih) * p.in[2];
              for (int64_t ow = 0; ow < p.out[2]; ++ow) {
                const int64_t iw = ow * p.stride[2] + kw * p.dilation[2] - p.pad[2];
                dst[ow] = (iw >= 0 && iw < p.in[2]) ? src[iw] : Acc{};
              }
            }
          }
        }
  }
}

bool isPointwise(const ConvProblem& p) {
  for (int d = 0; d < 3; ++d)
    if (p.kernel[d] != 1 || p.stride[d] != 1 || p.pad[d] != 0 || p.in[d] != p.out[d]) return false;
  return true;
}

/// y[N, M, out] += conv(x[N, C, in], w[M, C/groups, k]) (y must be zeroed or hold the bias).
template <class Acc>
void convForward(const ConvProblem& p, const Acc* x, const Acc* w, Acc* y) {
  const int64_t cg = p.inChannels / p.groups, mg = p.outChannels / p.groups;
  const int64_t rows = cg * p.kernelSize(), outSize = p.outSize();
  const bool pointwise = isPointwise(p);
  // The unfolded image is reused across calls: a fresh multi-megabyte buffer per convolution costs more
  // in page faults than the unfolding itself.
  thread_local std::vector<Acc> col;
  if (!pointwise && col.size() < static_cast<size_t>(rows * outSize)) col.resize(static_cast<size_t>(rows * outSize));
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t g = 0; g < p.groups; ++g) {
      const Acc* image = x + (n * p.inChannels + g * cg) * p.inSize();
      const Acc* b = image;
      if (!pointwise) {
        im2col(p, image, cg, col.data());
        b = col.data();
      }
      gemmAccumulate<Acc>(mg, outSize, rows, w + g * mg * rows, rows, b, outSize,
                          y + (n * p.outChannels + g * mg) * outSize, outSize);
    }
}

// ------------------------------------------------------------------------------------------------ Conv

std::vector<int64_t> kernelFromWeight(const Node& node, const std::vector<int64_t>& weightDims) {
  std::vector<int64_t> k(weightDims.begin() + 2, weightDims.end());
  if (node.hasAttr("kernel_shape")) {
    std::vector<int64_t> attr = node.attrInts("kernel_shape");
    if (attr.size() != k.size())
      throw UserError(fmt::format("{}: kernel_shape has {} values but the weight has {} spatial axes", node.describe(),
                                  attr.size(), k.size()));
    for (size_t d = 0; d < k.size(); ++d) {
      if (k[d] >= 0 && k[d] != attr[d])
        throw UserError(fmt::format("{}: kernel_shape {} disagrees with the weight's spatial extent {} on axis {}",
                                    node.describe(), attr[d], k[d], d));
      k[d] = attr[d];
    }
  }
  return k;
}

/// A convolution's output extent along spatial axis d (-1 when unknown). UserError naming the node when the
/// (dilated) kernel does not fit in the padded input: ONNX defines no empty convolution output.
int64_t convOutputExtent(const Node& node, const WindowGeometry& g, size_t d, int64_t inputExtent) {
  if (inputExtent >= 0 && inputExtent + g.padBegin[d] + g.padEnd[d] < g.effectiveKernel(d))
    throw UserError(fmt::format("{}: the kernel ({} on spatial axis {}{}) is larger than the padded input ({} + pads "
                                "{} + {} = {}); the output would be empty",
                                node.describe(), g.effectiveKernel(d), d, g.dilations[d] > 1 ? ", dilated" : "",
                                inputExtent, g.padBegin[d], g.padEnd[d], inputExtent + g.padBegin[d] + g.padEnd[d]));
  return windowOutputExtent(g, d, inputExtent);
}

/// Shared inference of Conv, ConvInteger and QLinearConv (x at input xIdx, w at wIdx).
void inferConvLike(InferContext& ctx, size_t xIdx, size_t wIdx, DType outType) {
  const TensorType& xt = ctx.inputType(xIdx);
  const TensorType& wt = ctx.inputType(wIdx);
  if (!xt.hasRank() || !wt.hasRank()) {
    ctx.setOutputType(0, TensorType(outType, std::nullopt));
    return;
  }
  if (xt.rank() < 3 || xt.rank() > 5) ctx.fail("input must have rank 3 to 5 (N, C, spatial...), has rank {}", xt.rank());
  if (wt.rank() != xt.rank()) ctx.fail("weight has rank {}, expected {} like the input", wt.rank(), xt.rank());
  std::vector<int64_t> x = knownExtents(xt), w = knownExtents(wt);
  int64_t groups = ctx.node().attrInt("group");
  if (groups < 1) ctx.fail("group must be >= 1, is {}", groups);
  if (x[1] >= 0 && w[1] >= 0 && x[1] != w[1] * groups)
    ctx.fail("input has {} channels, weight expects {} (group {} x {} per group)", x[1], w[1] * groups, groups, w[1]);
  if (w[0] >= 0 && w[0] % groups != 0) ctx.fail("weight has {} output channels, not divisible by group {}", w[0], groups);
  WindowGeometry g = readWindowGeometry(ctx.node(), kernelFromWeight(ctx.node(), w), spatialExtents(xt));
  std::vector<Dim> dims{(*xt.dims)[0], (*wt.dims)[0]};
  for (size_t d = 0; d < g.spatialRank(); ++d) {
    int64_t e = g.kernel[d] < 0 ? -1 : convOutputExtent(ctx.node(), g, d, x[2 + d]);
    dims.push_back(e >= 0 ? Dim::known(e) : Dim::unknown());
  }
  ctx.setOutputType(0, TensorType(outType, dims));
}

/// The problem of a Conv-like node for concrete x and w shapes.
ConvProblem convProblemFor(const KernelContext& ctx, const Shape& xs, const Shape& ws) {
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size())
    ctx.fail("expected input and weight of equal rank 3 to 5, got {} and {}", shapeToString(xs), shapeToString(ws));
  int64_t groups = ctx.attrInt("group");
  if (groups < 1 || xs[1] != ws[1] * groups || ws[0] % groups != 0)
    ctx.fail("input has {} channels, weight {} with group {} expects {}", xs[1], shapeToString(ws), groups, ws[1] * groups);
  WindowGeometry g = readWindowGeometry(ctx.node(), kernelFromWeight(ctx.node(), ws), Shape(xs.begin() + 2, xs.end()));
  std::vector<int64_t> out;
  for (size_t d = 0; d < g.spatialRank(); ++d) out.push_back(convOutputExtent(ctx.node(), g, d, xs[2 + d]));
  return makeProblem(xs, ws[0], groups, g, out);
}

Shape convOutputShape(const ConvProblem& p, size_t spatialRank) {
  Shape s{p.batch, p.outChannels};
  for (size_t d = 3 - spatialRank; d < 3; ++d) s.push_back(p.out[d]);
  return s;
}

void convKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  ConvProblem p = convProblemFor(ctx, x.shape(), w.shape());
  if (ctx.hasInput(2) && ctx.input(2).numel() != p.outChannels)
    ctx.fail("bias has {} values, expected {} (one per output channel)", ctx.input(2).numel(), p.outChannels);
  dispatchFloat(x.dtype(), "Conv input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = compute_t<T>;
    std::vector<Acc> xv, wv;
    const Acc* xp;
    const Acc* wp;
    if constexpr (std::is_same_v<T, Acc>) {
      xp = x.data<T>();
      wp = w.data<T>();
    } else {
      xv = toComputeVector<Acc>(x);
      wv = toComputeVector<Acc>(w);
      xp = xv.data();
      wp = wv.data();
    }
    Tensor& out = ctx.allocateOutput(0, x.dtype(), convOutputShape(p, x.rank() - 2));  // zero-filled
    std::vector<Acc> yv;
    Acc* y;
    if constexpr (std::is_same_v<T, Acc>) {
      y = out.data<T>();
    } else {
      yv.resize(static_cast<size_t>(out.numel()));
      y = yv.data();
    }
    if (ctx.hasInput(2)) {
      std::vector<Acc> bias = toComputeVector<Acc>(ctx.input(2));
      for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t m = 0; m < p.outChannels; ++m)
          std::fill_n(y + (n * p.outChannels + m) * p.outSize(), p.outSize(), bias[static_cast<size_t>(m)]);
    }
    convForward<Acc>(p, xp, wp, y);
    if constexpr (!std::is_same_v<T, Acc>) storeFromCompute<T>(out, yv);
  });
}

Cost convCost(const Node& node) {
  Cost c = movementCost(node);
  const Value* w = node.input(1);
  const Value* y = node.output(0);
  if (w && y && w->type.isStatic() && y->type.isStatic()) {
    Shape ws = w->type.staticShape();
    double perOutput = 1;
    for (size_t i = 1; i < ws.size(); ++i) perOutput *= static_cast<double>(ws[i]);
    c.flops = 2 * perOutput * static_cast<double>(y->type.staticSize());
  }
  return c;
}

OpDef& convAttrs(OpDef& def) {
  return def.traits({OpTrait::ChannelsFirst, OpTrait::SlidingWindow})
      .attr("auto_pad", AttrKind::String, std::string("NOTSET"))
      .optionalAttr("dilations", AttrKind::Ints)
      .attr("group", AttrKind::Int, int64_t{1})
      .optionalAttr("kernel_shape", AttrKind::Ints)
      .optionalAttr("pads", AttrKind::Ints)
      .optionalAttr("strides", AttrKind::Ints);
}

}  // namespace

TESSEL_REGISTER_OP(Conv) {
  OpDef def("Conv");
  def.inputs(2, 3).outputs(1).since(1).describe("N-D convolution with groups, strides, dilations and padding");
  return convAttrs(def)
      .infer([](InferContext& ctx) { inferConvLike(ctx, 0, 1, ctx.inputType(0).dtype); })
      .kernel(convKernel)
      .cost(convCost);
}

// ------------------------------------------------------------------------------------------ ConvInteger

namespace {

/// Per-output-channel zero points of w (scalar or one per channel).
std::vector<int32_t> channelZeroPoints(const KernelContext& ctx, size_t idx, int64_t channels) {
  std::vector<int32_t> z(static_cast<size_t>(channels), 0);
  if (!ctx.hasInput(idx)) return z;
  const Tensor& t = ctx.input(idx);
  if (t.numel() != 1 && t.numel() != channels)
    ctx.fail("input {} (zero point) must have 1 or {} values, has {}", idx, channels, t.numel());
  for (int64_t m = 0; m < channels; ++m) z[static_cast<size_t>(m)] = static_cast<int32_t>(t.elementAsDouble(t.numel() == 1 ? 0 : m));
  return z;
}

/// int32 accumulators of a quantised convolution: conv(x - xz, w - wz[m]).
std::vector<int32_t> integerConv(KernelContext& ctx, const ConvProblem& p, size_t xIdx, size_t xzIdx, size_t wIdx,
                                 size_t wzIdx) {
  const Tensor& w = ctx.input(wIdx);
  std::vector<int32_t> xs = shiftedInt32(ctx.input(xIdx), scalarZeroPoint(ctx, xzIdx));
  std::vector<int32_t> ws = shiftedInt32(w, 0);
  std::vector<int32_t> wz = channelZeroPoints(ctx, wzIdx, p.outChannels);
  const int64_t perChannel = w.numel() / std::max<int64_t>(1, p.outChannels);
  for (int64_t m = 0; m < p.outChannels; ++m)
    for (int64_t i = 0; i < perChannel; ++i) ws[static_cast<size_t>(m * perChannel + i)] -= wz[static_cast<size_t>(m)];
  std::vector<int32_t> y(static_cast<size_t>(p.batch * p.outChannels * p.outSize()));
  convForward<int32_t>(p, xs.data(), ws.data(), y.data());
  return y;
}

void convIntegerKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ConvProblem p = convProblemFor(ctx, x.shape(), ctx.input(1).shape());
  std::vector<int32_t> y = integerConv(ctx, p, 0, 2, 1, 3);
  Tensor& out = ctx.allocateOutput(0, DType::Int32, convOutputShape(p, x.rank() - 2));
  std::copy(y.begin(), y.end(), out.data<int32_t>());
}

void qlinearConvKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ConvProblem p = convProblemFor(ctx, x.shape(), ctx.input(3).shape());
  std::vector<int32_t> acc = integerConv(ctx, p, 0, 2, 3, 5);
  const float xScale = static_cast<float>(ctx.input(1).elementAsDouble(0));
  const float yScale = static_cast<float>(ctx.input(6).elementAsDouble(0));
  const Tensor& wScale = ctx.input(4);
  if (wScale.numel() != 1 && wScale.numel() != p.outChannels)
    ctx.fail("w_scale must have 1 or {} values, has {}", p.outChannels, wScale.numel());
  std::vector<int32_t> bias(static_cast<size_t>(p.outChannels), 0);
  if (ctx.hasInput(8)) bias = shiftedInt32(ctx.input(8), 0);
  if (static_cast<int64_t>(bias.size()) != p.outChannels) ctx.fail("bias must have {} values", p.outChannels);
  const DType outType = ctx.hasInput(7) ? ctx.input(7).dtype() : DType::UInt8;
  const int32_t yZero = scalarZeroPoint(ctx, 7);
  Tensor& out = ctx.allocateOutput(0, outType, convOutputShape(p, x.rank() - 2));
  dispatchNumeric(outType, "QLinearConv output", [&](auto tag) {
    using Q = typename decltype(tag)::type;
    if constexpr (std::is_same_v<Q, uint8_t> || std::is_same_v<Q, int8_t>) {
      Q* d = out.data<Q>();
      for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t m = 0; m < p.outChannels; ++m) {
          const float scale = xScale * static_cast<float>(wScale.elementAsDouble(wScale.numel() == 1 ? 0 : m)) / yScale;
          for (int64_t i = 0; i < p.outSize(); ++i) {
            const size_t at = static_cast<size_t>((n * p.outChannels + m) * p.outSize() + i);
            const float real = static_cast<float>(acc[at] + bias[static_cast<size_t>(m)]) * scale;
            d[at] = saturateRound<Q>(std::nearbyint(real) + yZero);
          }
        }
    } else {
      ctx.fail("y_zero_point must be uint8 or int8, is {}", dtypeName(outType));
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(ConvInteger) {
  OpDef def("ConvInteger");
  def.inputs(2, 4).outputs(1).since(10).describe("integer convolution of (x - x_zero_point) and (w - w_zero_point), int32 result");
  return convAttrs(def)
      .infer([](InferContext& ctx) { inferConvLike(ctx, 0, 1, DType::Int32); })
      .kernel(convIntegerKernel)
      .cost(convCost);
}

TESSEL_REGISTER_OP(QLinearConv) {
  OpDef def("QLinearConv");
  def.inputs(8, 9).outputs(1).since(10).describe("quantised convolution: requantised int32 conv of zero-point-shifted x and w");
  return convAttrs(def)
      .infer([](InferContext& ctx) {
        DType out = ctx.hasInput(7) ? ctx.inputType(7).dtype : DType::UInt8;
        inferConvLike(ctx, 0, 3, out);
      })
      .kernel(qlinearConvKernel)
      .cost([](const Node& node) {
        Cost c = movementCost(node);
        const Value* w = node.input(3);
        const Value* y = node.output(0);
        if (w && y && w->type.isStatic() && y->type.isStatic())
          c.flops = 2.0 * static_cast<double>(w->type.staticSize() / std::max<int64_t>(1, w->type.staticShape()[0])) *
                    static_cast<double>(y->type.staticSize());
        return c;
      });
}

// ---------------------------------------------------------------------------------------- ConvTranspose

namespace {

/// Output spatial extents and begin pads of a ConvTranspose (ONNX rules incl. output_shape and auto_pad).
struct TransposeGeometry {
  WindowGeometry window;
  std::vector<int64_t> out;  // -1 when unknown
};

TransposeGeometry transposeGeometry(const Node& node, const std::vector<int64_t>& kernel,
                                    const std::vector<int64_t>& in) {
  const size_t r = kernel.size();
  std::vector<int64_t> unknown(r, -1);
  TransposeGeometry t{readWindowGeometry(node, kernel, unknown), {}};
  WindowGeometry& g = t.window;
  std::vector<int64_t> outPad = node.hasAttr("output_padding") ? node.attrInts("output_padding") : std::vector<int64_t>{};
  if (outPad.empty()) outPad.assign(r, 0);
  if (outPad.size() != r) throw UserError(fmt::format("{}: output_padding must have {} values", node.describe(), r));
  std::vector<int64_t> outShape = node.hasAttr("output_shape") ? node.attrInts("output_shape") : std::vector<int64_t>{};
  if (outShape.size() == r + 2) outShape.erase(outShape.begin(), outShape.begin() + 2);
  if (!outShape.empty() && outShape.size() != r)
    throw UserError(fmt::format("{}: output_shape must have {} values", node.describe(), r));
  std::string autoPad = node.hasAttr("auto_pad") ? node.attrString("auto_pad") : "NOTSET";
  for (size_t d = 0; d < r; ++d) {
    if (in[d] < 0 || kernel[d] < 0) {
      t.out.push_back(outShape.empty() ? -1 : outShape[d]);
      continue;
    }
    const int64_t full = g.strides[d] * (in[d] - 1) + outPad[d] + g.effectiveKernel(d);
    int64_t target = -1;
    if (!outShape.empty()) target = outShape[d];
    else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") target = in[d] * g.strides[d];
    if (target >= 0) {
      // A target larger than the full result (negative total padding) leaves zeros at the end, as
      // ONNX Runtime and the ONNX test data do.
      const int64_t total = std::max<int64_t>(0, full - target);
      g.padBegin[d] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.padEnd[d] = total - g.padBegin[d];
      t.out.push_back(target);
      continue;
    }
    t.out.push_back(full - g.padBegin[d] - g.padEnd[d]);
  }
  return t;
}

void inferConvTranspose(InferContext& ctx) {
  const TensorType& xt = ctx.inputType(0);
  const TensorType& wt = ctx.inputType(1);
  if (!xt.hasRank() || !wt.hasRank()) return ctx.setOutputType(0, TensorType(xt.dtype, std::nullopt));
  if (xt.rank() < 3 || wt.rank() != xt.rank())
    ctx.fail("expected input and weight of equal rank >= 3, got {} and {}", xt.toString(), wt.toString());
  std::vector<int64_t> x = knownExtents(xt), w = knownExtents(wt);
  const int64_t groups = ctx.node().attrInt("group");
  if (x[1] >= 0 && w[0] >= 0 && x[1] != w[0])
    ctx.fail("input has {} channels, weight expects {}", x[1], w[0]);
  TransposeGeometry t = transposeGeometry(ctx.node(), kernelFromWeight(ctx.node(), w), spatialExtents(xt));
  std::vector<Dim> dims{(*xt.dims)[0], w[1] >= 0 ? Dim::known(w[1] * groups) : Dim::unknown()};
  for (int64_t e : t.out) dims.push_back(e >= 0 ? Dim::known(e) : Dim::unknown());
  ctx.setOutputType(0, TensorType(xt.dtype, dims));
}

/// Scatters col[(m, kd, kh, kw), (id, ih, iw)] into y[m, out] (the adjoint of im2col).
template <class Acc>
void col2im(const ConvProblem& p, const Acc* col, int64_t channels, Acc* y) {
  const Acc* row = col;
  for (int64_t m = 0; m < channels; ++m) {
    Acc* plane = y + m * p.outSize();
    for (int64_t kd = 0; kd < p.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < p.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < p.kernel[2]; ++kw)
          for (int64_t id = 0; id < p.in[0]; ++id)
            for (int64_t ih = 0; ih < p.in[1]; ++ih, row += p.in[2]) {
              const int64_t od = id * p.stride[0] + kd * p.dilation[0] - p.pad[0];
              const int64_t oh = ih * p.stride[1] + kh * p.dilation[1] - p.pad[1];
              if (od < 0 || od >= p.out[0] || oh < 0 || oh >= p.out[1]) continue;
              Acc* dst = plane + (od * p.out[1] + oh) * p.out[2];
              for (int64_t iw = 0; iw < p.in[2]; ++iw) {
                const int64_t ow = iw * p.stride[2] + kw * p.dilation[2] - p.pad[2];
                if (ow >= 0 && ow < p.out[2]) dst[ow] += row[iw];
              }
            }
  }
}

template <class Acc>
void convTransposeForward(const ConvProblem& p, const Acc* x, const Acc* w, Acc* y) {
  const int64_t cg = p.inChannels / p.groups, mg = p.outChannels / p.groups;
  const int64_t rows = mg * p.kernelSize(), inSize = p.inSize();
  std::vector<Acc> wT(static_cast<size_t>(rows * cg)), col(static_cast<size_t>(rows * inSize));
  for (int64_t g = 0; g < p.groups; ++g) {
    const Acc* wg = w + g * cg * rows;  // [cg, rows]
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t r = 0; r < rows; ++r) wT[static_cast<size_t>(r * cg + c)] = wg[c * rows + r];
    for (int64_t n = 0; n < p.batch; ++n) {
      std::fill(col.begin(), col.end(), Acc{});
      gemmAccumulate<Acc>(rows, inSize, cg, wT.data(), cg, x + (n * p.inChannels + g * cg) * inSize, inSize, col.data(),
                          inSize);
      col2im(p, col.data(), mg, y + (n * p.outChannels + g * mg) * p.outSize());
    }
  }
}

void convTransposeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const int64_t groups = ctx.attrInt("group");
  if (xs.size() < 3 || ws.size() != xs.size() || groups < 1 || ws[0] != xs[1] || xs[1] % groups != 0)
    ctx.fail("input {} and weight {} (group {}) do not match: weight must be [C, M/group, k...]", shapeToString(xs),
             shapeToString(ws), groups);
  TransposeGeometry t = transposeGeometry(ctx.node(), kernelFromWeight(ctx.node(), ws), Shape(xs.begin() + 2, xs.end()));
  for (int64_t e : t.out)
    if (e < 0) ctx.fail("computed a negative output extent; check pads and output_shape");
  // `in` holds x's extents and `out` the (larger) result's; col2im maps input positions to output ones.
  ConvProblem p = makeProblem(xs, ws[1] * groups, groups, t.window, t.out);
  dispatchFloat(x.dtype(), "ConvTranspose input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = compute_t<T>;
    std::vector<Acc> xv = toComputeVector<Acc>(x), wv = toComputeVector<Acc>(w);
    std::vector<Acc> y(static_cast<size_t>(p.batch * p.outChannels * p.outSize()));
    if (ctx.hasInput(2)) {
      std::vector<Acc> bias = toComputeVector<Acc>(ctx.input(2));
      if (static_cast<int64_t>(bias.size()) != p.outChannels) ctx.fail("bias must have {} values", p.outChannels);
      for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t m = 0; m < p.outChannels; ++m)
          std::fill_n(y.begin() + (n * p.outChannels + m) * p.outSize(), p.outSize(), bias[static_cast<size_t>(m)]);
    }
    convTransposeForward<Acc>(p, xv.data(), wv.data(), y.data());
    storeFromCompute<T>(ctx.allocateOutput(0, x.dtype(), convOutputShape(p, xs.size() - 2)), y);
  });
}

}  // namespace

ConvWindow convTransposeWindow(const Node& node, const Shape& xs, const Shape& ws) {
  const int64_t groups = node.attrInt("group");
  if (xs.size() < 3 || ws.size() != xs.size() || groups < 1 || ws[0] != xs[1] || xs[1] % groups != 0)
    throw UserError(fmt::format("{}: input {} and weight {} (group {}) do not match: weight must be [C, M/group, k...]",
                                node.describe(), shapeToString(xs), shapeToString(ws), groups));
  TransposeGeometry t = transposeGeometry(node, kernelFromWeight(node, ws), Shape(xs.begin() + 2, xs.end()));
  for (int64_t e : t.out)
    if (e < 0) throw UserError(fmt::format("{}: computed a negative output extent; check pads and output_shape", node.describe()));
  return makeProblem(xs, ws[1] * groups, groups, t.window, t.out);
}

TESSEL_REGISTER_OP(ConvTranspose) {
  OpDef def("ConvTranspose");
  def.inputs(2, 3).outputs(1).since(1).describe("transposed (fractionally strided) convolution");
  return convAttrs(def)
      .optionalAttr("output_padding", AttrKind::Ints)
      .optionalAttr("output_shape", AttrKind::Ints)
      .infer(inferConvTranspose)
      .kernel(convTransposeKernel)
      .cost([](const Node& node) {
        Cost c = movementCost(node);
        const Value* x = node.input(0);
        const Value* w = node.input(1);
        if (x && w && x->type.isStatic() && w->type.isStatic()) {
          Shape xs = x->type.staticShape();
          c.flops = 2.0 * static_cast<double>(w->type.staticSize()) * static_cast<double>(x->type.staticSize() / xs[1]);
        }
        return c;
      });
}

}  // namespace tessel
