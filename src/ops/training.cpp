// Optimizer update rules of the ai.onnx.preview.training domain: Adagrad, Adam and Momentum (standard and
// Nesterov). Each node updates n tensors at once: inputs R, T, then n of each per-tensor operand group.
#include <cmath>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

const char* const kTrainingDomain = "ai.onnx.preview.training";

/// The per-tensor operand groups of a node: `groups` groups (X, G, and optimizer states) of n tensors.
size_t tensorsPerGroup(const Node& node, size_t groups) {
  size_t rest = node.numInputs() < 2 ? 0 : node.numInputs() - 2;
  if (rest == 0 || rest % groups != 0)
    throw UserError(fmt::format("{}: expects R, T and {} equal groups of tensors, got {} input(s)", node.describe(), groups,
                                node.numInputs()));
  if (node.numOutputs() > rest / groups * (groups - 1))
    throw UserError(fmt::format("{}: has {} outputs, at most {} expected", node.describe(), node.numOutputs(), rest / groups * (groups - 1)));
  return rest / groups;
}

/// Outputs: X_new for every X, then the new state of every state group (G has no output).
void inferOptimizer(InferContext& ctx, size_t groups) {
  size_t n = tensorsPerGroup(ctx.node(), groups);
  if (ctx.inputType(1).dtype != DType::Int64) ctx.fail("T (update count) must be int64, found {}", dtypeName(ctx.inputType(1).dtype));
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    if (!ctx.hasOutput(i)) continue;
    size_t group = i / n, k = i % n;
    size_t input = 2 + (group == 0 ? 0 : group + 1) * n + k;  // skip the gradient group
    ctx.setOutputType(i, ctx.inputType(input));
  }
}

/// Operands of one update, as doubles, plus the scalars R (learning rate) and T (update count).
struct UpdateArgs {
  double rate;
  int64_t step;
  std::vector<std::vector<double>> operands;  ///< X, G, states...
};

/// Runs `update(args, outs)` for each of the n tensors; `outs` receives X_new followed by the new states.
template <class Update>
void optimizerKernel(KernelContext& ctx, size_t groups, Update&& update) {
  size_t n = tensorsPerGroup(ctx.node(), groups);
  const Tensor& r = ctx.input(0);
  const Tensor& t = ctx.input(1);
  if (r.numel() != 1 || !isFloat(r.dtype())) ctx.fail("R (learning rate) must be a float scalar, got {}", r.summary());
  if (t.numel() != 1 || t.dtype() != DType::Int64) ctx.fail("T (update count) must be an int64 scalar, got {}", t.summary());
  for (size_t k = 0; k < n; ++k) {
    UpdateArgs args{r.elementAsDouble(0), t.toInt64Vector()[0], {}};
    const Tensor& x = ctx.input(2 + k);
    for (size_t g = 0; g < groups; ++g) {
      const Tensor& op = ctx.input(2 + g * n + k);
      if (op.shape() != x.shape())
        ctx.fail("input {} has shape [{}] but the tensor it updates, input {}, has [{}]", 2 + g * n + k,
                 fmt::join(op.shape(), ","), 2 + k, fmt::join(x.shape(), ","));
      if (!isFloat(op.dtype())) ctx.fail("input {} must be float or double, found {}", 2 + g * n + k, dtypeName(op.dtype()));
      args.operands.push_back(op.toDoubleVector());
    }
    std::vector<std::vector<double>> outs(groups - 1, std::vector<double>(static_cast<size_t>(x.numel())));
    update(args, outs);
    for (size_t g = 0; g + 1 < groups; ++g) {
      size_t outIndex = g * n + k;
      if (outIndex >= ctx.numOutputs() || !ctx.outputRequested(outIndex)) continue;
      size_t like = 2 + (g == 0 ? 0 : g + 1) * n + k;
      DType dt = ctx.input(like).dtype();
      Tensor& out = ctx.allocateOutput(outIndex, dt, x.shape());
      dispatchFloat(dt, "optimizer tensor", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* d = out.data<T>();
        for (size_t i = 0; i < outs[g].size(); ++i) d[i] = T(static_cast<compute_t<T>>(outs[g][i]));
      });
    }
  }
}

void adagradKernel(KernelContext& ctx) {
  double norm = ctx.attrFloat("norm_coefficient"), eps = ctx.attrFloat("epsilon"), decay = ctx.attrFloat("decay_factor");
  optimizerKernel(ctx, 3, [&](const UpdateArgs& a, std::vector<std::vector<double>>& out) {
    double rate = a.rate / (1 + static_cast<double>(a.step) * decay);
    const auto &x = a.operands[0], &g = a.operands[1], &h = a.operands[2];
    for (size_t i = 0; i < x.size(); ++i) {
      double gr = norm * x[i] + g[i];
      double hNew = h[i] + gr * gr;
      out[0][i] = x[i] - rate * gr / (std::sqrt(hNew) + eps);
      out[1][i] = hNew;
    }
  });
}

