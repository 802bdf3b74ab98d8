// NpuSchedule: text and JSON forms, and the verifier run before lowering (nodes, tile legality, working
// sets against the buffers).
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <set>

#include "../geometry.h"
#include "tessel/ops/registry.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/isa.h"
#include "tessel/targets/npu/schedule.h"
#include "../lower_context.h"
#include "../lower_conv.h"
#include "tiling_cost.h"

namespace tessel::npu {

using json = nlohmann::json;

const NodeTiling* NpuSchedule::tilingOf(const std::string& node) const {
  for (const GroupSchedule& g : groups)
    for (const NodeTiling& t : g.tiling)
      if (t.node == node) return &t;
  return nullptr;
}

namespace {

std::string describeTiling(const NodeTiling& t) {
  std::string s;
  if (t.variant == "elementwise" || t.variant == "global-pool")
    s = fmt::format("{} px x {} ch", t.cols, t.channels);
  else if (t.variant == "alias")
    s = "addressing only";
  else
    s = fmt::format("{}x{} px x {} ch", t.rows, t.cols, t.channels);
  if (t.inChannels) s += fmt::format(", {} in-ch per load", t.inChannels);
  if (t.coutPerPass) s += fmt::format(", {} out-ch per input load", t.coutPerPass);
  if (t.onMatrixUnit()) s += t.weightsResident ? ", weights resident" : ", weights streamed";
  if (t.phased) s += ", input split into stride phases";
  if (t.inputResident) s += ", passes inside each tile (its input loaded once)";
  if (t.groupPack > 1) s += fmt::format(", {} groups per block", t.groupPack);
  if (t.residualInAcc && !t.epilogue.empty()) s += fmt::format(", {}'s other operand loaded into the accumulator", t.epilogue.front());
  if (t.biasGemm) s += ", bias by a gemm";
  if (t.biasLoad) s += ", bias loaded into the accumulator";
  if (t.windowInAcc) s += ", window in the accumulator";
  if (t.matrixEvery == 1) s += ", on the matrix unit";
  if (t.matrixEvery > 1) s += fmt::format(", one tile in {} on the matrix unit", t.matrixEvery);
  if (!t.inputScale.empty()) s += fmt::format(", input blocks x {} as loaded", t.inputScale);
  if (!t.inputNorm.empty()) s += fmt::format(", input blocks through {} as loaded", fmt::join(t.inputNorm, " + "));
  s += fmt::format(", {} slots", t.slots);
  for (const std::string& e : t.epilogue) s += fmt::format(", + {}", e);
  if (!t.globalPool.empty()) s += fmt::format(", then {} reduced from the output tiles", t.globalPool);
  if (!t.maxPool.empty()) s += fmt::format(", {} from the accumulator tiles (tiles of its output)", t.maxPool);
  if (!t.residualConv.empty())
    s += fmt::format(", {} computed into the accumulator first ({} in-ch per load, weights {})", t.residualConv,
                     t.residualInChannels, t.residualWeightsResident ? "resident" : "streamed");
  return s;
}

json tilingJson(const NodeTiling& t) {
  return json{{"node", t.node},         {"op", t.op},
              {"variant", t.variant},   {"rows", t.rows},
              {"cols", t.cols},         {"channels", t.channels},
              {"in_channels", t.inChannels}, {"cout_per_pass", t.coutPerPass},
              {"weights_resident", t.weightsResident}, {"phased", t.phased}, {"input_resident", t.inputResident}, {"slots", t.slots},
              {"matrix_every", t.matrixEvery}, {"group_pack", t.groupPack},
              {"residual_in_acc", t.residualInAcc}, {"bias_gemm", t.biasGemm}, {"bias_load", t.biasLoad}, {"window_in_acc", t.windowInAcc},
              {"epilogue", t.epilogue}, {"input_scale", t.inputScale}, {"input_norm", t.inputNorm},
              {"global_pool", t.globalPool}, {"max_pool", t.maxPool}, {"residual_conv", t.residualConv},
              {"residual_in_channels", t.residualInChannels}, {"residual_weights_resident", t.residualWeightsResident}};
}

/// Typed field access with errors naming the origin and the JSON path.
class JsonReader {
 public:
  explicit JsonReader(std::string origin) : origin_(std::move(origin)) {}
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw UserError(fmt::format("{}: schedule field '{}': {}", origin_, path, what));
  }
  const json& field(const json& j, const std::string& path, const char* key) const {
    if (!j.is_object() || !j.contains(key)) fail(path + "." + key, "missing");
    return j.at(key);
  }
  int64_t integer(const json& j, const std::string& path, const char* key, int64_t lo, int64_t hi) const {
    const json& v = field(j, path, key);
    if (!v.is_number_integer()) fail(path + "." + key, "expected an integer");
    int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(path + "." + key, fmt::format("{} is outside [{}, {}]", x, lo, hi));
    return x;
  }
  std::string string(const json& j, const std::string& path, const char* key) const {
    const json& v = field(j, path, key);
    if (!v.is_string()) fail(path + "." + key, "expected a string");
    return v.get<std::string>();
  }
  bool boolean(const json& j, const std::string& path, const char* key) const {
    const json& v = field(j, path, key);
    if (!v.is_boolean()) fail(path + "." + key, "expected true or false");
    return v.get<bool>();
  }
  const json& array(const json& j, const std::string& path, const char* key) const {
    const json& v = field(j, path, key);
    if (!v.is_array()) fail(path + "." + key, "expected an array");
    return v;
  }

