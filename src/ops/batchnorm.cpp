// Normalisation and regularisation: BatchNormalization (inference and training outputs),
// InstanceNormalization, LRN, Dropout (inference identity; training mask reproducing numpy's seeded draws).
#include "nn_common.h"

namespace tessel {
namespace {

using namespace nn;

/// Extents of an NC... tensor seen as [N, C, inner].
struct ChannelLayout {
  int64_t batch = 1, channels = 1, inner = 1;
};

ChannelLayout channelLayout(const KernelContext& ctx, const Tensor& x) {
  if (x.rank() < 2) ctx.fail("input must have rank >= 2 (N, C, ...), has shape {}", shapeToString(x.shape()));
  ChannelLayout l{x.dim(0), x.dim(1), 1};
  for (size_t d = 2; d < x.rank(); ++d) l.inner *= x.dim(static_cast<int64_t>(d));
  return l;
}

/// A per-channel parameter: C values, or C * inner values (legacy spatial=0 BatchNormalization).
struct ChannelParam {
  std::vector<double> values;
  bool perElement = false;
  double at(int64_t c, int64_t i, int64_t inner) const {
    return values[static_cast<size_t>(perElement ? c * inner + i : c)];
  }
};

ChannelParam channelParam(const KernelContext& ctx, size_t idx, const ChannelLayout& l, const char* what) {
  const Tensor& t = ctx.input(idx);
  ChannelParam p{t.toDoubleVector(), false};
  if (t.numel() == l.channels * l.inner && t.numel() != l.channels) p.perElement = true;
  else if (t.numel() != l.channels)
    ctx.fail("{} has {} values, expected {} (one per channel)", what, t.numel(), l.channels);
  return p;
}

/// Per-channel batch mean and population variance over N and the spatial axes.
void batchStatistics(const std::vector<double>& x, const ChannelLayout& l, std::vector<double>& mean,
                     std::vector<double>& var) {
  mean.assign(static_cast<size_t>(l.channels), 0.0);
  var.assign(static_cast<size_t>(l.channels), 0.0);
  const double count = static_cast<double>(l.batch * l.inner);
  for (int64_t n = 0; n < l.batch; ++n)
    for (int64_t c = 0; c < l.channels; ++c)
      for (int64_t i = 0; i < l.inner; ++i) mean[static_cast<size_t>(c)] += x[static_cast<size_t>((n * l.channels + c) * l.inner + i)];
  for (double& m : mean) m /= count;
  for (int64_t n = 0; n < l.batch; ++n)
    for (int64_t c = 0; c < l.channels; ++c)
      for (int64_t i = 0; i < l.inner; ++i) {
        const double d = x[static_cast<size_t>((n * l.channels + c) * l.inner + i)] - mean[static_cast<size_t>(c)];
        var[static_cast<size_t>(c)] += d * d;
      }
  for (double& v : var) v /= count;
}

/// Writes a vector of doubles as a tensor of the given float dtype and shape.
void storeDoubles(Tensor& out, const std::vector<double>& values) {
  dispatchFloat(out.dtype(), "BatchNormalization output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    storeFromCompute<T>(out, values);
  });
}

void batchNormKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ChannelLayout l = channelLayout(ctx, x);
  ChannelParam scale = channelParam(ctx, 1, l, "scale"), bias = channelParam(ctx, 2, l, "B");
  ChannelParam mean = channelParam(ctx, 3, l, "input_mean"), var = channelParam(ctx, 4, l, "input_var");
  const double eps = ctx.attrFloat("epsilon"), momentum = ctx.attrFloat("momentum");
  const bool training = ctx.attrInt("training_mode") != 0;
  std::vector<double> xv = toComputeVector<double>(x);
  std::vector<double> batchMean, batchVar;
  if (training) {
    batchStatistics(xv, l, batchMean, batchVar);
    mean = ChannelParam{batchMean, false};
    var = ChannelParam{batchVar, false};
  }
  // The element-wise part is computed in the input's precision, like the published reference and runtimes.
  dispatchFloat(x.dtype(), "BatchNormalization input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = compute_t<T>;
    const T* src = x.data<T>();
    T* dst = ctx.allocateOutput(0, x.dtype(), x.shape()).template data<T>();
    for (int64_t n = 0; n < l.batch; ++n)
      for (int64_t c = 0; c < l.channels; ++c)
        for (int64_t i = 0; i < l.inner; ++i) {
          const int64_t at = (n * l.channels + c) * l.inner + i;
          const Acc s = static_cast<Acc>(scale.at(c, i, l.inner)), b = static_cast<Acc>(bias.at(c, i, l.inner));
          const Acc m = static_cast<Acc>(mean.at(c, i, l.inner));
          const Acc denom = std::sqrt(static_cast<Acc>(var.at(c, i, l.inner)) + static_cast<Acc>(eps));
          dst[at] = static_cast<T>(s * (static_cast<Acc>(src[at]) - m) / denom + b);
        }
  });
  if (!training) return;
  const DType statType = ctx.input(3).dtype();
  const Tensor& inMean = ctx.input(3);
  const Tensor& inVar = ctx.input(4);
  std::vector<double> runMean(batchMean.size()), runVar(batchVar.size());
  for (size_t c = 0; c < batchMean.size(); ++c) {
    runMean[c] = inMean.elementAsDouble(static_cast<int64_t>(c)) * momentum + batchMean[c] * (1 - momentum);
    runVar[c] = inVar.elementAsDouble(static_cast<int64_t>(c)) * momentum + batchVar[c] * (1 - momentum);
  }
  const std::vector<double>* results[] = {&runMean, &runVar, &batchMean, &batchVar};
  for (size_t o = 1; o < ctx.numOutputs() && o <= 4; ++o)
    if (ctx.outputRequested(o)) storeDoubles(ctx.allocateOutput(o, statType, {l.channels}), *results[o - 1]);
}

