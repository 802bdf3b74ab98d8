// Resize (nearest / linear / cubic, every coordinate transformation, scales or sizes) and the deprecated Upsample.
//
// The reference follows ONNX's own separable definition: along each axis an output coordinate maps to a
// source coordinate x_ori, whose neighbours get interpolation weights (1 tap for nearest, 2 for linear, 4 for
// cubic, edge-clamped); the N-D result is the tensor product of the per-axis weights. Like the ONNX reference
// (and unlike some runtimes), align_corners/tf_crop_and_resize use the real-valued output extent
// scale * input extent when scales are given.
#include <cmath>

#include "tessel/ops/resize_plan.h"
#include "tessel/ops/upgrade.h"
#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

struct ResizeSpec {
  std::string mode = "nearest";                   ///< nearest | linear | cubic
  std::string coordinateMode = "half_pixel";
  std::string nearestMode = "round_prefer_floor";
  double cubicA = -0.75;
  bool excludeOutside = false;
  bool antialias = false;                         ///< opset 18: widen linear/cubic filters when downscaling
  double extrapolationValue = 0;
  std::vector<double> scales;                     ///< per axis, output/input
  Shape outShape;
  std::vector<double> roi;                        ///< [starts..., ends...] per axis (tf_crop_and_resize)
};

struct Tap {
  int64_t index;
  double weight;
};

/// Per-axis plan: the taps of each output coordinate, and whether it falls outside (extrapolation).
struct AxisPlan {
  std::vector<std::vector<Tap>> taps;
  std::vector<bool> outside;
};

