// Lowering of tessel.FusedElementwise (from the fuse-elementwise pass): the chain in its body becomes one
// generated vector loop, 8 floats per iteration (a masked tail), split over the threads in 1024-float
// chunks, so the chain reads its inputs once and writes one output instead of one tensor per node. A
// body this loop cannot express (an input that broadcasts along an axis, an op without a vector form)
// is lowered node by node instead.
#include <cmath>
#include <limits>

#include "lowerer.h"

namespace tessel::cpu {
namespace {

/// A scalar float constant of the body, or nullopt.
std::optional<float> scalarConst(const Value* v) {
  const Tensor* t = constTensor(v);
  if (t == nullptr || t->numel() != 1) return std::nullopt;
  return static_cast<float>(t->elementAsDouble(0));
}

std::string set1(float v) { return fmt::format("_mm256_set1_ps({})", floatLiteral(v)); }

/// act(x) on a vector of 8 floats (the runtime's epilogue activations, as rt::activate computes them).
std::string activationVectorExpr(const FusedAct& act, const std::string& x) {
  switch (act.kind) {
    case rt::Activation::None: return x;
    case rt::Activation::Relu: return fmt::format("_mm256_max_ps({}, _mm256_setzero_ps())", x);
    case rt::Activation::Clip:
      return fmt::format("_mm256_min_ps(_mm256_max_ps({}, {}), {})", x, set1(act.alpha), set1(act.beta));
    case rt::Activation::LeakyRelu:
      return fmt::format("_mm256_blendv_ps(_mm256_mul_ps({0}, {1}), {0}, _mm256_cmp_ps({0}, _mm256_setzero_ps(), _CMP_GE_OQ))",
                         x, set1(act.alpha));
    case rt::Activation::Sigmoid: return fmt::format("rt::vsigmoid({})", x);
    case rt::Activation::HardSigmoid:
      return fmt::format("rt::vhardsigmoid({}, {}, {})", x, floatLiteral(act.alpha), floatLiteral(act.beta));
    case rt::Activation::HardSwish: return fmt::format("rt::vhardswish({})", x);
    case rt::Activation::Silu: return fmt::format("rt::vsilu({})", x);
    case rt::Activation::Gelu: return fmt::format("rt::vgelu({})", x);
    case rt::Activation::Tanh: return fmt::format("rt::vtanh({})", x);
  }
  return "";
}

/// The vector expression of one body node over its operands' expressions, or "" when it has none.
std::string vectorExpr(const Node& n, const std::vector<std::string>& in) {
  const std::string& op = n.opType();
  if (!n.domain().empty()) return "";
  if (auto act = activationOf(&n)) return activationVectorExpr(*act, in[0]);
  static const std::map<std::string, std::string> binary = {{"Add", "_mm256_add_ps"}, {"Sub", "_mm256_sub_ps"},
                                                            {"Mul", "_mm256_mul_ps"}, {"Div", "_mm256_div_ps"},
                                                            {"Max", "_mm256_max_ps"}, {"Min", "_mm256_min_ps"}};
  if (auto it = binary.find(op); it != binary.end())
    return in.size() == 2 ? fmt::format("{}({}, {})", it->second, in[0], in[1]) : "";
  // Unary math (activations are above).
  static const std::map<std::string, std::string> unary = {
      {"Exp", "rt::vexp({})"}, {"Log", "rt::vlog({})"}, {"Erf", "rt::verf({})"}, {"Sqrt", "_mm256_sqrt_ps({})"},
      {"Neg", "_mm256_sub_ps(_mm256_setzero_ps(), {})"},
      {"Abs", "_mm256_andnot_ps(_mm256_set1_ps(-0.0f), {})"},
      {"Reciprocal", "_mm256_div_ps(_mm256_set1_ps(1.0f), {})"},
      {"Floor", "_mm256_round_ps({}, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)"},
      {"Ceil", "_mm256_round_ps({}, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC)"},
      {"Round", "_mm256_round_ps({}, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)"}};
  if (auto it = unary.find(op); it != unary.end()) return fmt::format(fmt::runtime(it->second), in[0]);
  if (isOp(n, "Pow")) {
    auto e = scalarConst(n.input(1));
    if (!e) return "";
    if (*e == 1.0f) return in[0];
    if (*e == 2.0f) return fmt::format("_mm256_mul_ps({0}, {0})", in[0]);
    if (*e == 3.0f) return fmt::format("_mm256_mul_ps(_mm256_mul_ps({0}, {0}), {0})", in[0]);
    if (*e == 0.5f) return fmt::format("_mm256_sqrt_ps({})", in[0]);
    if (*e == -1.0f) return fmt::format("_mm256_div_ps(_mm256_set1_ps(1.0f), {})", in[0]);
    return "";
  }
  return "";
}

}  // namespace

bool Lowerer::lowerFusedElementwise(const Node* n) { return lowerFusedLoop(n) || lowerBodyNodes(n); }

bool Lowerer::lowerFusedLoop(const Node* n) {
  const Graph& body = n->attrGraph("body");
  const Value* out = n->output(0);
  const Shape ys = out->type.staticShape();
  const int64_t count = shapeSize(ys);
  if (body.outputs().size() != 1 || body.inputs().size() != n->numInputs()) return false;
  std::map<const Value*, std::string> var;  // body value -> C++ expression
  std::string hoisted, params, args, tailArgs, chain;
  std::vector<int> reads;
  std::vector<std::string> inputPtrs;
  int inplace = -1;
  for (size_t i = 0; i < n->numInputs(); ++i) {
    const Value* in = n->input(i);
    const int id = tensorOf(in);
    reads.push_back(id);
    if (in->type.staticShape() == ys) {  // one element per output element: a lambda argument
      var[body.inputs()[i]] = fmt::format("x{}", i);
      params += fmt::format("{}__m256 x{}", params.empty() ? "" : ", ", i);
      args += fmt::format("{}_mm256_loadu_ps({} + i)", args.empty() ? "" : ", ", ref(id));
      tailArgs += fmt::format("{}_mm256_maskload_ps({} + i, m)", tailArgs.empty() ? "" : ", ", ref(id));
      if (inplace < 0) inplace = id;
    } else if (plan_.tensors[id].numel == 1) {  // a scalar: broadcast once
      hoisted += fmt::format("    const __m256 s{} = _mm256_set1_ps({}[0]);\n", i, ref(id));
      var[body.inputs()[i]] = fmt::format("s{}", i);
    } else {
      return false;  // broadcasts along some axes: not one flat loop
    }
  }
  if (params.empty()) return false;  // all scalars: nothing to loop over
  int t = 0;
  for (const auto& node : body.nodes()) {
    const Node& bn = *node;
    if (isOp(bn, "Constant")) continue;  // read through constTensor
    std::vector<std::string> in;
    for (size_t i = 0; i < bn.numInputs(); ++i) {
      const Value* v = bn.input(i);
      if (v == nullptr) {
        in.emplace_back();
        continue;
      }
      if (auto it = var.find(v); it != var.end()) {
        in.push_back(it->second);
      } else if (auto c = scalarConst(v)) {
        in.push_back(set1(*c));
      } else {
        return false;  // a constant with several elements
      }
    }
    if (bn.numOutputs() != 1) return false;
    const std::string e = vectorExpr(bn, in);
    if (e.empty()) return false;
    chain += fmt::format("      const __m256 t{} = {};  // {}\n", t, e, bn.opType());
    var[bn.output(0)] = fmt::format("t{}", t++);
  }
  auto result = var.find(body.outputs()[0]);
  if (result == var.end()) return false;
  const int y = tensorOf(out);
  std::string ops;
  for (const auto& node : body.nodes())
    if (!isOp(*node, "Constant")) ops += (ops.empty() ? "" : ", ") + node->opType();
  constexpr int64_t kChunk = 1024;
  std::string code = fmt::format(
      "{{\n{}    auto chain = [&]({}) {{\n{}      return {};\n    }};\n"
      "    rt::parallel_for(pool, {}, [&](int64_t c0, int64_t c1) {{\n"
      "      const int64_t end = std::min<int64_t>({}, c1 * {});\n"
      "      int64_t i = c0 * {};\n"
      "      for (; i + 8 <= end; i += 8) _mm256_storeu_ps({} + i, chain({}));\n"
      "      if (i < end) {{\n"
      "        const __m256i m = rt::vtail_mask(static_cast<int>(end - i));\n"
      "        _mm256_maskstore_ps({} + i, m, chain({}));\n"
      "      }}\n"
      "    }});\n"
      "  }}",
      hoisted, params, chain, result->second, (count + kChunk - 1) / kChunk, count, kChunk, kChunk, ref(y), args, ref(y),
      tailArgs);
  plan_.report.fusedNodes += std::max<int>(0, static_cast<int>(body.nodes().size()) - 1);
  addStep({n->name(), "FusedElementwise", "fused_loop"},
          fmt::format("FusedElementwise '{}' ({}) over {} floats, one loop", n->name(), ops, count), code, reads, {y},
          inplace);
  return true;
}

bool Lowerer::lowerBodyNodes(const Node* n) {
  const Graph& body = n->attrGraph("body");
  if (body.outputs().size() != 1 || body.inputs().size() != n->numInputs()) return false;
  for (const auto& node : body.nodes())
    if (!floatsOnly(node.get()) || !node->subgraphs().empty()) return false;
  // The body's inputs and output are the node's; its other values get tensors of their own.
  for (size_t i = 0; i < n->numInputs(); ++i) ids_[body.inputs()[i]] = tensorOf(n->input(i));
  ids_[body.outputs()[0]] = tensorOf(n->output(0));
  for (const auto& node : body.nodes()) {
    const Node* bn = node.get();
    if (isOp(*bn, "Constant") && bn->hasAttr("value")) continue;
    if (!lowerNode(bn) && !lowerFallback(bn)) unsupported_.push_back(bn->describe() + " (inside " + n->describe() + ")");
  }
  return true;
}

}  // namespace tessel::cpu
