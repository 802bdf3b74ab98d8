// The subgraph engine: device placement per node, acyclic merging into clusters, and the rewrite of each
// accelerator cluster into a tessel.Subgraph node (S4.2).
#include "tessel/partition/partitioner.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>
#include <unordered_map>

#include "tessel/ops/registry.h"
#include "tessel/support/error.h"

namespace tessel::partition {

bool isSubgraphNode(const Node& node) { return isOp(node, "Subgraph", "tessel"); }

namespace {

int64_t staticDim(const Value* v, int64_t axis) {
  if (!v || !v->type.hasRank()) return 0;
  const auto& dims = *v->type.dims;
  int64_t r = static_cast<int64_t>(dims.size());
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r || !dims[axis].isKnown()) return 0;
  return dims[axis].value;
}

size_t rankOf(const Value* v) { return v && v->type.hasRank() ? v->type.dims->size() : 0; }

}  // namespace

hw::OpQuery queryFor(const Node& node) {
  hw::OpQuery q;
  q.opType = node.domain().empty() ? node.opType() : node.domain() + "." + node.opType();
  q.nodeName = node.name();
  const Value* x = node.input(0) ? node.input(0) : node.output(0);
  if (x) q.elementType = std::string(dtypeName(x->type.dtype));
  if (node.domain().empty() && hasTrait(node, OpTrait::ChannelsFirst) && rankOf(node.input(0)) >= 3) q.layout = "NCHW";
  if (node.domain() != "") return q;
  if (hasTrait(node, OpTrait::SlidingWindow)) {
    if (node.hasAttr("kernel_shape")) {
      q.kernelShape = node.attrInts("kernel_shape");
    } else if (isOp(node, "Conv") && node.input(1) && node.input(1)->type.hasRank()) {
      for (size_t a = 2; a < rankOf(node.input(1)); ++a) q.kernelShape.push_back(staticDim(node.input(1), a));
    }
    size_t spatial = q.kernelShape.size();
    q.strides = node.hasAttr("strides") ? node.attrInts("strides") : std::vector<int64_t>(spatial, 1);
    q.dilations = node.hasAttr("dilations") ? node.attrInts("dilations") : std::vector<int64_t>(spatial, 1);
  }
  if (isOp(node, "Conv")) {
    q.group = node.attrInt("group");
    q.inChannels = staticDim(node.input(0), 1);
    q.outChannels = staticDim(node.input(1), 0);
  } else if (isOp(node, "Gemm")) {
    bool tb = node.attrInt("transB") != 0;
    q.inChannels = staticDim(node.input(1), tb ? 1 : 0);
    q.outChannels = staticDim(node.input(1), tb ? 0 : 1);
  } else if (isOp(node, "MatMul")) {
    q.inChannels = staticDim(node.input(1), -2);
    q.outChannels = staticDim(node.input(1), -1);
  }
  return q;
}