void inferBatchNorm(InferContext& ctx) {
  const TensorType& xt = ctx.inputType(0);
  if (xt.hasRank() && xt.rank() < 2) ctx.fail("input must have rank >= 2 (N, C, ...), has {}", xt.toString());
  Dim channels = xt.hasRank() ? (*xt.dims)[1] : Dim::unknown();
  for (size_t i = 1; i < 5; ++i) {
    const TensorType& pt = ctx.inputType(i);
    if (pt.hasRank() && pt.rank() == 1 && channels.isKnown() && (*pt.dims)[0].isKnown() &&
        (*pt.dims)[0].value != channels.value)
      ctx.fail("input {} has {} values, expected {} (one per channel)", i, (*pt.dims)[0].value, channels.value);
  }
  ctx.setOutputType(0, xt);
  bool training = ctx.node().attrInt("training_mode") != 0;
  for (size_t o = 1; o < ctx.numOutputs(); ++o) {
    if (!training && ctx.hasOutput(o)) ctx.fail("output {} is only produced when training_mode is 1", o);
    ctx.setOutputType(o, TensorType(ctx.inputType(3).dtype, std::vector<Dim>{channels}));
  }
}

/// Before opset 14 the extra outputs alone selected training; `spatial` (opset 7-8) only changed the
/// parameter shapes, which the kernel reads from the tensors.
void upgradeBatchNorm(UpgradeContext& ctx) {
  if (ctx.opsetVersion < 14 && ctx.node.numOutputs() > 1) {
    bool anyExtra = false;
    for (size_t o = 1; o < ctx.node.numOutputs(); ++o) anyExtra |= ctx.node.output(o) != nullptr;
    if (anyExtra) ctx.node.setAttr("training_mode", int64_t{1});
  }
  ctx.node.removeAttr("spatial");
}

}  // namespace

TESSEL_REGISTER_OP(BatchNormalization) {
  return OpDef("BatchNormalization")
      .inputs(5)
      .outputs(1, 5)
      .since(7)
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .attr("momentum", AttrKind::Float, 0.9f)
      .attr("training_mode", AttrKind::Int, int64_t{0})
      .attr("spatial", AttrKind::Int, int64_t{1})
      .describe("y = scale * (x - mean) / sqrt(var + epsilon) + B per channel; training mode uses batch statistics")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferBatchNorm)
      .kernel(batchNormKernel)
      .cost(costPerElement(4))
      .upgrade(upgradeBatchNorm);
}

// ---------------------------------------------------------------------------------- InstanceNormalization

namespace {

void instanceNormKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ChannelLayout l = channelLayout(ctx, x);
  ChannelParam scale = channelParam(ctx, 1, l, "scale"), bias = channelParam(ctx, 2, l, "B");
  const double eps = ctx.attrFloat("epsilon");
  std::vector<double> xv = toComputeVector<double>(x), y(xv.size());
  for (int64_t nc = 0; nc < l.batch * l.channels; ++nc) {
    const int64_t c = nc % l.channels;
    const double* src = xv.data() + nc * l.inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < l.inner; ++i) mean += src[i];
    mean /= static_cast<double>(l.inner);
    for (int64_t i = 0; i < l.inner; ++i) var += (src[i] - mean) * (src[i] - mean);
    var /= static_cast<double>(l.inner);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < l.inner; ++i)
      y[static_cast<size_t>(nc * l.inner + i)] = scale.at(c, 0, 1) * (src[i] - mean) * inv + bias.at(c, 0, 1);
  }
  storeDoubles(ctx.allocateOutput(0, x.dtype(), x.shape()), y);
}

}  // namespace

TESSEL_REGISTER_OP(InstanceNormalization) {
  return OpDef("InstanceNormalization")
      .inputs(3)
      .outputs(1)
      .since(6)
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .describe("per (n, c) normalisation over the spatial axes, then per-channel scale and bias")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferSameAsInput0)
      .kernel(instanceNormKernel)
      .cost(costPerElement(5));
}

// ------------------------------------------------------------------------------------------------- LRN

