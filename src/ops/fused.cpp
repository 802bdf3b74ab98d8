// Tessel's own fused operators (domain "tessel"): convolution / GEMM with a bias + residual + activation
// epilogue, a chain of element-wise ops run as one loop, and scaled dot-product attention. Their reference kernels reuse the standard
// ops' kernels through the registry, so the interpreter runs optimised graphs and checks every fusion.
#include <cmath>
#include <limits>

#include "tessel/ops/helpers.h"
#include "tessel/ops/shape_inference.h"

namespace tessel {
namespace {

/// SiLU (x * Sigmoid(x), the pattern passes fuse) is the one epilogue activation that is not an op.
constexpr const char* kSilu = "SiLU";

/// The definition of an epilogue activation named by the `activation` attribute (an op with
/// OpTrait::FusibleEpilogue), or null for "" and SiLU.
const EpilogueActivation* epilogueOf(const std::string& act) {
  const OpDef* def = act.empty() || act == kSilu ? nullptr : OpRegistry::instance().find("", act);
  return def && def->epilogue ? &*def->epilogue : nullptr;
}

/// y = act(y) for the epilogue activations (the activation ops' float formulas).
float applyActivation(const std::string& act, const std::vector<float>& p, float x) {
  if (act.empty()) return x;
  if (act == kSilu) return x * epilogueOf("Sigmoid")->apply(x, {});
  const EpilogueActivation* e = epilogueOf(act);
  TESSEL_ASSERT(e != nullptr, "unknown fused activation '" + act + "'");
  return e->apply(x, p);
}

/// Number of parameters each activation takes in `activation_params`.
size_t activationParamCount(const std::string& act) {
  const EpilogueActivation* e = epilogueOf(act);
  return e ? e->paramCount : 0;
}

bool isKnownActivation(const std::string& act) { return act.empty() || act == kSilu || epilogueOf(act); }

/// "Clip, Gelu, ..., SiLU or \"\"" for the error message.
std::string knownActivations() {
  std::vector<std::string> names;
  for (const OpDef* d : opsWithTrait(OpTrait::FusibleEpilogue))
    if (d->domain.empty()) names.push_back(d->name);
  names.push_back(kSilu);
  return fmt::format("{} or \"\"", fmt::join(names, ", "));
}

/// Checks the activation attributes and the residual's type; shared by FusedConv and FusedGemm inference.
void checkEpilogue(InferContext& ctx, size_t residualInput) {
  const Node& node = ctx.node();
  std::string act = node.attrString("activation");
  if (!isKnownActivation(act)) ctx.fail("unknown activation '{}' (expected {})", act, knownActivations());
  size_t params = node.attrFloats("activation_params").size();
  if (params != activationParamCount(act))
    ctx.fail("activation '{}' takes {} activation_params, has {}", act, activationParamCount(act), params);
  if (!ctx.hasInput(residualInput) || !node.output(0)) return;
  const TensorType& r = ctx.inputType(residualInput);
  const TensorType& y = node.output(0)->type;
  if (r.isStatic() && y.isStatic() && r.staticShape() != y.staticShape())
    ctx.fail("residual (input {}) has type {}, expected the output's shape {}", residualInput, r.toString(), y.toString());
}

/// Runs the standard op `opName`'s kernel on the first `count` inputs of ctx, then adds the residual
/// (input `count`, same shape) and applies the activation.
void runWithEpilogue(KernelContext& ctx, const char* opName, size_t count) {
  const OpDef* base = OpRegistry::instance().find("", opName);
  TESSEL_ASSERT(base && base->kernelFn, std::string("no reference kernel for ") + opName);
  std::vector<const Tensor*> inputs;
  for (size_t i = 0; i < count; ++i) inputs.push_back(ctx.hasInput(i) ? &ctx.input(i) : nullptr);
  KernelContext inner(ctx.node(), inputs, nullptr, nullptr);
  base->kernelFn(inner);
  Tensor y = std::move(inner.outputs()[0]);
  if (y.dtype() != DType::Float32) ctx.fail("fused kernels compute float32 only, output is {}", dtypeName(y.dtype()));
  float* out = y.data<float>();
  if (ctx.hasInput(count)) {
    const Tensor& r = ctx.input(count);
    if (r.shape() != y.shape() || r.dtype() != DType::Float32)
      ctx.fail("residual has shape {}, expected float32 {}", shapeToString(r.shape()), shapeToString(y.shape()));
    const float* add = r.data<float>();
    for (int64_t i = 0; i < y.numel(); ++i) out[i] += add[i];
  }
  const std::string act = ctx.attrString("activation");
  const std::vector<float> params = ctx.attrFloats("activation_params");
  if (!act.empty())
    for (int64_t i = 0; i < y.numel(); ++i) out[i] = applyActivation(act, params, out[i]);
  ctx.setOutput(0, std::move(y));
}

/// A fused op with the epilogue attributes. The base op's attributes are declared here again (not copied
/// from the registry) because static registration order across files is unspecified.
OpDef fusedOp(const char* name) {
  OpDef def(name, "tessel");
  def.attr("activation", AttrKind::String, std::string(""))
      .attr("activation_params", AttrKind::Floats, std::vector<float>{})
      .since(1)
      .outputs(1);
  return def;
}

}  // namespace

// The standard ops' definitions are looked up when a hook runs, never at registration time.
namespace {

OpDef makeFusedConv() {
  OpDef def = fusedOp("FusedConv");
  def.traits({OpTrait::ChannelsFirst, OpTrait::SlidingWindow})
      .attr("auto_pad", AttrKind::String, std::string("NOTSET"))
      .optionalAttr("dilations", AttrKind::Ints)
      .attr("group", AttrKind::Int, int64_t{1})
      .optionalAttr("kernel_shape", AttrKind::Ints)
      .optionalAttr("pads", AttrKind::Ints)
      .optionalAttr("strides", AttrKind::Ints)
      .inputs(2, 4)
      .describe("Y = act(Conv(X, W, B) + R): convolution with a bias, residual and activation epilogue")
      .infer([](InferContext& ctx) {
        OpRegistry::instance().find("", "Conv")->inferFn(ctx);
        checkEpilogue(ctx, 3);
      })
      .kernel([](KernelContext& ctx) { runWithEpilogue(ctx, "Conv", 3); })
      .cost([](const Node& node) {
        Cost c = OpRegistry::instance().find("", "Conv")->costFn(node);
        c.flops += 2.0 * staticBytes(node.output(0)) / 4.0;
        return c;
      });
  return def;
}

OpDef makeFusedGemm() {
  OpDef def = fusedOp("FusedGemm");
  def.attr("alpha", AttrKind::Float, 1.0f)
      .attr("beta", AttrKind::Float, 1.0f)
      .attr("transA", AttrKind::Int, int64_t{0})
      .attr("transB", AttrKind::Int, int64_t{0})
      .inputs(2, 4)
      .describe("Y = act(alpha A'B' + beta C + R): GEMM with a residual and activation epilogue")
      .infer([](InferContext& ctx) {
        OpRegistry::instance().find("", "Gemm")->inferFn(ctx);
        checkEpilogue(ctx, 3);
      })
      .kernel([](KernelContext& ctx) { runWithEpilogue(ctx, "Gemm", 3); })
      .cost([](const Node& node) {
        Cost c = OpRegistry::instance().find("", "Gemm")->costFn(node);
        c.flops += 2.0 * staticBytes(node.output(0)) / 4.0;
        return c;
      });
  return def;
}

/// The body graph of a FusedElementwise node, for editing its types during inference.
Graph& mutableBody(const Node& node) {
  const AttrValue* attr = node.findAttr("body");
  TESSEL_ASSERT(attr && attrKindOf(*attr) == AttrKind::Graph, node.describe() + ": body is not a graph");
  return *std::get<std::shared_ptr<Graph>>(*attr);
}

void inferFusedElementwise(InferContext& ctx) {
  Graph& body = mutableBody(ctx.node());
  if (body.inputs().size() != ctx.numInputs())
    ctx.fail("body takes {} inputs, the node has {}", body.inputs().size(), ctx.numInputs());
  if (body.outputs().size() != 1) ctx.fail("body must have one output, has {}", body.outputs().size());
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    if (!ctx.hasInput(i)) ctx.fail("input {} is omitted; every body input needs a value", i);
    body.inputs()[i]->type = ctx.inputType(i);
  }
  inferShapes(body);
  ctx.setOutputType(0, body.outputs()[0]->type);
}

Cost fusedElementwiseCost(const Node& node) {
  Cost c;
  for (const Value* in : node.inputs()) c.bytesRead += staticBytes(in);
  c.bytesWritten = staticBytes(node.output(0));
  const Graph& body = node.attrGraph("body");
  for (const auto& inner : body.nodes())
    if (inner->def() && inner->def()->costFn) c.flops += inner->def()->costFn(*inner).flops;
  return c;
}

OpDef makeFusedElementwise() {
  return OpDef("FusedElementwise", "tessel")
      .inputs(1, kVariadic)
      .outputs(1)
      .since(1)
      .requiredAttr("body", AttrKind::Graph)
      .describe("runs the element-wise chain in `body` (inputs in order) as one loop over the output")
      .traits({OpTrait::Elementwise})
      .infer(inferFusedElementwise)
      .kernel([](KernelContext& ctx) {
        std::vector<Tensor> inputs;
        for (size_t i = 0; i < ctx.numInputs(); ++i) inputs.push_back(ctx.input(i));
        std::vector<Tensor> outs = ctx.runSubgraph(ctx.attrGraph("body"), inputs);
        ctx.setOutput(0, std::move(outs.at(0)));
      })
      .cost(fusedElementwiseCost);
}

/// Runs the standard op `opType`'s reference kernel on `inputs` through a scratch node carrying `attrs`,
/// so a fused kernel composes standard kernels without copying them.
Tensor runStandardKernel(const std::string& opType, const std::vector<const Tensor*>& inputs,
                         const std::vector<std::pair<std::string, AttrValue>>& attrs = {}) {
  Graph scratch("scratch");
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) values.push_back(scratch.addValue("in" + std::to_string(i)));
  Node* node = scratch.addNode(opType, values, {"out"});
  for (const auto& [k, v] : attrs) node->setAttr(k, v);
  TESSEL_ASSERT(node->def() && node->def()->kernelFn, "no reference kernel for " + opType);
  KernelContext inner(*node, inputs, nullptr, nullptr);
  node->def()->kernelFn(inner);
  return std::move(inner.outputs()[0]);
}

