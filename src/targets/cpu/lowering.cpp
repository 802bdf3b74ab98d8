// Lowers a typed graph (the cpu pass pipeline's result) to runtime kernel calls: reads the fused epilogues
// of tessel.FusedConv / FusedGemm, chooses conv kernels, collects weights, and names every tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "lowerer.h"
#include "tessel/ir/text.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/gemm.h"
#include "tessel/rt/pool.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/tuner.h"

namespace tessel::cpu {

std::string floatLiteral(float v) {
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "-INFINITY";
  if (std::isnan(v)) return "NAN";
  std::string s = fmt::format("{:.9g}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s + "f";
}

/// The constant data behind v, looking through Identity chains (exporters share weights that way) and
/// Constant nodes, or null.
const Tensor* constTensor(const Value* v) {
  while (v && !v->isConstant() && v->producer() && v->producer()->opType() == "Identity" &&
         v->producer()->domain().empty())
    v = v->producer()->input(0);
  if (v == nullptr) return nullptr;
  if (v->isConstant()) return &v->constant();
  const Node* p = v->producer();
  if (p && p->opType() == "Constant" && p->domain().empty() && p->hasAttr("value")) return &p->attrTensor("value");
  return nullptr;
}
bool isConst(const Value* v) { return constTensor(v) != nullptr; }

/// A Dropout is an identity unless it is in training mode (a true training_mode input) with a non-zero
/// ratio (default 0.5); a training_mode or ratio computed at run time may be either.
static bool dropoutIsIdentity(const Node* n) {
  if (!n->hasInput(2)) return true;
  const Tensor* training = constTensor(n->input(2));
  if (training == nullptr) return false;
  if (training->numel() == 1 && training->elementAsDouble(0) == 0) return true;
  if (!n->hasInput(1)) return false;
  const Tensor* ratio = constTensor(n->input(1));
  return ratio != nullptr && ratio->numel() == 1 && ratio->elementAsDouble(0) == 0;
}

/// Ops that only reinterpret their first input's buffer.
static const std::set<std::string> kAliasOps = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"};


int Lowerer::tensorOf(const Value* v) {
  if (auto o = operandOverride_.find(v); o != operandOverride_.end()) return o->second;
  auto it = ids_.find(v);
  if (it != ids_.end()) return it->second;
  TESSEL_ASSERT(v->type.isStatic(), "cpu lowering: value without a static shape");
  PlanTensor t;
  t.name = v->name();
  t.shape = v->type.staticShape();
  t.numel = shapeSize(t.shape);
  t.dtype = v->type.dtype;
  if (const Tensor* c = constTensor(v)) {
    t.kind = StorageKind::Weight;
    t.dtype = c->dtype();
    // Offsets count floats; other element types keep their bytes (64-byte aligned, so a multiple of 4).
    t.offset = t.dtype == DType::Float32
                   ? addWeightData(floatsOf(v))
                   : addWeightBytes(std::string(static_cast<const char*>(c->rawData()), c->nbytes())) / 4;
  }
  plan_.tensors.push_back(std::move(t));
  int id = static_cast<int>(plan_.tensors.size()) - 1;
  ids_[v] = id;
  return id;
}

int64_t Lowerer::addWeightData(const std::vector<float>& data) {
  while (plan_.weights.size() % 64 != 0) plan_.weights.push_back('\0');
  int64_t offset = static_cast<int64_t>(plan_.weights.size() / sizeof(float));
  plan_.weights.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return offset;
}

int Lowerer::weightTensor(const std::string& name, const std::vector<float>& data, const Shape& shape) {
  PlanTensor t;
  t.name = name;
  t.shape = shape;
  t.numel = static_cast<int64_t>(data.size());
  t.kind = StorageKind::Weight;
  t.offset = addWeightData(data);
  plan_.tensors.push_back(std::move(t));
  return static_cast<int>(plan_.tensors.size()) - 1;
}

std::vector<float> Lowerer::floatsOf(const Value* v) {
  const Tensor& t = *constTensor(v);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::Float32) {
    std::memcpy(out.data(), t.data<float>(), out.size() * sizeof(float));
  } else {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(t.elementAsDouble(static_cast<int64_t>(i)));
  }
  return out;
}

void Lowerer::addStep(StepMeta meta, std::string comment, std::string code, std::vector<int> reads,
                      std::vector<int> writes, int inplace) {
  PlanStep step{std::move(meta.node), std::move(meta.op),    std::move(meta.kernel), meta.flops,
                std::move(comment),   std::move(code),       std::move(reads),       std::move(writes),
                inplace};
  producedBySteps_.insert(step.writes.begin(), step.writes.end());
  if (emitAt_ != nullptr) {
    deferred_[emitAt_].push_back(std::move(step));
    emitAt_ = nullptr;
    return;
  }
  plan_.steps.push_back(std::move(step));
}

bool Lowerer::isGraphOutput(const Value* v) const {
  const auto& outs = graph_.outputs();
  return std::find(outs.begin(), outs.end(), v) != outs.end();
}

const Node* Lowerer::singleUser(const Value* v) const {
  if (v->uses().size() != 1 || isGraphOutput(v)) return nullptr;
  return v->uses()[0].node;
}

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

std::string Lowerer::int64Array(const char* prefix, const std::vector<int64_t>& values) {
  std::string name = fmt::format("k{}{}", prefix, shapeCounter_++);
  plan_.globals += fmt::format("static const int64_t {}[] = {{{}}};\n", name,
                               values.empty() ? std::string("0") : fmt::format("{}", fmt::join(values, ", ")));
  return name;
}

std::string Lowerer::epilogueExpr(int bias, int residual, const FusedAct& act, bool perColumn) const {
  return fmt::format("epi({}, {}, rt::Activation::{}, {}, {}, {})", bias < 0 ? "nullptr" : ref(bias),
                     residual < 0 ? "nullptr" : ref(residual), act.kind, floatLiteral(act.alpha),
                     floatLiteral(act.beta), perColumn ? "true" : "false");
}

/// Reads Conv attributes into a runtime shape (2-D only; auto_pad resolved).
static std::optional<rt::Conv2dShape> convShape(const Node* n, const Shape& x, const Shape& w) {
  if (x.size() != 4 || w.size() != 4) return std::nullopt;
  rt::Conv2dShape s;
  s.batch = x[0];
  s.in_channels = x[1];
  s.in_h = x[2];
  s.in_w = x[3];
  s.out_channels = w[0];
  s.kernel_h = w[2];
  s.kernel_w = w[3];
  s.groups = n->attrInt("group");
  // strides, dilations and pads are optional (ONNX: 1, 1 and 0 along each axis).
  auto ints = [&](const char* name) { return n->hasAttr(name) ? n->attrInts(name) : std::vector<int64_t>{}; };
  auto strides = ints("strides");
  auto dil = ints("dilations");
  auto pads = ints("pads");
  if (strides.size() == 2) s.stride_h = strides[0], s.stride_w = strides[1];
  if (dil.size() == 2) s.dilation_h = dil[0], s.dilation_w = dil[1];
  if (pads.size() == 4) s.pad_top = pads[0], s.pad_left = pads[1], s.pad_bottom = pads[2], s.pad_right = pads[3];
  std::string autoPad = n->hasAttr("auto_pad") ? n->attrString("auto_pad") : "NOTSET";
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    auto same = [&](int64_t in, int64_t k, int64_t st, int64_t d, int64_t& lo, int64_t& hi) {
      int64_t out = (in + st - 1) / st;
      int64_t total = std::max<int64_t>(0, (out - 1) * st + d * (k - 1) + 1 - in);
      lo = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      hi = total - lo;
    };
    same(s.in_h, s.kernel_h, s.stride_h, s.dilation_h, s.pad_top, s.pad_bottom);
    same(s.in_w, s.kernel_w, s.stride_w, s.dilation_w, s.pad_left, s.pad_right);
  } else if (autoPad == "VALID") {
    s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = 0;
  }
  return s;
}