 private:
  std::string origin_;
};

constexpr int64_t kMaxCount = int64_t{1} << 40;

NodeTiling tilingFromJson(const JsonReader& r, const json& j, const std::string& path) {
  NodeTiling t;
  t.node = r.string(j, path, "node");
  t.op = r.string(j, path, "op");
  t.variant = r.string(j, path, "variant");
  t.rows = r.integer(j, path, "rows", 1, kMaxCount);
  t.cols = r.integer(j, path, "cols", 1, kMaxCount);
  t.channels = r.integer(j, path, "channels", 1, kMaxCount);
  t.inChannels = r.integer(j, path, "in_channels", 0, kMaxCount);
  t.coutPerPass = r.integer(j, path, "cout_per_pass", 0, kMaxCount);
  t.weightsResident = r.boolean(j, path, "weights_resident");
  t.phased = r.boolean(j, path, "phased");
  t.slots = r.integer(j, path, "slots", 1, 64);
  if (j.contains("matrix_every")) t.matrixEvery = r.integer(j, path, "matrix_every", 0, 64);  // absent in files written before the field existed
  if (j.contains("group_pack")) t.groupPack = r.integer(j, path, "group_pack", 1, kMaxCount);
  if (j.contains("residual_in_acc")) t.residualInAcc = r.boolean(j, path, "residual_in_acc");
  if (j.contains("bias_gemm")) t.biasGemm = r.boolean(j, path, "bias_gemm");  // absent in files written before the field
  if (j.contains("bias_load")) t.biasLoad = r.boolean(j, path, "bias_load");  // likewise
  if (j.contains("window_in_acc")) t.windowInAcc = r.boolean(j, path, "window_in_acc");  // likewise
  // Absent in files written before the fields existed.
  if (j.contains("input_scale")) t.inputScale = r.string(j, path, "input_scale");
  if (j.contains("global_pool")) t.globalPool = r.string(j, path, "global_pool");
  if (j.contains("max_pool")) t.maxPool = r.string(j, path, "max_pool");
  if (j.contains("residual_conv")) t.residualConv = r.string(j, path, "residual_conv");
  if (j.contains("residual_in_channels")) t.residualInChannels = r.integer(j, path, "residual_in_channels", 0, kMaxCount);
  if (j.contains("residual_weights_resident")) t.residualWeightsResident = r.boolean(j, path, "residual_weights_resident");
  if (j.contains("input_resident")) t.inputResident = r.boolean(j, path, "input_resident");
  if (j.contains("input_norm"))
    for (const json& e : r.array(j, path, "input_norm")) {
      if (!e.is_string()) r.fail(path + ".input_norm", "expected node names");
      t.inputNorm.push_back(e.get<std::string>());
    }
  for (const json& e : r.array(j, path, "epilogue")) {
    if (!e.is_string()) r.fail(path + ".epilogue", "expected node names");
    t.epilogue.push_back(e.get<std::string>());
  }
  return t;
}

/// A tiling's input scale: a Mul of the same group, listed before the node, that can scale the node's input on the
/// load side (lower::inputScaleOf), on a matrix-unit variant, its vector staged within a quarter of the output buffer.
void checkInputScale(const NodeTiling& t, const GroupSchedule& g, const Graph& body, const hw::NpuConfig& cfg,
                     const std::map<std::string, size_t>& position, std::vector<std::string>& problems) {
  auto mul = position.find(t.inputScale), node = position.find(t.node);
  if (mul == position.end() || node == position.end()) {
    problems.push_back(fmt::format("node '{}': input scale '{}' is not a node of the subgraph", t.node, t.inputScale));
    return;
  }
  const auto at = [&](const std::string& n) { return std::find(g.nodes.begin(), g.nodes.end(), n) - g.nodes.begin(); };
  if (at(t.inputScale) >= at(t.node))
    problems.push_back(fmt::format("node '{}': input scale '{}' must be listed in its group before it", t.node, t.inputScale));
  if (!t.onMatrixUnit())
    problems.push_back(fmt::format("node '{}': an input scale applies to matrix-unit tilings only, not '{}'", t.node, t.variant));
  const Node& n = *body.nodes()[node->second];
  if (!lower::inputScaleOf(body, *body.nodes()[mul->second], n)) {
    problems.push_back(fmt::format("node '{}': '{}' is no Mul by a per-channel vector that only this convolution reads",
                                   t.node, t.inputScale));
    return;
  }
  const ConvGeometry geo = packGroups(convGeometry(n), t.groupPack);
  const uint64_t quarter = cfg.bufferWords(static_cast<size_t>(Buffer::Output)) / 4;
  if (static_cast<uint64_t>(geo.C / geo.group) > quarter)
    problems.push_back(fmt::format("node '{}': the input scale's {} channels exceed a quarter of the output buffer ({} words)",
                                   t.node, geo.C / geo.group, quarter));
}

/// A tiling's input normalisation: nodes of the same layer-by-layer group, listed before the node in compute order,
/// that it can apply to its loaded input blocks (lower::inputNormOf), on a matrix-unit variant.
void checkInputNorm(const NodeTiling& t, const GroupSchedule& g, const Graph& body, const hw::NpuConfig& cfg,
                    const std::map<std::string, size_t>& position, std::vector<std::string>& problems) {
  auto node = position.find(t.node);
  std::vector<const Node*> chain;
  for (const std::string& name : t.inputNorm) {
    auto it = position.find(name);
    if (it == position.end() || node == position.end()) {
      problems.push_back(fmt::format("node '{}': input normalisation '{}' is not a node of the subgraph", t.node, name));
      return;
    }
    chain.push_back(body.nodes()[it->second].get());
  }
  const auto at = [&](const std::string& n) { return std::find(g.nodes.begin(), g.nodes.end(), n) - g.nodes.begin(); };
  for (size_t i = 0; i < t.inputNorm.size(); ++i)
    if (at(t.inputNorm[i]) >= at(t.node) || (i > 0 && at(t.inputNorm[i]) <= at(t.inputNorm[i - 1])))
      problems.push_back(fmt::format("node '{}': input normalisation '{}' must be listed in its group before it, in order", t.node,
                                     t.inputNorm[i]));
  const bool pool = t.variant == "pool" || t.variant == "pool-wide";
  if (!t.onMatrixUnit() && !pool)
    problems.push_back(fmt::format("node '{}': an input normalisation applies to matrix-unit and pool tilings only, not '{}'",
                                   t.node, t.variant));
  if (pool && node != position.end()) {
    const int64_t C = body.nodes()[node->second]->input(0)->type.staticShape()[1];
    if (static_cast<uint64_t>(2 * C) > cfg.bufferWords(static_cast<size_t>(Buffer::Weight)))
      problems.push_back(fmt::format("node '{}': the input normalisation's {} scales and biases exceed the weight buffer", t.node, 2 * C));
  }
  if (g.rowTiles != 1 || g.tiling.size() != 1)
    problems.push_back(fmt::format("node '{}': an input normalisation needs a layer-by-layer group", t.node));
  if (!t.inputScale.empty())
    problems.push_back(fmt::format("node '{}': an input scale and an input normalisation exclude each other", t.node));
  if (!lower::inputNormOf(body, chain, *body.nodes()[node->second]))
    problems.push_back(fmt::format("node '{}': '{}' is no BatchNormalization with unary steps that only this convolution "
                                   "or pool without padding reads", t.node, fmt::join(t.inputNorm, " + ")));
}

/// A tiling's global pool: a node of the same group, listed after the node, that pools the node's result (after its
/// epilogue) and can be computed from its tiles (lower::globalPoolFromTiles). The group runs layer by layer, or
/// the node is the matrix-unit convolution ending a fused group (its tiles hold every output channel).
void checkGlobalPool(const NodeTiling& t, const GroupSchedule& g, const Graph& body, const std::map<std::string, size_t>& position,
                     std::vector<std::string>& problems) {
  auto pool = position.find(t.globalPool), node = position.find(t.node);
  const std::string last = t.epilogue.empty() ? t.node : t.epilogue.back();
  auto result = position.find(last);
  if (pool == position.end() || node == position.end() || result == position.end()) {
    problems.push_back(fmt::format("node '{}': global pool '{}' is not a node of the subgraph", t.node, t.globalPool));
    return;
  }
  const auto at = [&](const std::string& n) { return std::find(g.nodes.begin(), g.nodes.end(), n) - g.nodes.begin(); };
  if (at(t.globalPool) == static_cast<long>(g.nodes.size()) || at(t.globalPool) <= at(last))
    problems.push_back(fmt::format("node '{}': global pool '{}' must be listed in its group after it", t.node, t.globalPool));
  const bool fused = g.tiling.size() > 1;
  if (fused ? &t != &g.tiling.back() : g.rowTiles != 1)
    problems.push_back(fmt::format("node '{}': a global pool from the output tiles needs a layer-by-layer group or the last "
                                   "stage of a fused one", t.node));
  if (!t.onMatrixUnit() && (fused || t.variant != "vector"))
    problems.push_back(fmt::format("node '{}': a global pool from the output tiles needs a convolution tiling, not '{}'", t.node,
                                   t.variant));
  if (!lower::globalPoolFromTiles(*body.nodes()[pool->second], *body.nodes()[node->second],
                                  body.nodes()[result->second]->output(0)))
    problems.push_back(fmt::format("node '{}': '{}' is no global pool of its result", t.node, t.globalPool));
}

/// A tiling's max pool (NodeTiling::maxPool): a MaxPool alone reading the result of the tiling's convolution
/// (lower::maxPoolFromTiles), listed in the group after it and followed there by the tiling's epilogue (unary steps
/// of the pool's result); the group runs layer by layer; the accumulator holds a convolution tile and its pooled
/// tile.
void checkMaxPool(const NodeTiling& t, const GroupSchedule& g, const Graph& body, const hw::NpuConfig& cfg,
                  const std::map<std::string, size_t>& position, std::vector<std::string>& problems) {
  auto pool = position.find(t.maxPool), node = position.find(t.node);
  if (pool == position.end() || node == position.end()) {
    problems.push_back(fmt::format("node '{}': max pool '{}' is not a node of the subgraph", t.node, t.maxPool));
    return;
  }
  const Node& conv = *body.nodes()[node->second];
  const Node& p = *body.nodes()[pool->second];
  if (!t.onMatrixUnit() || !lower::maxPoolFromTiles(body, p, conv)) {
    problems.push_back(fmt::format("node '{}': '{}' is no MaxPool that alone reads the result of this matrix-unit convolution",
                                   t.node, t.maxPool));
    return;
  }
  std::vector<std::string> expected{t.node, t.maxPool};
  expected.insert(expected.end(), t.epilogue.begin(), t.epilogue.end());
  if (g.tiling.size() != 1 || g.rowTiles != 1 || g.channelChain || g.nodes != expected)
    problems.push_back(fmt::format("node '{}': a max pool from the accumulator tiles needs a layer-by-layer group of the "
                                   "convolution, the pool and the pool's epilogue, in that order", t.node));
  if (t.residualInAcc || !t.globalPool.empty() || !t.inputScale.empty() || !t.inputNorm.empty() || t.groupPack != 1)
    problems.push_back(fmt::format("node '{}': a max pool from the accumulator tiles excludes residual_in_acc, a global pool, "
                                   "input scales and norms and packed groups", t.node));
  std::vector<const Node*> chain;
  for (const std::string& e : t.epilogue)
    if (auto it = position.find(e); it != position.end()) chain.push_back(body.nodes()[it->second].get());
  const auto steps = chain.size() == t.epilogue.size() ? lower::epilogueSteps(p.output(0), chain) : std::nullopt;
  if (!steps || std::any_of(steps->begin(), steps->end(), [](const lower::EpilogueStep& e) { return !e.unary; }))
    problems.push_back(fmt::format("node '{}': the epilogue of a max pool from the accumulator tiles must be unary steps of "
                                   "the pool's result", t.node));
  const PoolGeometry q = poolGeometry(p);
  const ConvGeometry geo = convGeometry(conv);
  const int64_t rows = std::min(t.rows, q.OH), cols = std::min(t.cols, q.OW);
  const int64_t block = std::min(t.coutPerPass > 0 ? t.coutPerPass : t.channels, geo.M / geo.group);
  const int64_t words = (q.inRows(rows) * q.inCols(cols) + rows * cols) * block;
  const uint64_t capacity = cfg.bufferWords(static_cast<size_t>(Buffer::Accumulator));
  if (static_cast<uint64_t>(words) > capacity)
    problems.push_back(fmt::format("node '{}': a convolution tile for {}x{} pooled pixels and the pooled tile need {} "
                                   "accumulator words, the buffer holds {}", t.node, rows, cols, words, capacity));
}

/// A tiling's residual convolution (NodeTiling::residualConv): a convolution whose result only the residual Add
/// starting this convolution's accumulator reads (lower::residualConvInto), listed in the group just before it; the
/// group runs layer by layer; the buffers hold both convolutions' input regions and weights.
void checkResidualConv(const NodeTiling& t, const GroupSchedule& g, const Graph& body, const hw::NpuConfig& cfg,
                       const std::map<std::string, size_t>& position, std::vector<std::string>& problems) {
  auto residual = position.find(t.residualConv), node = position.find(t.node);
  if (residual == position.end() || node == position.end()) {
    problems.push_back(fmt::format("node '{}': residual convolution '{}' is not a node of the subgraph", t.node, t.residualConv));
    return;
  }
  const Node& conv = *body.nodes()[node->second];
  const Node& r = *body.nodes()[residual->second];
  if (!t.onMatrixUnit() || !lower::residualConvInto(body, r, conv)) {
    problems.push_back(fmt::format("node '{}': '{}' is no convolution (groups of one) whose result only an Add of this "
                                   "matrix-unit convolution's result reads", t.node, t.residualConv));
    return;
  }
  if (!t.residualInAcc || t.groupPack != 1 || !t.maxPool.empty() || !t.inputScale.empty() || !t.inputNorm.empty() ||
      t.epilogue.empty() || position.find(t.epilogue.front()) == position.end() ||
      body.nodes()[position.at(t.epilogue.front())].get() != r.output(0)->uses()[0].node)
    problems.push_back(fmt::format("node '{}': a residual convolution needs residual_in_acc with its Add first in the epilogue, "
                                   "and excludes a max pool, input scales and norms and packed groups", t.node));
  if (g.tiling.size() != 1 || g.rowTiles != 1 || g.channelChain || g.nodes.size() < 2 || g.nodes[0] != t.residualConv ||
      g.nodes[1] != t.node)
    problems.push_back(fmt::format("node '{}': a residual convolution needs a layer-by-layer group listing it just before the "
                                   "convolution", t.node));
  if (const std::string overflow = residualConvOverflow(conv, r, t, cfg); !overflow.empty())
    problems.push_back(fmt::format("node '{}' with residual convolution '{}': {}", t.node, t.residualConv, overflow));
}

/// NodeTiling::inputResident: a matrix-unit convolution in a layer-by-layer group whose tile's whole input window (every
/// input channel of a convolution group) fits the input buffer and, with resident weights, every pass's weights the
/// weight buffer.
void checkInputResident(const NodeTiling& t, const GroupSchedule& g, const Graph& body, const hw::NpuConfig& cfg,
                        const std::map<std::string, size_t>& position, std::vector<std::string>& problems) {
  auto node = position.find(t.node);
  if (!t.onMatrixUnit() || g.rowTiles != 1 || g.tiling.size() != 1 || g.channelChain || node == position.end() ||
      lower::opFamily(*body.nodes()[node->second]) != lower::OpFamily::Matrix) {
    problems.push_back(fmt::format("node '{}': input_resident needs a matrix-unit convolution in a layer-by-layer group", t.node));
    return;
  }
  const ConvGeometry geo = packGroups(convGeometry(*body.nodes()[node->second]), t.groupPack);
  int64_t th = std::min(t.rows, geo.OH), tw = std::min(t.cols, geo.OW);
  if (!t.maxPool.empty())
    if (auto pool = position.find(t.maxPool); pool != position.end()) {  // the convolution's rows its pooled tile reads
      const PoolGeometry q = poolGeometry(*body.nodes()[pool->second]);
      th = std::min(q.inRows(std::min(t.rows, q.OH)), q.H), tw = std::min(q.inCols(std::min(t.cols, q.OW)), q.W);
    }
  const int64_t Cg = geo.C / geo.group, Mg = geo.M / geo.group;
  const int64_t pixels = tileWindowWordsPerChannel(geo, t, th, tw);
  const auto cap = [&](Buffer b) { return static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(b))); };
  if (pixels * Cg > cap(Buffer::Input))
    problems.push_back(fmt::format("node '{}': input_resident keeps a tile's input window of {} words, the input buffer holds {}",
                                   t.node, pixels * Cg, cap(Buffer::Input)));
  // Every pass's bias (and global pool vector) stays in the output buffer for all the tiles: at most half of it, the
  // rest for the tiles' epilogue regions.
  const Node& n = *body.nodes()[node->second];
  const int64_t vectors = (n.hasInput(2) ? Mg : 0) + (t.globalPool.empty() ? 0 : Mg);
  if (vectors > cap(Buffer::Output) / 2)
    problems.push_back(fmt::format("node '{}': input_resident keeps every pass's bias and pool vectors, {} words, more than "
                                   "half the output buffer ({} words)", t.node, vectors, cap(Buffer::Output)));
  if (t.weightsResident && Cg * geo.KH * geo.KW * Mg > cap(Buffer::Weight))
    problems.push_back(fmt::format("node '{}': input_resident with resident weights keeps every pass's {} weight words, the "
                                   "weight buffer holds {}", t.node, Cg * geo.KH * geo.KW * Mg, cap(Buffer::Weight)));
}

