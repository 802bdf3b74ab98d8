// Signal processing: DFT (onesided, inverse, dft_length, any axis), STFT, the Hann/Hamming/Blackman
// windows (periodic or symmetric) and MelWeightMatrix. Transforms are computed in double precision.
#include <cmath>
#include <complex>
#include <numbers>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

using cd = std::complex<double>;

/// Writes doubles into a new tensor of element type `dtype` (any real numeric type).
Tensor fromDoubles(const std::vector<double>& v, DType dtype, Shape shape, const Node& node) {
  Tensor t(dtype, std::move(shape));
  dispatchNumeric(dtype, node.describe() + " output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>) d[i] = v[i] != 0;
      else d[i] = T(static_cast<compute_t<T>>(v[i]));
    }
  });
  return t;
}

/// Scalar integer input (size, dft_length, frame_step...).
int64_t scalarInt(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1 || !isInteger(t.dtype())) ctx.fail("{} must be a single integer, got {}", what, t.summary());
  return t.toInt64Vector()[0];
}

/// Naive DFT of `x` into `n` bins (x is zero-padded or truncated to n samples). Exact twiddles are taken
/// modulo n so large indices do not lose precision.
std::vector<cd> dft(const std::vector<cd>& x, int64_t n, int64_t bins, bool inverse) {
  std::vector<cd> out(static_cast<size_t>(bins));
  double sign = inverse ? 1.0 : -1.0;
  int64_t len = std::min<int64_t>(n, static_cast<int64_t>(x.size()));
  for (int64_t k = 0; k < bins; ++k) {
    cd acc = 0;
    for (int64_t j = 0; j < len; ++j) {
      double angle = sign * 2.0 * std::numbers::pi * static_cast<double>((j * k) % n) / static_cast<double>(n);
      acc += x[static_cast<size_t>(j)] * cd(std::cos(angle), std::sin(angle));
    }
    out[static_cast<size_t>(k)] = inverse ? acc / static_cast<double>(n) : acc;
  }
  return out;
}

// ---------------------------------------------------------------- DFT

struct DftParams {
  int64_t axis, fftLength, bins;
  bool inverse;
};

DftParams dftParams(const Node& node, const Shape& in, std::optional<int64_t> dftLength) {
  auto fail = [&](const std::string& m) -> UserError { return UserError(fmt::format("{}: {}", node.describe(), m)); };
  int64_t rank = static_cast<int64_t>(in.size());
  if (rank < 2 || (in.back() != 1 && in.back() != 2))
    throw fail(fmt::format("input must be [batch, ..., 1 (real) or 2 (complex)], got shape [{}]", fmt::join(in, ",")));
  int64_t axis = node.attrInt("axis");
  if (axis < 0) axis += rank - 1;
  if (axis < 0 || axis >= rank - 1) throw fail(fmt::format("axis {} is out of range for a signal of rank {}", node.attrInt("axis"), rank - 1));
  DftParams p{axis, dftLength.value_or(in[static_cast<size_t>(axis)]), 0, node.attrInt("inverse") != 0};
  if (p.fftLength < 1) throw fail(fmt::format("dft_length must be at least 1, got {}", p.fftLength));
  bool onesided = node.attrInt("onesided") != 0;
  if (onesided && p.inverse) throw fail("onesided inverse DFT is not supported");
  p.bins = onesided ? p.fftLength / 2 + 1 : p.fftLength;
  return p;
}

void inferDft(InferContext& ctx) {
  const TensorType& x = ctx.inputType(0);
  if (!isFloat(x.dtype)) ctx.fail("input must be a floating-point tensor, found {}", dtypeName(x.dtype));
  if (!x.hasRank()) return ctx.setOutputType(0, TensorType(x.dtype, std::nullopt));
  if (x.rank() < 2) ctx.fail("input must have rank >= 2 ([batch, ..., 1 or 2]), found {}", x.toString());
  std::vector<Dim> dims = *x.dims;
  dims.back() = Dim::known(2);
  int64_t axis = ctx.node().attrInt("axis");
  if (axis < 0) axis += static_cast<int64_t>(x.rank()) - 1;
  if (axis < 0 || axis >= static_cast<int64_t>(x.rank()) - 1) ctx.fail("axis {} is out of range for input {}", ctx.node().attrInt("axis"), x.toString());
  Dim n = (*x.dims)[static_cast<size_t>(axis)];
  if (ctx.hasInput(1)) {
    const Tensor* len = ctx.inputValue(1);
    n = len && len->numel() == 1 ? Dim::known(len->toInt64Vector()[0]) : Dim::unknown();
  }
  if (ctx.node().attrInt("onesided") != 0) n = n.isKnown() ? Dim::known(n.value / 2 + 1) : Dim::unknown();
  dims[static_cast<size_t>(axis)] = n;
  ctx.setOutputType(0, TensorType(x.dtype, dims));
}

void dftKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::optional<int64_t> len;
  if (ctx.hasInput(1)) len = scalarInt(ctx, 1, "dft_length");
  DftParams p = dftParams(ctx.node(), x.shape(), len);
  Shape in = x.shape();
  int64_t comps = in.back(), extent = in[static_cast<size_t>(p.axis)];
  int64_t outer = 1, inner = 1;  // signal axes before / after the transformed one (complex axis excluded)
  for (int64_t i = 0; i < p.axis; ++i) outer *= in[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(p.axis) + 1; i + 1 < in.size(); ++i) inner *= in[i];
  Shape outShape = in;
  outShape[static_cast<size_t>(p.axis)] = p.bins;
  outShape.back() = 2;
  std::vector<double> src = x.toDoubleVector(), dst(static_cast<size_t>(shapeSize(outShape)));
  std::vector<cd> line(static_cast<size_t>(extent));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t j = 0; j < extent; ++j) {
        size_t at = static_cast<size_t>(((o * extent + j) * inner + i) * comps);
        line[static_cast<size_t>(j)] = cd(src[at], comps == 2 ? src[at + 1] : 0.0);
      }
      std::vector<cd> y = dft(line, p.fftLength, p.bins, p.inverse);
      for (int64_t k = 0; k < p.bins; ++k) {
        size_t at = static_cast<size_t>(((o * p.bins + k) * inner + i) * 2);
        dst[at] = y[static_cast<size_t>(k)].real();
        dst[at + 1] = y[static_cast<size_t>(k)].imag();
      }
    }
  ctx.setOutput(0, fromDoubles(dst, x.dtype(), outShape, ctx.node()));
}

// ---------------------------------------------------------------- STFT

void inferStft(InferContext& ctx) {
  const TensorType& s = ctx.inputType(0);
  if (!isFloat(s.dtype)) ctx.fail("signal must be a floating-point tensor, found {}", dtypeName(s.dtype));
  if (s.hasRank() && s.rank() != 3) ctx.fail("signal must be [batch, length, 1 or 2], found {}", s.toString());
  Dim batch = s.hasRank() ? (*s.dims)[0] : Dim::unknown();
  std::optional<int64_t> frameLength, step;
  if (ctx.hasInput(3))
    if (const Tensor* t = ctx.inputValue(3); t && t->numel() == 1) frameLength = t->toInt64Vector()[0];
  if (!frameLength && ctx.hasInput(2)) {
    const TensorType& w = ctx.inputType(2);
    if (w.hasRank() && w.rank() == 1 && (*w.dims)[0].isKnown()) frameLength = (*w.dims)[0].value;
  }
  if (const Tensor* t = ctx.inputValue(1); t && t->numel() == 1) step = t->toInt64Vector()[0];
  Dim frames = Dim::unknown(), bins = Dim::unknown();
  if (frameLength) bins = Dim::known(ctx.node().attrInt("onesided") ? *frameLength / 2 + 1 : *frameLength);
  if (frameLength && step && *step > 0 && s.hasRank() && (*s.dims)[1].isKnown())
    frames = Dim::known(((*s.dims)[1].value - *frameLength) / *step + 1);
  ctx.setOutputType(0, TensorType(s.dtype, std::vector<Dim>{batch, frames, bins, Dim::known(2)}));
}