std::vector<double> cubicCoefficients(double ratio, double a) {
  double r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
  return {((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a, ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
          ((a + 2) * q - (a + 3)) * q * q + 1, ((a * q1 - 5 * a) * q1 + 8 * a) * q1 - 4 * a};
}

/// Source coordinate of output coordinate x on an axis (ONNX's coordinate_transformation_mode formulas).
/// Returns NaN when tf_crop_and_resize maps outside the input (the caller then extrapolates).
double sourceCoordinate(const ResizeSpec& s, size_t axis, int64_t x, int64_t inExtent) {
  double scale = s.scales[axis], in = static_cast<double>(inExtent), xd = static_cast<double>(x);
  double outWidth = scale * in;  // real-valued on purpose, as in the ONNX reference
  const std::string& m = s.coordinateMode;
  if (m == "align_corners") return outWidth == 1 ? 0.0 : xd * (in - 1) / (outWidth - 1);
  if (m == "asymmetric") return xd / scale;
  if (m == "tf_crop_and_resize") {
    size_t rank = s.outShape.size();
    double start = s.roi.empty() ? 0.0 : s.roi[axis], end = s.roi.empty() ? 1.0 : s.roi[axis + rank];
    double xo = outWidth == 1 ? (end - start) * (in - 1) / 2 : xd * (end - start) * (in - 1) / (outWidth - 1);
    xo += start * (in - 1);
    return xo < 0 || xo > in - 1 ? std::nan("") : xo;
  }
  if (m == "pytorch_half_pixel") return outWidth == 1 ? -0.5 : (xd + 0.5) / scale - 0.5;
  if (m == "half_pixel") return (xd + 0.5) / scale - 0.5;
  if (m == "half_pixel_symmetric") {  // opset 19, cheap to offer
    double adjustment = static_cast<double>(s.outShape[axis]) / outWidth;
    double center = in / 2, offset = center * (1 - adjustment);
    return offset + (xd + 0.5) / scale - 0.5;
  }
  throw UserError("unknown coordinate_transformation_mode '" + m + "'");
}

/// Nearest-neighbour tap for x_ori = xInt + ratio (ratio in (0, 1], 1 meaning "exactly on xInt + 1").
int64_t nearestIndex(int64_t xInt, double ratio, const std::string& mode) {
  if (ratio == 1) return xInt + 1;
  if (mode == "round_prefer_floor") return ratio <= 0.5 ? xInt : xInt + 1;
  if (mode == "round_prefer_ceil") return ratio < 0.5 ? xInt : xInt + 1;
  if (mode == "floor") return xInt;
  if (mode == "ceil") return xInt + 1;
  throw UserError("unknown nearest_mode '" + mode + "'");
}

/// Interpolation weights of the points xInt + first, xInt + first + 1, ... for x_ori = xInt + ratio.
struct Filter {
  int64_t first;
  std::vector<double> coeffs;
};

/// Linear/cubic weights; with antialias and a downscale, the filter is stretched by 1/scale and normalised
/// (the opset-18 definition).
Filter interpolationFilter(const ResizeSpec& s, double ratio, double scale) {
  bool cubic = s.mode == "cubic";
  if (!s.antialias || scale >= 1) {
    if (cubic) return {-1, cubicCoefficients(ratio, s.cubicA)};
    return {0, {1 - ratio, ratio}};
  }
  double a = s.cubicA;
  auto cubicAt = [a](double x) {
    x = std::abs(x);
    if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
  };
  auto start = static_cast<int64_t>(std::floor((cubic ? -2 : -1) / scale) + 1);
  Filter f{start, {}};
  double sum = 0;
  for (int64_t i = start; i < 2 - start; ++i) {  // a footprint symmetric around the point
    double x = (static_cast<double>(i) - ratio) * scale;
    f.coeffs.push_back(cubic ? cubicAt(x) : std::clamp(1 - std::abs(x), 0.0, 1.0));
    sum += f.coeffs.back();
  }
  for (double& c : f.coeffs) c /= sum;
  return f;
}

AxisPlan planAxis(const ResizeSpec& s, size_t axis, int64_t inExtent) {
  AxisPlan plan;
  int64_t outExtent = s.outShape[axis];
  plan.taps.resize(static_cast<size_t>(outExtent));
  plan.outside.assign(static_cast<size_t>(outExtent), false);
  auto clampIndex = [inExtent](int64_t i) { return std::clamp<int64_t>(i, 0, inExtent - 1); };
  for (int64_t x = 0; x < outExtent; ++x) {
    auto& taps = plan.taps[static_cast<size_t>(x)];
    double xo = sourceCoordinate(s, axis, x, inExtent);
    if (std::isnan(xo)) {
      plan.outside[static_cast<size_t>(x)] = true;
      continue;
    }
    // Prefer the pixel on the left: an integral x_ori is xInt + 1 with ratio 1.
    double fl = std::floor(xo);
    bool integral = fl == xo;
    auto xInt = static_cast<int64_t>(fl) - (integral ? 1 : 0);
    double ratio = integral ? 1.0 : xo - fl;
    if (s.mode == "nearest") {
      taps.push_back({clampIndex(nearestIndex(xInt, ratio, s.nearestMode)), 1.0});
      continue;
    }
    Filter f = interpolationFilter(s, ratio, s.scales[axis]);
    double sum = 0;
    for (size_t k = 0; k < f.coeffs.size(); ++k) {
      int64_t i = xInt + f.first + static_cast<int64_t>(k);
      if (s.excludeOutside && (i < 0 || i >= inExtent)) f.coeffs[k] = 0;
      sum += f.coeffs[k];
    }
    for (size_t k = 0; k < f.coeffs.size(); ++k) {
      double w = s.excludeOutside ? f.coeffs[k] / sum : f.coeffs[k];
      if (w != 0) taps.push_back({clampIndex(xInt + f.first + static_cast<int64_t>(k)), w});
    }
  }
  return plan;
}

template <class T>
T fromDouble(double v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    double r = std::nearbyint(v);
    return static_cast<T>(std::clamp(r, static_cast<double>(std::numeric_limits<T>::lowest()),
                                     static_cast<double>(std::numeric_limits<T>::max())));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(static_cast<compute_t<T>>(v));
  }
}

Tensor resizeTensor(const Tensor& x, const ResizeSpec& s) {
  size_t rank = x.rank();
  std::vector<AxisPlan> plans;
  for (size_t a = 0; a < rank; ++a) {
    if (x.shape()[a] == 0 && s.outShape[a] > 0) throw UserError("cannot resize an empty axis to a non-empty one");
    plans.push_back(planAxis(s, a, x.shape()[a]));
  }
  std::vector<int64_t> inStrides = contiguousStrides(x.shape());
  Tensor y(x.dtype(), s.outShape);
  dispatchNumeric(x.dtype(), "Resize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = y.data<T>();
    std::vector<int64_t> index(rank, 0);
    // Sum over the tensor product of the taps of every axis.
    auto accumulate = [&](auto& self, size_t axis, int64_t offset, double weight) -> double {
      if (axis == rank) return weight * static_cast<double>(static_cast<compute_t<T>>(src[offset]));
      double sum = 0;
      for (const Tap& t : plans[axis].taps[static_cast<size_t>(index[axis])])
        sum += self(self, axis + 1, offset + t.index * inStrides[axis], weight * t.weight);
      return sum;
    };
    for (int64_t i = 0; i < y.numel(); ++i) {
      bool outside = false;
      for (size_t a = 0; a < rank; ++a) outside = outside || plans[a].outside[static_cast<size_t>(index[a])];
      dst[i] = fromDouble<T>(outside ? s.extrapolationValue : accumulate(accumulate, 0, 0, 1.0));
      for (size_t a = rank; a-- > 0;) {
        if (++index[a] < s.outShape[a]) break;
        index[a] = 0;
      }
    }
  });
  return y;
}