/// The geometry of a Conv / tessel.FusedConv that lowerConv turns into a kernel call: 2-D, constant
/// weights and bias. Null otherwise (an unsupported node).
static std::optional<rt::Conv2dShape> loweredConvShape(const Node* conv) {
  const Value* wv = conv->input(1);
  auto shape = convShape(conv, conv->input(0)->type.staticShape(), wv->type.staticShape());
  if (!shape || !isConst(wv) || (conv->hasInput(2) && !isConst(conv->input(2)))) return std::nullopt;
  return shape;
}

/// Whether the lowering itself handles a node (else the interpreter fallback does): every output and every
/// non-constant input is a static float32 tensor.
bool compiledDType(DType t) {
  switch (t) {
    case DType::Undefined: case DType::String: case DType::Complex64: case DType::Complex128: return false;
    default: return true;
  }
}

bool staticTensorsOnly(const Node* n) {
  for (const Value* o : n->outputs())
    if (o && (!compiledDType(o->type.dtype) || !o->type.isStatic())) return false;
  for (size_t i = 0; i < n->numInputs(); ++i) {
    const Value* v = n->input(i);
    if (v && !isConst(v) && (!compiledDType(v->type.dtype) || !v->type.isStatic())) return false;
  }
  return true;
}

bool floatsOnly(const Node* n) {
  for (const Value* o : n->outputs())
    if (o && (o->type.dtype != DType::Float32 || !o->type.isStatic())) return false;
  for (size_t i = 0; i < n->numInputs(); ++i) {
    const Value* v = n->input(i);
    // Constant operands of any type are fine: shapes/axes are read at compile time or embedded.
    if (v && !isConst(v) && (v->type.dtype != DType::Float32 || !v->type.isStatic())) return false;
  }
  return true;
}