void stftKernel(KernelContext& ctx) {
  const Tensor& signal = ctx.input(0);
  if (signal.rank() != 3 || (signal.dim(2) != 1 && signal.dim(2) != 2))
    ctx.fail("signal must be [batch, length, 1 or 2], got shape [{}]", fmt::join(signal.shape(), ","));
  int64_t step = scalarInt(ctx, 1, "frame_step");
  if (step < 1) ctx.fail("frame_step must be positive, got {}", step);
  std::vector<double> window;
  if (ctx.hasInput(2)) {
    if (ctx.input(2).rank() != 1) ctx.fail("window must be 1-D, got shape [{}]", fmt::join(ctx.input(2).shape(), ","));
    window = ctx.input(2).toDoubleVector();
  }
  int64_t frameLength = ctx.hasInput(3) ? scalarInt(ctx, 3, "frame_length") : static_cast<int64_t>(window.size());
  if (!ctx.hasInput(2) && !ctx.hasInput(3)) ctx.fail("needs a window or a frame_length to know the frame size");
  if (ctx.hasInput(2) && static_cast<int64_t>(window.size()) != frameLength)
    ctx.fail("window has {} samples but frame_length is {}", window.size(), frameLength);
  if (window.empty()) window.assign(static_cast<size_t>(frameLength), 1.0);
  int64_t batch = signal.dim(0), length = signal.dim(1), comps = signal.dim(2);
  if (frameLength < 1 || frameLength > length) ctx.fail("frame_length {} must be in [1, signal length {}]", frameLength, length);
  bool onesided = ctx.attrInt("onesided") != 0;
  if (onesided && comps == 2) ctx.fail("onesided output requires a real signal (last axis 1), got a complex one");
  int64_t frames = (length - frameLength) / step + 1;
  int64_t bins = onesided ? frameLength / 2 + 1 : frameLength;
  std::vector<double> src = signal.toDoubleVector(), dst(static_cast<size_t>(batch * frames * bins * 2));
  std::vector<cd> frame(static_cast<size_t>(frameLength));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t j = 0; j < frameLength; ++j) {
        size_t at = static_cast<size_t>((b * length + f * step + j) * comps);
        frame[static_cast<size_t>(j)] = cd(src[at], comps == 2 ? src[at + 1] : 0.0) * window[static_cast<size_t>(j)];
      }
      std::vector<cd> y = dft(frame, frameLength, bins, false);
      for (int64_t k = 0; k < bins; ++k) {
        size_t at = static_cast<size_t>(((b * frames + f) * bins + k) * 2);
        dst[at] = y[static_cast<size_t>(k)].real();
        dst[at + 1] = y[static_cast<size_t>(k)].imag();
      }
    }
  ctx.setOutput(0, fromDoubles(dst, signal.dtype(), {batch, frames, bins, 2}, ctx.node()));
}

// ---------------------------------------------------------------- windows

enum class WindowKind { Hann, Hamming, Blackman };

double windowValue(WindowKind kind, int64_t n, double denom) {
  double x = 2.0 * std::numbers::pi * static_cast<double>(n) / denom;
  switch (kind) {
    case WindowKind::Hann: return 0.5 - 0.5 * std::cos(x);
    case WindowKind::Hamming: return 25.0 / 46.0 - (21.0 / 46.0) * std::cos(x);
    case WindowKind::Blackman: return 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x);
  }
  return 0;
}

DType outputDatatype(const Node& node) {
  auto dt = static_cast<DType>(node.attrInt("output_datatype"));
  if (!isNumeric(dt) || dt == DType::Bool)
    throw UserError(fmt::format("{}: output_datatype {} is not a numeric tensor type", node.describe(), node.attrInt("output_datatype")));
  return dt;
}

void inferWindow(InferContext& ctx) {
  DType dt = outputDatatype(ctx.node());
  if (!isInteger(ctx.inputType(0).dtype)) ctx.fail("size must be an integer scalar, found {}", dtypeName(ctx.inputType(0).dtype));
  Dim n = Dim::unknown();
  if (const Tensor* t = ctx.inputValue(0); t && t->numel() == 1) n = Dim::known(t->toInt64Vector()[0]);
  ctx.setOutputType(0, TensorType(dt, std::vector<Dim>{n}));
}

KernelFn windowKernel(WindowKind kind) {
  return [kind](KernelContext& ctx) {
    int64_t size = scalarInt(ctx, 0, "size");
    if (size < 0) ctx.fail("size must be non-negative, got {}", size);
    // Periodic windows have period `size` (for spectral analysis); symmetric ones end where they start.
    double denom = static_cast<double>(ctx.attrInt("periodic") != 0 ? size : size - 1);
    std::vector<double> v(static_cast<size_t>(size));
    for (int64_t n = 0; n < size; ++n) v[static_cast<size_t>(n)] = size == 1 ? 1.0 : windowValue(kind, n, denom);
    ctx.setOutput(0, fromDoubles(v, outputDatatype(ctx.node()), {size}, ctx.node()));
  };
}

// ---------------------------------------------------------------- MelWeightMatrix

void inferMel(InferContext& ctx) {
  DType dt = outputDatatype(ctx.node());
  Dim bins = Dim::unknown(), mels = Dim::unknown();
  if (const Tensor* t = ctx.inputValue(0); t && t->numel() == 1) mels = Dim::known(t->toInt64Vector()[0]);
  if (const Tensor* t = ctx.inputValue(1); t && t->numel() == 1) bins = Dim::known(t->toInt64Vector()[0] / 2 + 1);
  ctx.setOutputType(0, TensorType(dt, std::vector<Dim>{bins, mels}));
}

