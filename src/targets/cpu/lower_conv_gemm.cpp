// Lowering of convolutions and GEMMs (Conv / tessel.FusedConv, Gemm / MatMul / tessel.FusedGemm) to the
// runtime's packed-weight kernels with their fused epilogues, and the conv geometries `--tune` times.
#include <fmt/format.h>
#include <set>

#include "kernel_rules.h"
#include "lowerer.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/gemm.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/tuner.h"

namespace tessel::cpu {

/// The geometry of a Conv / tessel.FusedConv that lowerConv turns into a kernel call: 2-D, constant
/// weights and bias. Null otherwise (an unsupported node).
static std::optional<rt::Conv2dShape> loweredConvShape(const Node* conv) {
  auto shape = conv2dShape(*conv);
  if (!shape || !isConst(conv->input(1)) || (conv->hasInput(2) && !isConst(conv->input(2)))) return std::nullopt;
  return shape;
}


/// A string entry of a node's meta (the schedule data passes record), or null.
static const std::string* metaString(const Node* n, const char* key) {
  auto it = n->meta.find(key);
  return it == n->meta.end() ? nullptr : std::get_if<std::string>(&it->second);
}

/// The kernel select-kernels recorded for a conv (meta kernel): the one place a kernel is chosen, --tune
/// included (the compile driver re-runs select-kernels with the measured choices).
static const rt::Conv2dKernel* recordedKernel(const Node* conv, const rt::Conv2dShape& s) {
  const std::string* name = metaString(conv, "kernel");
  const rt::Conv2dKernel* kernel = name ? rt::find_conv2d_kernel(name->c_str()) : nullptr;
  const rt::ConvLayout layout = runsBlocked(*conv) ? rt::ConvLayout::NCHWc8 : rt::ConvLayout::NCHW;
  if (!kernel || kernel->layout != layout || !kernel->applicable(s))
    throw InternalError(fmt::format("cpu lowering: {} has no applicable kernel choice (meta kernel {}); the cpu "
                                    "pass pipeline's select-kernels records it",
                                    conv->describe(), name ? *name : "absent"));
  return kernel;
}

// Squeeze-and-excitation: Mul(x, s) with s [1, C, 1, 1], whose only user is a pointwise convolution (the
// projection after the scale in EfficientNet, MobileNetV3, RegNetY): conv(x * s) is the conv of x with weights
// W[m][k] s[k]. Where the weights are small against x (at least kScaleFoldMinPixelsPerOutput pixels per output
// channel: the large early maps), the conv step scales and re-packs its weights each run
// (rt::pack_scaled_conv_weights) and reads x; the Mul's pass over x (a read and a write of C H W floats, and a
// kernel call) is gone. Elsewhere the Mul runs as before: on EfficientNet-B0's 28x28 maps (144 -> 40 and
// 240 -> 40 channels, 20 pixels per output channel) re-packing cost more than the Mul (Zen 4, 2 threads: conv
// +11 and +17 us against Mul 7 and 11 us; the other thread reads the new weights from the packing core).
constexpr int64_t kScaleFoldMinPixelsPerOutput = 64;

bool Lowerer::foldChannelScaleIntoConv(const Node* n) {
  if (!isOp(*n, "Mul") || runsBlocked(*n)) return false;
  const Value* y = n->output(0);
  const Node* u = singleUser(y);
  if (!u || absorbed_.count(u) || runsBlocked(*u) || !isOp(*u, "FusedConv", "tessel") || u->input(0) != y ||
      !y->type.isStatic() || y->type.dtype != DType::Float32)
    return false;
  const auto shape = loweredConvShape(u);
  if (!shape || shape->batch != 1 || shape->groups != 1 || !shape->is_pointwise() ||
      shape->out_channels * kScaleFoldMinPixelsPerOutput > shape->in_h * shape->in_w)
    return false;
  const Shape ys = y->type.staticShape();
  for (size_t side = 0; side < 2; ++side) {
    const Value* big = n->input(side);
    const Value* small = n->input(1 - side);
    if (!big || !small || !big->type.isStatic() || !small->type.isStatic() || big->type.staticShape() != ys ||
        big->type.dtype != DType::Float32 || small->type.dtype != DType::Float32 ||
        !channelScaleOperand(small->type.staticShape(), ys) || blocked_.count(big) || blocked_.count(small))
      continue;
    scaledConvInput_[u] = {big, small};
    plan_.report.fusedNodes++;
    plan_.report.scaledConvInputs++;
    return true;
  }
  return false;
}

// A branch of ShuffleNet's block: a pointwise conv (output `out`, batch 1, groups 1) whose only user is a Concat that
// lowerShuffledConcat takes, its channels inside one group of the shuffle. It is written straight into its planes
// after the shuffle, every groups-th plane, and the gather leaves them alone: a copy of half of every shuffled
// tensor saved. Records the input as written in place; nullopt when the pattern does not hold.
std::optional<Lowerer::ShuffledPlanes> Lowerer::shuffledPlanesOf(const Value* out, const rt::Conv2dShape& s) {
  if (s.batch != 1 || s.groups != 1) return std::nullopt;
  const Node* cat = singleUser(out);
  const auto shuffle = cat ? shuffleOfConcat(cat) : std::nullopt;
  if (!shuffle) return std::nullopt;
  int64_t off = 0, at = -1, uses = 0;
  for (const Value* in : cat->inputs()) {
    if (in == out) at = off, ++uses;
    off += in->type.staticShape()[1];
  }
  const int64_t K = shuffle->perGroup;
  if (uses != 1 || at / K != (at + s.out_channels - 1) / K) return std::nullopt;
  inPlaceShuffleInputs_.insert(out);
  plan_.report.inPlaceShuffleInputs++;
  return ShuffledPlanes{tensorOf(shuffle->transpose->output(0)), (at % K) * shuffle->groups + at / K,
                        shuffle->groups};
}

std::string Lowerer::convShapeConstant(const rt::Conv2dShape& s) {
  std::string name = fmt::format("kShape{}", shapeCounter_++);
  plan_.globals += fmt::format(
      "static const rt::Conv2dShape {} = {{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}};\n", name,
      s.batch, s.in_channels, s.in_h, s.in_w, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w,
      s.pad_top, s.pad_left, s.pad_bottom, s.pad_right, s.dilation_h, s.dilation_w, s.groups);
  return name;
}

int64_t Lowerer::packConvWeights(const rt::Conv2dKernel& k, const std::string& shapeName, const rt::Conv2dShape& s,
                                 int weights) {
  const int64_t offset = plan_.packedFloats;
  plan_.packedFloats += (static_cast<int64_t>(k.packed_weight_size(s)) + 15) / 16 * 16;
  plan_.initCode += fmt::format("  rt::find_conv2d_kernel(\"{}\")->pack_weights({}, W + {}, P + {});\n", k.name,
                                shapeName, plan_.tensors[weights].offset, offset);
  return offset;
}

// An inverted residual block -- a pointwise conv whose only user is a depthwise conv whose only user is a
// pointwise conv (MobileNetV2's and MnasNet's blocks, MobileNetV3's without squeeze-and-excitation) -- on a map of
// at least kChainMinMap rows and columns whose expanded tensor has at least kChainMinExpandedBytes: one step,
// rt::conv_chain_nchw, that computes the three in bands of output rows, each band on one thread from its own input
// rows (the CPU counterpart of S0's fused row tiles). The expanded tensor is never written whole, and at 2 threads
// no tensor of the block crosses between the cores (unfused, the GEMMs split pixels and the depthwise channels).
// The number of bands is the step's schedule data (rt::ConvChain: at least 2, and 2 per thread with several threads,
// so that a thread the host slows down leaves a band to the others). Measured (Zen 4, docs/performance.md,
// thirty-ninth session): 2 threads 0.78-0.96x the time on MobileNetV2 and MnasNet, about even at 1 thread; on
// 14x14 maps, and without the projection (EfficientNet's blocks, squeeze-and-excitation between), it measured
// slower and is not taken.
static constexpr int64_t kChainMinExpandedBytes = 512 * 1024;
static constexpr int64_t kChainMinBands = 2;
static constexpr int64_t kChainBandsPerThread = 2;
static constexpr int64_t kChainMinMap = 28;

bool Lowerer::lowerConvChain(const Node* expand) {
  if (!options_.convChains) return false;
  auto plainFused = [&](const Node* n) {
    return n && !absorbed_.count(n) && isOp(*n, "FusedConv", "tessel") && !runsBlocked(*n) &&
           !scaledConvInput_.count(n) && fusedEpilogueOf(n).has_value();
  };
  if (!plainFused(expand) || expand->hasInput(3)) return false;
  const Node* dw = singleUser(expand->output(0));
  if (!plainFused(dw) || dw->input(0) != expand->output(0) || dw->hasInput(3)) return false;
  const Node* proj = singleUser(dw->output(0));
  if (!plainFused(proj) || proj->input(0) != dw->output(0)) return false;
  const Node* after = singleUser(proj->output(0));
  if (after && shuffleOfConcat(after)) return false;  // ShuffleNet's branch writes into the shuffled planes instead
  auto se = loweredConvShape(expand), sd = loweredConvShape(dw), sp = loweredConvShape(proj);
  if (!se || !sd || !sp) return false;
  rt::ConvChain chain{*se, *sd, *sp, kChainMinBands, kChainBandsPerThread};
  if (!rt::conv_chain_applicable(chain) || (sd->kernel_h != 3 && sd->kernel_h != 5) || sd->stride_h > 2) return false;
  if (4 * sd->in_channels * sd->in_h * sd->in_w < kChainMinExpandedBytes || sd->in_h < kChainMinMap ||
      sd->in_w < kChainMinMap)
    return false;

  const rt::Conv2dKernel* gemm = rt::find_conv2d_kernel("conv2d_nchw_1x1_gemm_avx2");
  const rt::Conv2dKernel* depthwise = rt::find_conv2d_kernel("conv2d_nchw_depthwise_avx2");
  if (!gemm || !depthwise) throw InternalError("cpu lowering: the runtime lacks the 1x1 GEMM or depthwise kernel");
  const Node* nodes[3] = {expand, dw, proj};
  const rt::Conv2dShape shapes[3] = {*se, *sd, *sp};
  std::string shapeNames[3], epis[3], what;
  int64_t packed[3];
  std::vector<int> reads = {tensorOf(expand->input(0))};
  double flops = 0;
  for (int i = 0; i < 3; ++i) {
    const Node* n = nodes[i];
    const rt::Conv2dShape& s = shapes[i];
    const rt::Conv2dKernel* k = i == 1 ? depthwise : gemm;
    const Value* wv = n->input(1);
    const int wid = weightTensor(wv->name(), floatsOf(wv), wv->type.staticShape());
    const int bid = n->hasInput(2) ? weightTensor(n->name() + ".bias", floatsOf(n->input(2)), {s.out_channels}) : -1;
    const int residual = i == 2 && n->hasInput(3) ? tensorOf(n->input(3)) : -1;
    if (bid >= 0) reads.push_back(bid);
    if (residual >= 0) reads.push_back(residual);
    shapeNames[i] = convShapeConstant(s);
    packed[i] = packConvWeights(*k, shapeNames[i], s, wid);
    const FusedAct act = *fusedEpilogueOf(n);
    epis[i] = epilogueExpr(bid, residual, act);
    what += i == 0 ? "conv" : i == 1 ? fmt::format("->dw{}x{}", s.kernel_h, s.kernel_w) : "->conv";
    if (residual >= 0) what += "+add", plan_.report.fusedNodes++;
    if (act.kind != rt::Activation::None) what.append("+").append(n->attrString("activation")), plan_.report.fusedNodes++;
    flops += 2 * s.macs();
  }
  plan_.report.flops += flops;
  plan_.report.fusedNodes += 2;  // the depthwise conv and the projection
  plan_.report.chainedConvBlocks++;
  absorbed_.insert(dw);
  absorbed_.insert(proj);
  emitAt_ = proj;  // the projection's residual may be computed after the expansion
  const std::string chainName = fmt::format("kChain{}", shapeCounter_++);
  plan_.globals += fmt::format("static const rt::ConvChain {} = {{{}, {}, {}, {}, {}}};\n", chainName, shapeNames[0],
                               shapeNames[1], shapeNames[2], chain.min_bands, chain.bands_per_thread);
  const int y = tensorOf(proj->output(0));
  addStep({expand->name(), what, "conv_chain_nchw", flops},
          fmt::format("{} '{}' .. '{}' {}x{}/{} in at least {} bands of rows -> {}", what, expand->name(), proj->name(),
                      sd->kernel_h, sd->kernel_w, sd->stride_h, chain.min_bands,
                      shapeToString(proj->output(0)->type.staticShape())),
          fmt::format("rt::conv_chain_nchw({}, {}, P + {}, P + {}, P + {}, {}, {}, {}, {}, pool);", chainName,
                      ref(reads[0]), packed[0], packed[1], packed[2], ref(y), epis[0], epis[1], epis[2]),
          reads, {y});
  return true;
}

bool Lowerer::lowerConv(const Node* conv) {
  if (lowerConvChain(conv)) return true;
  const Value* x = conv->input(0);
  const Value* scale = nullptr;  // foldChannelScaleIntoConv's s: the conv reads x and scales its weights
  if (auto it = scaledConvInput_.find(conv); it != scaledConvInput_.end()) x = it->second.first, scale = it->second.second;
  const Value* wv = conv->input(1);
  auto shape = loweredConvShape(conv);
  if (!shape) return false;  // not 2-D, or weights computed at run time
  // The epilogue (bias, residual Add, activation) is the fuse-conv-epilogue pass's: a tessel.FusedConv
  // carries it; a plain Conv (a graph lowered without the pipeline) has none.
  const bool fused = isOp(*conv, "FusedConv", "tessel");
  const std::optional<FusedAct> act = fused ? fusedEpilogueOf(conv) : FusedAct{};
  if (!act) return false;  // an activation the runtime lacks: the host fallback runs the node
  const rt::Conv2dShape& s = *shape;
  const std::vector<float> w = floatsOf(wv);
  const bool hasBias = conv->hasInput(2);
  const std::vector<float> bias = hasBias ? floatsOf(conv->input(2)) : std::vector<float>{};
  int residual = -1;
  const Value* out = conv->output(0);
  std::string what = "conv";
  if (fused) {
    if (conv->hasInput(3)) {
      residual = tensorOf(conv->input(3));
      what += "+add";
      plan_.report.fusedNodes++;  // the Add fuse-conv-epilogue merged
    }
    // Appended in two steps: `"+" + std::string` trips GCC 12's -Wrestrict false positive (basic_string::insert).
    if (act->kind != rt::Activation::None) what.append("+").append(conv->attrString("activation")), plan_.report.fusedNodes++;
  }
  const rt::Conv2dKernel* kernel = recordedKernel(conv, s);
  // A stem conv whose only user is a MaxPool: one kernel pools the conv rows while they are in cache,
  // so the full-resolution map (3 MB at 64 x 112 x 112) is never written and read back.
  std::optional<rt::Pool2dShape> maxpool;
  if (std::string(kernel->name) == "conv2d_nchw_direct_small_cin" && residual < 0 && !scale) {
    const Node* u = singleUser(out);
    if (u && !absorbed_.count(u) && isOp(*u, "MaxPool") && u->input(0) == out &&
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
  const std::string shapeName = convShapeConstant(s);
  const int64_t packedOffset = packConvWeights(*kernel, shapeName, s, wid);
  plan_.report.flops += 2 * s.macs();
  const std::optional<ShuffledPlanes> shuffled =
      std::string(kernel->name) == "conv2d_nchw_1x1_gemm_avx2" && !maxpool && !scale ? shuffledPlanesOf(out, s)
                                                                                     : std::nullopt;
  int x_id = tensorOf(x), y_id = shuffled ? shuffled->tensor : tensorOf(out);
  std::vector<int> reads = {x_id};
  if (bid >= 0) reads.push_back(bid);
  if (residual >= 0) reads.push_back(residual);
  std::string call = fmt::format("rt::{}({}, {}, P + {}, {}, {}, pool);", kernel->name, shapeName, ref(x_id),
                                 packedOffset, ref(y_id), epilogueExpr(bid, residual, *act));
  if (shuffled) {
    const int64_t hw = s.out_h() * s.out_w();
    what += "->shuffle";
    call = fmt::format("rt::conv2d_nchw_1x1_gemm_strided({}, {}, P + {}, {} + {}, {}, {}, pool);", shapeName, ref(x_id),
                       packedOffset, ref(y_id), shuffled->plane0 * hw, shuffled->stride * hw,
                       epilogueExpr(bid, residual, *act));
  }
  if (scale) {
    const int s_id = tensorOf(scale);
    reads.push_back(s_id);
    what = "scale+" + what;
    // The kernel looked up once (a static of the run function), not by name on every run.
    call = fmt::format("{{\n    static const rt::Conv2dKernel* const k = rt::find_conv2d_kernel(\"{}\");\n"
                       "    rt::pack_scaled_conv_weights(*k, {}, W + {}, {}, const_cast<float*>(P) + {});\n  }}\n  {}",
                       kernel->name, shapeName, plan_.tensors[wid].offset, ref(s_id), packedOffset, call);
  }
  std::string kernelName = kernel->name;
  if (maxpool) {
    int id = shapeCounter_++;
    plan_.globals += fmt::format("static const rt::Pool2dShape kPool{} = {};\n", id, poolShapeInit(*maxpool));
    kernelName += "_maxpool";
    call = fmt::format("rt::{}({}, kPool{}, {}, P + {}, {}, {}, pool);", kernelName, shapeName, id, ref(x_id),
                       packedOffset, ref(y_id), epilogueExpr(bid, residual, *act));
  }
  addStep({conv->name(), what, kernelName, 2.0 * s.macs()},
          fmt::format("{} '{}' {}x{}/{} -> {}", what, conv->name(), s.kernel_h, s.kernel_w, s.stride_h,
                      shapeToString(out->type.staticShape())),
          call,
          reads, {y_id});
  return true;
}

bool Lowerer::lowerGemm(const Node* n) {
  const bool fused = isOp(*n, "FusedGemm", "tessel");
  const bool isGemm = isOp(*n, "Gemm") || fused;
  const std::optional<FusedAct> act = fused ? fusedEpilogueOf(n) : FusedAct{};
  if (!act) return false;  // an activation the runtime lacks: the host fallback runs the node
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
  const Value* out = n->output(0);
  std::string what = fused ? "Gemm" : n->opType();
  if (fused) {  // tessel.FusedGemm from the cpu pass pipeline: residual and activation are in the node
    if (n->hasInput(3)) {
      if (residual >= 0) return false;  // a full-matrix C and a residual: not one epilogue
      residual = tensorOf(n->input(3));
      what += "+add";
      plan_.report.fusedNodes++;
    }
    if (act->kind != rt::Activation::None) what.append("+").append(n->attrString("activation")), plan_.report.fusedNodes++;
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
                      epilogueExpr(bias, residual, *act, perColumn)),
          reads, {y_id});
  return true;
}

std::string convGeometryKey(const rt::Conv2dShape& s) {
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", s.batch, s.in_channels, s.in_h, s.in_w,
                     s.out_channels, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_top, s.pad_left,
                     s.pad_bottom, s.pad_right, s.dilation_h, s.dilation_w, s.groups);
}

std::string convTuningKey(const rt::Conv2dShape& s, rt::ConvLayout layout) {
  std::string key = convGeometryKey(s);
  if (layout == rt::ConvLayout::NCHWc8) key.insert(0, kBlockedKeyPrefix);
  return key;
}

std::vector<ConvTuneJob> convTuneJobs(const Graph& graph, bool avx512) {
  std::vector<ConvTuneJob> jobs;
  std::set<std::string> seen;
  for (const auto& node : graph.nodes()) {
    const Node* n = node.get();
    // The same nodes Lowerer::run sends to lowerConv, in the layout select-layout gave them. A blocked conv's
    // alternatives read the same input layout: a few-channel stem that reads NCHW keeps to such kernels.
    if (!isConvNode(*n) || !floatsOnly(n)) continue;
    auto s = loweredConvShape(n);
    const rt::ConvLayout layout = runsBlocked(*n) ? rt::ConvLayout::NCHWc8 : rt::ConvLayout::NCHW;
    if (!s) continue;
    std::string key = convTuningKey(*s, layout);
    if (!seen.insert(key).second) continue;
    const rt::Conv2dKernel* untuned = recordedKernel(n, *s);
    ConvTuneJob job{std::move(key), *s, {}, untuned->name};
    for (const rt::Conv2dKernel& k : rt::conv2d_kernels())
      if (k.layout == layout && k.nchw_input == untuned->nchw_input && k.applicable(*s) && (avx512 || !k.avx512_only))
        job.candidates.push_back(k.name);
    jobs.push_back(std::move(job));
  }
  return jobs;
}

}  // namespace tessel::cpu
