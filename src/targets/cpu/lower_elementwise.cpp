// Lowering of element-wise nodes to the runtime's kernels: binary ops with their broadcasting forms,
// unary math, activations (as the fused kernels' epilogue, applied alone), inference BatchNormalization,
// and the epilogue expression every fused kernel call takes.
#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "lowerer.h"

namespace tessel::cpu {

/// The epilogue activation an elementwise node computes, if it is one the kernels fuse.
std::optional<FusedAct> Lowerer::activationOf(const Node* n) const {
  const std::string& op = n->opType();
  if (!n->domain().empty()) return std::nullopt;
  if (op == "Relu") return FusedAct{"Relu"};
  if (op == "Sigmoid") return FusedAct{"Sigmoid"};
  if (op == "Tanh") return FusedAct{"Tanh"};
  if (op == "HardSwish") return FusedAct{"HardSwish"};
  if (op == "Gelu" && (!n->hasAttr("approximate") || n->attrString("approximate") == "none")) return FusedAct{"Gelu"};
  if (op == "LeakyRelu") return FusedAct{"LeakyRelu", n->attrFloat("alpha")};
  if (op == "HardSigmoid") return FusedAct{"HardSigmoid", n->attrFloat("alpha"), n->attrFloat("beta")};
  if (op == "Clip") {
    FusedAct a{"Clip", -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
    for (size_t i = 1; i <= 2; ++i) {
      if (!n->hasInput(i)) continue;
      const Tensor* bound = constTensor(n->input(i));
      if (!bound || bound->numel() != 1) return std::nullopt;
      float v = static_cast<float>(bound->elementAsDouble(0));
      (i == 1 ? a.alpha : a.beta) = v;
    }
    return a;
  }
  return std::nullopt;
}

FusedAct Lowerer::fusedEpilogueOf(const Node* n) {
  FusedAct act;
  const std::string a = n->attrString("activation");
  auto params = n->attrFloats("activation_params");
  if (!a.empty()) act.kind = a == "SiLU" ? "Silu" : a;
  if (params.size() > 0) act.alpha = params[0];
  if (params.size() > 1) act.beta = params[1];
  if (a == "LeakyRelu" && params.empty()) act.alpha = 0.01f;
  if (a == "HardSigmoid" && params.empty()) act.alpha = 0.2f, act.beta = 0.5f;
  return act;
}

std::string Lowerer::epilogueExpr(int bias, int residual, const FusedAct& act, bool perColumn) const {
  return fmt::format("epi({}, {}, rt::Activation::{}, {}, {}, {})", bias < 0 ? "nullptr" : ref(bias),
                     residual < 0 ? "nullptr" : ref(residual), act.kind, floatLiteral(act.alpha),
                     floatLiteral(act.beta), perColumn ? "true" : "false");
}

bool Lowerer::lowerBinary(const Node* n) {
  static const std::map<std::string, std::string> ops = {{"Add", "Add"}, {"Sub", "Sub"}, {"Mul", "Mul"},
                                                         {"Div", "Div"}, {"Max", "Max"}, {"Min", "Min"}};
  auto it = ops.find(n->opType());
  if (it == ops.end() || n->numInputs() != 2) return false;
  const std::string op = "rt::BinaryOp::" + it->second;
  bool commutative = it->second != "Sub" && it->second != "Div";
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
  int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  const Shape& xs = plan_.tensors[x].shape;
  int64_t C = static_cast<int64_t>(scale.size()), inner = 1;
  for (size_t i = 2; i < xs.size(); ++i) inner *= xs[i];
  int s = weightTensor(n->name() + ".scale", scale, {C}), t = weightTensor(n->name() + ".shift", shift, {C});
  addStep({n->name(), "BatchNormalization", "binary_channel"}, fmt::format("BatchNormalization '{}'", n->name()),
          fmt::format("rt::binary_channel(rt::BinaryOp::Mul, {}, {}, {}, {}, {}, {}, pool);\n  "
                      "rt::binary_channel(rt::BinaryOp::Add, {}, {}, {}, {}, {}, {}, pool);",
                      ref(x), ref(s), ref(y), xs[0], C, inner, ref(y), ref(t), ref(y), xs[0], C, inner),
          {x, s, t}, {y}, x);
  return true;
}

}  // namespace tessel::cpu