/// The runtime geometry of a MaxPool/AveragePool node on an NCHW input of shape xs, or nullopt when the
/// compiled kernels do not cover it (not 2-D, dilations, the Indices output, storage_order 1).
static std::optional<rt::Pool2dShape> loweredPoolShape(const Node* n, const Shape& xs) {
  auto k = n->attrInts("kernel_shape");
  auto st = n->hasAttr("strides") ? n->attrInts("strides") : std::vector<int64_t>{};
  auto pads = n->hasAttr("pads") ? n->attrInts("pads") : std::vector<int64_t>{};
  auto dil = n->hasAttr("dilations") ? n->attrInts("dilations") : std::vector<int64_t>{};
  std::string autoPad = n->hasAttr("auto_pad") ? n->attrString("auto_pad") : "NOTSET";
  bool dilated = false;
  for (int64_t d : dil) dilated = dilated || d != 1;
  bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
  if (xs.size() != 4 || k.size() != 2 || dilated || (autoPad != "NOTSET" && autoPad != "VALID" && !same) ||
      n->numOutputs() > 1 || (n->hasAttr("storage_order") && n->attrInt("storage_order") != 0))
    return std::nullopt;
  if (st.size() != 2) st = {1, 1};
  if (pads.size() != 4 || autoPad != "NOTSET") pads = {0, 0, 0, 0};
  bool ceil = n->hasAttr("ceil_mode") && n->attrInt("ceil_mode") != 0;
  if (same) {  // out = ceil(in / stride); the odd pad goes at the end (UPPER) or the start (LOWER)
    for (int axis = 0; axis < 2; ++axis) {
      int64_t in = xs[2 + axis], out = (in + st[axis] - 1) / st[axis];
      int64_t total = std::max<int64_t>(0, (out - 1) * st[axis] + k[axis] - in);
      int64_t lo = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[axis] = lo, pads[axis + 2] = total - lo;
    }
    ceil = false;
  }
  rt::Pool2dShape p;
  p.batch = xs[0], p.channels = xs[1], p.in_h = xs[2], p.in_w = xs[3];
  p.kernel_h = k[0], p.kernel_w = k[1], p.stride_h = st[0], p.stride_w = st[1];
  p.pad_top = pads[0], p.pad_left = pads[1], p.pad_bottom = pads[2], p.pad_right = pads[3];
  p.ceil_mode = ceil;
  p.count_include_pad = n->opType() == "AveragePool" && n->attrInt("count_include_pad") != 0;
  return p;
}

static std::string poolShapeInit(const rt::Pool2dShape& p) {
  return fmt::format("{{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}}", p.batch, p.channels, p.in_h,
                     p.in_w, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.pad_bottom,
                     p.pad_right, p.ceil_mode, p.count_include_pad);
}

static bool isConvNode(const Node* n) {
  return (n->domain() == "tessel" && n->opType() == "FusedConv") || (n->domain().empty() && n->opType() == "Conv");
}

/// A string entry of a node's meta (the schedule data passes record), or null.
static const std::string* metaString(const Node* n, const char* key) {
  auto it = n->meta.find(key);
  return it == n->meta.end() ? nullptr : std::get_if<std::string>(&it->second);
}

/// The kernel the select-kernels pass recorded for a conv, when it has `layout` and applies to s; else null.
static const rt::Conv2dKernel* selectedKernel(const Node* conv, const rt::Conv2dShape& s, rt::ConvLayout layout) {
  const std::string* name = metaString(conv, "kernel");
  const rt::Conv2dKernel* kernel = name ? rt::find_conv2d_kernel(name->c_str()) : nullptr;
  return kernel && kernel->layout == layout && kernel->applicable(s) ? kernel : nullptr;
}

