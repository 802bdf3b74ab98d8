// The subgraph engine (S4.2): places every node on a device of the hardware configuration and merges the
// nodes of each accelerator into maximal acyclic subgraphs, each replaced by one `tessel.Subgraph` node.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"

namespace tessel::partition {

/// Where one node of the input graph went, and why.
struct Placement {
  std::string node;     ///< node name
  std::string opType;
  std::string device;   ///< device name from the configuration
  std::string reason;   ///< "supported by npu0", "override", or what ruled the preferred devices out
  std::string subgraph; ///< name of the subgraph node that holds it ("" for host nodes)
};

/// Asks a target whether it can lower a node the configuration accepts (e.g. an attribute combination
/// the instruction set cannot express). Returns {true, ""} or {false, why}.
using LoweringCheck = std::function<hw::SupportResult(const Node& node, const hw::Device& device)>;

struct PartitionOptions {
  /// Consulted for devices of kind npu after the configuration said yes; empty = configuration only.
  LoweringCheck canLower;
};

/// What the partitioner did.
struct PartitionResult {
  std::vector<Placement> placements;        ///< one per node of the input graph, in its order
  std::vector<std::string> subgraphNodes;   ///< names of the created tessel.Subgraph nodes
  size_t transferValues = 0;                ///< values crossing a device boundary (subgraph inputs + outputs)
  uint64_t transferBytes = 0;               ///< their static sizes in bytes (unknown sizes count 0)
};

/// The attribute summary of a node the configuration is asked about (op, dtype, layout, kernel, ...).
hw::OpQuery queryFor(const Node& node);

/// Places each top-level node (overrides first, then the devices in configuration order, the host CPU
/// last) and replaces each maximal acyclic group of same-accelerator nodes by a tessel.Subgraph node
/// whose `body` holds them (constants they use are copied into the body). Sets Node::device on every
/// top-level node and body node. Throws UserError when an override pins a node to a device that cannot
/// run it, or when the configuration has no device for a node.
PartitionResult partitionGraph(Graph& graph, const hw::HardwareConfig& config, const PartitionOptions& options = {});

/// A table, one row per node: name, op, device, subgraph, reason; then a summary line.
std::string placementTable(const PartitionResult& result);

/// The placements as `tessel partition --json` prints them (keys in docs/cli.md); `model` names the model.
nlohmann::json placementJson(const PartitionResult& result, const hw::HardwareConfig& config, const std::string& model);

/// Graphviz text of a partitioned graph: one cluster per subgraph node, colour per device.
std::string partitionDot(const Graph& graph);

/// True for the subgraph operator (domain "tessel", op "Subgraph").
bool isSubgraphNode(const Node& node);

}  // namespace tessel::partition