namespace {

/// Chooses a device for every node; fills placements (in node order) and returns node -> device index.
std::vector<size_t> placeNodes(const Graph& graph, const hw::HardwareConfig& config, const PartitionOptions& options,
                               std::vector<Placement>& placements) {
  const auto& devices = config.devices();
  auto deviceIndex = [&](const std::string& name) {
    for (size_t i = 0; i < devices.size(); ++i)
      if (devices[i].name == name) return i;
    config.device(name);  // throws, listing the devices
    return size_t{0};
  };
  std::vector<size_t> chosen;
  for (const auto& nodePtr : graph.nodes()) {
    const Node& node = *nodePtr;
    hw::OpQuery q = queryFor(node);
    Placement p{node.name(), node.opType(), "", "", ""};
    auto accepts = [&](const hw::Device& dev) -> hw::SupportResult {
      if (dev.kind == hw::DeviceKind::Cpu) {
        if (dev.supportsAllOps || dev.ops.count(q.opType)) return {true, ""};
        return {false, fmt::format("{} on device '{}': not in its operator list", q.opType, dev.name)};
      }
      hw::SupportResult r = config.supports(dev.name, q);
      if (r.supported && options.canLower) {
        hw::SupportResult l = options.canLower(node, dev);
        if (!l.supported) return {false, fmt::format("{} on device '{}': the lowering cannot: {}", q.opType, dev.name, l.reason)};
      }
      return r;
    };
    if (auto pinned = config.overrideFor(node.name())) {
      size_t d = deviceIndex(*pinned);
      hw::SupportResult r = devices[d].kind == hw::DeviceKind::Cpu ? accepts(devices[d]) : hw::SupportResult{true, ""};
      if (devices[d].kind == hw::DeviceKind::Npu) {
        // supports() reports the override itself as fine; ask about the op with the override lifted.
        hw::OpQuery unpinned = q;
        unpinned.nodeName.clear();
        r = config.supports(devices[d].name, unpinned);
        if (r.supported && options.canLower) r = options.canLower(node, devices[d]);
      }
      if (!r.supported)
        throw UserError(fmt::format("configuration override pins {} to device '{}', which cannot run it: {}",
                                    node.describe(), *pinned, r.reason));
      p.device = *pinned;
      p.reason = fmt::format("override in the configuration pins it to '{}'", *pinned);
      chosen.push_back(d);
      placements.push_back(p);
      continue;
    }
    std::vector<std::string> refusals;
    for (size_t d = 0; d < devices.size() && p.device.empty(); ++d) {
      hw::SupportResult r = accepts(devices[d]);
      if (r.supported) {
        p.device = devices[d].name;
        p.reason = refusals.empty() ? fmt::format("supported by '{}'", devices[d].name)
                                    : fmt::format("{}", fmt::join(refusals, "; "));
        chosen.push_back(d);
      } else {
        refusals.push_back(r.reason);
      }
    }
    if (p.device.empty())
      throw UserError(fmt::format("no device of configuration '{}' runs {}: {}", config.name(), node.describe(),
                                  fmt::join(refusals, "; ")));
    placements.push_back(p);
  }
  return chosen;
}

/// Union-find clusters over node indices with the acyclicity test of a merge.
class Clusters {
 public:
  Clusters(const Graph& graph, std::vector<size_t> device) : device_(std::move(device)) {
    const auto& nodes = graph.nodes();
    std::unordered_map<const Node*, size_t> index;
    for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i].get()] = i;
    succ_.resize(nodes.size());
    parent_.resize(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      parent_[i] = i;
      for (Value* out : nodes[i]->outputs())
        if (out)
          for (const Use& u : out->uses())
            if (auto it = index.find(u.node); it != index.end() && it->second != i) succ_[i].push_back(it->second);
    }
  }
  size_t find(size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  /// Merges the clusters of a and b unless that would close a cycle (a path between them through a
  /// third cluster). Returns whether they are now one cluster.
  bool tryMerge(size_t a, size_t b) {
    size_t ca = find(a), cb = find(b);
    if (ca == cb) return true;
    if (device_[ca] != device_[cb]) return false;
    if (reachesThroughOther(ca, cb) || reachesThroughOther(cb, ca)) return false;
    parent_[std::max(ca, cb)] = std::min(ca, cb);
    return true;
  }

 private:
  /// Whether a path leaves cluster `from`, visits a node of another cluster, and arrives in cluster `to`.
  bool reachesThroughOther(size_t from, size_t to) {
    std::vector<char> seen(succ_.size(), 0);
    std::vector<size_t> stack;
    for (size_t i = 0; i < succ_.size(); ++i)
      if (find(i) == from)
        for (size_t s : succ_[i])
          if (find(s) != from && find(s) != to && !seen[s]) seen[s] = 1, stack.push_back(s);
    while (!stack.empty()) {
      size_t n = stack.back();
      stack.pop_back();
      for (size_t s : succ_[n]) {
        size_t cs = find(s);
        if (cs == to) return true;
        if (cs != from && !seen[s]) seen[s] = 1, stack.push_back(s);
      }
    }
    return false;
  }

  std::vector<size_t> device_;
  std::vector<std::vector<size_t>> succ_;
  std::vector<size_t> parent_;
};