// ---------------------------------------------------------------- Resize: reading the node

/// Expands per-listed-axis values (opset 18 `axes`) to one value per axis, `fill` elsewhere.
template <class V>
std::vector<V> perAxis(const std::vector<V>& given, const std::vector<int64_t>& axes, size_t rank, V fill) {
  if (axes.empty()) return given;
  std::vector<V> out(rank, fill);
  for (size_t i = 0; i < axes.size(); ++i) out[static_cast<size_t>(axes[i])] = given[i];
  return out;
}

std::vector<int64_t> resizeAxes(const Node& node, size_t rank) {
  std::vector<int64_t> axes;
  if (node.hasAttr("axes"))
    for (int64_t a : node.attrInts("axes")) axes.push_back(normalizeAxis(a, static_cast<int64_t>(rank), node));
  return axes;
}

/// Output shape and per-axis scales from scales or sizes (with keep_aspect_ratio_policy). `scales`/`sizes`
/// are nullptr when absent or empty.
void resolveResizeShape(const Node& node, const Shape& in, const Tensor* scales, const Tensor* sizes, ResizeSpec& s) {
  size_t rank = in.size();
  std::vector<int64_t> axes = resizeAxes(node, rank);
  size_t expected = axes.empty() ? rank : axes.size();
  if ((scales != nullptr) == (sizes != nullptr))
    throw UserError(fmt::format("{}: exactly one of scales and sizes must be given", node.describe()));
  if (scales) {
    std::vector<double> sc = scales->toDoubleVector();
    if (sc.size() != expected)
      throw UserError(fmt::format("{}: scales has {} entries, expected {}", node.describe(), sc.size(), expected));
    s.scales = perAxis(sc, axes, rank, 1.0);
    s.outShape.resize(rank);
    for (size_t a = 0; a < rank; ++a) {
      if (s.scales[a] <= 0) throw UserError(fmt::format("{}: scale {} on axis {} must be positive", node.describe(), s.scales[a], a));
      s.outShape[a] = static_cast<int64_t>(std::floor(s.scales[a] * static_cast<double>(in[a])));
    }
    return;
  }
  std::vector<int64_t> sz = sizes->toInt64Vector();
  if (sz.size() != expected)
    throw UserError(fmt::format("{}: sizes has {} entries, expected {}", node.describe(), sz.size(), expected));
  std::vector<int64_t> full = perAxis(sz, axes, rank, int64_t{-1});
  std::string policy = node.attrString("keep_aspect_ratio_policy");
  s.outShape = in;
  s.scales.assign(rank, 1.0);
  if (policy == "stretch") {
    for (size_t a = 0; a < rank; ++a)
      if (full[a] >= 0) {
        s.outShape[a] = full[a];
        s.scales[a] = static_cast<double>(full[a]) / static_cast<double>(in[a]);
      }
    return;
  }
  if (policy != "not_larger" && policy != "not_smaller")
    throw UserError(fmt::format("{}: unknown keep_aspect_ratio_policy '{}'", node.describe(), policy));
  double scale = policy == "not_larger" ? INFINITY : 0;
  for (size_t a = 0; a < rank; ++a)
    if (full[a] >= 0) {
      double r = static_cast<double>(full[a]) / static_cast<double>(in[a]);
      scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
    }
  for (size_t a = 0; a < rank; ++a)
    if (full[a] >= 0) {
      s.scales[a] = scale;
      s.outShape[a] = static_cast<int64_t>(std::nearbyint(scale * static_cast<double>(in[a])));
    }
}