bool Lowerer::lowerConv(const Node* conv) {
  const Value* x = conv->input(0);
  const Value* wv = conv->input(1);
  auto shape = loweredConvShape(conv);
  if (!shape) return false;  // not 2-D, or weights computed at run time
  const rt::Conv2dShape& s = *shape;
  const std::vector<float> w = floatsOf(wv);
  const bool hasBias = conv->hasInput(2);
  const std::vector<float> bias = hasBias ? floatsOf(conv->input(2)) : std::vector<float>{};
  // The epilogue (bias, residual Add, activation) is the fuse-conv-epilogue pass's: a tessel.FusedConv
  // carries it; a plain Conv (a graph lowered without the pipeline) has none.
  FusedAct act;
  int residual = -1;
  const Value* out = conv->output(0);
  std::string what = "conv";
  if (conv->opType() == "FusedConv") {
    if (conv->hasInput(3)) {
      residual = tensorOf(conv->input(3));
      what += "+add";
      plan_.report.fusedNodes++;  // the Add fuse-conv-epilogue merged
    }
    act = fusedEpilogueOf(conv);
    if (act.kind != "None") what += "+" + conv->attrString("activation"), plan_.report.fusedNodes++;
  }
  std::string key = convGeometryKey(s);
  // A conv of an NCHWc8 region (select-layout) runs the NCHWc8 kernel select-kernels chose; tuning
  // covers the NCHW kernels.
  const rt::Conv2dKernel* blockedKernel = nullptr;
  if (blockedNode(conv)) {
    blockedKernel = selectedKernel(conv, s, rt::ConvLayout::NCHWc8);
    if (!blockedKernel) blockedKernel = rt::select_conv2d_kernel(s, rt::ConvLayout::NCHWc8, avx512_);
  }
  const rt::Conv2dKernel*& kernel = blockedKernel ? blockedKernel : tuned_[key];
  if (kernel == nullptr) {
    auto known = choices_.find(key);
    // With tune_, the compile driver has timed every geometry of convTuneJobs (on the runtime built for
    // the model's --march) and put the winners in choices_.
    TESSEL_ASSERT(!tune_ || known != choices_.end(), "cpu lowering: conv geometry missing from convTuneJobs");
    if (known != choices_.end()) kernel = rt::find_conv2d_kernel(known->second.c_str());
    if (kernel && (kernel->layout != rt::ConvLayout::NCHW || !kernel->applicable(s)))
      throw UserError(fmt::format("tuning file: kernel '{}' does not apply to {}", known->second, conv->describe()));
    // The select-kernels pass's choice (the same rule for the same target), else the rule itself.
    if (kernel == nullptr) kernel = selectedKernel(conv, s, rt::ConvLayout::NCHW);
    if (kernel == nullptr) kernel = rt::select_conv2d_kernel(s, rt::ConvLayout::NCHW, avx512_);
    choices_[key] = kernel->name;
  }
  // A stem conv whose only user is a MaxPool: one kernel pools the conv rows while they are in cache,
  // so the full-resolution map (3 MB at 64 x 112 x 112) is never written and read back.
  std::optional<rt::Pool2dShape> maxpool;
  if (std::string(kernel->name) == "conv2d_nchw_direct_small_cin" && residual < 0) {
    const Node* u = singleUser(out);
    if (u && !absorbed_.count(u) && u->domain().empty() && u->opType() == "MaxPool" && u->input(0) == out &&
        out->type.isStatic()) {
      auto ps = loweredPoolShape(u, out->type.staticShape());
      if (ps && rt::conv2d_nchw_direct_small_cin_maxpool_applicable(s, *ps)) {
        maxpool = ps;
        absorbed_.insert(u);
        plan_.report.fusedNodes++;
        out = u->output(0);
        what += "+MaxPool";
        emitAt_ = u;
      }
    }
  }
  int wid = weightTensor(wv->name(), w, wv->type.staticShape());
  int bid = hasBias ? weightTensor(conv->name() + ".bias", bias, {s.out_channels}) : -1;
  std::string shapeName = fmt::format("kShape{}", shapeCounter_++);
  plan_.globals += fmt::format(
      "static const rt::Conv2dShape {} = {{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}};\n",
      shapeName, s.batch, s.in_channels, s.in_h, s.in_w, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h,
      s.stride_w, s.pad_top, s.pad_left, s.pad_bottom, s.pad_right, s.dilation_h, s.dilation_w, s.groups);
  int64_t packedOffset = plan_.packedFloats;
  plan_.packedFloats += (static_cast<int64_t>(kernel->packed_weight_size(s)) + 15) / 16 * 16;
  plan_.initCode += fmt::format("  rt::find_conv2d_kernel(\"{}\")->pack_weights({}, W + {}, P + {});\n", kernel->name,
                                shapeName, plan_.tensors[wid].offset, packedOffset);
  plan_.report.flops += 2 * s.macs();
  int x_id = tensorOf(x), y_id = tensorOf(out);
  std::vector<int> reads = {x_id};
  if (bid >= 0) reads.push_back(bid);
  if (residual >= 0) reads.push_back(residual);
  std::string call = fmt::format("rt::{}({}, {}, P + {}, {}, {}, pool);", kernel->name, shapeName, ref(x_id),
                                 packedOffset, ref(y_id), epilogueExpr(bid, residual, act));
  std::string kernelName = kernel->name;
  if (maxpool) {
    int id = shapeCounter_++;
    plan_.globals += fmt::format("static const rt::Pool2dShape kPool{} = {};\n", id, poolShapeInit(*maxpool));
    kernelName += "_maxpool";
    call = fmt::format("rt::{}({}, kPool{}, {}, P + {}, {}, {}, pool);", kernelName, shapeName, id, ref(x_id),
                       packedOffset, ref(y_id), epilogueExpr(bid, residual, act));
  }
  addStep({conv->name(), what, kernelName, 2.0 * s.macs()},
          fmt::format("{} '{}' {}x{}/{} -> {}", what, conv->name(), s.kernel_h, s.kernel_w, s.stride_h,
                      shapeToString(out->type.staticShape())),
          call,
          reads, {y_id});
  return true;
}