/// A convolution with an input scale or normalisation or a global pool, layer by layer (fused groups tile it differently), keeps a per-channel vector in the output buffer across its
/// tiles, beside its bias and, when its epilogue has a tensor step (a tile loaded from DRAM or a saved copy), at
/// least one tile-sized region: those must fit together (more is the list scheduler's to find room for).
void checkOutputBuffer(const NodeTiling& t, const Graph& body, const hw::NpuConfig& cfg,
                       const std::map<std::string, size_t>& position, std::vector<std::string>& problems) {
  const Node& n = *body.nodes()[position.at(t.node)];
  const ConvGeometry geo = packGroups(convGeometry(n), t.groupPack);
  const int64_t Mg = geo.M / geo.group;
  const int64_t block = t.variant == "vector" ? std::min(t.channels, geo.C)
                                              : std::min(t.coutPerPass > 0 ? t.coutPerPass : t.channels, Mg);
  int64_t words = (n.hasInput(2) ? block : 0) + (t.inputScale.empty() ? 0 : geo.C / geo.group) +
                  (t.inputNorm.empty() ? 0 : 2 * (geo.C / geo.group)) + (t.globalPool.empty() ? 0 : block);
  std::vector<const Node*> chain;
  for (const std::string& e : t.epilogue)
    if (auto it = position.find(e); it != position.end()) chain.push_back(body.nodes()[it->second].get());
  if (const auto steps = lower::epilogueSteps(n.output(0), chain))
    if (std::any_of(steps->begin(), steps->end(), [](const lower::EpilogueStep& e) { return !e.unary || e.saved >= 0; }))
      words += std::min(t.rows, geo.OH) * std::min(t.cols, geo.OW) * block;
  const uint64_t capacity = cfg.bufferWords(static_cast<size_t>(Buffer::Output));
  if (static_cast<uint64_t>(words) > capacity)
    problems.push_back(fmt::format("node '{}': its per-channel vectors, bias and epilogue tile need {} output-buffer words, the "
                                   "buffer holds {}", t.node, words, capacity));
}

