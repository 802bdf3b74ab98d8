// Lowering of element-wise nodes to the runtime's kernels: activations (the registry's FusibleEpilogue ops,
// applied alone with the fused kernels' epilogue), unary math, binary ops with their broadcasting forms,
// inference BatchNormalization, and the epilogue expression every fused kernel call takes.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <iterator>
#include <set>
#include <string_view>

#include "kernel_rules.h"
#include "lowerer.h"

namespace tessel::cpu {

namespace {

/// rt::Activation's enumerators as C++ spells them, indexed by value (from the runtime's own list).
constexpr const char* kActivationNames[] = {
#define TESSEL_RT_ACTIVATION_NAME(name) #name,
    TESSEL_RT_ACTIVATIONS(TESSEL_RT_ACTIVATION_NAME)
#undef TESSEL_RT_ACTIVATION_NAME
};

bool equalIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

/// The runtime's activation for an IR activation name: the enumerators are spelled as the ONNX ops they
/// compute ("Relu", "HardSigmoid"; the SiLU pattern is Silu). Nullopt when the runtime has none.
std::optional<rt::Activation> runtimeActivation(std::string_view name) {
  for (size_t i = 1; i < std::size(kActivationNames); ++i)  // 0 is None
    if (equalIgnoringCase(name, kActivationNames[i])) return static_cast<rt::Activation>(i);
  return std::nullopt;
}

/// The epilogue for an activation name ("" = none) and its activation_params.
std::optional<FusedAct> fusedAct(std::string_view name, const std::vector<float>& params) {
  FusedAct act;
  if (name.empty()) return act;
  auto kind = runtimeActivation(name);
  if (!kind) return std::nullopt;
  act.kind = *kind;
  if (params.size() > 0) act.alpha = params[0];
  if (params.size() > 1) act.beta = params[1];
  return act;
}

/// The ops rt::unary computes, as the rt::UnaryOp enumerator of the same name (its activations are reached
/// as epilogue activations instead: rt::UnaryOp::Gelu is the exact form only).
const std::set<std::string> kUnaryKernelOps = {"Exp", "Log", "Erf", "Neg", "Abs", "Sqrt", "Reciprocal"};
/// The ops rt::binary_same / _scalar / _channel / _broadcast compute, as rt::BinaryOp enumerators.
const std::set<std::string> kBinaryKernelOps = {"Add", "Sub", "Mul", "Div", "Max", "Min"};

}  // namespace

const char* activationName(rt::Activation a) { return kActivationNames[static_cast<size_t>(a)]; }

std::optional<FusedAct> activationOf(const Node* n) {
  auto params = epilogueParams(*n, constTensor);
  return params ? fusedAct(n->opType(), *params) : std::nullopt;
}

std::optional<FusedAct> fusedEpilogueOf(const Node* n) {
  return fusedAct(n->attrString("activation"), n->attrFloats("activation_params"));
}

std::string Lowerer::epilogueExpr(int bias, int residual, const FusedAct& act, bool perColumn) const {
  return fmt::format("epi({}, {}, rt::Activation::{}, {}, {}, {})", bias < 0 ? "nullptr" : ref(bias),
                     residual < 0 ? "nullptr" : ref(residual), activationName(act.kind), floatLiteral(act.alpha),
                     floatLiteral(act.beta), perColumn ? "true" : "false");
}

bool Lowerer::lowerElementwise(const Node* n) {
  const std::string& op = n->opType();
  if (auto act = activationOf(n)) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    addStep({n->name(), op, "apply_activation"}, fmt::format("{} '{}'", op, n->name()),
            fmt::format("activation({}, {}, {}, {});", ref(x), ref(y), plan_.tensors[x].numel,
                        epilogueExpr(-1, -1, *act)),
            {x}, {y}, x);
    return true;
  }
  if (kUnaryKernelOps.count(op)) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    addStep({n->name(), op, "unary"}, fmt::format("{} '{}'", op, n->name()),
            fmt::format("rt::unary(rt::UnaryOp::{}, {}, {}, {}, pool);", op, ref(x), ref(y), plan_.tensors[x].numel),
            {x}, {y}, x);
    return true;
  }
  return lowerBinary(n);
}

bool runsAsElementwiseKernel(const Node& n) {
  if (!n.domain().empty() || n.numOutputs() != 1) return false;
  return activationOf(&n) || kUnaryKernelOps.count(n.opType()) ||
         (kBinaryKernelOps.count(n.opType()) && n.numInputs() == 2);
}

