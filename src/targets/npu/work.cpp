// The schedule-independent work of an NPU subgraph (matrix MACs, vector element operations, compulsory DRAM
// bytes) and the lower bound on cycles it implies.
#include <algorithm>

#include "geometry.h"
#include "lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/targets/npu/lowering.h"

namespace tessel::npu {
namespace {

uint64_t ceilDivU(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

uint64_t elements(const Value* v) { return v && v->type.isStatic() ? static_cast<uint64_t>(shapeSize(v->type.staticShape())) : 0; }

/// Cycles per lanes-wide vector of an element-wise op (complex ops take the slow path). A binary op with a scalar
/// constant runs as the unary step it becomes (a Div by a constant is a `vun scale`).
uint64_t cyclesPerVector(const Node& n, const hw::NpuConfig& cfg) {
  std::optional<VecOp> op = lower::vectorOpOf(n);
  for (size_t i = 0; n.numInputs() == 2 && i < 2; ++i)
    if (const Value* c = n.input(i); c && c->isConstant() && c->constant().numel() == 1)
      if (const auto step = lower::epilogueStep(n, n.input(1 - i)); step && step->unary) op = step->op.op;
  return op && isComplexVecOp(*op) ? cfg.vectorCyclesPerVectorComplex : cfg.vectorCyclesPerVector;
}

/// The elements of body input `in` its readers must load: a convolution or pool only the rows and columns its
/// windows touch (a strided 1x1 convolution reads a quarter of its input), a Slice or Gather what it outputs, a view
/// (addressing only) what its own readers load of it, any other reader everything; at most the whole input.
uint64_t readElements(const Value* in) {
  const bool spatial = in->type.isStatic() && in->type.staticShape().size() == 4;
  const Shape s = spatial ? in->type.staticShape() : Shape{1, 1, 1, 1};
  std::vector<bool> rows(static_cast<size_t>(s[2]), false), cols(static_cast<size_t>(s[3]), false);
  auto mark = [](std::vector<bool>& m, int64_t out, int64_t k, int64_t stride, int64_t dil, int64_t pad) {
    for (int64_t o = 0; o < out; ++o)
      for (int64_t t = 0; t < k; ++t)
        if (const int64_t i = o * stride - pad + t * dil; i >= 0 && i < static_cast<int64_t>(m.size())) m[static_cast<size_t>(i)] = true;
  };
  uint64_t copied = 0;  // by Slice and Gather readers
  for (const Use& u : in->uses()) {
    // A Transpose (strided DMA, never a view) loads all of it.
    if (isOp(*u.node, "Transpose")) return elements(in);
    // Addressing only (Flatten, Reshape, a channel slice...): what the view's readers read of it, they read of the
    // input; a view that is only a result moves nothing.
    if (lower::opFamily(*u.node) == lower::OpFamily::Alias && u.index == 0) {
      copied += readElements(u.node->output(0));
      continue;
    }
    // A Slice or Gather (strided DMA) loads what it outputs.
    if ((isOp(*u.node, "Slice") || isOp(*u.node, "Gather")) && u.index == 0) {
      for (const Value* o : u.node->outputs()) copied += elements(o);
      continue;
    }
    if (!spatial || u.index != 0) return elements(in);
    if (isOp(*u.node, "Conv")) {
      const ConvGeometry g = convGeometry(*u.node);
      mark(rows, g.OH, g.KH, g.sH, g.dH, g.pT), mark(cols, g.OW, g.KW, g.sW, g.dW, g.pL);
    } else if (isOp(*u.node, "MaxPool") || isOp(*u.node, "AveragePool")) {
      const PoolGeometry g = poolGeometry(*u.node);
      mark(rows, g.OH, g.KH, g.sH, 1, g.pT), mark(cols, g.OW, g.KW, g.sW, 1, g.pL);
    } else {
      return elements(in);
    }
  }
  const auto count = [](const std::vector<bool>& m) { return static_cast<uint64_t>(std::count(m.begin(), m.end(), true)); };
  return std::min(elements(in), static_cast<uint64_t>(s[0] * s[1]) * count(rows) * count(cols) + copied);
}

/// Vector ops per channel of a pool: over its output positions, the window's taps inside the input minus one (the
/// first two take one op together), at least one (a copy, or the fill of a window wholly on padding); plus the
/// average's scale per output. Windows are rectangles, so a position's inside taps are its inside rows times its
/// inside columns.
uint64_t poolTapOps(const PoolGeometry& q) {
  auto inside = [](int64_t o, int64_t k, int64_t s, int64_t pad, int64_t size) {
    const int64_t lo = o * s - pad;
    return std::max<int64_t>(0, std::min(lo + k, size) - std::max<int64_t>(lo, 0));
  };
  uint64_t ops = 0;
  for (int64_t oy = 0; oy < q.OH; ++oy)
    for (int64_t ox = 0; ox < q.OW; ++ox)
      ops += static_cast<uint64_t>(std::max<int64_t>(1, inside(oy, q.KH, q.sH, q.pT, q.H) * inside(ox, q.KW, q.sW, q.pL, q.W) - 1));
  return ops + (q.isMax ? 0 : static_cast<uint64_t>(q.OH * q.OW));
}

/// Whether result `out` is a view (through addressing-only nodes) of a subgraph input or constant: not stored.
bool viewOfInput(const Value* out) {
  const Node* p = out->producer();
  if (!p) return true;
  return lower::opFamily(*p) == lower::OpFamily::Alias && !isOp(*p, "Transpose") && p->input(0) && viewOfInput(p->input(0));
}

}  // namespace

uint64_t SubgraphWork::depthwiseCycles(const hw::NpuConfig& cfg) const {
  const uint64_t perCycle = std::max<uint64_t>(cfg.dim, cfg.vectorLanes / std::max<uint64_t>(1, cfg.vectorCyclesPerVector));
  return ceilDivU(depthwiseMacs, perCycle);
}

uint64_t SubgraphWork::lowerBound(const hw::NpuConfig& cfg) const {
  const uint64_t mm = ceilDivU(macs, uint64_t{cfg.dim} * cfg.dim), vec = ceilDivU(vectorCycles, cfg.vectorLanes);
  return std::max({mm, vec, ceilDivU(mm + vec + depthwiseCycles(cfg), 2), ceilDivU(compulsoryLoadBytes, cfg.loadBytesPerCycle),
                   ceilDivU(compulsoryStoreBytes, cfg.storeBytesPerCycle)});
}

nlohmann::json SubgraphWork::toJson(const hw::NpuConfig& cfg) const {
  return {{"macs", macs},
          {"vector_lane_cycles", vectorCycles},
          {"depthwise_macs", depthwiseMacs},
          {"compulsory_load_bytes", compulsoryLoadBytes},
          {"compulsory_store_bytes", compulsoryStoreBytes},
          {"mm_cycles", ceilDivU(macs, uint64_t{cfg.dim} * cfg.dim)},
          {"vector_cycles", ceilDivU(vectorCycles, cfg.vectorLanes)},
          {"depthwise_cycles", depthwiseCycles(cfg)},
          {"load_cycles", ceilDivU(compulsoryLoadBytes, cfg.loadBytesPerCycle)},
          {"store_cycles", ceilDivU(compulsoryStoreBytes, cfg.storeBytesPerCycle)},
          {"lower_bound_cycles", lowerBound(cfg)}};
}

SubgraphWork subgraphWork(const Graph& body, const hw::NpuConfig& cfg) {
  SubgraphWork w;
  for (const Value* in : body.inputs()) w.compulsoryLoadBytes += 4 * readElements(in);
  for (const Value* out : body.outputs())
    if (!viewOfInput(out)) w.compulsoryStoreBytes += 4 * elements(out);
  for (const auto& n : body.nodes()) {
    for (const Value* v : n->inputs())
      // Float constants are loaded (weights, biases, operands); integer ones are shapes and indices.
      if (v && v->isConstant() && v->constant().dtype() == DType::Float32)
        w.compulsoryLoadBytes += 4 * static_cast<uint64_t>(v->constant().numel());
    if (const lower::OpLowering* l = lower::findLowering(*n); l && l->work) {  // priced by its own lowering
      l->work(*n, cfg, w);
      continue;
    }
    const uint64_t out = elements(n->output(0));
    switch (lower::opFamily(*n).value_or(lower::OpFamily::Alias)) {
      case lower::OpFamily::Matrix: {
        const ConvGeometry g = convGeometry(*n);
        if (g.depthwise())
          w.depthwiseMacs += static_cast<uint64_t>(g.macs());
        else
          w.macs += static_cast<uint64_t>(g.macs());
        break;
      }
      case lower::OpFamily::Pool: {
        const PoolGeometry q = poolGeometry(*n);
        // Per output, one op per tap inside the input after the first two (which take one together), and the
        // average's scale. Taps on padding need no op (a max pool from a convolution's accumulator tiles skips
        // them), so they are not work: with every window tap counted, a max pool padded by 7 of its 8 rows priced
        // a random graph's bound above the cycles its program took (seed 30135: 39,401 cycles, bound 43,763).
        w.vectorCycles += static_cast<uint64_t>(q.N * q.C) * poolTapOps(q) * cfg.vectorCyclesPerVector;
        break;
      }
      case lower::OpFamily::GlobalPool: w.vectorCycles += (elements(n->input(0)) + out) * cfg.vectorCyclesPerVector; break;
      case lower::OpFamily::Elementwise:
        // The Mul of SiLU adds nothing: the vector unit computes the pair as one `silu` pass, priced as the Sigmoid.
        // Nor does a residual Add of a convolution's result: its other operand can be loaded into the accumulator.
        if (!lower::siluSigmoid(*n) && !lower::residualAddOfMatrix(*n)) w.vectorCycles += out * cyclesPerVector(*n, cfg);
        break;
      case lower::OpFamily::Alias: break;
    }
  }
  return w;
}

}  // namespace tessel::npu