/// A channel chain (GroupSchedule::channelChain): a depthwise "vector" tiling with unary epilogue steps, then a 1x1
/// "matrix" tiling reading its result alone, the same rows x cols, the depthwise result the only value on chip;
/// one tile's working set (the depthwise window and block copy, the accumulator tiles, the weights of every
/// depthwise block and the 1x1 weights resident or of one block, the biases) fits the buffers.
void checkChannelChain(const GroupSchedule& g, size_t gi, const Graph& body, const hw::NpuConfig& cfg,
                       const std::map<std::string, size_t>& position, std::vector<std::string>& problems) {
  auto node = [&](const std::string& n) -> const Node* {
    auto it = position.find(n);
    return it == position.end() ? nullptr : body.nodes()[it->second].get();
  };
  if ((g.tiling.size() != 2 && g.tiling.size() != 3) || g.rowTiles != 1) {
    problems.push_back(fmt::format("group {}: a channel chain has two tilings (a depthwise convolution, then a 1x1 "
                                   "convolution), or three with a 1x1 expand convolution first, and row_tiles 1", gi));
    return;
  }
  const bool expands = g.tiling.size() == 3;
  const NodeTiling &d = g.tiling[expands ? 1 : 0], &c = g.tiling[expands ? 2 : 1];
  const Node *dw = node(d.node), *conv = node(c.node);
  if (!dw || !conv) return;  // reported with the group's nodes
  std::vector<const Node*> epilogue;
  for (const std::string& e : d.epilogue)
    if (const Node* n = node(e)) epilogue.push_back(n);
  if (epilogue.size() != d.epilogue.size()) return;
  if (d.variant != "vector" || c.variant != "matrix") {
    problems.push_back(fmt::format("group {}: a channel chain needs a 'vector' then a 'matrix' tiling, not '{}' and '{}'", gi,
                                   d.variant, c.variant));
    return;
  }
  if (const std::string why = lower::channelChainRefusal(body, *dw, epilogue, *conv); !why.empty()) {
    problems.push_back(fmt::format("group {}: not a channel chain: {}", gi, why));
    return;
  }
  if (c.groupPack != 1 || c.phased || !c.inputScale.empty() || !c.inputNorm.empty() || !d.globalPool.empty())
    problems.push_back(fmt::format("group {}: a channel chain's convolutions take no group packing, phases, input scale or "
                                   "normalisation, and only the 1x1 convolution a global pool", gi));
  if (d.rows != c.rows || d.cols != c.cols)
    problems.push_back(fmt::format("group {}: the channel chain's tilings have different tiles ({}x{} and {}x{})", gi, d.rows,
                                   d.cols, c.rows, c.cols));
  const Value* result = epilogue.empty() ? dw->output(0) : epilogue.back()->output(0);
  std::vector<std::string> onChip{result->name()};
  const ConvGeometry dg = convGeometry(*dw), cg = convGeometry(*conv);
  const int64_t rows = std::min(d.rows, dg.OH), cols = std::min(d.cols, dg.OW), cb = std::min(d.channels, dg.C);
  // The expand stage: the tile's input pixels (all its input channels) in the input buffer, one block's expanded
  // pixels in the accumulator, its weights (all, or one block's) and bias.
  int64_t exInput = 0, exAcc = 0, exWeights = 0;
  if (expands) {
    const NodeTiling& e = g.tiling[0];
    const Node* expand = node(e.node);
    if (!expand) return;
    std::vector<const Node*> exEpilogue;
    for (const std::string& n : e.epilogue)
      if (const Node* en = node(n)) exEpilogue.push_back(en);
    if (exEpilogue.size() != e.epilogue.size()) return;
    if (e.variant != "matrix" || e.groupPack != 1 || e.phased || e.residualInAcc || !e.inputScale.empty() ||
        !e.inputNorm.empty() || !e.globalPool.empty()) {
      problems.push_back(fmt::format("group {}: a channel chain's expand stage is a plain 'matrix' tiling (no packing, phases, "
                                     "residual, input scale or normalisation, or global pool)", gi));
      return;
    }
    if (const std::string why = lower::expandChainRefusal(body, *expand, exEpilogue, *dw); !why.empty()) {
      problems.push_back(fmt::format("group {}: not a channel chain: {}", gi, why));
      return;
    }
    const Value* expanded = exEpilogue.empty() ? expand->output(0) : exEpilogue.back()->output(0);
    onChip.insert(onChip.begin(), expanded->name());
    const ConvGeometry eg = convGeometry(*expand);
    const int64_t px = std::min(dg.inRows(rows), dg.H) * std::min(dg.inCols(cols), dg.W);
    const bool bias = expand->hasInput(2) && e.biasGemm;  // bias rows beside the weights, gemms of a word holding 1.0
    // The expanded pixels of one block, or with window_in_acc the whole window they are made in (padding ring too).
    exInput = px * eg.C + (bias ? 1 : 0), exAcc = d.windowInAcc ? dg.inRows(rows) * dg.inCols(cols) * cb : px * cb;
    exWeights = (e.weightsResident ? eg.C * eg.M : eg.C * cb) + (bias ? (e.weightsResident ? eg.M : cb) : 0);
  }
  if (g.onChip != onChip)
    problems.push_back(fmt::format("group {}: a channel chain keeps exactly its {} on chip", gi,
                                   expands ? "expand and depthwise results" : fmt::format("depthwise result '{}'", result->name())));
  auto words = [&](Buffer b) { return static_cast<int64_t>(cfg.bufferWords(static_cast<size_t>(b))); };
  auto need = [&](Buffer b, const char* name, int64_t w) {
    if (w > words(b))
      problems.push_back(fmt::format("group {}: the channel chain's tile needs {} {}-buffer words, the buffer holds {}", gi, w, name,
                                     words(b)));
  };
  // The 1x1 bias (a row in the weight buffer, gemms of a word holding 1.0).
  const int64_t convBias = conv->hasInput(2) && c.biasGemm ? cg.M : 0;
  const int64_t exBiasOut = expands && !g.tiling[0].biasGemm && !g.tiling[0].biasLoad && node(g.tiling[0].node)->hasInput(2)
                                ? convGeometry(*node(g.tiling[0].node)).M
                                : 0;
  // With window_in_acc in the accumulator (exAcc), but a matrix-unit block's, which its gemms read here.
  const int64_t window = d.windowInAcc && d.matrixEvery == 0 ? 0 : dg.inRows(rows) * dg.inCols(cols) * cb;
  need(Buffer::Input, "input", exInput + window + rows * cols * cb + (convBias ? 1 : 0));
  need(Buffer::Accumulator, "accumulator", exAcc + rows * cols * (cg.M + cb));
  need(Buffer::Weight, "weight",
       exWeights + depthwiseNodeWeightWords(dg.C, dg.KH * dg.KW, cb, d.matrixEvery, spatialTiles(dg, d), true, cfg.dim) +
           (c.weightsResident ? cg.C * cg.M : cb * cg.M) + convBias);
  // The 1x1 convolution's epilogue needs a tile of the output buffer when it combines with a tensor loaded from
  // DRAM (other than a residual loaded into the accumulator).
  std::vector<const Node*> chain;
  for (const std::string& e : c.epilogue)
    if (const Node* n = node(e)) chain.push_back(n);
  const auto steps = lower::epilogueSteps(conv->output(0), chain);
  const bool tensorStep = steps && std::any_of(steps->begin() + (c.residualInAcc && !steps->empty() ? 1 : 0), steps->end(),
                                               [](const lower::EpilogueStep& e) { return !e.unary; });
  need(Buffer::Output, "output", exBiasOut + (conv->hasInput(2) && !c.biasGemm && !c.biasLoad ? cg.M : 0) + (c.globalPool.empty() ? 0 : cg.M) + cb +
                                     (tensorStep ? rows * cols * cg.M : 0));
}

}  // namespace

