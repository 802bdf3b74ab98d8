// The partitioner's placements as JSON (`tessel partition --json`, the Python module's tessel.partition).
#include "tessel/partition/partitioner.h"

namespace tessel::partition {

nlohmann::json placementJson(const PartitionResult& r, const hw::HardwareConfig& config,
                             const std::string& model) {
  nlohmann::json placements = nlohmann::json::array(), perDevice = nlohmann::json::object();
  for (const auto& p : r.placements) {
    placements.push_back({{"node", p.node}, {"op", p.opType}, {"device", p.device}, {"subgraph", p.subgraph},
                          {"reason", p.reason}});
    perDevice[p.device] = perDevice.value(p.device, 0) + 1;
  }
  return {{"model", model},
          {"hw_config", config.name()},
          {"hw_hash", config.hashHex()},
          {"placements", placements},
          {"nodes_per_device", perDevice},
          {"subgraphs", r.subgraphNodes},
          {"transfer_values", r.transferValues},
          {"transfer_bytes", r.transferBytes}};
}

}  // namespace tessel::partition