bool Lowerer::lowerGemm(const Node* n) {
  const bool fused = n->opType() == "FusedGemm";
  const bool isGemm = n->opType() == "Gemm" || fused;
  const Value* a = n->input(0);
  const Value* b = n->input(1);
  Shape as = a->type.staticShape(), bs = b->type.staticShape();
  // A MatMul whose right operand is computed at run time or batched: the batched kernel.
  if (!isGemm && (!isConst(b) || bs.size() != 2 || as.size() < 2)) return lowerMatMulBatched(n);
  if (!isConst(b) || bs.size() != 2 || as.size() < 2 || (isGemm && as.size() != 2)) return false;
  bool transA = isGemm && n->attrInt("transA") != 0;
  bool transB = isGemm && n->attrInt("transB") != 0;
  float alpha = isGemm ? n->attrFloat("alpha") : 1.0f;
  float beta = isGemm ? n->attrFloat("beta") : 1.0f;
  int64_t K = transA ? as[0] : as.back();
  int64_t M = transA ? as[1] : shapeSize(as) / K;
  int64_t N = transB ? bs[0] : bs[1];
  int bias = -1, residual = -1;
  bool perColumn = true;
  if (isGemm && n->hasInput(2)) {
    const Value* c = n->input(2);
    if (!isConst(c)) return false;
    auto cv = floatsOf(c);
    for (float& v : cv) v *= beta;
    Shape cs = c->type.staticShape();
    if (cv.size() == 1) cv.assign(static_cast<size_t>(N), cv[0]), cs = {N};  // a 1-element C is a scalar
    if (static_cast<int64_t>(cv.size()) == N && (cs.empty() || cs.back() == N)) {
      bias = weightTensor(n->name() + ".bias", cv, {N});
    } else if (static_cast<int64_t>(cv.size()) == M && cs.size() == 2 && cs[1] == 1) {
      bias = weightTensor(n->name() + ".bias", cv, {M});
      perColumn = false;
    } else if (static_cast<int64_t>(cv.size()) == M * N) {
      residual = weightTensor(n->name() + ".c", cv, {M, N});
    } else {
      return false;  // C broadcasts neither as a row, a column nor the full matrix
    }
  }
  FusedAct act;
  const Value* out = n->output(0);
  std::string what = fused ? "Gemm" : n->opType();
  if (fused) {  // tessel.FusedGemm from the cpu pass pipeline: residual and activation are in the node
    if (n->hasInput(3)) {
      if (residual >= 0) return false;  // a full-matrix C and a residual: not one epilogue
      residual = tensorOf(n->input(3));
      what += "+add";
      plan_.report.fusedNodes++;
    }
    act = fusedEpilogueOf(n);
    if (act.kind != "None") what += "+" + n->attrString("activation"), plan_.report.fusedNodes++;
  }
  int bw = tensorOf(b);
  int64_t packedOffset = plan_.packedFloats;
  plan_.packedFloats += (static_cast<int64_t>(rt::packed_b_size(N, K)) + 15) / 16 * 16;
  plan_.initCode += fmt::format("  rt::pack_b({}, {}, {}, W + {}, {}, P + {});\n", transB, N, K,
                                plan_.tensors[bw].offset, bs[1], packedOffset);
  plan_.report.flops += 2.0 * M * N * K;
  int x_id = tensorOf(a), y_id = tensorOf(out);
  std::vector<int> reads = {x_id};
  if (bias >= 0) reads.push_back(bias);
  if (residual >= 0) reads.push_back(residual);
  addStep({n->name(), what, "sgemm_packed_b", 2.0 * M * N * K}, fmt::format("{} '{}' {}x{}x{}", what, n->name(), M, N, K),
          fmt::format("rt::sgemm_packed_b({}, {}, {}, {}, {}, {}, {}, P + {}, 0.0f, {}, {}, {}, pool);", transA, M, N,
                      K, floatLiteral(alpha), ref(x_id), transA ? M : K, packedOffset, ref(y_id), N,
                      epilogueExpr(bias, residual, act, perColumn)),
          reads, {y_id});
  return true;
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

bool Lowerer::lowerPool(const Node* n) {
  const std::string& op = n->opType();
  int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  const Shape& xs = plan_.tensors[x].shape;
  std::string comment = fmt::format("{} '{}' -> {}", op, n->name(), shapeToString(plan_.tensors[y].shape));
  if (xs.size() != 4) return false;  // 1-D and 3-D pooling
  if (op == "GlobalAveragePool") {
    addStep({n->name(), op, "global_avgpool_nchw"}, comment, fmt::format("rt::global_avgpool_nchw({}, {}, {}, {}, {}, pool);", xs[0], xs[1], xs[2] * xs[3],
                                 ref(x), ref(y)),
            {x}, {y});
    return true;
  }
  auto ps = loweredPoolShape(n, xs);
  if (!ps) return false;  // dilation, the Indices output
  int id = shapeCounter_++;
  plan_.globals += fmt::format("static const rt::Pool2dShape kPool{} = {};\n", id, poolShapeInit(*ps));
  if (blockedNode(n)) {  // select-layout blocks MaxPool only
    if (op != "MaxPool") return false;
    addStep({n->name(), op, "maxpool2d_nchwc8"}, comment,
            fmt::format("rt::maxpool2d_nchwc8(kPool{}, {}, {}, pool);", id, ref(x), ref(y)), {x}, {y});
    return true;
  }
  addStep({n->name(), op, op == "MaxPool" ? "maxpool2d_nchw" : "avgpool2d_nchw"}, comment,
          fmt::format("rt::{}pool2d_nchw(kPool{}, {}, {}, pool);", op == "MaxPool" ? "max" : "avg", id, ref(x),
                      ref(y)),
          {x}, {y});
  return true;
}

void Lowerer::lowerConcat(const Node* n) {
  int y = tensorOf(n->output(0));
  const Shape ys = plan_.tensors[y].shape;  // a copy: tensorOf() below may grow plan_.tensors
  int64_t axis = n->attrInt("axis");
  if (axis < 0) axis += static_cast<int64_t>(ys.size());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= ys[i];
  for (size_t i = axis + 1; i < ys.size(); ++i) inner *= ys[i];
  // With nothing outside the concat axis (batch 1 along channels), each input is one contiguous slice
  // of the output: an input computed by an earlier step is written there directly (an alias with an
  // offset), and only the others (graph inputs, weights, aliases, repeated inputs) are copied.
  std::set<int> seen;
  auto sliceable = [&](int x) {
    const PlanTensor& t = plan_.tensors[x];
    return outer == 1 && plan_.tensors[y].kind == StorageKind::Arena && plan_.tensors[y].aliasOf < 0 &&
           t.kind == StorageKind::Arena && t.aliasOf < 0 && producedBySteps_.count(x);
  };
  std::string code;
  std::vector<int> reads;
  int64_t offset = 0;
  for (const Value* in : n->inputs()) {
    int x = tensorOf(in);
    int64_t chunk = plan_.tensors[x].shape[axis] * inner;
    if (sliceable(x) && seen.insert(x).second) {
      plan_.tensors[x].aliasOf = y;
      plan_.tensors[x].aliasOffset = offset;
      ++plan_.report.inPlaceConcatInputs;
    } else {
      code += fmt::format("concat_part({}, {}, {}, {}, {}, {});\n  ", ref(x), ref(y), outer, chunk, ys[axis] * inner,
                          offset);
      reads.push_back(x);
    }
    offset += chunk;
  }
  if (code.empty()) return;  // every input already sits in its slice
  code.resize(code.size() - 3);
  addStep({n->name(), "Concat", "concat_part"}, fmt::format("Concat '{}' -> {}", n->name(), shapeToString(ys)), code,
          reads, {y});
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

/// Runs a node without a kernel through the host's reference interpreter: the node, as a one-node model
/// in text IR (constants included), goes into the weights blob; the step calls the host back.
bool Lowerer::lowerFallback(const Node* n) {
  if (!n->subgraphs().empty()) return false;  // bodies may capture outer values
  Model one;
  one.graph = std::make_unique<Graph>("fallback");
  one.opsetImports = {{"", 17}};
  std::vector<Value*> ins;
  std::vector<int> reads, writes;
  std::string inList, outList;
  for (const Value* v : n->inputs()) {
    if (v == nullptr) {
      ins.push_back(nullptr);
      continue;
    }
    if (const Tensor* c = constTensor(v)) {
      ins.push_back(one.graph->findValue(v->name()) ? one.graph->findValue(v->name())
                                                    : one.graph->addConstant(v->name(), *c));
      continue;
    }
    Value* existing = one.graph->findValue(v->name());
    ins.push_back(existing ? existing : one.graph->addInput(v->name(), v->type));
    if (!existing) {
      int id = tensorOf(v);
      reads.push_back(id);
      inList += (inList.empty() ? "" : ", ") + ref(id);
    }
  }
  std::vector<std::string> outNames;
  for (const Value* o : n->outputs()) outNames.push_back(o ? o->name() : "");
  Node* copy = one.graph->addNode(n->opType(), ins, outNames, n->name(), n->domain());
  for (const auto& [k, v] : n->attrs()) copy->setAttr(k, v);
  for (size_t i = 0; i < n->numOutputs(); ++i) {
    if (!n->output(i)) continue;
    copy->output(i)->type = n->output(i)->type;
    one.graph->addOutput(copy->output(i));
    int id = tensorOf(n->output(i));
    writes.push_back(id);
    outList += (outList.empty() ? "" : ", ") + ref(id);
  }
  std::string side;
  std::string text = printModelText(one, {}, &side, "fallback.bin");
  int64_t textOffset = addWeightBytes(text), sideOffset = addWeightBytes(side);
  int index = static_cast<int>(plan_.fallbacks.size());
  plan_.fallbacks.push_back({n->describe(), textOffset, static_cast<int64_t>(text.size()), sideOffset,
                             static_cast<int64_t>(side.size())});
  addStep({n->name(), n->opType(), "host interpreter"},
          fmt::format("{} through the host's reference interpreter", n->describe()),
          fmt::format("if (fallback(m, {}, {{{}}}, {{{}}}) != 0) return 1;", index, inList, outList), reads, writes);
  return true;
}

int64_t Lowerer::addWeightBytes(const std::string& bytes) {
  while (plan_.weights.size() % 64 != 0) plan_.weights.push_back('\0');
  int64_t offset = static_cast<int64_t>(plan_.weights.size());
  plan_.weights += bytes;
  return offset;
}

bool Lowerer::lowerNode(const Node* n) {
  const std::string& op = n->opType();
  if (n->domain() == "tessel") {
    if (op == "FusedConv") return lowerConv(n);
    if (op == "FusedGemm") return lowerGemm(n);
    if (op == "Attention") return lowerAttention(n);
    if (op == "FusedElementwise") return lowerFusedElementwise(n) || lowerBodyNodes(n);
    return false;
  }
  if (!n->domain().empty()) return false;
  if (op == "Conv") return lowerConv(n);
  if (op == "Gemm" || op == "MatMul") return lowerGemm(n);
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool") return lowerPool(n);
  if (op == "Concat") return lowerConcat(n), true;
  if (op == "BatchNormalization" && n->numOutputs() == 1) return lowerBatchNorm(n);
  if (op == "LayerNormalization") return lowerLayerNorm(n);
  if (op == "Transpose") return lowerTranspose(n);
  if (op == "Split") return lowerSplit(n);
  if (op == "Gather" || op == "Slice") return lowerTypedNode(n);
  if (kAliasOps.count(op) && (op != "Dropout" || (n->numOutputs() == 1 && dropoutIsIdentity(n)))) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    plan_.tensors[y].aliasOf = x;
    return true;
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    const Shape& xs = plan_.tensors[x].shape;
    int64_t axis = n->attrInt("axis");
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (axis != static_cast<int64_t>(xs.size()) - 1) return false;
    addStep({n->name(), op, op == "Softmax" ? "softmax" : "log_softmax"}, fmt::format("{} '{}'", op, n->name()),
            fmt::format("rt::{}({}, {}, {}, {}, pool);", op == "Softmax" ? "softmax" : "log_softmax", ref(x), ref(y),
                        shapeSize(xs) / xs.back(), xs.back()),
            {x}, {y});
    return true;
  }
  static const std::map<std::string, std::string> unary = {
      {"Exp", "Exp"}, {"Log", "Log"}, {"Erf", "Erf"}, {"Neg", "Neg"}, {"Abs", "Abs"}, {"Sqrt", "Sqrt"},
      {"Reciprocal", "Reciprocal"}};
  if (auto it = unary.find(op); it != unary.end()) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    addStep({n->name(), op, "unary"}, fmt::format("{} '{}'", op, n->name()),
            fmt::format("rt::unary(rt::UnaryOp::{}, {}, {}, {}, pool);", it->second, ref(x), ref(y),
                        plan_.tensors[x].numel),
            {x}, {y}, x);
    return true;
  }
  if (auto act = activationOf(n)) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    addStep({n->name(), op, "apply_activation"}, fmt::format("{} '{}'", op, n->name()),
            fmt::format("activation({}, {}, {}, {});", ref(x), ref(y), plan_.tensors[x].numel,
                        epilogueExpr(-1, -1, *act)),
            {x}, {y}, x);
    return true;
  }
  return lowerBinary(n);
}