const Tensor* nonEmpty(const KernelContext& ctx, size_t i) {
  return ctx.hasInput(i) && ctx.input(i).numel() > 0 ? &ctx.input(i) : nullptr;
}

ResizeSpec resizeSpecFromNode(const Node& node) {
  ResizeSpec s;
  s.mode = node.attrString("mode");
  if (s.mode != "nearest" && s.mode != "linear" && s.mode != "cubic")
    throw UserError(fmt::format("{}: unknown mode '{}' (expected nearest, linear or cubic)", node.describe(), s.mode));
  s.coordinateMode = node.attrString("coordinate_transformation_mode");
  s.nearestMode = node.attrString("nearest_mode");
  s.cubicA = node.attrFloat("cubic_coeff_a");
  s.excludeOutside = node.attrInt("exclude_outside") != 0;
  s.extrapolationValue = node.attrFloat("extrapolation_value");
  s.antialias = node.attrInt("antialias") != 0;
  return s;
}

/// The full spec of a Resize node on input shape `in` with its operands (nullptr when absent or empty).
ResizeSpec resizeSpecFor(const Node& node, const Shape& in, const Tensor* roi, const Tensor* scales,
                         const Tensor* sizes) {
  ResizeSpec s = resizeSpecFromNode(node);
  resolveResizeShape(node, in, scales, sizes, s);
  if (roi && s.coordinateMode == "tf_crop_and_resize") {
    std::vector<double> r = roi->toDoubleVector();
    std::vector<int64_t> axes = resizeAxes(node, in.size());
    size_t n = axes.empty() ? in.size() : axes.size();
    if (r.size() != 2 * n)
      throw UserError(fmt::format("{}: roi has {} entries, expected {}", node.describe(), r.size(), 2 * n));
    std::vector<double> starts(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(n)), ends(r.begin() + static_cast<std::ptrdiff_t>(n), r.end());
    starts = perAxis(starts, axes, in.size(), 0.0);
    ends = perAxis(ends, axes, in.size(), 1.0);
    s.roi = starts;
    s.roi.insert(s.roi.end(), ends.begin(), ends.end());
  }
  return s;
}

void resizeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.setOutput(0, resizeTensor(x, resizeSpecFor(ctx.node(), x.shape(), nonEmpty(ctx, 1), nonEmpty(ctx, 2), nonEmpty(ctx, 3))));
}

