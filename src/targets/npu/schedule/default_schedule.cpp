// defaultSchedule(): the layer-by-layer lowering's historical tiling choices written down as an NpuSchedule
// (one group per node, an activation fused into its Conv/Gemm/MatMul, tiles sized to half buffers).
#include <algorithm>
#include <array>
#include <fmt/format.h>
#include <optional>

#include "../geometry.h"
#include "../lower_context.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"
#include "tessel/targets/npu/timing.h"
#include "tiling_cost.h"
#include "tessel/targets/npu/lowering.h"

namespace tessel::npu {
namespace {

/// The window the compiler's choices (tiles, fusion, SE) are priced with; the program's own window is chosen when
/// it is scheduled (S0.6).
constexpr uint32_t kPricingWindow = 2;

/// The output tiles whose input window (inRows x inCols pixels of `cbIn` words) fits `inpSlot` and whose result
/// (rows x cols pixels of `cbOut` words) fits `accSlot`: for each tile width that splits the OW columns into
/// 1, 2, ... parts (each width once, widest first), the most rows that fit; calls fit(rows, cols) and stops when
/// it returns true. Counts stay below the instructions' 16-bit fields.
template <class Geometry, class Fit>
void forEachFittingTile(const Geometry& g, int64_t cbIn, int64_t cbOut, uint64_t inpSlot, uint64_t accSlot, Fit&& fit) {
  for (int64_t parts = 1; parts <= g.OW; ++parts) {
    const int64_t tw = ceilDiv(g.OW, parts);
    if (parts > 1 && ceilDiv(g.OW, parts - 1) == tw) continue;  // the same width as the previous count
    if (tw >= 65536 || static_cast<uint64_t>(g.inCols(tw) * cbIn) > inpSlot) continue;
    int64_t th = std::min<int64_t>({g.OH, 65535, static_cast<int64_t>(accSlot / static_cast<uint64_t>(tw * cbOut))});
    while (th >= 1 && static_cast<uint64_t>(g.inRows(th) * g.inCols(tw) * cbIn) > inpSlot) --th;
    if (th >= 1 && fit(th, tw)) return;
  }
}

/// Output tile rows x cols such that the accumulator tile and the input window fit one slot each: the widest.
std::pair<int64_t, int64_t> chooseTile(const ConvGeometry& p, int64_t channelsOut, int64_t channelsIn, uint64_t accSlot,
                                       uint64_t inpSlot) {
  std::optional<std::pair<int64_t, int64_t>> tile;
  forEachFittingTile(p, channelsIn, channelsOut, inpSlot, accSlot, [&](int64_t th, int64_t tw) {
    tile = {th, tw};
    return true;
  });
  if (tile) return *tile;
  throw UserError(fmt::format("npu lowering: a {}x{} convolution window of {} channels does not fit the input buffer "
                              "({} words per slot)", p.KH, p.KW, channelsIn, inpSlot));
}

NodeTiling tilingFor(const Node& n, const char* variant) {
  NodeTiling t;
  t.node = n.name(), t.op = n.opType(), t.variant = variant;
  return t;
}

uint64_t half(const hw::NpuConfig& cfg, Buffer b) { return cfg.bufferWords(static_cast<size_t>(b)) / 2; }

NodeTiling matrixTiling(const Node& n, const hw::NpuConfig& cfg) {
  const ConvGeometry p = convGeometry(n);
  NodeTiling t = tilingFor(n, "matrix");
  const int64_t DIM = cfg.dim;
  if (p.depthwise()) {
    t.variant = "vector";
    const int64_t taps = p.KH * p.KW;
    int64_t cb = std::min<int64_t>(p.C, 4 * DIM);
    cb = std::min<int64_t>(cb, static_cast<int64_t>(half(cfg, Buffer::Weight)) / taps);
    cb = std::min<int64_t>(cb, static_cast<int64_t>(half(cfg, Buffer::Output)));
    cb = std::min<int64_t>(cb, static_cast<int64_t>(half(cfg, Buffer::Input)) / p.windowWords());
    if (cb < 1) throw UserError(fmt::format("{}: depthwise kernel does not fit the NPU's buffers", n.describe()));
    auto [th, tw] = chooseTile(p, cb, cb, half(cfg, Buffer::Accumulator), half(cfg, Buffer::Input));
    t.rows = th, t.cols = tw, t.channels = cb, t.inChannels = cb;
    return t;
  }
  // Narrow groups share gemm blocks (block-diagonal weights): one gemm instead of one per group.
  t.groupPack = groupPackFor(p, DIM);
  const ConvGeometry q = packGroups(p, t.groupPack);
  const int64_t Cq = q.C / q.group, Mq = q.M / q.group;
  const int64_t cb = std::max<int64_t>(1, std::min({DIM, Cq, static_cast<int64_t>(half(cfg, Buffer::Input)) / q.windowWords()}));
  const int64_t nb = std::min(DIM, Mq);
  auto [th, tw] = chooseTile(q, nb, cb, half(cfg, Buffer::Accumulator), half(cfg, Buffer::Input));
  t.rows = th, t.cols = tw, t.channels = nb, t.inChannels = cb;
  // An output block's weights stay resident when they fit half the weight buffer, else they are streamed.
  t.weightsResident = static_cast<uint64_t>(Cq * q.KH * q.KW * nb) <= half(cfg, Buffer::Weight);
  return t;
}

/// Busy cycles of the busiest unit (load, vector, store) for a pool's tiling, with the simulator's instruction costs.
uint64_t poolCycles(const PoolGeometry& q, const NodeTiling& t, const hw::NpuConfig& cfg) {
  uint64_t ld = 0, vec = 0, st = 0;
  for (int64_t c0 = 0; c0 < q.C; c0 += t.channels)
    for (int64_t oy0 = 0; oy0 < q.OH; oy0 += t.rows)
      for (int64_t ox0 = 0; ox0 < q.OW; ox0 += t.cols) {
        const int64_t ck = std::min(t.channels, q.C - c0), rows = std::min(t.rows, q.OH - oy0), cols = std::min(t.cols, q.OW - ox0);
        Instruction io;
        io.opcode = Opcode::Load;
        io.outer = static_cast<uint32_t>(q.inRows(rows)), io.inner = static_cast<uint32_t>(q.inCols(cols));
        io.vecLen = static_cast<uint32_t>(ck), io.dramStrideInner = ck == q.C ? io.vecLen : io.vecLen + 1;
        ld += instructionCost(io, cfg).occupancy;
        io.opcode = Opcode::Store, io.outer = static_cast<uint32_t>(rows), io.inner = static_cast<uint32_t>(cols);
        st += instructionCost(io, cfg).occupancy;
        Instruction v;
        v.opcode = Opcode::VecBinary, v.vecOp = VecOp::Max;
        v.outer = io.outer, v.inner = io.inner, v.vecLen = io.vecLen;
        vec += static_cast<uint64_t>(std::max<int64_t>(1, q.KH * q.KW - 1)) * instructionCost(v, cfg).occupancy;  // the first two taps in one op
      }
  return std::max({ld, vec, st});
}

/// Busy cycles per unit (LD, MM, VEC, ST) of a depthwise convolution with tiling `t`, with the simulator's
/// instruction costs: per channel block its weights and bias, per tile the input window, then on the vector unit
/// one multiply-accumulate per tap (the first one a per-channel affine adding the bias), or on the matrix unit
/// (every t.matrixEvery-th tile) the bias gemm and one gemm per tap and DIM channels; `epilogueOps` vector ops in
/// place and the store.
std::array<uint64_t, 4> depthwiseUnits(const ConvGeometry& p, const NodeTiling& t, int epilogueOps, bool bias,
                                       const hw::NpuConfig& cfg) {
  std::array<uint64_t, 4> u{};
  const int64_t taps = p.KH * p.KW, DIM = cfg.dim;
  const int64_t blocks = ceilDiv(p.C, t.channels), blockTiles = ceilDiv(p.OH, t.rows) * ceilDiv(p.OW, t.cols);
  int64_t tile = 0;
  for (int64_t c0 = 0; c0 < p.C; c0 += t.channels) {
    const int64_t ck = std::min(t.channels, p.C - c0);
    for (int64_t oy0 = 0; oy0 < p.OH; oy0 += t.rows)
      for (int64_t ox0 = 0; ox0 < p.OW; ox0 += t.cols, ++tile) {
        const int64_t rows = std::min(t.rows, p.OH - oy0), cols = std::min(t.cols, p.OW - ox0);
        Instruction io;
        io.opcode = Opcode::Load;
        io.outer = static_cast<uint32_t>(p.inRows(rows)), io.inner = static_cast<uint32_t>(p.inCols(cols));
        io.vecLen = static_cast<uint32_t>(ck), io.dramStrideInner = static_cast<uint32_t>(p.C);
        u[0] += instructionCost(io, cfg).occupancy;
        io.opcode = Opcode::Store, io.outer = static_cast<uint32_t>(rows), io.inner = static_cast<uint32_t>(cols);
        u[3] += instructionCost(io, cfg).occupancy;
        Instruction v;
        v.opcode = Opcode::VecBinary, v.vecOp = VecOp::MulAcc;
        v.outer = io.outer, v.inner = io.inner, v.vecLen = io.vecLen;
        const uint64_t vecOp = instructionCost(v, cfg).occupancy;
        if (depthwiseTileOnMatrix(tile, t.matrixEvery)) {
          for (int64_t j = 0; j < ck; j += DIM) {
            Instruction gm;
            gm.opcode = Opcode::Gemm, gm.outer = io.outer, gm.inner = io.inner;
            gm.gemmK = gm.gemmN = static_cast<uint32_t>(std::min(DIM, ck - j));
            u[1] += static_cast<uint64_t>(taps + (bias ? 1 : 0)) * instructionCost(gm, cfg).occupancy;
          }
          u[2] += static_cast<uint64_t>(epilogueOps) * vecOp;
        } else {
          u[2] += static_cast<uint64_t>(taps + epilogueOps) * vecOp;  // the bias rides on the first tap (affine)
        }
      }
    // DepthwiseConv loads a block's vector weights and bias, and its diagonal blocks and bias rows, for the units its
    // tiles run on.
    const DepthwiseBlockUnits units = depthwiseBlockUnits(blocks, t.matrixEvery, c0 / t.channels, blockTiles, false);
    Instruction w;
    w.opcode = Opcode::Load, w.outer = 1, w.inner = 1;
    const int64_t vectorWords = taps * ck + (bias ? ck : 0), matrixWords = depthwiseMatrixWords(taps, ck, DIM);
    for (const int64_t words : {units.vector ? vectorWords : 0, units.matrix ? matrixWords : 0})
      if (words > 0) w.vecLen = static_cast<uint32_t>(words), u[0] += instructionCost(w, cfg).occupancy;
  }
  return u;
}

/// Depthwise tilings, cheapest first by busy cycles of the busiest unit (ties: the fewest in total): for each
/// channel block of whole vectors (or all channels) and share of tiles on the matrix unit, the tile whose input
/// window and accumulator tile fit one slot each that costs least. Narrow channel blocks allow taller and wider
/// windows, so the rows and columns of the halo are loaded fewer times.
std::vector<NodeTiling> depthwiseTilingOptions(const Node& n, const hw::NpuConfig& cfg, int epilogueOps, const NodeTiling& t) {
  const ConvGeometry p = convGeometry(n);
  const int64_t taps = p.KH * p.KW, lanes = cfg.vectorLanes;
  const bool bias = n.hasInput(2);
  std::vector<int64_t> cbs;
  for (int64_t cb = std::min(p.C, lanes); cb <= std::min<int64_t>(p.C, 4 * cfg.dim); cb += lanes) cbs.push_back(cb);
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, NodeTiling>> options;
  auto tryBlocks = [&](const std::vector<int64_t>& blocks) {
    for (int64_t every : {0, 1, 2, 3, 4})
      for (int64_t cb : blocks) {
        // Tiles on both units: a window computing on each and the next ones loading (a quarter buffer each).
        const uint64_t slots = every > 1 ? 4 : 2;
        const uint64_t inpSlot = cfg.bufferWords(static_cast<size_t>(Buffer::Input)) / slots;
        const uint64_t accSlot = cfg.bufferWords(static_cast<size_t>(Buffer::Accumulator)) / slots;
        if (static_cast<uint64_t>(depthwiseWeightWords(taps, cb, every > 0, cfg.dim)) > half(cfg, Buffer::Weight) ||
            static_cast<uint64_t>(cb) > half(cfg, Buffer::Output))
          continue;
        NodeTiling c = t;
        c.channels = cb, c.inChannels = cb, c.matrixEvery = every;
        bool found = false;
        std::pair<uint64_t, uint64_t> best{0, 0};
        NodeTiling bestTiling;
        forEachFittingTile(p, cb, cb, inpSlot, accSlot, [&](int64_t th, int64_t tw) {
          c.rows = ceilDiv(p.OH, ceilDiv(p.OH, th)), c.cols = tw;  // even row tiles
          const auto u = depthwiseUnits(p, c, epilogueOps, bias, cfg);
          const std::pair<uint64_t, uint64_t> cost{*std::max_element(u.begin(), u.end()), u[0] + u[1] + u[2] + u[3]};
          if (!found || cost < best) best = cost, bestTiling = c, found = true;
          return false;
        });
        if (found) options.push_back({best, bestTiling});
      }
  };
  tryBlocks(cbs);
  // A large kernel on a small input buffer (7x7 taps of 16 channels are 784 words): narrower blocks than a vector,
  // halving until one output pixel's window fits.
  for (int64_t cb = std::min(p.C, lanes) / 2; options.empty() && cb >= 1; cb /= 2) tryBlocks({cb});
  std::stable_sort(options.begin(), options.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<NodeTiling> out;
  for (auto& o : options) out.push_back(std::move(o.second));
  return out;
}

/// The depthwise tiling of the fewest busy cycles (depthwiseTilingOptions' first), else `t`.
NodeTiling depthwiseTiling(const Node& n, const hw::NpuConfig& cfg, int epilogueOps, NodeTiling t) {
  const std::vector<NodeTiling> options = depthwiseTilingOptions(n, cfg, epilogueOps, t);
  return options.empty() ? t : options.front();
}

/// A pool's tiles when its input windows go to buffer `window` and its results to `result` (one slot each): the
/// widest tile that fits, or with `cheapest` the tile width of the fewest busy cycles (poolCycles).
NodeTiling poolTilingIn(const Node& n, const hw::NpuConfig& cfg, const char* variant, Buffer window, Buffer result, bool cheapest) {
  const PoolGeometry q = poolGeometry(n);
  NodeTiling t = tilingFor(n, variant);
  const uint64_t inpSlot = half(cfg, window), accSlot = half(cfg, result);
  int64_t cb = std::min<int64_t>(q.C, 4 * cfg.dim);
  while (cb > 1 && static_cast<uint64_t>(q.KH * q.KW * cb) > inpSlot) cb = ceilDiv(cb, 2);
  bool found = false;
  uint64_t best = 0;
  forEachFittingTile(q, cb, cb, inpSlot, accSlot, [&](int64_t th, int64_t tw) {
    NodeTiling c = t;
    c.rows = th, c.cols = tw, c.channels = cb;
    const uint64_t cycles = cheapest ? poolCycles(q, c, cfg) : 0;
    if (!found || cycles < best) best = cycles, t = c, found = true;
    return !cheapest;  // the widest, or go on for the cheapest
  });
  if (!found) throw UserError(fmt::format("{}: pooling window does not fit the input buffer", n.describe()));
  return t;
}

NodeTiling poolTiling(const Node& n, const hw::NpuConfig& cfg) {
  return poolTilingIn(n, cfg, "pool", Buffer::Input, Buffer::Accumulator, false);
}

NodeTiling globalPoolTiling(const Node& n, const hw::NpuConfig& cfg) {
  const Shape xs = n.input(0)->type.staticShape();
  const int64_t C = xs[1], HW = xs[2] * xs[3];
  NodeTiling t = tilingFor(n, "global-pool");
  t.channels = std::min<int64_t>({C, 4 * cfg.dim, static_cast<int64_t>(half(cfg, Buffer::Accumulator))});
  t.cols = std::max<int64_t>(1, std::min<int64_t>(HW, static_cast<int64_t>(half(cfg, Buffer::Input)) / t.channels));
  return t;
}

NodeTiling elementwiseTiling(const Node& n, const hw::NpuConfig& cfg) {
  const PixelView y = pixelView(n.output(0)->type.staticShape());
  NodeTiling t = tilingFor(n, "elementwise");
  const int64_t slot = static_cast<int64_t>(
      std::min({half(cfg, Buffer::Input), half(cfg, Buffer::Weight), half(cfg, Buffer::Output)}));
  t.channels = std::min<int64_t>({y.channels, slot, 65535});
  t.cols = std::max<int64_t>(1, std::min<int64_t>({y.pixels, slot / t.channels, 65535}));
  return t;
}

/// The nodes a node applies in place to its result before storing it: the chain of its only consumers that can
/// run as epilogue steps, stopping at a subgraph output. A Conv/Gemm/MatMul takes any step (activations,
/// element-wise ops with a scalar constant or a same-shape tensor, SiLU's x * Sigmoid(x)); a pool or an element-wise
/// node unary steps only (an activation moved behind a max pool by pool-before-activation, the ReLU after a
/// BatchNormalization that no convolution absorbs, DenseNet's).
std::vector<const Node*> epilogueChain(const Graph& body, const Node& n) {
  std::vector<const Node*> chain;
  const auto family = lower::opFamily(n);
  const bool matrix = family == lower::OpFamily::Matrix;
  if (!matrix && family != lower::OpFamily::Pool && family != lower::OpFamily::Elementwise) return chain;
  const auto& outs = body.outputs();
  const Value* y = n.output(0);
  for (;;) {
    if (std::find(outs.begin(), outs.end(), y) != outs.end()) break;
    if (matrix && y->uses().size() == 2) {
      // x * Sigmoid(x) (SiLU): both nodes, one `silu` step (epilogueSteps).
      const Node* b = y->uses()[0].node;
      if (!lower::siluSigmoid(*b)) b = y->uses()[1].node;
      const Node* a = lower::siluSigmoid(*b);
      if (!a || std::find(outs.begin(), outs.end(), a->output(0)) != outs.end()) break;
      if (lower::opFamily(*a) != lower::OpFamily::Elementwise || lower::opFamily(*b) != lower::OpFamily::Elementwise ||
          !lower::epilogueSteps(y, {a, b}))
        break;
      chain.push_back(a), chain.push_back(b);
      y = b->output(0);
      continue;
    }
    if (y->uses().size() != 1) break;
    const Node* user = y->uses()[0].node;
    if (lower::opFamily(*user) != lower::OpFamily::Elementwise) break;
    const std::optional<lower::EpilogueStep> step = lower::epilogueStep(*user, y);
    if (!step || (!matrix && !step->unary)) break;
    chain.push_back(user);
    y = user->output(0);
  }
  return chain;
}

}  // namespace

namespace {

/// The DRAM traffic the compiler allows itself, as a multiple of the compulsory bytes (every input, output and
/// constant moved once): past it, tilings that move fewer bytes are preferred at a small cost in cycles, as long
/// as that brings the traffic within 5 % of the budget (networks whose activations dwarf their weights cannot
/// get there layer by layer, and then keep their fastest tilings).
constexpr double kDramBudget = 2.75;
/// The most cycles a node may lose (as a fraction) to move fewer DRAM bytes, and all nodes together.
constexpr double kDramTradeLimit = 0.25;
constexpr double kDramTradeTotalLimit = 0.04;

/// The steps of `t`'s epilogue applied to `n`'s result (nothing when some node cannot be a step).
std::optional<std::vector<lower::EpilogueStep>> epilogueStepsOf(const Node& n, const NodeTiling& t,
                                                                const std::map<std::string, const Node*>& byName) {
  std::vector<const Node*> chain;
  for (const std::string& name : t.epilogue) chain.push_back(byName.at(name));
  return lower::epilogueSteps(n.output(0), chain);
}

/// What a node's epilogue costs per tile (vector ops, tensors loaded).
EpilogueShape epilogueShape(const Node& n, const NodeTiling& t, const std::map<std::string, const Node*>& byName) {
  EpilogueShape e;
  e.bias = (n.opType() == "Conv" || n.opType() == "Gemm") && n.hasInput(2);
  const auto steps = epilogueStepsOf(n, t, byName);
  if (!steps) {
    e.tensorSteps = static_cast<int>(t.epilogue.size());
    return e;
  }
  e.accTensor = t.residualInAcc && lower::residualFirst(*steps);
  for (size_t k = e.accTensor ? 1 : 0; k < steps->size(); ++k)
    if (const lower::EpilogueStep& step = (*steps)[k]; step.unary)
      ++e.unarySteps;
    else if (step.saved >= 0)
      ++e.unarySteps, ++e.savedSteps;
    else
      ++e.tensorSteps;
  return e;
}

uint64_t bytesOf(const Value* v) { return v && v->type.isStatic() ? 4 * static_cast<uint64_t>(shapeSize(v->type.staticShape())) : 0; }

}  // namespace

int64_t depthwiseMatrixWords(int64_t taps, int64_t cb, int64_t dim) {
  int64_t words = 0;
  for (int64_t j = 0; j < cb; j += dim) words += taps * std::min(dim, cb - j) * std::min(dim, cb - j) + std::min(dim, cb - j);
  return words;
}

int64_t depthwiseWeightWords(int64_t taps, int64_t cb, bool matrix, int64_t dim) {
  return taps * cb + (matrix ? depthwiseMatrixWords(taps, cb, dim) : 0);
}

DepthwiseBlockUnits depthwiseBlockUnits(int64_t blocks, int64_t every, int64_t block, int64_t spatialTiles, bool blocksInner) {
  DepthwiseBlockUnits u;
  for (int64_t s = 0; s < spatialTiles && !(u.vector && u.matrix); ++s) {
    const int64_t k = blocksInner ? s * blocks + block : block * spatialTiles + s;  // the node's k-th tile
    (depthwiseTileOnMatrix(k, every) ? u.matrix : u.vector) = true;
  }
  return u;
}

int64_t depthwiseNodeWeightWords(int64_t C, int64_t taps, int64_t cb, int64_t every, int64_t spatialTiles, bool blocksInner,
                                 int64_t dim) {
  const int64_t blocks = ceilDiv(C, cb);
  int64_t words = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t ck = std::min(cb, C - b * cb);
    const DepthwiseBlockUnits u = depthwiseBlockUnits(blocks, every, b, spatialTiles, blocksInner);
    words += (u.vector ? taps * ck : 0) + (u.matrix ? depthwiseMatrixWords(taps, ck, dim) : 0);
  }
  return words;
}

namespace {

/// A convolution whose output channels take several passes, each loading the whole input again because the window of
/// its tile (every input channel) does not fit the input buffer, is offered the same tile with fewer rows (halved until
/// the window fits once) and the passes inside it, with its weights resident (when they were) or streamed. The
/// estimate refuses such tiles (a window that does not fit twice serialises the tiles in ways its sum does not
/// rank), so the instruction scheduler prices them on the group, and pickMatrixTiling's rule picks: the cheapest
/// in cycles, or within 2 % of it the one that moves the fewest DRAM bytes. ResNet-18's layer2.0 conv1 on `edge`
/// (3x3 stride 2, a 56x56x64 map, four passes of 32 channels) loaded its input four times; 14-row tiles with the
/// passes inside move 2.1 MB less for 1 % more cycles.
void chooseInsideTiles(NpuSchedule& s, const Graph& body, const hw::NpuConfig& cfg) {
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  const auto inputWords = static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(Buffer::Input)));
  for (size_t g = 0; g < s.groups.size(); ++g) {
    GroupSchedule& grp = s.groups[g];
    if (grp.tiling.size() != 1 || grp.rowTiles != 1 || grp.channelChain) continue;
    const NodeTiling& t = grp.tiling[0];
    if (t.variant != "matrix" || t.inputResident || !t.maxPool.empty() || !isOp(*byName.at(t.node), "Conv")) continue;
    const ConvGeometry geo = packGroups(convGeometry(*byName.at(t.node)), t.groupPack);
    const int64_t Mg = geo.M / geo.group, Cg = geo.C / geo.group, cols = std::min(t.cols, geo.OW);
    if (std::min(t.coutPerPass > 0 ? t.coutPerPass : t.channels, Mg) >= Mg) continue;  // one pass: loaded once
    const auto fits = [&](int64_t rows) { return tileWindowWordsPerChannel(geo, t, rows, cols) * Cg <= inputWords; };
    if (fits(std::min(t.rows, geo.OH))) continue;  // the estimate's to offer
    int64_t rows = std::min(t.rows, geo.OH) / 2;
    while (rows > 1 && !fits(rows)) rows /= 2;
    if (rows < 1 || !fits(rows)) continue;
    const std::optional<lower::ModelledCost> now = lower::modelledCostIfItFits(body, cfg, s, {g});
    if (!now) continue;
    std::vector<std::pair<uint64_t, uint64_t>> costs{{now->cycles, now->dramBytes}};  // option 0: the tiling as chosen
    std::vector<NodeTiling> inside;
    for (const bool resident : {true, false}) {
      if (resident && !t.weightsResident) continue;
      NpuSchedule trial = s;
      NodeTiling& u = trial.groups[g].tiling[0];
      u.rows = rows, u.inputResident = true, u.weightsResident = resident;
      if (const auto c = lower::modelledCostIfItFits(body, cfg, trial, {g})) costs.push_back({c->cycles, c->dramBytes}), inside.push_back(u);
    }
    if (const size_t pick = pickCheapOrLight(costs); pick > 0) grp.tiling[0] = inside[pick - 1];
  }
}

}  // namespace