std::string NpuSchedule::toText() const {
  std::string s = fmt::format("schedule of subgraph '{}': strategy {}, window {} tile(s), {} group(s)\n", subgraph, strategy,
                              window, groups.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const GroupSchedule& g = groups[gi];
    std::string nodes;
    for (const std::string& n : g.nodes) {
      if (!nodes.empty()) nodes += ", ";
      nodes += n;
    }
    s += fmt::format("  group {}: [{}]", gi, nodes);
    if (g.rowTiles > 1) {
      std::string order;
      for (int64_t t : g.tileOrder) {
        if (!order.empty()) order += ",";
        order += std::to_string(t);
      }
      s += fmt::format(" fused in {} row tiles, order {}", g.rowTiles, order);
    }
    if (g.channelChain) s += " channel chain (depthwise blocks into the 1x1 convolution's accumulating tiles)";
    s += "\n";
    for (const NodeTiling& t : g.tiling) s += fmt::format("    {} ({}, {}): {}\n", t.node, t.op, t.variant, describeTiling(t));
    for (const std::string& v : g.onChip) s += fmt::format("    value {} stays on chip\n", v);
  }
  return s;
}

json NpuSchedule::toJson() const {
  json gs = json::array();
  for (const GroupSchedule& g : groups) {
    json tiling = json::array();
    for (const NodeTiling& t : g.tiling) tiling.push_back(tilingJson(t));
    gs.push_back({{"nodes", g.nodes}, {"tiling", tiling}, {"row_tiles", g.rowTiles}, {"tile_order", g.tileOrder},
                  {"on_chip", g.onChip}, {"channel_chain", g.channelChain}});
  }
  return json{{"subgraph", subgraph}, {"strategy", strategy}, {"window", window}, {"groups", gs}};
}