/// Triangular mel filters over the onesided DFT bins, as the ONNX reference computes them (including its
/// mel spacing over num_mel_bins + 2 points and floor((dft_length + 1) * f / sample_rate) bin mapping).
void melKernel(KernelContext& ctx) {
  int64_t mels = scalarInt(ctx, 0, "num_mel_bins");
  int64_t dftLength = scalarInt(ctx, 1, "dft_length");
  int64_t sampleRate = scalarInt(ctx, 2, "sample_rate");
  if (mels < 1 || dftLength < 1 || sampleRate < 1)
    ctx.fail("num_mel_bins ({}), dft_length ({}) and sample_rate ({}) must be positive", mels, dftLength, sampleRate);
  double lowHz = ctx.input(3).elementAsDouble(0), highHz = ctx.input(4).elementAsDouble(0);
  if (lowHz < 0 || highHz <= lowHz || highHz > sampleRate / 2.0)
    ctx.fail("need 0 <= lower_edge_hertz ({}) < upper_edge_hertz ({}) <= sample_rate / 2 ({})", lowHz, highHz, sampleRate / 2.0);
  int64_t specBins = dftLength / 2 + 1;
  auto toMel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  double lowMel = toMel(lowHz), step = (toMel(highHz) - lowMel) / static_cast<double>(mels + 2);
  std::vector<int64_t> edges(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + lowMel) / 2595.0) - 1.0);
    edges[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(static_cast<double>(dftLength + 1) * hz / static_cast<double>(sampleRate)));
  }
  std::vector<double> out(static_cast<size_t>(specBins * mels), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& {
    if (j < 0 || j >= specBins) ctx.fail("mel filter {} reaches DFT bin {}, outside [0, {})", i, j, specBins);
    return out[static_cast<size_t>(j * mels + i)];
  };
  for (int64_t i = 0; i < mels; ++i) {
    int64_t lo = edges[static_cast<size_t>(i)], mid = edges[static_cast<size_t>(i + 1)], hi = edges[static_cast<size_t>(i + 2)];
    if (mid == lo) at(mid, i) = 1.0;
    else
      for (int64_t j = lo; j <= mid; ++j) at(j, i) = static_cast<double>(j - lo) / static_cast<double>(mid - lo);
    for (int64_t j = mid; j < hi; ++j) at(j, i) = static_cast<double>(hi - j) / static_cast<double>(hi - mid);
  }
  ctx.setOutput(0, fromDoubles(out, outputDatatype(ctx.node()), {specBins, mels}, ctx.node()));
}

OpDef windowDef(const char* name, WindowKind kind, const char* doc) {
  OpDef d(name);
  d.inputs(1).outputs(1).since(17)
      .attr("output_datatype", AttrKind::Int, int64_t{1})
      .attr("periodic", AttrKind::Int, int64_t{1})
      .describe(doc)
      .infer(inferWindow)
      .kernel(windowKernel(kind))
      .cost(costPerElement(4));
  return d;
}

}  // namespace

TESSEL_REGISTER_OP(DFT) {
  return OpDef("DFT").inputs(1, 2).outputs(1).since(17)
      .attr("axis", AttrKind::Int, int64_t{1})
      .attr("inverse", AttrKind::Int, int64_t{0})
      .attr("onesided", AttrKind::Int, int64_t{0})
      .describe("discrete Fourier transform along axis; last input axis is 1 (real) or 2 (complex)")
      .infer(inferDft)
      .kernel(dftKernel)
      .cost(movementCost);
}

TESSEL_REGISTER_OP(STFT) {
  return OpDef("STFT").inputs(2, 4).outputs(1).since(17)
      .attr("onesided", AttrKind::Int, int64_t{1})
      .describe("short-time Fourier transform: DFT of windowed frames taken every frame_step samples")
      .infer(inferStft)
      .kernel(stftKernel)
      .cost(movementCost);
}

TESSEL_REGISTER_OP(HannWindow) { return windowDef("HannWindow", WindowKind::Hann, "0.5 - 0.5 cos(2 pi n / N)"); }
TESSEL_REGISTER_OP(HammingWindow) {
  return windowDef("HammingWindow", WindowKind::Hamming, "25/46 - 21/46 cos(2 pi n / N)");
}
TESSEL_REGISTER_OP(BlackmanWindow) {
  return windowDef("BlackmanWindow", WindowKind::Blackman, "0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)");
}

TESSEL_REGISTER_OP(MelWeightMatrix) {
  return OpDef("MelWeightMatrix").inputs(5).outputs(1).since(17)
      .attr("output_datatype", AttrKind::Int, int64_t{1})
      .describe("[dft_length/2+1, num_mel_bins] triangular mel filter bank")
      .infer(inferMel)
      .kernel(melKernel)
      .cost(movementCost);
}

}  // namespace tessel