void adamKernel(KernelContext& ctx) {
  double norm = ctx.attrFloat("norm_coefficient"), post = ctx.attrFloat("norm_coefficient_post");
  double alpha = ctx.attrFloat("alpha"), beta = ctx.attrFloat("beta"), eps = ctx.attrFloat("epsilon");
  optimizerKernel(ctx, 4, [&](const UpdateArgs& a, std::vector<std::vector<double>>& out) {
    double step = static_cast<double>(a.step);
    // Bias correction of both moments from the second update on.
    double rate = a.step > 0 ? a.rate * std::sqrt(1 - std::pow(beta, step)) / (1 - std::pow(alpha, step)) : a.rate;
    const auto &x = a.operands[0], &g = a.operands[1], &v = a.operands[2], &h = a.operands[3];
    for (size_t i = 0; i < x.size(); ++i) {
      double gr = norm * x[i] + g[i];
      double vNew = alpha * v[i] + (1 - alpha) * gr;
      double hNew = beta * h[i] + (1 - beta) * gr * gr;
      double xNew = x[i] - rate * (vNew / (std::sqrt(hNew) + eps));
      out[0][i] = (1 - post) * xNew;
      out[1][i] = vNew;
      out[2][i] = hNew;
    }
  });
}

void momentumKernel(KernelContext& ctx) {
  double norm = ctx.attrFloat("norm_coefficient"), alpha = ctx.attrFloat("alpha"), beta = ctx.attrFloat("beta");
  std::string mode = ctx.attrString("mode");
  if (mode != "standard" && mode != "nesterov") ctx.fail("mode must be 'standard' or 'nesterov', got '{}'", mode);
  bool nesterov = mode == "nesterov";
  optimizerKernel(ctx, 3, [&](const UpdateArgs& a, std::vector<std::vector<double>>& out) {
    double gradScale = a.step > 0 ? beta : 1.0;  // the first update takes the whole gradient
    const auto &x = a.operands[0], &g = a.operands[1], &v = a.operands[2];
    for (size_t i = 0; i < x.size(); ++i) {
      double gr = norm * x[i] + g[i];
      double vNew = alpha * v[i] + gradScale * gr;
      out[0][i] = nesterov ? x[i] - a.rate * (gr + alpha * vNew) : x[i] - a.rate * vNew;
      out[1][i] = vNew;
    }
  });
}

}  // namespace

TESSEL_REGISTER_OP(training_Adagrad) {
  return OpDef("Adagrad", kTrainingDomain).inputs(3, kVariadic).outputs(1, kVariadic).since(1)
      .attr("decay_factor", AttrKind::Float, 0.0f)
      .attr("epsilon", AttrKind::Float, 1e-6f)
      .attr("norm_coefficient", AttrKind::Float, 0.0f)
      .describe("R, T, X..., G..., H... -> X_new..., H_new... (Adagrad with decaying rate and L2 term)")
      .infer([](InferContext& ctx) { inferOptimizer(ctx, 3); })
      .kernel(adagradKernel)
      .cost(costPerElement(8));
}

TESSEL_REGISTER_OP(training_Adam) {
  return OpDef("Adam", kTrainingDomain).inputs(4, kVariadic).outputs(1, kVariadic).since(1)
      .attr("alpha", AttrKind::Float, 0.9f)
      .attr("beta", AttrKind::Float, 0.999f)
      .attr("epsilon", AttrKind::Float, 1e-6f)
      .attr("norm_coefficient", AttrKind::Float, 0.0f)
      .attr("norm_coefficient_post", AttrKind::Float, 0.0f)
      .describe("R, T, X..., G..., V..., H... -> X_new..., V_new..., H_new... (Adam with bias correction)")
      .infer([](InferContext& ctx) { inferOptimizer(ctx, 4); })
      .kernel(adamKernel)
      .cost(costPerElement(12));
}

TESSEL_REGISTER_OP(training_Momentum) {
  return OpDef("Momentum", kTrainingDomain).inputs(3, kVariadic).outputs(1, kVariadic).since(1)
      .requiredAttr("alpha", AttrKind::Float)
      .requiredAttr("beta", AttrKind::Float)
      .requiredAttr("mode", AttrKind::String)
      .requiredAttr("norm_coefficient", AttrKind::Float)
      .describe("R, T, X..., G..., V... -> X_new..., V_new... (SGD with standard or Nesterov momentum)")
      .infer([](InferContext& ctx) { inferOptimizer(ctx, 3); })
      .kernel(momentumKernel)
      .cost(costPerElement(6));
}

}  // namespace tessel