bool Lowerer::blockedNode(const Node* n) {
  const std::string* layout = metaString(n, "layout");
  return layout && *layout == "nchwc8";
}

bool Lowerer::blockedOperand(const Node* n, size_t i) {
  const Value* v = n->input(i);
  if (isConvNode(n)) return i == 0 || i == 3;  // the input and the residual; weights and bias stay as they are
  return v->type.isStatic() && v->type.rank() == 4 && v->type.staticSize() > 1;  // not a scalar
}

int Lowerer::reordered(const Value* v, bool toBlocked) {
  auto& cache = toBlocked ? blockedCopies_ : nchwCopies_;
  if (auto it = cache.find(v); it != cache.end()) return it->second;
  const int src = tensorOf(v);
  const Shape shape = plan_.tensors[src].shape;  // a copy: push_back below
  TESSEL_ASSERT(shape.size() == 4, "cpu lowering: a reorder needs a 4-D tensor");
  const int64_t hw = shape[2] * shape[3];
  PlanTensor t;
  t.name = v->name() + (toBlocked ? ".nchwc8" : ".nchw");
  t.shape = shape;
  t.numel = toBlocked ? static_cast<int64_t>(rt::nchwc8_size(shape[0], shape[1], hw)) : shapeSize(shape);
  plan_.tensors.push_back(std::move(t));
  const int id = static_cast<int>(plan_.tensors.size()) - 1;
  addStep({v->name(), toBlocked ? "reorder to NCHWc8" : "reorder to NCHW",
           toBlocked ? "reorder_nchw_to_nchwc8" : "reorder_nchwc8_to_nchw"},
          fmt::format("'{}' {} -> {}", v->name(), toBlocked ? "NCHW" : "NCHWc8", toBlocked ? "NCHWc8" : "NCHW"),
          fmt::format("rt::{}({}, {}, {}, {}, {}, pool);",
                      toBlocked ? "reorder_nchw_to_nchwc8" : "reorder_nchwc8_to_nchw", shape[0], shape[1], hw,
                      ref(src), ref(id)),
          {src}, {id});
  cache[v] = id;
  return id;
}