bool Lowerer::lowerBinary(const Node* n) {
  if (!n->domain().empty() || !kBinaryKernelOps.count(n->opType()) || n->numInputs() != 2) return false;
  if (foldChannelScaleIntoConv(n)) return true;
  const std::string op = "rt::BinaryOp::" + n->opType();
  const bool commutative = hasTrait(*n, OpTrait::Commutative);
  int a = tensorOf(n->input(0)), b = tensorOf(n->input(1)), y = tensorOf(n->output(0));
  const Shape &as = plan_.tensors[a].shape, &bs = plan_.tensors[b].shape, &ys = plan_.tensors[y].shape;
  int64_t count = shapeSize(ys);
  std::string comment = fmt::format("{} '{}' {}", n->opType(), n->name(), shapeToString(ys));
  if (as == ys && bs == ys) {
    addStep({n->name(), n->opType(), "binary_same"}, comment, fmt::format("rt::binary_same({}, {}, {}, {}, {}, pool);", op, ref(a), ref(b), ref(y), count),
            {a, b}, {y}, a);
    return true;
  }
  // One operand a scalar: broadcast it.
  for (int side = 0; side < 2; ++side) {
    int big = side == 0 ? a : b, small = side == 0 ? b : a;
    if (plan_.tensors[big].shape != ys || plan_.tensors[small].numel != 1) continue;
    addStep({n->name(), n->opType(), "binary_scalar"}, comment, fmt::format("rt::binary_scalar({}, {}, {}[0], {}, {}, {}, pool);", op, ref(big), ref(small),
                                 side == 1 ? "true" : "false", ref(y), count),
            {a, b}, {y}, big);
    return true;
  }
  // In an NCHWc8 region (select-layout): a 4-D operand times one value per channel (squeeze-and-excitation's
  // scale, [N or 1, C, 1, 1]); its blocked layout is its NCHW one.
  if (runsBlocked(*n)) {
    for (int side = 0; side < 2; ++side) {
      int big = side == 0 ? a : b, small = side == 0 ? b : a;
      if (side == 1 && !commutative) break;
      const Shape& ss = plan_.tensors[small].shape;
      if (plan_.tensors[big].shape != ys || !channelScaleOperand(ss, ys)) continue;
      addStep({n->name(), n->opType(), "binary_channel_nchwc8"}, comment,
              fmt::format("rt::binary_channel_nchwc8({}, {}, {}, {}, {}, {}, {}, {}, pool);", op, ref(big), ref(small),
                          ss[0] == ys[0] && ys[0] > 1 ? "true" : "false", ref(y), ys[0], ys[1], ys[2] * ys[3]),
              {a, b}, {y}, big);
      return true;
    }
    return false;
  }
  // One operand varies along a single axis (per-channel bias/scale).
  for (int side = 0; side < 2; ++side) {
    int big = side == 0 ? a : b, small = side == 0 ? b : a;
    if (side == 1 && !commutative) break;
    const Shape& ss = plan_.tensors[small].shape;
    if (plan_.tensors[big].shape != ys || ss.size() > ys.size()) continue;
    int axis = -1;
    bool ok = true;
    for (size_t i = 0; i < ss.size(); ++i) {
      size_t yi = ys.size() - ss.size() + i;
      if (ss[i] == 1) continue;
      if (ss[i] != ys[yi] || axis >= 0) ok = false;
      axis = static_cast<int>(yi);
    }
    if (!ok || axis < 0) continue;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i) outer *= ys[i];
    for (size_t i = axis + 1; i < ys.size(); ++i) inner *= ys[i];
    addStep({n->name(), n->opType(), "binary_channel"}, comment, fmt::format("rt::binary_channel({}, {}, {}, {}, {}, {}, {}, pool);", op, ref(big), ref(small),
                                 ref(y), outer, ys[axis], inner),
            {a, b}, {y}, big);
    return true;
  }
  if (ys.size() > 8) return false;
  int id = shapeCounter_++;
  plan_.globals += fmt::format("static const int64_t kBa{}[] = {{{}}}, kBb{}[] = {{{}}}, kBy{}[] = {{{}}};\n", id,
                               fmt::join(as.empty() ? Shape{1} : as, ", "), id,
                               fmt::join(bs.empty() ? Shape{1} : bs, ", "), id, fmt::join(ys, ", "));
  addStep({n->name(), n->opType(), "binary_broadcast"}, comment,
          fmt::format("rt::binary_broadcast({}, {}, kBa{}, {}, {}, kBb{}, {}, {}, kBy{}, {}, pool);", op, ref(a), id,
                      std::max<size_t>(1, as.size()), ref(b), id, std::max<size_t>(1, bs.size()), ref(y), id,
                      ys.size()),
          {a, b}, {y});
  return true;
}

bool Lowerer::lowerBatchNorm(const Node* n) {
  if (n->numOutputs() != 1) return false;  // training outputs
  for (size_t i = 1; i < 5; ++i)
    if (!isConst(n->input(i))) return false;  // statistics computed at run time
  auto gamma = floatsOf(n->input(1)), beta = floatsOf(n->input(2)), mean = floatsOf(n->input(3)),
       var = floatsOf(n->input(4));
  float eps = n->attrFloat("epsilon");
  std::vector<float> scale(gamma.size()), shift(gamma.size());
  for (size_t c = 0; c < gamma.size(); ++c) {
    scale[c] = static_cast<float>(gamma[c] / std::sqrt(double(var[c]) + eps));
    shift[c] = beta[c] - mean[c] * scale[c];
  }
  // An activation that is the only user (DenseNet's BatchNormalization -> Relu before every conv) is
  // applied in the same pass.
  const Node* u = singleUser(n->output(0));
  std::optional<FusedAct> act;
  if (u && !absorbed_.count(u) && u->input(0) == n->output(0) && !runsBlocked(*n) && !runsBlocked(*u))
    act = activationOf(u);
  std::string what = "BatchNormalization";
  if (act) {
    absorbed_.insert(u);
    plan_.report.fusedNodes++;
    what += "+" + u->opType();
  }
  int x = tensorOf(n->input(0)), y = tensorOf(act ? u->output(0) : n->output(0));
  const Shape xs = plan_.tensors[x].shape;  // a copy: weightTensor below adds tensors (the vector may move)
  int64_t C = static_cast<int64_t>(scale.size()), inner = 1;
  for (size_t i = 2; i < xs.size(); ++i) inner *= xs[i];
  int s = weightTensor(n->name() + ".scale", scale, {C}), t = weightTensor(n->name() + ".shift", shift, {C});
  addStep({n->name(), what, "channel_affine"}, fmt::format("{} '{}'", what, n->name()),
          fmt::format("rt::channel_affine({}, {}, {}, {}, {}, {}, {}, {}, pool);", ref(x), ref(s), ref(t), ref(y),
                      xs[0], C, inner, epilogueExpr(-1, -1, act ? *act : FusedAct{})),
          {x, s, t}, {y}, x);
  return true;
}

}  // namespace tessel::cpu
