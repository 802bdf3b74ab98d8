// Random generators: RandomNormal, RandomUniform (fixed shape or shaped like an input), Bernoulli and
// Multinomial. With a `seed` attribute a node draws the same values on every run; without one it draws
// from the interpreter's generator (seeded by `tessel run --seed`).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

/// The generator a node draws from: its own when seeded, the interpreter's otherwise.
class NodeRandom {
 public:
  explicit NodeRandom(KernelContext& ctx) {
    if (ctx.hasAttr("seed")) {
      float seed = ctx.attrFloat("seed");
      uint32_t bits;
      std::memcpy(&bits, &seed, sizeof bits);  // every float (even 0.5 vs 0.7) gives a distinct stream
      own_.seed(bits);
      gen_ = &own_;
    } else {
      gen_ = &ctx.rng();
    }
  }
  /// Uniform in [0, 1).
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(*gen_); }
  double normal(double mean, double scale) { return std::normal_distribution<double>(mean, scale)(*gen_); }

 private:
  std::mt19937_64 own_;
  std::mt19937_64* gen_;
};

DType dtypeAttr(const Node& node, DType fallback) {
  if (!node.hasAttr("dtype")) return fallback;
  auto dt = static_cast<DType>(node.attrInt("dtype"));
  if (!isNumeric(dt) && dt != DType::Bool)
    throw UserError(fmt::format("{}: dtype {} is not a numeric or bool tensor type", node.describe(), node.attrInt("dtype")));
  return dt;
}

template <class Draw>
Tensor fill(DType dtype, const Shape& shape, const Node& node, Draw&& draw) {
  Tensor t(dtype, shape);
  dispatchNumeric(dtype, node.describe() + " output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* d = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = draw();
      if constexpr (std::is_same_v<T, bool>) d[i] = v != 0;
      else d[i] = T(static_cast<compute_t<T>>(v));
    }
  });
  return t;
}

Shape shapeAttr(const Node& node) {
  Shape s = node.attrInts("shape");
  for (int64_t d : s)
    if (d < 0) throw UserError(fmt::format("{}: shape attribute has negative extent {}", node.describe(), d));
  return s;
}

// ---------------------------------------------------------------- RandomNormal / RandomUniform

void inferFixedShape(InferContext& ctx) {
  DType dt = dtypeAttr(ctx.node(), DType::Float32);
  if (!isFloat(dt)) ctx.fail("dtype must be a floating-point type, got {}", dtypeName(dt));
  ctx.setOutputType(0, TensorType::fromShape(dt, shapeAttr(ctx.node())));
}

void inferLike(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  DType dt = dtypeAttr(ctx.node(), in.dtype);
  if (!isFloat(dt)) ctx.fail("output type must be floating-point, got {} (set the dtype attribute)", dtypeName(dt));
  ctx.setOutputType(0, TensorType(dt, in.dims));
}

/// Draw from N(mean, scale) or U[low, high) depending on the op.
std::function<double()> drawer(KernelContext& ctx, NodeRandom& rnd, bool normal) {
  if (normal) {
    double mean = ctx.attrFloat("mean"), scale = ctx.attrFloat("scale");
    return [&rnd, mean, scale] { return rnd.normal(mean, scale); };
  }
  double low = ctx.attrFloat("low"), high = ctx.attrFloat("high");
  if (!(high >= low)) ctx.fail("high ({}) must not be below low ({})", high, low);
  return [&rnd, low, high] { return low + (high - low) * rnd.uniform(); };
}

KernelFn randomKernel(bool normal, bool like) {
  return [normal, like](KernelContext& ctx) {
    NodeRandom rnd(ctx);
    DType dt = like ? dtypeAttr(ctx.node(), ctx.input(0).dtype()) : dtypeAttr(ctx.node(), DType::Float32);
    if (!isFloat(dt)) ctx.fail("output type must be floating-point, got {}", dtypeName(dt));
    Shape shape = like ? ctx.input(0).shape() : shapeAttr(ctx.node());
    ctx.setOutput(0, fill(dt, shape, ctx.node(), drawer(ctx, rnd, normal)));
  };
}

// ---------------------------------------------------------------- Bernoulli / Multinomial

void inferBernoulli(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  if (!isFloat(in.dtype)) ctx.fail("input probabilities must be floating-point, found {}", dtypeName(in.dtype));
  ctx.setOutputType(0, TensorType(dtypeAttr(ctx.node(), in.dtype), in.dims));
}

void bernoulliKernel(KernelContext& ctx) {
  NodeRandom rnd(ctx);
  const Tensor& p = ctx.input(0);
  std::vector<double> prob = p.toDoubleVector();
  for (double v : prob)
    if (!(v >= 0 && v <= 1)) ctx.fail("probability {} is outside [0, 1]", v);
  size_t i = 0;
  ctx.setOutput(0, fill(dtypeAttr(ctx.node(), p.dtype()), p.shape(), ctx.node(), [&] { return rnd.uniform() < prob[i++] ? 1.0 : 0.0; }));
}