bool Lowerer::lowerTypedNode(const Node* n) {
  const std::string& op = n->opType();
  if (!n->domain().empty()) return false;
  if (kAliasOps.count(op) && n->numOutputs() == 1 && (op != "Dropout" || dropoutIsIdentity(n)) &&
      n->input(0)->type.dtype == n->output(0)->type.dtype) {
    int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
    plan_.tensors[y].aliasOf = x;
    return true;
  }
  if (op == "Gather") return lowerGather(n);
  if (op == "Slice") return lowerSlice(n);
  if (op == "Cast") return lowerCast(n);
  return lowerBroadcastOp(n);
}

Plan Lowerer::run() {
  for (const Value* in : graph_.inputs()) {
    if (!compiledDType(in->type.dtype) || !in->type.isStatic())
      throw UserError(fmt::format("cpu target: input '{}' is {}; compiled models take tensors of static shape "
                                  "(use --input-shape) with numeric or bool elements",
                                  in->name(), in->type.toString()));
    int id = tensorOf(in);
    plan_.tensors[id].kind = StorageKind::Input;
    plan_.tensors[id].index = static_cast<int>(plan_.inputs.size());
    plan_.inputs.push_back(id);
  }
  for (const auto& node : graph_.nodes()) {
    const Node* n = node.get();
    if (n->opType() == "Constant" && n->domain().empty() && n->hasAttr("value")) continue;  // a weight on use
    if (absorbed_.count(n)) {
      for (PlanStep& s : deferred_[n]) plan_.steps.push_back(std::move(s));
      continue;
    }
    // Operands in the layout the node runs in (select-layout's NCHWc8 regions): a reorder on each region edge.
    const bool blocked = blockedNode(n);
    for (size_t i = 0; i < n->numInputs(); ++i) {
      const Value* v = n->input(i);
      if (v && blocked != (blocked_.count(v) > 0) && (blocked ? blockedOperand(n, i) : !isConst(v)))
        operandOverride_[v] = reordered(v, blocked);
    }
    bool done = floatsOnly(n) && lowerNode(n);
    const bool typed = staticTensorsOnly(n);
    done = done || (typed && !blocked && (lowerTypedNode(n) || lowerFallback(n)));
    operandOverride_.clear();
    if (!done) {
      if (blocked) throw InternalError(fmt::format("cpu lowering: no NCHWc8 code for {}", n->describe()));
      unsupported_.push_back(n->describe() + (typed ? " (a nested graph)" : " (a tensor of dynamic shape or of strings)"));
      continue;
    }
    if (blocked)
      for (const Value* o : n->outputs())
        if (o) blocked_.insert(o);
  }
  if (!unsupported_.empty())
    throw UserError(fmt::format("cpu target: no code path for {} node(s): {}", unsupported_.size(),
                                fmt::join(unsupported_, "; ")));
  for (const Value* out : graph_.outputs()) {
    int id = blocked_.count(out) ? reordered(out, false) : tensorOf(out);
    int outIndex = static_cast<int>(plan_.outputs.size());
    PlanTensor& t = plan_.tensors[id];
    bool producedHere = t.kind == StorageKind::Arena && t.aliasOf < 0;
    if (producedHere) {
      t.kind = StorageKind::Output;
      t.index = outIndex;
      plan_.outputs.push_back(id);
      continue;
    }
    // An input, a weight, an alias or an output listed twice: copy into the caller's buffer.
    PlanTensor copy = t;
    copy.kind = StorageKind::Output;
    copy.index = outIndex;
    copy.aliasOf = -1;
    copy.aliasOffset = 0;
    const int64_t bytes = t.numel * static_cast<int64_t>(dtypeSize(t.dtype));
    plan_.tensors.push_back(copy);  // invalidates t
    int cid = static_cast<int>(plan_.tensors.size()) - 1;
    addStep({out->name(), "copy to output", "memcpy"}, fmt::format("output '{}'", out->name()),
            fmt::format("std::memcpy({}, {}, {});", ref(cid), ref(id), bytes), {id}, {cid});
    plan_.outputs.push_back(cid);
  }
  plan_.report.steps = static_cast<int>(plan_.steps.size());
  plan_.report.weightBytes = plan_.weights.size();
  plan_.report.packedWeightBytes = static_cast<size_t>(plan_.packedFloats) * sizeof(float);
  return std::move(plan_);
}