void inferResize(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!in.hasRank()) return ctx.setOutputType(0, in);
  auto known = [&](size_t i) -> const Tensor* {
    const Tensor* t = ctx.hasInput(i) ? ctx.inputValue(i) : nullptr;
    return t && t->numel() > 0 ? t : nullptr;
  };
  bool scalesGiven = ctx.hasInput(2) && !(ctx.inputValue(2) && ctx.inputValue(2)->numel() == 0);
  const Tensor* scales = known(2);
  const Tensor* sizes = known(3);
  std::vector<Dim> out(in.rank());
  if (in.isStatic() && (scales || sizes) && !(scales && sizes)) {
    ResizeSpec s;
    resolveResizeShape(ctx.node(), in.staticShape(), scales, sizes, s);
    return ctx.setOutputType(0, TensorType::fromShape(in.dtype, s.outShape));
  }
  if (scales && !sizes && resizeAxes(ctx.node(), in.rank()).empty()) {  // symbolic dims survive a scale of 1
    std::vector<double> sc = scales->toDoubleVector();
    if (sc.size() != in.rank()) ctx.fail("scales has {} entries, expected {}", sc.size(), in.rank());
    for (size_t a = 0; a < in.rank(); ++a) {
      const Dim& d = (*in.dims)[a];
      if (sc[a] == 1.0) out[a] = d;
      else if (d.isKnown()) out[a] = Dim::known(static_cast<int64_t>(std::floor(sc[a] * static_cast<double>(d.value))));
    }
  } else if (sizes && !scalesGiven && ctx.node().attrString("keep_aspect_ratio_policy") == "stretch" &&
             resizeAxes(ctx.node(), in.rank()).empty()) {
    std::vector<int64_t> sz = sizes->toInt64Vector();
    if (sz.size() != in.rank()) ctx.fail("sizes has {} entries, expected {}", sz.size(), in.rank());
    for (size_t a = 0; a < in.rank(); ++a) out[a] = Dim::known(sz[a]);
  }
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

/// Resize-10 took (X, scales) and meant asymmetric coordinates; opset 11 inserted roi before scales.
void upgradeResize(UpgradeContext& ctx) {
  if (ctx.opsetVersion >= 11) return;
  Node& n = ctx.node;
  Value* scales = n.input(1);
  n.setInput(1, nullptr);
  if (n.numInputs() < 3) n.addInput(scales);
  else n.setInput(2, scales);
  if (!n.hasAttr("coordinate_transformation_mode")) n.setAttr("coordinate_transformation_mode", std::string("asymmetric"));
  if (!n.hasAttr("nearest_mode")) n.setAttr("nearest_mode", std::string("floor"));
}

// ---------------------------------------------------------------- Upsample (deprecated)

ResizeSpec upsampleSpecFor(const Node& node, const Shape& in, const Tensor* scales) {
  ResizeSpec s;
  s.mode = node.attrString("mode");
  if (s.mode == "bilinear") s.mode = "linear";  // Upsample-7 spelling
  if (s.mode != "nearest" && s.mode != "linear")
    throw UserError(fmt::format("{}: unknown mode '{}' (expected nearest or linear)", node.describe(), s.mode));
  s.coordinateMode = "asymmetric";
  s.nearestMode = "floor";
  if (!scales) throw UserError(fmt::format("{}: the scales input is missing", node.describe()));
  std::vector<double> sc = scales->toDoubleVector();
  if (sc.size() != in.size())
    throw UserError(fmt::format("{}: scales has {} entries, the input has rank {}", node.describe(), sc.size(), in.size()));
  s.scales = sc;
  for (size_t a = 0; a < in.size(); ++a) {
    if (sc[a] < 1) throw UserError(fmt::format("{}: Upsample scale {} on axis {} must be >= 1", node.describe(), sc[a], a));
    s.outShape.push_back(static_cast<int64_t>(std::floor(sc[a] * static_cast<double>(in[a]))));
  }
  return s;
}

void upsampleKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.setOutput(0, resizeTensor(x, upsampleSpecFor(ctx.node(), x.shape(), ctx.hasInput(1) ? &ctx.input(1) : nullptr)));
}

