// Recurrent layers RNN, GRU and LSTM: both layouts, forward/reverse/bidirectional, sequence_lens, initial
// states, LSTM peepholes and input_forget, GRU linear_before_reset, activations with alpha/beta, clip.
#include <algorithm>
#include <cmath>

#include "tessel/ops/helpers.h"

namespace tessel {
namespace {

enum class RnnKind { Simple, Gru, Lstm };

int gatesOf(RnnKind k) { return k == RnnKind::Simple ? 1 : k == RnnKind::Gru ? 3 : 4; }
/// Activations per direction: RNN f; GRU f, g; LSTM f, g, h.
size_t activationsOf(RnnKind k) { return k == RnnKind::Simple ? 1 : k == RnnKind::Gru ? 2 : 3; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// One activation function with its parameters.
struct Activation {
  std::string name;  ///< lower case
  double alpha = 0, beta = 0;

  double operator()(double x) const {
    if (name == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "tanh") return std::tanh(x);
    if (name == "relu") return std::max(0.0, x);
    if (name == "affine") return alpha * x + beta;
    if (name == "leakyrelu") return x >= 0 ? x : alpha * x;
    if (name == "thresholdedrelu") return x > alpha ? x : 0.0;
    if (name == "scaledtanh") return alpha * std::tanh(beta * x);
    if (name == "hardsigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
    if (name == "elu") return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
    if (name == "softsign") return x / (1.0 + std::fabs(x));
    return std::log1p(std::exp(x));  // softplus (names are validated when parsed)
  }
};

/// Default (alpha, beta) and which of them the function takes.
struct ActivationParams {
  bool takesAlpha, takesBeta;
  double alpha, beta;
};

std::optional<ActivationParams> activationParams(const std::string& n) {
  if (n == "sigmoid" || n == "tanh" || n == "relu" || n == "softsign" || n == "softplus") return ActivationParams{false, false, 0, 0};
  if (n == "affine") return ActivationParams{true, true, 1.0, 0.0};
  if (n == "leakyrelu") return ActivationParams{true, false, 0.01, 0};
  if (n == "thresholdedrelu") return ActivationParams{true, false, 1.0, 0};
  if (n == "scaledtanh") return ActivationParams{true, true, 1.0, 1.0};
  if (n == "hardsigmoid") return ActivationParams{true, true, 0.2, 0.5};
  if (n == "elu") return ActivationParams{true, false, 1.0, 0};
  return std::nullopt;
}

/// Everything a recurrent node's attributes say.
struct RnnConfig {
  RnnKind kind;
  int64_t hidden = -1;
  int64_t directions = 1;
  bool reverseOnly = false;
  bool batchFirst = false;  ///< layout = 1
  std::optional<double> clip;
  bool linearBeforeReset = false;
  bool inputForget = false;
  std::vector<std::vector<Activation>> activations;  ///< per direction
};

RnnConfig readConfig(const Node& node, RnnKind kind) {
  RnnConfig c;
  c.kind = kind;
  auto fail = [&](const std::string& m) -> UserError { return UserError(fmt::format("{}: {}", node.describe(), m)); };
  std::string dir = node.attrString("direction");
  if (dir == "bidirectional") c.directions = 2;
  else if (dir == "reverse") c.reverseOnly = true;
  else if (dir != "forward") throw fail(fmt::format("direction must be forward, reverse or bidirectional, got '{}'", dir));
  if (node.hasAttr("hidden_size")) {
    c.hidden = node.attrInt("hidden_size");
    if (c.hidden <= 0) throw fail(fmt::format("hidden_size must be positive, got {}", c.hidden));
  }
  int64_t layout = node.attrInt("layout");
  if (layout != 0 && layout != 1) throw fail(fmt::format("layout must be 0 or 1, got {}", layout));
  c.batchFirst = layout == 1;
  if (node.hasAttr("clip")) {
    c.clip = node.attrFloat("clip");
    if (*c.clip <= 0) throw fail(fmt::format("clip must be positive, got {}", *c.clip));
  }
  if (kind == RnnKind::Gru) c.linearBeforeReset = node.attrInt("linear_before_reset") != 0;
  if (kind == RnnKind::Lstm) c.inputForget = node.attrInt("input_forget") != 0;

  size_t per = activationsOf(kind);
  std::vector<std::string> names;
  if (node.hasAttr("activations")) names = node.attrStrings("activations");
  if (names.empty()) {
    std::vector<std::string> defaults = kind == RnnKind::Simple ? std::vector<std::string>{"Tanh"}
                                        : kind == RnnKind::Gru  ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < c.directions; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (names.size() == per && c.directions == 2) {
    names.insert(names.end(), names.begin(), names.end());  // one set given for both directions
  }
  if (names.size() != per * static_cast<size_t>(c.directions))
    throw fail(fmt::format("activations lists {} function(s), expected {} ({} per direction)", names.size(),
                           per * static_cast<size_t>(c.directions), per));
  std::vector<float> alphas = node.hasAttr("activation_alpha") ? node.attrFloats("activation_alpha") : std::vector<float>{};
  std::vector<float> betas = node.hasAttr("activation_beta") ? node.attrFloats("activation_beta") : std::vector<float>{};
  // Parameters are consumed in order by the functions that take them.
  size_t ai = 0, bi = 0;
  c.activations.resize(static_cast<size_t>(c.directions));
  for (size_t i = 0; i < names.size(); ++i) {
    Activation a{lower(names[i])};
    auto params = activationParams(a.name);
    if (!params) throw fail(fmt::format("unknown activation function '{}'", names[i]));
    a.alpha = params->alpha;
    a.beta = params->beta;
    if (params->takesAlpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (params->takesBeta && bi < betas.size()) a.beta = betas[bi++];
    c.activations[i / per].push_back(a);
  }
  return c;
}

// ---------------------------------------------------------------- inference

Dim dimOf(const TensorType& t, size_t i) { return t.hasRank() && i < t.rank() ? (*t.dims)[i] : Dim::unknown(); }

void inferRecurrent(InferContext& ctx, RnnKind kind) {
  RnnConfig c = readConfig(ctx.node(), kind);
  const TensorType& x = ctx.inputType(0);
  if (!isFloat(x.dtype)) ctx.fail("X must be a floating-point tensor, found {}", dtypeName(x.dtype));
  if (x.hasRank() && x.rank() != 3) ctx.fail("X must have rank 3 ([seq, batch, input] or [batch, seq, input]), found {}", x.toString());
  const TensorType& w = ctx.inputType(1);
  const TensorType& r = ctx.inputType(2);
  if (w.hasRank() && w.rank() != 3) ctx.fail("W must have rank 3, found {}", w.toString());
  if (r.hasRank() && r.rank() != 3) ctx.fail("R must have rank 3, found {}", r.toString());
  Dim hidden = c.hidden > 0 ? Dim::known(c.hidden) : dimOf(r, 2);
  Dim dw = dimOf(w, 1);
  if (hidden.isKnown() && dw.isKnown() && dw.value != gatesOf(kind) * hidden.value)
    ctx.fail("W has {} rows, expected {} gate(s) x hidden_size {} = {}", dw.value, gatesOf(kind), hidden.value,
             gatesOf(kind) * hidden.value);
  Dim d0 = dimOf(w, 0);
  if (d0.isKnown() && d0.value != c.directions)
    ctx.fail("W has {} direction(s) on axis 0, the direction attribute implies {}", d0.value, c.directions);
  Dim seq = dimOf(x, c.batchFirst ? 1 : 0), batch = dimOf(x, c.batchFirst ? 0 : 1);
  Dim dirs = Dim::known(c.directions);
  if (ctx.hasOutput(0))
    ctx.setOutputType(0, TensorType(x.dtype, c.batchFirst ? std::vector<Dim>{batch, seq, dirs, hidden}
                                                          : std::vector<Dim>{seq, dirs, batch, hidden}));
  std::vector<Dim> state = c.batchFirst ? std::vector<Dim>{batch, dirs, hidden} : std::vector<Dim>{dirs, batch, hidden};
  for (size_t i = 1; i < ctx.numOutputs(); ++i)
    if (ctx.hasOutput(i)) ctx.setOutputType(i, TensorType(x.dtype, state));
}

// ---------------------------------------------------------------- kernel

/// Inputs as doubles plus the geometry, shared by the three cells.
struct RnnProblem {
  RnnConfig cfg;
  int64_t seq = 0, batch = 0, inputSize = 0, hidden = 0, gates = 0;
  std::vector<double> x, w, r, bias, initH, initC, peep;
  std::vector<int64_t> seqLens;

  double xAt(int64_t t, int64_t b, int64_t k) const {
    return x[static_cast<size_t>((cfg.batchFirst ? (b * seq + t) : (t * batch + b)) * inputSize + k)];
  }
  /// Index of state (direction d, batch b, unit j) in initial_h / Y_h / Y_c.
  size_t stateIndex(int64_t d, int64_t b, int64_t j) const {
    int64_t dirs = cfg.directions;
    return static_cast<size_t>((cfg.batchFirst ? (b * dirs + d) : (d * batch + b)) * hidden + j);
  }
  size_t yIndex(int64_t t, int64_t d, int64_t b, int64_t j) const {
    int64_t dirs = cfg.directions;
    return static_cast<size_t>((cfg.batchFirst ? ((b * seq + t) * dirs + d) : ((t * dirs + d) * batch + b)) * hidden + j);
  }
};

void checkShape(const KernelContext& ctx, const Tensor& t, const Shape& expected, const char* what) {
  if (t.shape() != expected)
    ctx.fail("{} has shape [{}], expected [{}]", what, fmt::join(t.shape(), ","), fmt::join(expected, ","));
}

RnnProblem loadProblem(KernelContext& ctx, RnnKind kind) {
  RnnProblem p;
  p.cfg = readConfig(ctx.node(), kind);
  const Tensor& x = ctx.input(0);
  if (x.rank() != 3) ctx.fail("X must have rank 3, found shape [{}]", fmt::join(x.shape(), ","));
  p.seq = x.dim(p.cfg.batchFirst ? 1 : 0);
  p.batch = x.dim(p.cfg.batchFirst ? 0 : 1);
  p.inputSize = x.dim(2);
  p.gates = gatesOf(kind);
  const Tensor& r = ctx.input(2);
  if (r.rank() != 3) ctx.fail("R must have rank 3, found shape [{}]", fmt::join(r.shape(), ","));
  p.hidden = p.cfg.hidden > 0 ? p.cfg.hidden : r.dim(2);
  int64_t D = p.cfg.directions, GH = p.gates * p.hidden;
  checkShape(ctx, ctx.input(1), {D, GH, p.inputSize}, "W");
  checkShape(ctx, r, {D, GH, p.hidden}, "R");
  p.x = x.toDoubleVector();
  p.w = ctx.input(1).toDoubleVector();
  p.r = r.toDoubleVector();
  p.bias.assign(static_cast<size_t>(D * 2 * GH), 0.0);
  if (ctx.hasInput(3)) {
    checkShape(ctx, ctx.input(3), {D, 2 * GH}, "B");
    p.bias = ctx.input(3).toDoubleVector();
  }
  p.seqLens.assign(static_cast<size_t>(p.batch), p.seq);
  if (ctx.hasInput(4)) {
    checkShape(ctx, ctx.input(4), {p.batch}, "sequence_lens");
    p.seqLens = ctx.input(4).toInt64Vector();
    for (int64_t l : p.seqLens)
      if (l < 0 || l > p.seq) ctx.fail("sequence_lens holds {}, outside [0, {}]", l, p.seq);
  }
  Shape stateShape = p.cfg.batchFirst ? Shape{p.batch, D, p.hidden} : Shape{D, p.batch, p.hidden};
  p.initH.assign(static_cast<size_t>(D * p.batch * p.hidden), 0.0);
  if (ctx.hasInput(5)) {
    checkShape(ctx, ctx.input(5), stateShape, "initial_h");
    p.initH = ctx.input(5).toDoubleVector();
  }
  p.initC.assign(p.initH.size(), 0.0);
  if (kind == RnnKind::Lstm && ctx.hasInput(6)) {
    checkShape(ctx, ctx.input(6), stateShape, "initial_c");
    p.initC = ctx.input(6).toDoubleVector();
  }
  p.peep.assign(static_cast<size_t>(D * 3 * p.hidden), 0.0);
  if (kind == RnnKind::Lstm && ctx.hasInput(7)) {
    checkShape(ctx, ctx.input(7), {D, 3 * p.hidden}, "P");
    p.peep = ctx.input(7).toDoubleVector();
  }
  return p;
}

/// dot(row j of a [rows, n] block starting at `base`, v)
double rowDot(const std::vector<double>& m, size_t base, int64_t j, const std::vector<double>& v, int64_t n) {
  double s = 0;
  const double* row = m.data() + base + static_cast<size_t>(j * n);
  for (int64_t k = 0; k < n; ++k) s += row[k] * v[static_cast<size_t>(k)];
  return s;
}

/// One GRU step (gate order z, r, h): next = (1 - z) * candidate + z * h.
template <class Clip>
void gruStep(const RnnProblem& p, const std::vector<Activation>& act, Clip&& clip, const std::vector<double>& xw,
             const std::vector<double>& hr, size_t rBase, const double* rb, const std::vector<double>& h,
             std::vector<double>& next) {
  int64_t H = p.hidden;
  std::vector<double> z(static_cast<size_t>(H)), resetH(static_cast<size_t>(H)), rgate(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) {
    auto J = static_cast<size_t>(j);
    z[J] = act[0](clip(xw[J] + hr[J] + rb[j]));
    rgate[J] = act[0](clip(xw[J + H] + hr[J + H] + rb[j + H]));
    resetH[J] = rgate[J] * h[J];
  }
  for (int64_t j = 0; j < H; ++j) {
    auto J = static_cast<size_t>(j);
    double pre;
    if (p.cfg.linearBeforeReset) {
      pre = xw[J + 2 * H] + rgate[J] * (hr[J + 2 * H] + rb[j + 2 * H]);
    } else {
      // (r * h) R_h^T: the recurrence sees the reset-scaled state.
      pre = xw[J + 2 * H] + rowDot(p.r, rBase, j + 2 * H, resetH, H) + rb[j + 2 * H];
    }
    next[J] = (1 - z[J]) * act[1](clip(pre)) + z[J] * h[J];
  }
}

/// Runs one direction for one batch entry, writing Y (if given) and the final states.
void runSequence(const RnnProblem& p, int64_t d, int64_t b, bool reverse, std::vector<double>* y,
                 std::vector<double>& yh, std::vector<double>& yc) {
  const RnnConfig& c = p.cfg;
  int64_t H = p.hidden, I = p.inputSize, GH = p.gates * H;
  const auto& act = c.activations[static_cast<size_t>(d)];
  auto clip = [&](double v) { return c.clip ? std::clamp(v, -*c.clip, *c.clip) : v; };
  std::vector<double> h(static_cast<size_t>(H)), cell(static_cast<size_t>(H)), xt(static_cast<size_t>(I));
  for (int64_t j = 0; j < H; ++j) {
    h[static_cast<size_t>(j)] = p.initH[p.stateIndex(d, b, j)];
    cell[static_cast<size_t>(j)] = p.initC[p.stateIndex(d, b, j)];
  }
  size_t wBase = static_cast<size_t>(d * GH * I), rBase = static_cast<size_t>(d * GH * H);
  const double* wb = p.bias.data() + d * 2 * GH;
  const double* rb = wb + GH;
  const double* peep = p.peep.data() + d * 3 * H;
  int64_t len = p.seqLens[static_cast<size_t>(b)];
  std::vector<double> xw(static_cast<size_t>(GH)), hr(static_cast<size_t>(GH)), next(static_cast<size_t>(H));
  for (int64_t step = 0; step < len; ++step) {
    int64_t t = reverse ? len - 1 - step : step;
    for (int64_t k = 0; k < I; ++k) xt[static_cast<size_t>(k)] = p.xAt(t, b, k);
    for (int64_t j = 0; j < GH; ++j) {
      xw[static_cast<size_t>(j)] = rowDot(p.w, wBase, j, xt, I) + wb[j];
      hr[static_cast<size_t>(j)] = rowDot(p.r, rBase, j, h, H);
    }
    if (c.kind == RnnKind::Gru) {
      gruStep(p, act, clip, xw, hr, rBase, rb, h, next);
    } else {
      for (int64_t j = 0; j < H; ++j) {
        auto J = static_cast<size_t>(j);
        if (c.kind == RnnKind::Simple) {
          next[J] = act[0](clip(xw[J] + hr[J] + rb[j]));
          continue;
        }
        // LSTM gate order i, o, f, c; peepholes i, o, f.
        double cprev = cell[J];
        double i = act[0](clip(xw[J] + hr[J] + rb[j] + peep[j] * cprev));
        double f = c.inputForget ? 1 - i : act[0](clip(xw[J + 2 * H] + hr[J + 2 * H] + rb[j + 2 * H] + peep[j + 2 * H] * cprev));
        double g = act[1](clip(xw[J + 3 * H] + hr[J + 3 * H] + rb[j + 3 * H]));
        double cnew = f * cprev + i * g;
        double o = act[0](clip(xw[J + H] + hr[J + H] + rb[j + H] + peep[j + H] * cnew));
        cell[J] = cnew;
        next[J] = o * act[2](cnew);
      }
    }
    h = next;
    if (y)
      for (int64_t j = 0; j < H; ++j) (*y)[p.yIndex(t, d, b, j)] = h[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j < H; ++j) {
    yh[p.stateIndex(d, b, j)] = h[static_cast<size_t>(j)];
    yc[p.stateIndex(d, b, j)] = cell[static_cast<size_t>(j)];
  }
}

template <class T>
Tensor toTensor(const std::vector<double>& v, DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  T* d = t.data<T>();
  for (size_t i = 0; i < v.size(); ++i) d[i] = T(static_cast<compute_t<T>>(v[i]));
  return t;
}

void recurrentKernel(KernelContext& ctx, RnnKind kind) {
  RnnProblem p = loadProblem(ctx, kind);
  int64_t D = p.cfg.directions;
  size_t stateSize = static_cast<size_t>(D * p.batch * p.hidden);
  std::vector<double> y(static_cast<size_t>(p.seq) * stateSize, 0.0), yh(stateSize, 0.0), yc(stateSize, 0.0);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t b = 0; b < p.batch; ++b) runSequence(p, d, b, p.cfg.reverseOnly || d == 1, &y, yh, yc);
  DType dt = ctx.input(0).dtype();
  Shape yShape = p.cfg.batchFirst ? Shape{p.batch, p.seq, D, p.hidden} : Shape{p.seq, D, p.batch, p.hidden};
  Shape stateShape = p.cfg.batchFirst ? Shape{p.batch, D, p.hidden} : Shape{D, p.batch, p.hidden};
  dispatchFloat(dt, "recurrent layer input X", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (ctx.numOutputs() > 0 && ctx.outputRequested(0)) ctx.setOutput(0, toTensor<T>(y, dt, yShape));
    if (ctx.numOutputs() > 1 && ctx.outputRequested(1)) ctx.setOutput(1, toTensor<T>(yh, dt, stateShape));
    if (ctx.numOutputs() > 2 && ctx.outputRequested(2)) ctx.setOutput(2, toTensor<T>(yc, dt, stateShape));
  });
}

/// FLOPs: per step and direction, gates x hidden rows of (input + hidden) multiply-adds.
CostFn recurrentCost(RnnKind kind) {
  return [kind](const Node& node) {
    Cost c;
    for (Value* v : node.inputs()) c.bytesRead += staticBytes(v);
    for (Value* v : node.outputs()) c.bytesWritten += staticBytes(v);
    const TensorType& x = node.input(0)->type;
    const TensorType& r = node.input(2)->type;
    if (x.isStatic() && r.isStatic()) {
      Shape xs = x.staticShape(), rs = r.staticShape();
      c.flops = 2.0 * static_cast<double>(xs[0] * xs[1] * rs[0] * rs[1] * (xs[2] + rs[2]));
    }
    (void)kind;
    return c;
  };
}

/// Attributes common to the three layers (opset 7 to 14; `layout` arrived in 14 with default 0).
OpDef recurrentDef(const char* name, RnnKind kind, int maxInputs, int maxOutputs, const char* doc) {
  OpDef d(name);
  d.inputs(3, maxInputs)
      .outputs(0, maxOutputs)
      .since(7)
      .optionalAttr("activation_alpha", AttrKind::Floats)
      .optionalAttr("activation_beta", AttrKind::Floats)
      .optionalAttr("activations", AttrKind::Strings)
      .optionalAttr("clip", AttrKind::Float)
      .attr("direction", AttrKind::String, std::string("forward"))
      .optionalAttr("hidden_size", AttrKind::Int)
      .attr("layout", AttrKind::Int, int64_t{0})
      .describe(doc)
      .infer([kind](InferContext& ctx) { inferRecurrent(ctx, kind); })
      .kernel([kind](KernelContext& ctx) { recurrentKernel(ctx, kind); })
      .cost(recurrentCost(kind));
  return d;
}

}  // namespace

TESSEL_REGISTER_OP(RNN) {
  return recurrentDef("RNN", RnnKind::Simple, 6, 2, "H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb); outputs Y (all H_t), Y_h (last)");
}

TESSEL_REGISTER_OP(GRU) {
  return recurrentDef("GRU", RnnKind::Gru, 6, 2, "gated recurrent unit (gates z, r, h); outputs Y, Y_h")
      .attr("linear_before_reset", AttrKind::Int, int64_t{0});
}

TESSEL_REGISTER_OP(LSTM) {
  return recurrentDef("LSTM", RnnKind::Lstm, 8, 3, "long short-term memory (gates i, o, f, c, peepholes); outputs Y, Y_h, Y_c")
      .attr("input_forget", AttrKind::Int, int64_t{0});
}

}  // namespace tessel
