// The compiler's choice of tiles for each node (compilerSchedule): candidate tilings of a convolution are
// priced with the simulator's own instruction costs (per-unit busy cycles, whether two tiles fit the buffers
// at once so loads, gemms and stores overlap) and the cheapest is kept. Other nodes keep the default rules.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <set>

#include "../geometry.h"
#include "../lower_context.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/schedule.h"
#include "tessel/targets/npu/timing.h"
#include "tiling_cost.h"

namespace tessel::npu {
namespace {

/// The share of a tile's work (fill and drain) the per-node estimate adds to its busiest unit's (matrixCost).
constexpr uint64_t kFillDrainShare = 4;

uint64_t loadCycles(const hw::NpuConfig& cfg, uint64_t rows, uint64_t cols, uint64_t vec, bool dense) {
  Instruction ld;
  ld.opcode = Opcode::Load;
  ld.outer = static_cast<uint32_t>(rows), ld.inner = static_cast<uint32_t>(cols), ld.vecLen = static_cast<uint32_t>(vec);
  ld.dramStrideInner = dense ? ld.vecLen : ld.vecLen + 1;
  return instructionCost(ld, cfg).occupancy;
}

uint64_t storeCycles(const hw::NpuConfig& cfg, uint64_t rows, uint64_t cols, uint64_t vec, bool dense) {
  Instruction st;
  st.opcode = Opcode::Store;
  st.outer = static_cast<uint32_t>(rows), st.inner = static_cast<uint32_t>(cols), st.vecLen = static_cast<uint32_t>(vec);
  st.dramStrideInner = dense ? st.vecLen : st.vecLen + 1;
  return instructionCost(st, cfg).occupancy;
}

uint64_t vectorCycles(const hw::NpuConfig& cfg, uint64_t pixels, uint64_t channels) {
  return cfg.vector.setupCycles + pixels * ceilDiv(static_cast<int64_t>(channels), cfg.vectorLanes) * cfg.vectorCyclesPerVector;
}

/// Cycles to load `words` contiguous words (rows of up to 4096 words, as loadContiguous does).
uint64_t contiguousLoadCycles(const hw::NpuConfig& cfg, uint64_t words) {
  uint64_t cycles = 0;
  while (words > 0) {
    const uint64_t vec = std::min<uint64_t>(words, 4096), rows = words / vec;
    cycles += loadCycles(cfg, rows, 1, vec, true);
    words -= rows * vec;
  }
  return cycles;
}

/// Gemms per output block that stride phase (py, px) of an input block of `cb` channels needs.
int64_t phaseSlices(const ConvGeometry& p, Reduction r, int64_t ph, int64_t pw, int64_t py, int64_t px, int64_t cb, int64_t dim) {
  const int64_t khs = p.rowTaps(ph, py), kws = p.colTaps(pw, px);
  switch (r) {
    case Reduction::PerTap: return khs * kws * ceilDiv(cb, dim);
    case Reduction::Packed: return khs * ceilDiv(kws * cb, std::max<int64_t>(1, dim / cb) * cb);
    case Reduction::Stacked: return ceilDiv(khs * kws * cb, dim);
  }
  return 0;
}

}  // namespace

int64_t reductionSlicesPerBlock(const ConvGeometry& p, Reduction r, bool phased, int64_t cb, int64_t dim) {
  const int64_t ph = phased ? p.sH : 1, pw = phased ? p.sW : 1;
  int64_t slices = 0;
  for (int64_t py = 0; py < ph; ++py)
    for (int64_t px = 0; px < pw; ++px) slices += phaseSlices(p, r, ph, pw, py, px, cb, dim);
  return slices;
}

int64_t tileWindowWordsPerChannel(const ConvGeometry& p, const NodeTiling& t, int64_t th, int64_t tw, bool largestPhase) {
  const int64_t ph = t.phased ? p.sH : 1, pw = t.phased ? p.sW : 1;
  int64_t words = 0;
  for (int64_t py = 0; py < ph; ++py)
    for (int64_t px = 0; px < pw; ++px) {
      const auto [r, cl] = p.phaseExtent(ph, pw, py, px, th, tw);
      const int64_t w = t.variant == "stacked" ? (r == 0 ? 0 : th * cl * p.rowTaps(ph, py)) : r * cl;
      words = largestPhase ? std::max(words, w) : words + w;
    }
  return words;
}

MatrixCost matrixCost(const ConvGeometry& p, const NodeTiling& t, const hw::NpuConfig& cfg, const EpilogueShape& e) {
  MatrixCost c;
  const int64_t DIM = cfg.dim, Cg = p.C / p.group, Mg = p.M / p.group;
  const Reduction red = reductionOf(t.variant);
  const int64_t cb = red != Reduction::PerTap ? Cg : std::min(t.inChannels, Cg);
  const int64_t cp = std::min(t.coutPerPass > 0 ? t.coutPerPass : t.channels, Mg);
  const int64_t gemmN = std::min({t.channels, DIM, Mg});
  const int64_t th = std::min(t.rows, p.OH), tw = std::min(t.cols, p.OW);
  const int64_t tiles = p.N * ceilDiv(p.OH, th) * ceilDiv(p.OW, tw);
  const int64_t passes = p.group * ceilDiv(Mg, cp);
  const int64_t blocks = ceilDiv(Cg, cb);
  const int64_t slices = reductionSlicesPerBlock(p, red, t.phased, cb, DIM);  // per full block
  const int64_t jPerPass = ceilDiv(cp, gemmN);
  const int64_t jTotal = p.group * ceilDiv(Mg, gemmN);
  const int64_t pixels = p.N * p.OH * p.OW;
  const int64_t taps = p.KH * p.KW;
  // Regions of one tile: the input window, or its largest stride phase.
  const int64_t ph = t.phased ? p.sH : 1, pw = t.phased ? p.sW : 1;
  uint64_t inputLoad = 0, inputWords = 0;
  std::vector<std::pair<uint64_t, uint64_t>> stream;  // per region of a block: (load cycles, gemm cycles on it)
  const uint64_t gemmCycles = cfg.matrix.setupCycles + cfg.dim + static_cast<uint64_t>(th * tw);
  for (int64_t py = 0; py < ph; ++py)
    for (int64_t px = 0; px < pw; ++px) {
      const auto [r, cl] = p.phaseExtent(ph, pw, py, px, th, tw);
      if (r == 0) continue;
      // Stacked: one region row per output row holding its kernel rows side by side, one load per kernel row.
      const int64_t khs = p.rowTaps(ph, py);
      const bool stacked = red == Reduction::Stacked;
      const auto words = static_cast<uint64_t>(stacked ? th * cl * khs * cb : r * cl * cb);
      c.inpWords = std::max(c.inpWords, words);
      inputWords += words;
      const bool dense = cb == p.C && pw == 1;
      const uint64_t ld = stacked ? static_cast<uint64_t>(khs) * loadCycles(cfg, static_cast<uint64_t>(th), static_cast<uint64_t>(cl),
                                                                           static_cast<uint64_t>(cb), dense)
                                  : loadCycles(cfg, static_cast<uint64_t>(r), static_cast<uint64_t>(cl), static_cast<uint64_t>(cb), dense);
      inputLoad += ld;
      const int64_t slicesHere = phaseSlices(p, red, ph, pw, py, px, cb, DIM);
      stream.push_back({ld, static_cast<uint64_t>(slicesHere * ceilDiv(cp, gemmN)) * gemmCycles});
    }
  // NodeTiling::inputResident: the tile's input is loaded once for all its passes (groups x tiles times, not passes
  // x tiles), and all of it stays in `inp` while the passes run.
  const int64_t inputLoads = t.inputResident ? p.group * tiles : passes * tiles;
  const uint64_t regionWords = c.inpWords;
  if (t.inputResident) c.inpWords = static_cast<uint64_t>(tileWindowWordsPerChannel(p, t, th, tw) * Cg);
  // The input regions stream through `inp`: with room for two, the load of the next waits for the gemms on the
  // current one; with room for one, nothing overlaps.
  const uint64_t depth = regionWords ? cfg.bufferWords(static_cast<size_t>(Buffer::Input)) / regionWords : 0;
  uint64_t streamStall = 0;
  for (size_t k = 0; k < stream.size(); ++k) {
    const uint64_t before = stream[(k + stream.size() - 1) % stream.size()].second;
    if (depth <= 1) streamStall += stream[k].first;
    else if (depth == 2) streamStall += stream[k].first > before ? stream[k].first - before : 0;
  }
  c.accWords = static_cast<uint64_t>(th * tw * cp);
  const uint64_t passWeights = static_cast<uint64_t>(Cg * taps * cp);
  const uint64_t wgtCap = cfg.bufferWords(static_cast<size_t>(Buffer::Weight));
  // Streamed: chunks of whole reduction slices (at most DIM rows of the pass's weights each) of up to half the buffer,
  // so one slice of a wide pass can exceed that half, and the buffer.
  const uint64_t sliceWords = static_cast<uint64_t>(std::min(DIM, cb * taps) * cp);
  // Resident with the passes inside each tile: every pass's weights, loaded once per convolution group.
  const uint64_t groupWeights = static_cast<uint64_t>(Cg * taps * Mg);
  c.wgtWords = t.weightsResident ? (t.inputResident ? groupWeights : passWeights)
                                 : std::max(sliceWords, std::min<uint64_t>(passWeights / static_cast<uint64_t>(blocks), wgtCap / 2));
  // A residual loaded into the accumulator (EpilogueShape::accTensor) needs no tile of `out`.
  // With the passes inside the tiles every pass's bias stays on chip for all the tiles.
  c.outWords = (e.bias ? static_cast<uint64_t>(t.inputResident ? Mg : cp) : 0) +
               static_cast<uint64_t>(e.tensorSteps + e.savedSteps) * c.accWords;
  // Matrix unit: every gemm pays setup + a weight shift; rows are the output pixels.
  const uint64_t gemmOverhead = cfg.matrix.setupCycles + cfg.dim;
  const uint64_t gemms = static_cast<uint64_t>(tiles * blocks * slices * jTotal);
  c.units[1] = gemms * gemmOverhead + static_cast<uint64_t>(pixels * blocks * slices * jTotal);
  // Loads: the input window of each tile and block once per pass (dense when the block is every channel),
  // the weights once per pass when resident, else per tile.
  c.units[0] = static_cast<uint64_t>(inputLoads * blocks) * inputLoad;
  c.dramBytes = static_cast<uint64_t>(inputLoads * blocks) * inputWords * 4;
  if (t.weightsResident) {  // once per pass (its tiles inside, or with the passes inside the tiles its first tile)
    c.units[0] += static_cast<uint64_t>(passes) * contiguousLoadCycles(cfg, passWeights);
    c.dramBytes += static_cast<uint64_t>(passes) * passWeights * 4;
  } else {
    // MatrixConv::computeBlock streams each input block's slices in chunks of at most half the buffer: at least one
    // load per block. (Counting the chunks of the whole pass instead priced ShuffleNet v2's conv5, 29 blocks of 16
    // channels, one setup per pass instead of 29, and chose 16 passes that reload its input.)
    const uint64_t perTile = passWeights;
    const uint64_t chunks = static_cast<uint64_t>(blocks) *
                            ceilDiv(ceilDiv(static_cast<int64_t>(perTile), blocks), static_cast<int64_t>(std::max<uint64_t>(1, wgtCap / 2)));
    c.units[0] += static_cast<uint64_t>(passes * tiles) *
                  (contiguousLoadCycles(cfg, perTile) + (chunks > 1 ? (chunks - 1) * cfg.load.setupCycles : 0));
    c.dramBytes += static_cast<uint64_t>(passes * tiles) * perTile * 4;
  }
  // Epilogue on the vector unit (and the loads of its tensor operands) and the store, per tile and pass.
  const uint64_t vecOps = (e.bias ? 1 : 0) + static_cast<uint64_t>(e.unarySteps + e.tensorSteps + e.savedSteps);
  c.units[0] += static_cast<uint64_t>(passes * tiles * (e.tensorSteps + (e.accTensor ? 1 : 0))) *
                loadCycles(cfg, static_cast<uint64_t>(th), static_cast<uint64_t>(tw), static_cast<uint64_t>(cp), cp == p.M);
  c.units[2] = static_cast<uint64_t>(passes * tiles) * vecOps * vectorCycles(cfg, static_cast<uint64_t>(th * tw), static_cast<uint64_t>(cp));
  c.units[3] = static_cast<uint64_t>(passes * tiles) *
               storeCycles(cfg, static_cast<uint64_t>(th), static_cast<uint64_t>(tw), static_cast<uint64_t>(cp), cp == p.M);
  c.dramBytes += static_cast<uint64_t>(pixels * p.M) * 4;
  // Two tiles in flight (loads and stores overlap the gemms) only when two tiles' regions fit.
  auto cap = [&](Buffer b) { return cfg.bufferWords(static_cast<size_t>(b)); };
  const uint64_t wgtNeed = t.weightsResident ? c.wgtWords : 2 * c.wgtWords;
  c.fits = c.inpWords <= cap(Buffer::Input) && c.accWords <= cap(Buffer::Accumulator) && c.wgtWords <= wgtCap &&
           c.outWords <= cap(Buffer::Output) && (t.weightsResident || c.wgtWords * 1 <= wgtCap);
  // With the passes inside the tiles, consecutive passes overlap whenever the tiles' other regions do. Such a tiling
  // is offered only where the next tile's window loads while this one's passes run (two windows fit), or where there
  // is no next tile (one tile per image and convolution group): a window filling the buffer serialises the tiles in
  // ways the estimate's no-overlap sum does not rank right (SqueezeNet's expand convolutions on `tiny`: 9 % slower).
  const bool inputTwice = 2 * c.inpWords <= cap(Buffer::Input);
  if (t.inputResident && !inputTwice && tiles != p.N) c.fits = false;
  c.overlaps = (inputTwice || t.inputResident) && 2 * c.accWords <= cap(Buffer::Accumulator) && wgtNeed <= wgtCap &&
               2 * c.outWords <= cap(Buffer::Output);
  c.streamStall = static_cast<uint64_t>(inputLoads * blocks) * streamStall;
  // Resident weights of the next pass load while the current pass runs only if both fit; with the passes inside the
  // tiles, every pass's load at the group's start while the node before runs only if both fit.
  if (t.weightsResident && !t.inputResident && 2 * passWeights >= wgtCap)
    c.streamStall += static_cast<uint64_t>(passes) * contiguousLoadCycles(cfg, passWeights);
  if (t.weightsResident && t.inputResident && 2 * groupWeights >= wgtCap)
    c.streamStall += static_cast<uint64_t>(p.group) * contiguousLoadCycles(cfg, groupWeights);
  const uint64_t steady = std::max(*std::max_element(c.units.begin(), c.units.end()), c.units[1] + c.streamStall);
  // Fill and drain: one tile's work on every unit, of which the window schedule hides most under the neighbouring
  // groups' tiles (kFillDrainShare). Counting all of it preferred many small tiles, and their fixed per-gemm and
  // per-load costs: with a quarter, ShuffleNet v2 1,665,251 -> 1,551,414 cycles on `default`, GoogLeNet -2.6 %,
  // MobileNetV2 -0.9 %, ResNet-18 +0.5 % (docs/scheduling.md, section 8.2).
  const uint64_t perTileSum = (c.units[0] + c.units[1] + c.units[2] + c.units[3]) / static_cast<uint64_t>(passes * tiles);
  c.cycles = c.overlaps ? steady + perTileSum / kFillDrainShare : c.units[0] + c.units[1] + c.units[2] + c.units[3];
  (void)jPerPass;
  return c;
}

namespace {

std::vector<int64_t> evenSplits(int64_t extent, int64_t maxParts) {
  std::set<int64_t> sizes;
  for (int64_t parts = 1; parts <= std::min(extent, maxParts); ++parts) sizes.insert(ceilDiv(extent, parts));
  return {sizes.begin(), sizes.end()};
}

}  // namespace

std::vector<std::pair<NodeTiling, MatrixCost>> matrixTilingOptions(const Node& n, const ConvGeometry& p, const hw::NpuConfig& cfg,
                                                                  const EpilogueShape& shape, size_t alsoFastest) {
  const int64_t DIM = cfg.dim, Cg = p.C / p.group, Mg = p.M / p.group;
  NodeTiling base;
  base.node = n.name(), base.op = n.opType();
  const ConvGeometry real = convGeometry(n);  // p: the node's geometry with its groups packed (NodeTiling::groupPack)
  base.groupPack = Cg / (real.C / real.group);
  // Packed groups keep the residual in `out` (their last packed group recomputes channels of the one before).
  EpilogueShape e = shape;
  if (e.accTensor && base.groupPack > 1) e.accTensor = false, ++e.tensorSteps;
  base.residualInAcc = e.accTensor;
  std::vector<int64_t> cbs{std::min(DIM, Cg)};
  for (int64_t k = 2; k * DIM <= Cg && k <= 8; k *= 2) cbs.push_back(k * DIM);
  if (Cg <= 8 * DIM) cbs.push_back(Cg);
  std::vector<int64_t> cps;
  for (int64_t k = 1; k * DIM < Mg; k *= 2) cps.push_back(k * DIM);
  cps.push_back(Mg);
  std::vector<std::string> variants{"matrix"};
  if (Cg < DIM && p.dW == 1 && p.KW > 1) variants.push_back("packed");
  if (Cg < DIM && p.dW == 1 && p.KH > 1) variants.push_back("stacked");
  const std::vector<int64_t> ths = evenSplits(p.OH, 64), tws = evenSplits(p.OW, 16);
  std::vector<std::pair<NodeTiling, MatrixCost>> options;
  // A window of min(DIM, Cg) channels can exceed a small input buffer (a dilated 7x7 window on tiny): then the
  // matrix variant is tried again with smaller input-channel blocks.
  std::vector<int64_t> smaller;
  for (int64_t cb = std::min(DIM, Cg) / 2; cb >= 1; cb /= 2) smaller.push_back(cb);
  if (smaller.empty()) smaller = cbs;  // one input channel: no smaller block
  // And a long row of pixels (a MatMul's rows as one row: 19,240 of them on `tiny`, where 16 column tiles of 1,203
  // pixels overflowed the accumulator) is then cut into up to one tile per 8 pixels.
  std::vector<int64_t> finer;
  for (int attempt = 0; attempt < 2 && options.empty(); ++attempt) {
  if (attempt == 1) finer = evenSplits(p.OW, std::max<int64_t>(16, ceilDiv(p.OW, 8)));
  for (const std::string& variant : variants)
    for (int64_t cb : variant != "matrix" ? std::vector<int64_t>{Cg} : attempt == 0 ? cbs : smaller)
      for (int64_t cp : cps)
        for (bool resident : {true, false})
          for (bool phased : {false, true})
          for (int64_t tw : attempt == 0 ? tws : finer)
            for (int64_t th : ths) {
              if (phased && p.sH == 1 && p.sW == 1) continue;
              if (th * tw >= (int64_t{1} << 16) || p.inCols(tw) >= (int64_t{1} << 16)) continue;
              NodeTiling t = base;
              t.variant = variant;
              t.rows = th, t.cols = tw, t.channels = std::min(DIM, Mg), t.inChannels = cb, t.coutPerPass = cp;
              t.weightsResident = resident, t.phased = phased;
              const MatrixCost c = matrixCost(p, t, cfg, e);
              if (c.fits) options.push_back({t, c});
            }
  }
  if (options.empty())
    throw UserError(fmt::format("{}: no tiling of this {}x{} convolution of {} channels fits the NPU's buffers", n.describe(),
                                p.KH, p.KW, Cg));
  // Keep the Pareto front in (cycles, DRAM bytes).
  std::sort(options.begin(), options.end(), [](const auto& a, const auto& b) {
    return a.second.cycles != b.second.cycles ? a.second.cycles < b.second.cycles : a.second.dramBytes < b.second.dramBytes;
  });
  std::vector<std::pair<NodeTiling, MatrixCost>> front, others;
  for (auto& o : options)
    if (front.empty() || o.second.dramBytes < front.back().second.dramBytes)
      front.push_back(std::move(o));
    else if (others.size() < alsoFastest)
      others.push_back(std::move(o));
  front.insert(front.end(), others.begin(), others.end());
  return front;
}

size_t pickMatrixTiling(const std::vector<std::pair<NodeTiling, MatrixCost>>& options) {
  std::vector<std::pair<uint64_t, uint64_t>> costs;
  for (const auto& [t, c] : options) costs.push_back({c.cycles, c.dramBytes});
  return pickCheapOrLight(costs);
}

size_t pickCheapOrLight(const std::vector<std::pair<uint64_t, uint64_t>>& costs) {
  size_t best = 0;
  // The cheapest in cycles; among the options within 2 % of it, the one that moves the fewest DRAM bytes
  // (traffic the estimate does not see as cycles still costs energy and bandwidth other layers could use).
  // With 5 %, ResNet-18 took tilings whose resident weights reload between passes without overlap
  // (docs/scheduling.md, section 8.2: 1, 2, 3 and 5 % measured).
  for (size_t k = 1; k < costs.size(); ++k)
    if (costs[k].first < costs[best].first) best = k;
  const uint64_t limit = costs[best].first + costs[best].first / 50;
  for (size_t k = 0; k < costs.size(); ++k) {
    const auto &c = costs[k], &b = costs[best];
    if (c.first <= limit && (c.second < b.second || (c.second == b.second && c.first < b.first))) best = k;
  }
  return best;
}

}  // namespace tessel::npu
