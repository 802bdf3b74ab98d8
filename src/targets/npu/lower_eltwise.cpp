// NPU operator interpreters of the element-wise family: binary arithmetic (same shape, per-channel or scalar
// broadcast; one value per row: lower_norm.cpp), Pow by 1, 2, 0.5 or -0.5, activations (vun) and inference
// BatchNormalization (vaffine), tiled over pixels x channels.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <fmt/format.h>

#include "geometry.h"
#include "lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::npu::lower {
namespace {

/// How an operand relates to the output of an element-wise node.
/// PerImageChannel: one vector of channels per image of a batch (`[N, C, 1, 1]` against `[N, C, H, W]`, N > 1: a
/// squeeze-and-excitation scale of a batch).
enum class Operand { Full, PerChannel, PerImageChannel, ScalarConstant, Unsupported };

Operand classify(const Value* v, const Shape& out) {
  Shape s = v->type.staticShape();
  if (s == out) return Operand::Full;
  if (shapeSize(s) == 1 && v->isConstant()) return Operand::ScalarConstant;
  if (s.size() > out.size() || out.empty()) return Operand::Unsupported;
  const size_t r = out.size(), axis = static_cast<size_t>(channelAxis(r));
  Shape aligned(r - s.size(), 1);
  aligned.insert(aligned.end(), s.begin(), s.end());
  bool perImage = false;
  for (size_t i = 0; i < r; ++i) {
    if (aligned[i] == (i == axis ? out[i] : 1)) continue;
    if (i != 0 || r != 4 || aligned[i] != out[i]) return Operand::Unsupported;
    perImage = true;  // the batch axis of a map, whole
  }
  return perImage ? Operand::PerImageChannel : Operand::PerChannel;
}

bool channelVector(Operand k) { return k == Operand::PerChannel || k == Operand::PerImageChannel; }

/// A per-channel vector operand: DRAM address of its Cc words, the buffer it is staged in, and the words from one
/// image's vector to the next (0: one vector for every image).
struct ChannelVector {
  uint64_t dramAddr;
  Buffer buffer;
  uint64_t imageStride = 0;
};

/// The instruction for one tile: dst and the first operand share the tile in `inp`; `b` is the second
/// full operand (in `wgt`) or the per-channel vectors (stride 0), in the order given.
using TileOp = std::function<Instruction(SramOperand tile, std::optional<SramOperand> b,
                                         const std::vector<SramOperand>& vectors, uint32_t pixels, uint32_t channels)>;

/// The regions an instruction of lowerTiled reads: the tile then the second operand or first vector (the default),
/// the tile twice (a * a), or the first vector then the tile (c / a).
enum class Sources { TileThenOther, TileTwice, VectorThenTile };

/// Streams the output in tiles of pixels x channels: load a (and b), one vector instruction, store.
void lowerTiled(LowerContext& ctx, const Node& node, const Value* a, const Value* bFull,
                const std::vector<ChannelVector>& vectors, const TileOp& op, Sources sources = Sources::TileThenOther) {
  // The result after the fused epilogue (unary steps: BatchNormalization then ReLU in one pass, DenseNet).
  const TensorLoc& y = ctx.loc(ctx.resultValue(node));
  const std::vector<EpilogueStep> epilogue = ctx.epilogue(node);
  const TensorLoc& la = ctx.loc(a);
  const TensorLoc* lb = bFull ? &ctx.loc(bFull) : nullptr;
  const int64_t P = y.pixels(), Cc = y.channels();
  const int64_t nc = ctx.tiling(node).channels, np = ctx.tiling(node).cols;
  // With a vector per image, tiles stay within one image and stage that image's vector.
  const bool perImage = std::any_of(vectors.begin(), vectors.end(), [](const ChannelVector& v) { return v.imageStride; });
  const int64_t images = perImage ? y.shape.at(0) : 1, imagePixels = P / images;
  uint32_t tileCount = 0;
  for (int64_t c0 = 0; c0 < Cc; c0 += nc) {
    const int64_t ck = std::min(nc, Cc - c0);
    std::vector<int32_t> staged;
    for (int64_t image = 0; image < images; ++image, staged.clear())
    for (int64_t p0 = image * imagePixels, pEnd = p0 + imagePixels; p0 < pEnd; p0 += np) {
      ctx.beginTile(node, tileCount++);
      if (staged.empty())
        for (const ChannelVector& v : vectors) {
          staged.push_back(ctx.region(v.buffer, static_cast<uint64_t>(ck)));
          loadContiguous(ctx, staged.back(), 0, v.dramAddr + static_cast<uint64_t>(image) * v.imageStride + c0,
                         static_cast<uint64_t>(ck));
        }
      const auto pk = static_cast<uint32_t>(std::min(np, pEnd - p0));
      auto at = [&](const TensorLoc& l) { return l.addr + static_cast<uint64_t>(p0 * l.pixelStride() + c0); };
      const int32_t tile = ctx.region(Buffer::Input, uint64_t{pk} * static_cast<uint64_t>(ck));
      // outer = 1, inner = pixels: one DRAM burst when whole rows of channels are moved.
      ctx.emit(makeLoad(ctx.at(tile, 0, pk * ck, ck), at(la), 0, la.pixelStride(), 1, pk, static_cast<uint32_t>(ck)), tile);
      int32_t b = -1;
      if (lb) {
        b = ctx.region(Buffer::Weight, uint64_t{pk} * static_cast<uint64_t>(ck));
        ctx.emit(makeLoad(ctx.at(b, 0, pk * ck, ck), at(*lb), 0, lb->pixelStride(), 1, pk, static_cast<uint32_t>(ck)), b);
      }
      std::vector<SramOperand> vectorOperands;
      for (int32_t v : staged) vectorOperands.push_back(ctx.at(v));
      std::optional<SramOperand> bOperand;
      if (b >= 0) bOperand = ctx.at(b, 0, pk * ck, ck);
      // Operand regions: dst and srcA the tile; srcB the full operand or the first vector; srcC the second.
      const int32_t other = b >= 0 ? b : (staged.empty() ? -1 : staged[0]);
      const Instruction inst = op(ctx.at(tile, 0, pk * ck, ck), bOperand, vectorOperands, pk, static_cast<uint32_t>(ck));
      if (sources == Sources::TileTwice)
        ctx.emit(inst, tile, tile, tile);
      else if (sources == Sources::VectorThenTile)
        ctx.emit(inst, tile, other, tile);
      else
        ctx.emit(inst, tile, tile, other, staged.size() > 1 ? staged[1] : -1);
      applyUnarySteps(ctx, epilogue, tile, ctx.at(tile, 0, pk * ck, ck), 1, pk, static_cast<uint32_t>(ck));
      ctx.emit(makeStore(ctx.at(tile, 0, pk * ck, ck), at(y), 0, y.pixelStride(), 1, pk, static_cast<uint32_t>(ck)), -1, tile);
    }
  }
}

VecOp binaryOp(const std::string& op) {
  if (op == "Add") return VecOp::Add;
  if (op == "Sub") return VecOp::Sub;
  if (op == "Mul") return VecOp::Mul;
  if (op == "Div") return VecOp::Div;
  if (op == "Max") return VecOp::Max;
  return VecOp::Min;
}

bool commutative(const std::string& op) { return op != "Sub" && op != "Div"; }

/// Whether a binary node's operands are the same shape, or one of them a per-channel vector or a scalar constant
/// (lowerTiled's cases).
bool tiledOperands(const Node& n) {
  const Shape y = n.output(0)->type.staticShape();
  Operand a = classify(n.input(0), y), b = classify(n.input(1), y);
  if (a == Operand::Full && b != Operand::Unsupported) return true;
  if (b == Operand::Full && channelVector(a) && commutative(n.opType())) return true;
  return b == Operand::Full && a == Operand::ScalarConstant;  // c / x: a vector of c (lowerBinary)
}

hw::SupportResult checkBinary(const Node& n) {
  if (n.numInputs() != 2) return refuse(fmt::format("{} with {} inputs is not lowered (2 expected)", n.opType(), n.numInputs()));
  const Shape y = n.output(0)->type.staticShape();
  if (tiledOperands(n) || perRowOperand(n)) return ok();  // per row: lower_norm.cpp
  return refuse(fmt::format("broadcast of {} and {} to {} is not lowered (same shape, per-channel, per-row or scalar constant only)",
                            n.input(0)->type.toString(), n.input(1)->type.toString(), shapeToString(y)));
}

/// x op c for a scalar constant c, as one unary instruction; `scalarFirst` means c op x.
Instruction scalarOp(const std::string& op, float c, bool scalarFirst, SramOperand tile, uint32_t p, uint32_t ch) {
  const float inf = std::numeric_limits<float>::infinity();
  if (op == "Add") return makeVecUnary(VecOp::Scale, tile, tile, 1, p, ch, 1.0f, c);
  if (op == "Sub") return makeVecUnary(VecOp::Scale, tile, tile, 1, p, ch, scalarFirst ? -1.0f : 1.0f, scalarFirst ? c : -c);
  if (op == "Mul") return makeVecUnary(VecOp::Scale, tile, tile, 1, p, ch, c, 0.0f);
  if (op == "Div") return makeVecUnary(VecOp::Scale, tile, tile, 1, p, ch, 1.0f / c, 0.0f);
  if (op == "Max") return makeVecUnary(VecOp::Clip, tile, tile, 1, p, ch, c, inf);
  return makeVecUnary(VecOp::Clip, tile, tile, 1, p, ch, -inf, c);
}

void lowerBinary(const Node& n, LowerContext& ctx) {
  const Shape y = n.output(0)->type.staticShape();
  if (!tiledOperands(n)) {  // one value per row
    lowerRowBroadcast(n, ctx);
    return;
  }
  const Value *a = n.input(0), *b = n.input(1);
  const std::string op = n.opType();
  Operand ka = classify(a, y), kb = classify(b, y);
  bool scalarFirst = false;
  if (ka != Operand::Full) {
    scalarFirst = ka == Operand::ScalarConstant;
    std::swap(a, b);
    std::swap(ka, kb);
  }
  if (kb == Operand::ScalarConstant && scalarFirst && op == "Div") {
    // c / x: the vector unit has no reciprocal; a vector of c (one per channel) divided by the tile.
    const float c = static_cast<float>(b->constant().elementAsDouble(0));
    const TensorLoc& ya = ctx.loc(a);
    const std::vector<ChannelVector> numerator{{ctx.addConstant(std::vector<float>(static_cast<size_t>(ya.channels()), c)),
                                                Buffer::Output}};
    lowerTiled(
        ctx, n, a, nullptr, numerator,
        [&](SramOperand t, auto, const std::vector<SramOperand>& v, uint32_t p, uint32_t ch) {
          return makeVecBinary(VecOp::Div, t, v.at(0), t, 1, p, ch);
        },
        Sources::VectorThenTile);
    return;
  }
  if (kb == Operand::ScalarConstant) {
    float c = static_cast<float>(b->constant().elementAsDouble(0));
    lowerTiled(ctx, n, a, nullptr, {}, [&](SramOperand t, auto, const auto&, uint32_t p, uint32_t ch) {
      return scalarOp(op, c, scalarFirst, t, p, ch);
    });
    return;
  }
  std::vector<ChannelVector> vectors;
  if (channelVector(kb))
    vectors.push_back({ctx.loc(b).addr, Buffer::Output,
                       kb == Operand::PerImageChannel ? static_cast<uint64_t>(ctx.loc(b).pixelStride()) : 0});
  const Value* bFull = kb == Operand::Full ? b : nullptr;
  VecOp vop = binaryOp(op);
  lowerTiled(ctx, n, a, bFull, vectors,
             [&](SramOperand t, std::optional<SramOperand> full, const std::vector<SramOperand>& v, uint32_t p, uint32_t ch) {
               return makeVecBinary(vop, t, t, full ? *full : v.at(0), 1, p, ch);
             });
}

/// The exponent of a Pow the vector unit computes: a scalar constant 1, 2 (x * x), 0.5 (sqrt) or -0.5 (rsqrt).
std::optional<float> powExponent(const Node& n) {
  if (n.numInputs() != 2 || !n.input(1) || !n.input(1)->isConstant() || n.input(1)->constant().numel() != 1) return std::nullopt;
  if (n.input(0)->type.staticShape() != n.output(0)->type.staticShape()) return std::nullopt;
  const auto e = static_cast<float>(n.input(1)->constant().elementAsDouble(0));
  if (e == 1.0f || e == 2.0f || e == 0.5f || e == -0.5f) return e;
  return std::nullopt;
}

hw::SupportResult checkPow(const Node& n) {
  if (!powExponent(n)) return refuse("only a Pow by a scalar constant 1, 2, 0.5 or -0.5 is lowered");
  return ok();
}

void lowerPow(const Node& n, LowerContext& ctx) {
  const float e = *powExponent(n);
  lowerTiled(ctx, n, n.input(0), nullptr, {}, [&](SramOperand t, auto, const auto&, uint32_t p, uint32_t ch) {
    if (e == 2.0f) return makeVecBinary(VecOp::Mul, t, t, t, 1, p, ch);
    if (e == 0.5f) return makeVecUnary(VecOp::Sqrt, t, t, 1, p, ch);
    if (e == -0.5f) return makeVecUnary(VecOp::Rsqrt, t, t, 1, p, ch, 1.0f, 0.0f);
    return makeVecUnary(VecOp::Copy, t, t, 1, p, ch);
  }, e == 2.0f ? Sources::TileTwice : Sources::TileThenOther);
}

hw::SupportResult checkActivation(const Node& n) {
  if (!activationOf(n))
    return refuse(fmt::format("{}: its parameters are not constants or its attributes have no vector sub-op", n.opType()));
  return ok();
}

void lowerActivation(const Node& n, LowerContext& ctx) {
  Activation act = *activationOf(n);
  lowerTiled(ctx, n, n.input(0), nullptr, {}, [&](SramOperand t, auto, const auto&, uint32_t p, uint32_t ch) {
    return makeVecUnary(act.op, t, t, 1, p, ch, act.imm0, act.imm1);
  });
}

hw::SupportResult checkBatchNorm(const Node& n) {
  if (n.numOutputs() > 1 && (n.output(1) || n.output(2))) return refuse("training-mode outputs are not lowered");
  for (size_t i = 1; i < 5; ++i)
    if (!n.input(i) || !n.input(i)->isConstant()) return refuse("scale, bias, mean and variance must be constants");
  if (n.input(0)->type.dims->size() < 2) return refuse("input must have rank >= 2");
  return ok();
}

void lowerBatchNorm(const Node& n, LowerContext& ctx) {
  const auto [scale, bias] = batchNormAffine(n);
  // BatchNorm's channel axis is 1; the DRAM view's channels are axis 1 only for rank 4 (channels-last).
  const Shape x = n.input(0)->type.staticShape();
  if (x.size() != 4 && x.size() != 2)
    throw UserError(fmt::format("{}: BatchNormalization of rank {} is not lowered", n.describe(), x.size()));
  std::vector<ChannelVector> vectors{{ctx.addConstant(scale), Buffer::Weight}, {ctx.addConstant(bias), Buffer::Output}};
  lowerTiled(ctx, n, n.input(0), nullptr, vectors,
             [&](SramOperand t, auto, const std::vector<SramOperand>& v, uint32_t p, uint32_t ch) {
               return makeVecAffine(t, t, v.at(0), v.at(1), 1, p, ch);
             });
}

/// A binary node with one value per row needs a whole row on chip.
hw::SupportResult binaryFits(const Node& n, const hw::NpuConfig& cfg) {
  return tiledOperands(n) ? ok() : rowBroadcastFits(n, cfg);
}

const RegisterOpLowering kBinary({"Add", "Sub", "Mul", "Div", "Max", "Min"},
                                 {OpFamily::Elementwise, checkBinary, lowerBinary, binaryFits});
const RegisterOpLowering kPow({"Pow"}, {OpFamily::Elementwise, checkPow, lowerPow});
const RegisterOpLowering kActivations({kVectorUnaryLowering}, {OpFamily::Elementwise, checkActivation, lowerActivation});
const RegisterOpLowering kBatchNorm({"BatchNormalization"}, {OpFamily::Elementwise, checkBatchNorm, lowerBatchNorm});

}  // namespace