std::string convGeometryKey(const rt::Conv2dShape& s) {
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", s.batch, s.in_channels, s.in_h, s.in_w,
                     s.out_channels, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_top, s.pad_left,
                     s.pad_bottom, s.pad_right, s.dilation_h, s.dilation_w, s.groups);
}

std::vector<ConvTuneJob> convTuneJobs(const Graph& graph, bool avx512) {
  std::vector<ConvTuneJob> jobs;
  std::set<std::string> seen;
  for (const auto& node : graph.nodes()) {
    const Node* n = node.get();
    // The same nodes Lowerer::run sends to lowerConv in NCHW (NCHWc8 regions run select-kernels' choice).
    if (!isConvNode(n) || !floatsOnly(n) || Lowerer::blockedNode(n)) continue;
    auto s = loweredConvShape(n);
    if (!s || !seen.insert(convGeometryKey(*s)).second) continue;
    ConvTuneJob job{convGeometryKey(*s), *s, {}, rt::select_conv2d_kernel(*s, rt::ConvLayout::NCHW, avx512)->name};
    for (const rt::Conv2dKernel& k : rt::conv2d_kernels())
      if (k.layout == rt::ConvLayout::NCHW && k.applicable(*s) && (avx512 || !k.avx512_only))
        job.candidates.push_back(k.name);
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Plan lowerGraph(const Graph& graph, bool tune, bool avx512, std::map<std::string, std::string>& kernelChoices) {
  return Lowerer(graph, tune, avx512, kernelChoices).run();
}

}  // namespace tessel::cpu