NpuSchedule tiledSchedule(const Graph& body, const hw::NpuConfig& cfg, const std::string& subgraph) {
  NpuSchedule s = defaultSchedule(body, cfg, subgraph);
  std::map<std::string, const Node*> byName;
  for (const auto& n : body.nodes()) byName[n->name()] = n.get();
  struct Choice {
    NodeTiling* tiling;
    std::vector<std::pair<NodeTiling, MatrixCost>> options;  ///< Pareto front, fastest first
    size_t pick = 0;
    EpilogueShape epilogue;
  };
  std::vector<Choice> choices;
  uint64_t otherBytes = 0;  // traffic of the nodes that are not convolutions: their inputs and outputs once
  for (GroupSchedule& g : s.groups)
    for (NodeTiling& t : g.tiling) {
      const Node& n = *byName.at(t.node);
      if (t.variant != "matrix") {
        for (const Value* v : n.inputs()) otherBytes += bytesOf(v);
        otherBytes += bytesOf(n.output(0));
        continue;
      }
      // A residual Add first in the epilogue: its tensor goes into the accumulator (never worse: no vector pass, no
      // output-buffer tile, the same load).
      const auto steps = epilogueStepsOf(n, t, byName);
      t.residualInAcc = steps && lower::residualFirst(*steps);
      const EpilogueShape e = epilogueShape(n, t, byName);
      Choice c{&t, matrixTilingOptions(n, packGroups(convGeometry(n), t.groupPack), cfg, e), 0, e};
      c.pick = pickMatrixTiling(c.options);
      if (t.groupPack > 1) {  // packed groups: more weight words (zeros) and, when the pack does not divide, recomputation
        std::vector<std::pair<NodeTiling, MatrixCost>> one = matrixTilingOptions(n, convGeometry(n), cfg, e);
        const size_t pick = pickMatrixTiling(one);
        if (one[pick].second.cycles < c.options[c.pick].second.cycles) t.groupPack = 1, c.options = std::move(one), c.pick = pick;
      }
      choices.push_back(std::move(c));
    }
  // Within the DRAM budget: trade the fewest cycles per byte saved, one node at a time.
  const SubgraphWork work = subgraphWork(body, cfg);
  const auto budget = static_cast<uint64_t>(kDramBudget * static_cast<double>(work.compulsoryLoadBytes + work.compulsoryStoreBytes));
  auto total = [&] {
    uint64_t b = otherBytes;
    for (const Choice& c : choices) b += c.options[c.pick].second.dramBytes;
    return b;
  };
  uint64_t cycles = 0;
  for (const Choice& c : choices) cycles += c.options[c.pick].second.cycles;
  const auto allowed = static_cast<uint64_t>(kDramTradeTotalLimit * static_cast<double>(cycles));
  uint64_t spent = 0;
  std::vector<size_t> fastest;
  for (const Choice& c : choices) fastest.push_back(c.pick);
  uint64_t bytes = total();
  while (bytes > budget) {
    Choice* bestChoice = nullptr;
    size_t bestPick = 0;
    double bestRatio = 0;
    for (Choice& c : choices) {
      const MatrixCost& now = c.options[c.pick].second;
      for (size_t k = c.pick + 1; k < c.options.size(); ++k) {
        const MatrixCost& o = c.options[k].second;
        if (o.cycles > c.options[0].second.cycles + static_cast<uint64_t>(kDramTradeLimit * static_cast<double>(c.options[0].second.cycles)))
          break;
        if (spent + (o.cycles - now.cycles) > allowed) continue;
        const double ratio = static_cast<double>(now.dramBytes - o.dramBytes) / static_cast<double>(o.cycles - now.cycles + 1);
        if (ratio > bestRatio) bestRatio = ratio, bestChoice = &c, bestPick = k;
      }
    }
    if (!bestChoice) break;
    bytes -= bestChoice->options[bestChoice->pick].second.dramBytes - bestChoice->options[bestPick].second.dramBytes;
    spent += bestChoice->options[bestPick].second.cycles - bestChoice->options[bestChoice->pick].second.cycles;
    bestChoice->pick = bestPick;
  }
  // Trading is worth its cycles only when it brings the traffic (nearly) within the budget.
  if (bytes > budget + budget / 20)
    for (size_t k = 0; k < choices.size(); ++k) choices[k].pick = fastest[k];
  for (Choice& c : choices) {
    NodeTiling chosen = c.options[c.pick].first;
    // The same tiles with the passes inside each tile (NodeTiling::inputResident) when the estimate finds that no
    // slower and lighter on DRAM: the input loaded once per tile instead of once per pass. Only as a variant of the
    // chosen tiling: offered among all the options, it won on estimates that ranked tiles of different shapes
    // wrongly (SqueezeNet's stem on `tiny` 4 % slower).
    // Resident weights then hold every pass's: where they do not fit, the variant streams them (loaded per tile and
    // pass, as often as the resident ones when a tile is a whole image: ResNet-18's layer2 on `edge` read its input
    // once per 16-channel pass, 3.2 MB of the 3.6 MB it moved).
    const ConvGeometry geo = packGroups(convGeometry(*byName.at(chosen.node)), chosen.groupPack);
    MatrixCost best = c.options[c.pick].second;
    const NodeTiling picked = chosen;
    for (const bool resident : {true, false}) {
      if (resident && !picked.weightsResident) continue;
      NodeTiling inside = picked;
      inside.inputResident = true, inside.weightsResident = resident;
      const MatrixCost then = matrixCost(geo, inside, cfg, c.epilogue);
      if (then.fits && then.cycles <= best.cycles && then.dramBytes < best.dramBytes) chosen = inside, best = then;
    }
    chosen.epilogue = c.tiling->epilogue;
    *c.tiling = chosen;
  }
  // Depthwise convolutions: the channel block and tile of the fewest busy cycles.
  for (GroupSchedule& g : s.groups)
    for (NodeTiling& t : g.tiling)
      if (t.variant == "vector") t = depthwiseTiling(*byName.at(t.node), cfg, static_cast<int>(t.epilogue.size()), t);
  // Pools: the input windows in the accumulator and the results in the output buffer when that is cheaper
  // (larger windows load fewer overlapping rows).
  for (GroupSchedule& g : s.groups)
    for (NodeTiling& t : g.tiling)
      if (t.variant == "pool") {
        const Node& n = *byName.at(t.node);
        const NodeTiling wide = poolTilingIn(n, cfg, "pool-wide", Buffer::Accumulator, Buffer::Output, true);
        if (poolCycles(poolGeometry(n), wide, cfg) < poolCycles(poolGeometry(n), t, cfg)) {
          const std::vector<std::string> epilogue = t.epilogue;
          t = wide;
          t.epilogue = epilogue;
        }
      }
  chooseInsideTiles(s, body, cfg);   // passes inside smaller tiles where the input was loaded once per pass
  chooseInputScaling(s, body, cfg);  // squeeze-and-excitation Muls on their convolutions' loads, when cheaper
  chooseInputNorms(s, body, cfg);    // pre-activation BatchNormalization (+ ReLU) on their convolutions' loads, when cheaper
  s.window = 0;  // chosen when the program is scheduled (S0.6)
  return s;
}