NpuSchedule NpuSchedule::fromJson(const json& j, const std::string& origin) {
  JsonReader r(origin);
  NpuSchedule s;
  s.subgraph = r.string(j, "schedule", "subgraph");
  s.strategy = r.string(j, "schedule", "strategy");
  static const std::set<std::string> strategies{"window", "greedy", "sequential"};
  if (!strategies.count(s.strategy)) r.fail("schedule.strategy", fmt::format("unknown strategy '{}'", s.strategy));
  s.window = r.integer(j, "schedule", "window", 0, 1 << 20);
  const json& gs = r.array(j, "schedule", "groups");
  for (size_t gi = 0; gi < gs.size(); ++gi) {
    const std::string path = fmt::format("schedule.groups[{}]", gi);
    GroupSchedule g;
    for (const json& n : r.array(gs[gi], path, "nodes")) {
      if (!n.is_string()) r.fail(path + ".nodes", "expected node names");
      g.nodes.push_back(n.get<std::string>());
    }
    const json& ts = r.array(gs[gi], path, "tiling");
    for (size_t ti = 0; ti < ts.size(); ++ti) g.tiling.push_back(tilingFromJson(r, ts[ti], fmt::format("{}.tiling[{}]", path, ti)));
    g.rowTiles = r.integer(gs[gi], path, "row_tiles", 1, 1 << 20);
    for (const json& t : r.array(gs[gi], path, "tile_order")) {
      if (!t.is_number_integer()) r.fail(path + ".tile_order", "expected integers");
      g.tileOrder.push_back(t.get<int64_t>());
    }
    for (const json& v : r.array(gs[gi], path, "on_chip")) {
      if (!v.is_string()) r.fail(path + ".on_chip", "expected value names");
      g.onChip.push_back(v.get<std::string>());
    }
    if (gs[gi].contains("channel_chain")) g.channelChain = r.boolean(gs[gi], path, "channel_chain");  // absent in older files
    s.groups.push_back(std::move(g));
  }
  return s;
}