/// The MatMul result shape of two static shapes (numpy rules), for Attention's inference.
Shape matmulShape(InferContext& ctx, Shape a, Shape b) {
  if (a.size() < 2 || b.size() < 2) ctx.fail("attention operands need rank >= 2, have ranks {} and {}", a.size(), b.size());
  if (a.back() != b[b.size() - 2]) ctx.fail("attention operands do not chain: {} x {}", shapeToString(a), shapeToString(b));
  const int64_t rows = a[a.size() - 2], cols = b.back();
  a.resize(a.size() - 2);
  b.resize(b.size() - 2);
  Shape out = broadcastShapes(a, b, ctx.node());
  out.push_back(rows);
  out.push_back(cols);
  return out;
}

void inferAttention(InferContext& ctx) {
  for (size_t i = 0; i < 3; ++i)
    if (ctx.inputType(i).dtype != DType::Float32) ctx.fail("input {} must be float32, is {}", i, ctx.inputType(i).toString());
  if (!ctx.inputType(0).isStatic() || !ctx.inputType(1).isStatic() || !ctx.inputType(2).isStatic()) {
    ctx.setOutputType(0, TensorType(DType::Float32, std::nullopt));
    return;
  }
  Shape scores = matmulShape(ctx, ctx.inputType(0).staticShape(), ctx.inputType(1).staticShape());
  Shape out = matmulShape(ctx, scores, ctx.inputType(2).staticShape());
  ctx.setOutputType(0, TensorType::fromShape(DType::Float32, out));
}