namespace {

void lrnKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ChannelLayout l = channelLayout(ctx, x);
  const int64_t size = ctx.attrInt("size");
  if (size < 1) ctx.fail("size must be >= 1, is {}", size);
  const double alpha = ctx.attrFloat("alpha"), beta = ctx.attrFloat("beta"), bias = ctx.attrFloat("bias");
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<double> xv = toComputeVector<double>(x), y(xv.size());
  for (int64_t n = 0; n < l.batch; ++n)
    for (int64_t c = 0; c < l.channels; ++c)
      for (int64_t i = 0; i < l.inner; ++i) {
        double squares = 0;
        for (int64_t k = std::max<int64_t>(0, c - before); k <= std::min(l.channels - 1, c + after); ++k) {
          const double v = xv[static_cast<size_t>((n * l.channels + k) * l.inner + i)];
          squares += v * v;
        }
        const size_t at = static_cast<size_t>((n * l.channels + c) * l.inner + i);
        y[at] = xv[at] / std::pow(bias + alpha / static_cast<double>(size) * squares, beta);
      }
  storeDoubles(ctx.allocateOutput(0, x.dtype(), x.shape()), y);
}

}  // namespace

TESSEL_REGISTER_OP(LRN) {
  return OpDef("LRN")
      .inputs(1)
      .outputs(1)
      .since(1)
      .attr("alpha", AttrKind::Float, 1e-4f)
      .attr("beta", AttrKind::Float, 0.75f)
      .attr("bias", AttrKind::Float, 1.0f)
      .requiredAttr("size", AttrKind::Int)
      .describe("local response normalisation across `size` neighbouring channels")
      .traits({OpTrait::ChannelsFirst})
      .infer(inferSameAsInput0)
      .kernel(lrnKernel)
      .cost([](const Node& node) {
        Cost c = costPerElement(4)(node);
        if (node.hasAttr("size")) c.flops *= static_cast<double>(node.attrInt("size"));
        return c;
      });
}

// --------------------------------------------------------------------------------------------- Dropout

namespace {

/// A uniform [0, 1) double drawn like numpy's legacy RandomState.random_sample (53 bits from two words).
template <class Engine>
double numpyUniform(Engine& engine) {
  const uint32_t a = static_cast<uint32_t>(engine()) >> 5, b = static_cast<uint32_t>(engine()) >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

void dropoutKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const double ratio = ctx.hasInput(1) ? ctx.input(1).elementAsDouble(0) : 0.5;
  const bool training = ctx.hasInput(2) && ctx.input(2).elementAsDouble(0) != 0;
  const bool wantMask = ctx.numOutputs() > 1 && ctx.outputRequested(1);
  if (!training || ratio == 0) {
    ctx.setOutput(0, x);
    if (wantMask) {
      Tensor& mask = ctx.allocateOutput(1, DType::Bool, x.shape());
      std::fill_n(mask.data<bool>(), mask.numel(), true);
    }
    return;
  }
  if (ratio < 0 || ratio >= 1) ctx.fail("ratio must be in [0, 1), is {}", ratio);
  // With a seed the draws match numpy's np.random.seed(seed); np.random.uniform(size=x.shape), which is
  // how the ONNX reference defines the mask; without one, the interpreter's generator is used.
  std::vector<bool> keep(static_cast<size_t>(x.numel()));
  if (ctx.hasAttr("seed")) {
    std::mt19937 engine(static_cast<uint32_t>(ctx.attrInt("seed")));
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = numpyUniform(engine) >= ratio;
  } else {
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = numpyUniform(ctx.rng()) >= ratio;
  }
  const double scale = 1.0 / (1.0 - ratio);
  Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
  dispatchFloat(x.dtype(), "Dropout input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = compute_t<T>;
    for (int64_t i = 0; i < x.numel(); ++i)
      y.data<T>()[i] = keep[static_cast<size_t>(i)] ? static_cast<T>(static_cast<Acc>(x.data<T>()[i]) * static_cast<Acc>(scale))
                                                    : static_cast<T>(Acc{0});
  });
  if (wantMask) {
    Tensor& mask = ctx.allocateOutput(1, DType::Bool, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) mask.data<bool>()[i] = keep[static_cast<size_t>(i)];
  }
}

void inferDropout(InferContext& ctx) {
  ctx.setOutputType(0, ctx.inputType(0));
  if (ctx.numOutputs() > 1) ctx.setOutputType(1, TensorType(DType::Bool, ctx.inputType(0).dims));
}

}  // namespace

TESSEL_REGISTER_OP(Dropout) {
  return OpDef("Dropout")
      .inputs(1, 3)
      .outputs(1, 2)
      .since(7)
      .optionalAttr("seed", AttrKind::Int)
      .optionalAttr("ratio", AttrKind::Float)
      .nondeterministic()
      .describe("identity at inference; in training mode zeroes elements with probability ratio and rescales")
      .infer(inferDropout)
      .kernel(dropoutKernel)
      .cost(costPerElement(1))
      // Before opset 12 `ratio` was an attribute that only mattered for training, which those opsets'
      // graphs never selected: the node is an identity either way, so the attribute is dropped.
      .upgrade([](UpgradeContext& ctx) {
        if (ctx.opsetVersion < 12) ctx.node.removeAttr("ratio");
      });
}

}  // namespace tessel