void inferUpsample(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  const Tensor* scales = ctx.hasInput(1) ? ctx.inputValue(1) : nullptr;
  if (!in.hasRank()) return ctx.setOutputType(0, in);
  std::vector<Dim> out(in.rank());
  if (scales) {
    std::vector<double> sc = scales->toDoubleVector();
    if (sc.size() != in.rank()) ctx.fail("scales has {} entries, the input has rank {}", sc.size(), in.rank());
    for (size_t a = 0; a < in.rank(); ++a) {
      const Dim& d = (*in.dims)[a];
      if (sc[a] == 1.0) out[a] = d;
      else if (d.isKnown()) out[a] = Dim::known(static_cast<int64_t>(std::floor(sc[a] * static_cast<double>(d.value))));
    }
  }
  ctx.setOutputType(0, TensorType(in.dtype, out));
}

/// Upsample-7 kept scales as an attribute; opset 9 made it an input.
void upgradeUpsample(UpgradeContext& ctx) {
  if (!ctx.node.hasAttr("scales")) return;
  std::vector<float> sc = ctx.node.attrFloats("scales");
  moveAttrToInput(ctx, "scales", 1, Tensor::fromVector<float>({static_cast<int64_t>(sc.size())}, sc));
}

}  // namespace

std::vector<ResizeAxisTaps> resizeTaps(const Node& node, const Shape& in, const Tensor* roi, const Tensor* scales,
                                       const Tensor* sizes) {
  auto nonEmptyOrNull = [](const Tensor* t) { return t && t->numel() > 0 ? t : nullptr; };
  ResizeSpec s = isOp(node, "Upsample") ? upsampleSpecFor(node, in, scales)
                                        : resizeSpecFor(node, in, nonEmptyOrNull(roi), nonEmptyOrNull(scales),
                                                        nonEmptyOrNull(sizes));
  std::vector<ResizeAxisTaps> out;
  for (size_t a = 0; a < in.size(); ++a) {
    if (in[a] == 0 && s.outShape[a] > 0) throw UserError("cannot resize an empty axis to a non-empty one");
    AxisPlan plan = planAxis(s, a, in[a]);
    ResizeAxisTaps t;
    t.outside = plan.outside;
    for (const auto& taps : plan.taps) {
      t.taps.emplace_back();
      for (const Tap& tap : taps) t.taps.back().push_back({tap.index, tap.weight});
    }
    out.push_back(std::move(t));
  }
  return out;
}

TESSEL_REGISTER_OP(Resize) {
  return OpDef("Resize").inputs(1, 4).outputs(1).since(10)
      .attr("mode", AttrKind::String, std::string("nearest"))
      .attr("coordinate_transformation_mode", AttrKind::String, std::string("half_pixel"))
      .attr("nearest_mode", AttrKind::String, std::string("round_prefer_floor"))
      .attr("cubic_coeff_a", AttrKind::Float, -0.75f)
      .attr("exclude_outside", AttrKind::Int, int64_t{0})
      .attr("extrapolation_value", AttrKind::Float, 0.0f)
      .attr("antialias", AttrKind::Int, int64_t{0})                                   // opset 18
      .optionalAttr("axes", AttrKind::Ints)                                            // opset 18
      .attr("keep_aspect_ratio_policy", AttrKind::String, std::string("stretch"))     // opset 18
      .describe("resizes by scales or to sizes with nearest/linear/cubic interpolation")
      .infer(inferResize).kernel(resizeKernel).cost(costPerElement(8)).upgrade(upgradeResize);
}

TESSEL_REGISTER_OP(Upsample) {
  return OpDef("Upsample").inputs(1, 2).outputs(1).since(7)
      .attr("mode", AttrKind::String, std::string("nearest"))
      .optionalAttr("scales", AttrKind::Floats)  // Upsample-7; moved to input 1 by the upgrade
      .describe("deprecated: Resize with asymmetric coordinates (nearest floor or linear), scales >= 1")
      .infer(inferUpsample).kernel(upsampleKernel).cost(costPerElement(4)).upgrade(upgradeUpsample);
}

}  // namespace tessel