NpuSchedule compilerSchedule(const Graph& body, const hw::NpuConfig& cfg, const std::string& subgraph, bool fusion) {
  NpuSchedule s = tiledSchedule(body, cfg, subgraph);
  // Fusion and the pools are priced with the window the tiles were chosen with (pricing them with window 0, as
  // tiledSchedule leaves it, chose worse fusions on edge: SqueezeNet 1,899,442 -> 2,197,685 cycles).
  s.window = kPricingWindow;
  if (fusion) {
    chooseFusion(s, body, cfg);
    chooseChannelChains(s, body, cfg);  // depthwise -> 1x1 pairs the row-tile fusion left (their windows did not fit)
    chooseMaxPools(s, body, cfg);       // max pools of the convolutions left alone, from their accumulator tiles
    chooseResidualConvs(s, body, cfg);  // shortcut convolutions computed into the accumulator they are added to
  }
  chooseGlobalPoolEpilogues(s, body, cfg);  // squeeze-and-excitation's pools from their producers' tiles, when cheaper
  if (fusion) chooseBiasLoads(s, body, cfg);  // biases broadcast by the load unit where it has the cycles to spare
  s.window = 0;  // chosen when the program is scheduled (S0.6)
  return s;
}

std::vector<NodeTiling> tilingOptions(const Node& n, const NodeTiling& current, const Graph& body, const hw::NpuConfig& cfg) {
  std::vector<NodeTiling> out{current};
  auto add = [&](NodeTiling t) {  // what the node does besides its tiles stays (its epilogue, work on loads and stores)
    t.epilogue = current.epilogue;
    t.inputScale = current.inputScale, t.inputNorm = current.inputNorm, t.globalPool = current.globalPool;
    t.maxPool = current.maxPool;
    t.residualConv = current.residualConv, t.residualInChannels = current.residualInChannels;
    t.residualWeightsResident = current.residualWeightsResident;
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(std::move(t));
  };
  if (current.onMatrixUnit()) {
    std::map<std::string, const Node*> byName;
    for (const auto& m : body.nodes()) byName[m->name()] = m.get();
    // With the current group packing, then with the other (packed or one group per block).
    const ConvGeometry geo = convGeometry(n);
    std::vector<int64_t> packs{current.groupPack};
    if (const int64_t other = current.groupPack > 1 ? 1 : groupPackFor(geo, cfg.dim); other != current.groupPack)
      packs.push_back(other);
    const EpilogueShape e = epilogueShape(n, current, byName);
    std::vector<NodeTiling> inside;  // the same tiles with the passes inside each (NodeTiling::inputResident), last
    for (int64_t pack : packs)
      for (auto& [t, cost] : matrixTilingOptions(n, packGroups(geo, pack), cfg, e, 6)) {
        add(t);
        NodeTiling u = t;
        u.inputResident = true;
        const MatrixCost c = matrixCost(packGroups(geo, pack), u, cfg, e);
        if (c.fits && c.dramBytes < cost.dramBytes) inside.push_back(std::move(u));
      }
    for (NodeTiling& u : inside) add(std::move(u));
  } else if (current.variant == "vector") {
    for (NodeTiling& t : depthwiseTilingOptions(n, cfg, static_cast<int>(current.epilogue.size()), current)) add(t);
  } else if (current.variant == "pool" || current.variant == "pool-wide") {
    add(poolTilingIn(n, cfg, "pool", Buffer::Input, Buffer::Accumulator, false));
    add(poolTilingIn(n, cfg, "pool-wide", Buffer::Accumulator, Buffer::Output, true));
  }
  return out;
}