void verifySchedule(const NpuSchedule& schedule, const Graph& body, const hw::NpuConfig& cfg) {
  std::vector<std::string> problems;
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < body.nodes().size(); ++i) position[body.nodes()[i]->name()] = i;
  std::map<std::string, size_t> scheduled;
  for (size_t gi = 0; gi < schedule.groups.size(); ++gi) {
    const GroupSchedule& g = schedule.groups[gi];
    if (g.nodes.empty()) problems.push_back(fmt::format("group {} has no nodes", gi));
    for (const std::string& n : g.nodes) {
      auto it = position.find(n);
      if (it == position.end()) {
        problems.push_back(fmt::format("group {} names node '{}', which the subgraph does not have", gi, n));
        continue;
      }
      if (scheduled.count(n)) problems.push_back(fmt::format("node '{}' is scheduled twice", n));
      scheduled[n] = gi;
    }
    std::vector<int64_t> order = g.tileOrder;
    std::sort(order.begin(), order.end());
    for (size_t t = 0; t < order.size(); ++t)
      if (order[t] != static_cast<int64_t>(t) || order.size() != static_cast<size_t>(g.rowTiles)) {
        problems.push_back(fmt::format("group {}: tile order is not a permutation of its {} tiles", gi, g.rowTiles));
        break;
      }
    if (g.channelChain) checkChannelChain(g, gi, body, cfg, position, problems);
    for (const NodeTiling& t : g.tiling)
      if (t.biasGemm && (!g.channelChain || t.variant != "matrix"))
        problems.push_back(fmt::format("node '{}': bias_gemm applies to the matrix stages of a channel chain only", t.node));
    for (const NodeTiling& t : g.tiling) {
      if (!t.biasLoad) continue;
      std::string why = biasLoadRefusal(g, t, body);
      if (why.empty() && t.biasGemm) why = "no bias_gemm as well";
      if (why.empty() && g.channelChain && t.variant != "matrix") why = "a channel chain's matrix stage";
      if (!why.empty()) problems.push_back(fmt::format("node '{}': bias_load needs {}", t.node, why));
    }
    for (size_t k = 0; k < g.tiling.size(); ++k)
      if (g.tiling[k].windowInAcc && (!g.channelChain || g.tiling.size() != 3 || k != 1 || g.tiling[k].matrixEvery == 1))
        problems.push_back(fmt::format("node '{}': window_in_acc applies to the depthwise stage of a channel chain with an expand "
                                       "stage, some of its taps on the vector unit (matrix_every not 1)", g.tiling[k].node));
    for (const NodeTiling& t : g.tiling) {
      if (std::find(g.nodes.begin(), g.nodes.end(), t.node) == g.nodes.end())
        problems.push_back(fmt::format("group {}: tiling for node '{}' outside the group", gi, t.node));
      if (t.onMatrixUnit() && t.channels > cfg.dim)
        problems.push_back(fmt::format("node '{}': gemm blocks of {} output channels exceed the {}x{} array", t.node,
                                       t.channels, cfg.dim, cfg.dim));
      if (t.groupPack != 1) {
        auto it = position.find(t.node);
        const Node* n = it == position.end() ? nullptr : body.nodes()[it->second].get();
        const bool conv = n && isOp(*n, "Conv") && t.onMatrixUnit();
        const ConvGeometry geo = conv ? convGeometry(*n) : ConvGeometry{};
        if (!conv || geo.depthwise() || t.groupPack < 1 || t.groupPack > geo.group) {
          problems.push_back(fmt::format("node '{}': {} groups per block needs a grouped, not depthwise convolution on the "
                                         "matrix unit with at least that many groups ({})", t.node, t.groupPack, geo.group));
          continue;  // the checks below need a valid packing
        }
      }
      if (t.variant == "packed") {  // one block of all the group's channels, cut into gemms of whole kernel columns
        auto it = position.find(t.node);
        if (it != position.end() && lower::opFamily(*body.nodes()[it->second]) == lower::OpFamily::Matrix) {
          const ConvGeometry geo = packGroups(convGeometry(*body.nodes()[it->second]), t.groupPack);
          if (geo.C / geo.group > cfg.dim)
            problems.push_back(fmt::format("node '{}': a packed reduction needs at most {} input channels per group, not {}",
                                           t.node, cfg.dim, geo.C / geo.group));
        }
      }
      if (t.variant == "vector") {
        auto it = position.find(t.node);
        if (it != position.end() && lower::opFamily(*body.nodes()[it->second]) == lower::OpFamily::Matrix) {
          const ConvGeometry geo = convGeometry(*body.nodes()[it->second]);
          const int64_t words = depthwiseWeightWords(geo.KH * geo.KW, std::min(t.channels, geo.C), t.matrixEvery > 0, cfg.dim);
          if (static_cast<uint64_t>(words) > cfg.bufferWords(static_cast<size_t>(Buffer::Weight)))
            problems.push_back(fmt::format("node '{}': a depthwise block of {} channels{} needs {} weight words, the weight "
                                           "buffer holds {}", t.node, t.channels, t.matrixEvery > 0 ? " with matrix-unit tiles" : "",
                                           words, cfg.bufferWords(static_cast<size_t>(Buffer::Weight))));
        }
      }
      if (t.residualInAcc) {
        auto it = position.find(t.node);
        const Node* n = it == position.end() ? nullptr : body.nodes()[it->second].get();
        std::vector<const Node*> chain;
        for (const std::string& e : t.epilogue) {
          auto ei = position.find(e);
          if (ei != position.end()) chain.push_back(body.nodes()[ei->second].get());
        }
        const bool matrix = t.onMatrixUnit();
        const auto steps = n && chain.size() == t.epilogue.size() ? lower::epilogueSteps(n->output(0), chain) : std::nullopt;
        if (!matrix || t.groupPack != 1 || !steps || !lower::residualFirst(*steps))
          problems.push_back(fmt::format("node '{}': residual_in_acc needs a convolution on the matrix unit (groups not packed) "
                                         "whose epilogue starts with an Add of a tensor read from DRAM", t.node));
      }
      if (t.matrixEvery != 0 && t.variant != "vector")
        problems.push_back(fmt::format("node '{}': matrix_every applies to depthwise (vector) tilings only, not '{}'", t.node,
                                       t.variant));
      if (!t.inputScale.empty()) checkInputScale(t, g, body, cfg, position, problems);
      if (!t.inputNorm.empty()) checkInputNorm(t, g, body, cfg, position, problems);
      if (!t.globalPool.empty()) checkGlobalPool(t, g, body, position, problems);
      if (!t.maxPool.empty()) checkMaxPool(t, g, body, cfg, position, problems);
      if (!t.residualConv.empty()) checkResidualConv(t, g, body, cfg, position, problems);
      if (t.inputResident) checkInputResident(t, g, body, cfg, position, problems);
      const bool matrixVariant = t.onMatrixUnit() || t.variant == "vector";
      if ((!t.inputScale.empty() || !t.inputNorm.empty() || !t.globalPool.empty()) && g.rowTiles == 1 && g.tiling.size() == 1 &&
          matrixVariant && problems.empty())
        checkOutputBuffer(t, body, cfg, position, problems);
      if (t.rows >= (int64_t{1} << kCountBits) || t.cols >= (int64_t{1} << kCountBits))
        problems.push_back(fmt::format("node '{}': tile {}x{} exceeds the instruction's 16-bit counts", t.node, t.rows, t.cols));
    }
  }
  for (const auto& n : body.nodes()) {
    auto it = scheduled.find(n->name());
    if (it == scheduled.end()) {
      problems.push_back(fmt::format("node '{}' is not scheduled", n->name()));
      continue;
    }
    // Groups are lowered in order: every input must come from an earlier group or the same one.
    for (const Value* v : n->inputs())
      if (v && v->producer()) {
        auto p = scheduled.find(v->producer()->name());
        if (p != scheduled.end() && p->second > it->second)
          problems.push_back(fmt::format("node '{}' (group {}) reads '{}' of group {}, which comes later", n->name(),
                                         it->second, v->name(), p->second));
      }
  }
  if (problems.empty()) return;
  std::string msg = fmt::format("NPU schedule of subgraph '{}' refused: {} problem(s)", schedule.subgraph, problems.size());
  for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += "\n  " + problems[i];
  throw UserError(msg);
}

}  // namespace tessel::npu