std::pair<std::vector<float>, std::vector<float>> batchNormAffine(const Node& bn) {
  std::vector<float> g = constantFloats(bn.input(1)->constant()), b = constantFloats(bn.input(2)->constant());
  std::vector<float> mean = constantFloats(bn.input(3)->constant()), var = constantFloats(bn.input(4)->constant());
  const float eps = bn.attrFloat("epsilon");
  std::vector<float> scale(g.size()), bias(g.size());
  for (size_t c = 0; c < g.size(); ++c) {
    scale[c] = g[c] / std::sqrt(var[c] + eps);
    bias[c] = b[c] - mean[c] * scale[c];
  }
  return {scale, bias};
}

bool unpaddedReader(const Node& n) {
  const std::vector<int64_t> pads = n.hasAttr("pads") ? n.attrInts("pads") : std::vector<int64_t>{};
  const bool unpadded = std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }) &&
                        (!n.hasAttr("auto_pad") || n.attrString("auto_pad") == "NOTSET" || n.attrString("auto_pad") == "VALID");
  if (isOp(n, "Conv")) return unpadded && !convGeometry(n).depthwise();
  // A pool whose windows all lie inside the image (nothing filled in): no padding, no ceil_mode.
  return (isOp(n, "AveragePool") || isOp(n, "MaxPool")) && unpadded && (!n.hasAttr("ceil_mode") || n.attrInt("ceil_mode") == 0) &&
         (n.numOutputs() < 2 || !n.output(1));
}