NpuSchedule defaultSchedule(const Graph& body, const hw::NpuConfig& cfg, const std::string& subgraph) {
  NpuSchedule s;
  s.subgraph = subgraph;
  s.strategy = "window";
  s.window = kPricingWindow;
  // Each epilogue node joins the first producer (in topological order) that can take it.
  std::map<const Node*, const Node*> fusedInto;
  std::map<const Node*, std::vector<const Node*>> chains;
  for (const auto& n : body.nodes())
    for (const Node* e : epilogueChain(body, *n)) {
      if (fusedInto.count(e)) break;
      fusedInto[e] = n.get();
      chains[n.get()].push_back(e);
    }
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < body.nodes().size(); ++i) position[body.nodes()[i]->name()] = i;
  for (const auto& n : body.nodes()) {
    if (fusedInto.count(n.get())) continue;
    GroupSchedule g;
    g.nodes.push_back(n->name());
    g.tileOrder = {0};
    NodeTiling t;
    switch (lower::opFamily(*n).value_or(lower::OpFamily::Elementwise)) {
      case lower::OpFamily::Matrix: t = matrixTiling(*n, cfg); break;
      case lower::OpFamily::Pool: t = poolTiling(*n, cfg); break;
      case lower::OpFamily::GlobalPool: t = globalPoolTiling(*n, cfg); break;
      case lower::OpFamily::Alias:
        t = elementwiseTiling(*n, cfg);  // copy tiles, when a view is impossible
        t.variant = "alias";
        break;
      case lower::OpFamily::Elementwise: t = elementwiseTiling(*n, cfg); break;
    }
    for (const Node* e : chains[n.get()]) {
      t.epilogue.push_back(e->name());
      g.nodes.push_back(e->name());
    }
    g.tiling.push_back(t);
    s.groups.push_back(std::move(g));
  }
  // A group is lowered once everything it reads exists: order groups by their last node.
  std::stable_sort(s.groups.begin(), s.groups.end(), [&](const GroupSchedule& a, const GroupSchedule& b) {
    return position.at(a.nodes.back()) < position.at(b.nodes.back());
  });
  return s;
}

}  // namespace tessel::npu