void inferMultinomial(InferContext& ctx) {
  const TensorType& in = ctx.inputType(0);
  DType dt = dtypeAttr(ctx.node(), DType::Int32);
  if (dt != DType::Int32 && dt != DType::Int64) ctx.fail("dtype must be int32 or int64, got {}", dtypeName(dt));
  if (in.hasRank() && in.rank() != 2) ctx.fail("input must be [batch, classes] log-probabilities, found {}", in.toString());
  Dim batch = in.hasRank() ? (*in.dims)[0] : Dim::unknown();
  ctx.setOutputType(0, TensorType(dt, std::vector<Dim>{batch, Dim::known(ctx.node().attrInt("sample_size"))}));
}

/// Samples class indices from unnormalized log-probabilities by inverting the cumulative distribution.
void multinomialKernel(KernelContext& ctx) {
  NodeRandom rnd(ctx);
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) ctx.fail("input must be [batch, classes], got shape [{}]", fmt::join(x.shape(), ","));
  int64_t batch = x.dim(0), classes = x.dim(1), samples = ctx.attrInt("sample_size");
  if (samples < 0) ctx.fail("sample_size must be non-negative, got {}", samples);
  if (classes == 0 && samples > 0) ctx.fail("cannot sample from zero classes");
  std::vector<double> logits = x.toDoubleVector(), cdf(static_cast<size_t>(classes));
  std::vector<double> out;
  for (int64_t b = 0; b < batch; ++b) {
    double maxLogit = -INFINITY, total = 0;
    for (int64_t c = 0; c < classes; ++c) maxLogit = std::max(maxLogit, logits[static_cast<size_t>(b * classes + c)]);
    for (int64_t c = 0; c < classes; ++c) {
      total += std::exp(logits[static_cast<size_t>(b * classes + c)] - maxLogit);
      cdf[static_cast<size_t>(c)] = total;
    }
    for (int64_t s = 0; s < samples; ++s) {
      double u = rnd.uniform() * total;
      auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
      out.push_back(static_cast<double>(std::min<int64_t>(it - cdf.begin(), classes - 1)));
    }
  }
  size_t i = 0;
  DType dt = dtypeAttr(ctx.node(), DType::Int32);
  ctx.setOutput(0, fill(dt, {batch, samples}, ctx.node(), [&] { return out[i++]; }));
}

OpDef randomDef(const char* name, bool normal, bool like) {
  OpDef d(name);
  d.inputs(like ? 1 : 0).outputs(1).since(1).nondeterministic()
      .optionalAttr("seed", AttrKind::Float)
      .optionalAttr("dtype", AttrKind::Int);
  if (normal) d.attr("mean", AttrKind::Float, 0.0f).attr("scale", AttrKind::Float, 1.0f);
  else d.attr("low", AttrKind::Float, 0.0f).attr("high", AttrKind::Float, 1.0f);
  if (!like) d.requiredAttr("shape", AttrKind::Ints);
  d.describe(normal ? "samples N(mean, scale^2)" : "samples U[low, high)")
      .infer(like ? InferFn(inferLike) : InferFn(inferFixedShape))
      .kernel(randomKernel(normal, like))
      .cost(costPerElement(4));
  return d;
}

}  // namespace

TESSEL_REGISTER_OP(RandomNormal) { return randomDef("RandomNormal", true, false); }
TESSEL_REGISTER_OP(RandomUniform) { return randomDef("RandomUniform", false, false); }
TESSEL_REGISTER_OP(RandomNormalLike) { return randomDef("RandomNormalLike", true, true); }
TESSEL_REGISTER_OP(RandomUniformLike) { return randomDef("RandomUniformLike", false, true); }

TESSEL_REGISTER_OP(Bernoulli) {
  return OpDef("Bernoulli").inputs(1).outputs(1).since(15).nondeterministic()
      .optionalAttr("seed", AttrKind::Float)
      .optionalAttr("dtype", AttrKind::Int)
      .describe("y = 1 with probability x, else 0")
      .infer(inferBernoulli)
      .kernel(bernoulliKernel)
      .cost(costPerElement(2));
}

TESSEL_REGISTER_OP(Multinomial) {
  return OpDef("Multinomial").inputs(1).outputs(1).since(7).nondeterministic()
      .optionalAttr("seed", AttrKind::Float)
      .attr("dtype", AttrKind::Int, int64_t{6})
      .attr("sample_size", AttrKind::Int, int64_t{1})
      .describe("samples sample_size class indices per row of unnormalized log-probabilities")
      .infer(inferMultinomial)
      .kernel(multinomialKernel)
      .cost(costPerElement(4));
}

}  // namespace tessel