std::optional<InputNorm> inputNormOf(const Graph& body, const std::vector<const Node*>& chain, const Node& consumer) {
  if (chain.empty() || !isOp(*chain[0], "BatchNormalization") || !checkBatchNorm(*chain[0]).supported)
    return std::nullopt;
  const Value* full = chain[0]->input(0);
  if (!full->type.isStatic() || full->type.dtype != DType::Float32 || full->type.staticShape().size() != 4 ||
      consumer.input(0) != chain.back()->output(0))
    return std::nullopt;
  if (!unpaddedReader(consumer)) return std::nullopt;
  const auto& outs = body.outputs();
  for (const Node* n : chain) {
    const Value* y = n->output(0);
    if (y->uses().size() != 1 || std::find(outs.begin(), outs.end(), y) != outs.end()) return std::nullopt;
  }
  InputNorm norm;
  norm.full = full;
  std::tie(norm.scale, norm.bias) = batchNormAffine(*chain[0]);
  if (static_cast<int64_t>(norm.scale.size()) != full->type.staticShape()[1]) return std::nullopt;
  for (size_t i = 1; i < chain.size(); ++i) {
    std::optional<EpilogueStep> step = epilogueStep(*chain[i], chain[i - 1]->output(0));
    if (!step || !step->unary) return std::nullopt;
    norm.steps.push_back(*step);
  }
  return norm;
}

std::optional<InputScale> inputScaleOf(const Graph& body, const Node& mul, const Node& consumer) {
  if (!isOp(mul, "Mul") || mul.numInputs() != 2 || !isOp(consumer, "Conv") || consumer.input(0) != mul.output(0))
    return std::nullopt;
  const Value* y = mul.output(0);
  const auto& outs = body.outputs();
  if (y->uses().size() != 1 || std::find(outs.begin(), outs.end(), y) != outs.end() || !y->type.isStatic() ||
      y->type.staticShape().size() != 4 || convGeometry(consumer).depthwise())
    return std::nullopt;
  const Shape shape = y->type.staticShape();
  for (int first = 0; first < 2; ++first) {
    const Value *full = mul.input(first), *vector = mul.input(1 - first);
    if (full && vector && full->type.isStatic() && vector->type.isStatic() && classify(full, shape) == Operand::Full &&
        classify(vector, shape) == Operand::PerChannel && full->type.dtype == DType::Float32 &&
        (vector->type.dtype == DType::Float32 || vector->isConstant()))
      return InputScale{full, vector};
  }
  return std::nullopt;
}

}  // namespace tessel::npu::lower
