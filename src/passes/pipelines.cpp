// The named pass pipelines, each a plain list read top to bottom.
#include <fmt/format.h>

#include "tessel/passes/pass.h"

namespace tessel {

namespace {
const std::map<std::string, std::vector<std::string>>& pipelines() {
  static const std::map<std::string, std::vector<std::string>> table = {
      // Clean-up only: what every target runs first.
      {"cleanup", {"infer-shapes", "dce"}},
      // The CPU target: single-node clean-ups, then fusions, then schedule decisions (layout, kernels).
      {"cpu",
       {"infer-shapes",
        "specialize-shapes",
        "fold-constants",
        "eliminate-identity",
        "cse",
        "fold-batchnorm",
        "fuse-transformer-patterns",  // before the epilogues (Gelu) and fuse-elementwise (it would take the chains)
        "fuse-conv-epilogue",
        "fuse-gemm-epilogue",
        "fuse-elementwise",
        "dce",
        "infer-shapes",
        "select-layout",
        "select-kernels"}},
  };
  return table;
}
}  // namespace

PassPipeline namedPipeline(const std::string& name) {
  auto it = pipelines().find(name);
  if (it == pipelines().end())
    throw UserError(fmt::format("unknown pipeline '{}' (known: {})", name, fmt::join(pipelineNames(), ", ")));
  return PassPipeline(it->second);
}

std::vector<std::string> pipelineNames() {
  std::vector<std::string> out;
  for (const auto& [n, p] : pipelines()) out.push_back(n);
  return out;
}

}  // namespace tessel