/// Y = Softmax(scale * Q Kt, last axis) V with the MatMul and Softmax reference kernels.
void attentionKernel(KernelContext& ctx) {
  Tensor scores = runStandardKernel("MatMul", {&ctx.input(0), &ctx.input(1)});
  if (scores.dtype() != DType::Float32) ctx.fail("attention computes float32 only, scores are {}", dtypeName(scores.dtype()));
  const float scale = ctx.attrFloat("scale");
  float* s = scores.data<float>();
  for (int64_t i = 0; i < scores.numel(); ++i) s[i] *= scale;
  Tensor probabilities = runStandardKernel("Softmax", {&scores}, {{"axis", int64_t{-1}}});
  ctx.setOutput(0, runStandardKernel("MatMul", {&probabilities, &ctx.input(2)}));
}

OpDef makeAttention() {
  return OpDef("Attention", "tessel")
      .inputs(3)
      .outputs(1)
      .since(1)
      .attr("scale", AttrKind::Float, 1.0f)
      .describe("Y = Softmax(scale * Q Kt, last axis) V; Kt is K already transposed ([..., d, T])")
      .infer(inferAttention)
      .kernel(attentionKernel)
      .cost([](const Node& node) {
        Cost c;
        for (const Value* in : node.inputs()) c.bytesRead += staticBytes(in);
        c.bytesWritten = staticBytes(node.output(0));
        const TensorType& q = node.input(0)->type;
        const TensorType& v = node.input(2)->type;
        if (q.isStatic() && v.isStatic() && node.output(0)->type.isStatic()) {
          // Two GEMMs: scores (rows x T x d) and output (rows x dv x T), plus ~5 flops per score.
          const double outElems = static_cast<double>(node.output(0)->type.staticSize());
          const double d = static_cast<double>(q.staticShape().back()), dv = static_cast<double>(v.staticShape().back());
          const double t = static_cast<double>(v.staticShape()[v.rank() - 2]);
          const double scoreElems = outElems / dv * t;
          c.flops = 2.0 * scoreElems * d + 2.0 * outElems * t + 5.0 * scoreElems;
        }
        return c;
      });
}

}  // namespace

TESSEL_REGISTER_OP(tessel_FusedConv) { return makeFusedConv(); }
TESSEL_REGISTER_OP(tessel_FusedGemm) { return makeFusedGemm(); }
TESSEL_REGISTER_OP(tessel_FusedElementwise) { return makeFusedElementwise(); }
TESSEL_REGISTER_OP(tessel_Attention) { return makeAttention(); }

}  // namespace tessel