/// Moves the nodes of one cluster into a new tessel.Subgraph node; returns it.
Node* outlineCluster(Graph& graph, const std::vector<Node*>& members, const std::string& device,
                     const std::string& name, PartitionResult& result) {
  std::set<const Node*> inCluster(members.begin(), members.end());
  auto body = std::make_shared<Graph>(name);
  body->setParent(&graph);
  std::map<const Value*, Value*> mapped;  // outer value -> body value
  std::vector<Value*> outerInputs, outerOutputs;
  auto bodyValueFor = [&](Value* v) -> Value* {
    if (!v) return nullptr;
    if (auto it = mapped.find(v); it != mapped.end()) return it->second;
    Value* b = nullptr;
    if (v->isConstant()) {
      b = body->addConstant(v->name(), v->constant());
    } else {
      b = body->addInput(v->name(), v->type);
      outerInputs.push_back(v);
    }
    return mapped[v] = b;
  };
  for (Node* n : members) {
    std::vector<Value*> ins;
    for (Value* v : n->inputs()) ins.push_back(bodyValueFor(v));
    std::vector<std::string> outNames;
    for (Value* v : n->outputs()) outNames.push_back(v ? v->name() : "");
    Node* copy = body->addNode(n->opType(), ins, outNames, n->name(), n->domain());
    for (const auto& [k, a] : n->attrs()) copy->setAttr(k, a);
    copy->meta = n->meta;
    copy->device = device;
    for (size_t i = 0; i < n->numOutputs(); ++i) {
      Value* v = n->output(i);
      if (!v) continue;
      copy->output(i)->type = v->type;
      mapped[v] = copy->output(i);
      bool usedOutside = std::any_of(v->uses().begin(), v->uses().end(),
                                     [&](const Use& u) { return !inCluster.count(u.node); });
      bool isGraphOutput = std::find(graph.outputs().begin(), graph.outputs().end(), v) != graph.outputs().end();
      if (usedOutside || isGraphOutput) {
        body->addOutput(copy->output(i));
        outerOutputs.push_back(v);
      }
    }
  }
  for (Value* v : outerInputs) result.transferBytes += v->type.isStatic() ? v->type.staticSize() * dtypeSize(v->type.dtype) : 0;
  for (Value* v : outerOutputs) result.transferBytes += v->type.isStatic() ? v->type.staticSize() * dtypeSize(v->type.dtype) : 0;
  result.transferValues += outerInputs.size() + outerOutputs.size();

  std::vector<std::string> tempNames, finalNames;
  std::vector<TensorType> outputTypes;  // the cluster's values die with it
  for (Value* v : outerOutputs) {
    outputTypes.push_back(v->type);
    tempNames.push_back(graph.uniqueName(v->name() + "__outlined"));
    finalNames.push_back(v->name());
  }
  // Two steps keep the original value names: a first node takes over the uses under temporary names, the
  // cluster is removed (freeing its names), then the final node is created under the original names.
  auto makeNode = [&](Node* anchor, const std::vector<std::string>& outNames, const std::string& nodeName) {
    Node* sg = graph.insertNodeBefore(anchor, "Subgraph", outerInputs, outNames, nodeName, "tessel");
    sg->setAttr("body", body);
    sg->device = device;
    for (size_t i = 0; i < outputTypes.size(); ++i) sg->output(i)->type = outputTypes[i];
    return sg;
  };
  Node* temp = makeNode(members.front(), tempNames, graph.uniqueName(name + "__tmp"));
  for (size_t i = 0; i < outerOutputs.size(); ++i) graph.replaceAllUsesWith(outerOutputs[i], temp->output(i));
  for (auto it = members.rbegin(); it != members.rend(); ++it) graph.removeNode(*it);
  Node* sg = makeNode(temp, finalNames, name);
  for (size_t i = 0; i < finalNames.size(); ++i) graph.replaceAllUsesWith(temp->output(i), sg->output(i));
  graph.removeNode(temp);
  return sg;
}

}  // namespace

PartitionResult partitionGraph(Graph& graph, const hw::HardwareConfig& config, const PartitionOptions& options) {
  PartitionResult result;
  std::vector<size_t> device = placeNodes(graph, config, options, result.placements);
  const auto& devices = config.devices();
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i]->device = devices[device[i]].name;

  Clusters clusters(graph, device);
  auto isAccel = [&](size_t i) { return devices[device[i]].kind == hw::DeviceKind::Npu; };
  std::unordered_map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  // Grow along edges first (producer -> consumer), then join unconnected groups of the same device.
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!isAccel(i)) continue;
    for (Value* out : nodes[i]->outputs())
      if (out)
        for (const Use& u : out->uses())
          if (auto it = index.find(u.node); it != index.end() && isAccel(it->second)) clusters.tryMerge(i, it->second);
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    for (size_t j = i + 1; j < nodes.size(); ++j)
      if (isAccel(i) && isAccel(j) && clusters.find(i) != clusters.find(j)) clusters.tryMerge(i, j);

  std::map<size_t, std::vector<Node*>> members;  // cluster root -> nodes in order
  for (size_t i = 0; i < nodes.size(); ++i)
    if (isAccel(i)) members[clusters.find(i)].push_back(nodes[i]);
  std::map<std::string, int> perDevice;
  std::map<const Node*, std::string> subgraphOf;
  for (auto& [root, group] : members) {
    const std::string& dev = devices[device[root]].name;
    std::string name = graph.uniqueName(fmt::format("{}_subgraph{}", dev, perDevice[dev]++));
    for (const Node* n : group) subgraphOf[n] = name;
    outlineCluster(graph, group, dev, name, result);
    result.subgraphNodes.push_back(name);
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    if (isAccel(i)) result.placements[i].subgraph = subgraphOf[nodes[i]];
  graph.topoSort();
  return result;
}

std::string placementTable(const PartitionResult& result) {
  size_t wName = 4, wOp = 2, wDev = 6, wSub = 8;
  for (const Placement& p : result.placements) {
    wName = std::max(wName, p.node.size());
    wOp = std::max(wOp, p.opType.size());
    wDev = std::max(wDev, p.device.size());
    wSub = std::max(wSub, p.subgraph.size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", "node", wName, "op", wOp, "device", wDev,
                                "subgraph", wSub, "why");
  std::map<std::string, size_t> count;
  for (const Placement& p : result.placements) {
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", p.node, wName, p.opType, wOp, p.device, wDev,
                       p.subgraph.empty() ? "-" : p.subgraph, wSub, p.reason);
    ++count[p.device];
  }
  std::vector<std::string> parts;
  for (const auto& [d, c] : count) parts.push_back(fmt::format("{} on {}", c, d));
  out += fmt::format("{} node(s): {}; {} subgraph(s); {} value(s) cross a device boundary ({} bytes)\n",
                     result.placements.size(), fmt::join(parts, ", "), result.subgraphNodes.size(),
                     result.transferValues, result.transferBytes);
  return out;
}

}  // namespace tessel::partition
