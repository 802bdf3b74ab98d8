// The named pass pipelines, each a plain list read top to bottom; the targets that own them register their
// options (src/targets/cpu/pipeline.cpp).
#include <fmt/format.h>

#include "tessel/passes/pass.h"

namespace tessel {

namespace {

struct PipelineList {
  std::string target;  ///< PassOptions::target of the pipeline's runs
  std::vector<std::string> passes;
};

const std::map<std::string, PipelineList>& pipelines() {
  static const std::map<std::string, PipelineList> table = {
      // Clean-up only: what every target runs first.
      {"cleanup", {"", {"infer-shapes", "dce"}}},
      // The CPU target: single-node clean-ups, then fusions, then schedule decisions (layout, kernels: the
      // cpu target's passes).
      {"cpu",
       {"cpu",
        {"infer-shapes",
         "specialize-shapes",
         "fold-constants",
         "eliminate-identity",
         "transpose-to-reshape",
         "reduce-to-global-pool",
         "crop-dead-conv-taps",
         "cse",
         "fold-batchnorm",
         "pool-before-pointwise-conv",
         "fuse-gelu",                  // before the epilogues (Gelu) and fuse-elementwise (it would take the chains)
         "fuse-transformer-patterns",
         "fuse-conv-epilogue",
         "fuse-gemm-epilogue",
         "fuse-elementwise",
         "dce",
         "infer-shapes",
         "select-layout",
         "select-kernels"}}},
      // The NPU target: clean-ups and folding only; its lowering fuses activations into the ops it emits.
      {"npu",
       {"npu",
        {"infer-shapes", "specialize-shapes", "fold-constants", "eliminate-identity", "transpose-to-reshape",
         "reduce-to-global-pool", "crop-dead-conv-taps", "cse",
         "fold-batchnorm", "pool-before-concat", "pool-before-activation", "pool-before-pointwise-conv",
         "fuse-activation-patterns", "fuse-gelu", "fuse-transformer-patterns", "channel-shuffle-to-gather", "dce",
         "infer-shapes"}}},
  };
  return table;
}

std::map<std::string, PipelineOptionsFn>& optionProviders() {
  static std::map<std::string, PipelineOptionsFn> providers;
  return providers;
}

const PipelineList& pipelineList(const std::string& name) {
  auto it = pipelines().find(name);
  if (it == pipelines().end())
    throw UserError(fmt::format("unknown pipeline '{}' (known: {})", name, fmt::join(pipelineNames(), ", ")));
  return it->second;
}

}  // namespace

void registerPipelineOptions(const std::string& pipeline, PipelineOptionsFn options) {
  TESSEL_ASSERT(!optionProviders().count(pipeline), "options of pipeline '" + pipeline + "' registered twice");
  optionProviders()[pipeline] = std::move(options);
}

Pipeline namedPipeline(const std::string& name, PassOptions options) {
  const PipelineList& list = pipelineList(name);
  if (!list.target.empty()) options.target = list.target;
  return Pipeline{name, PassPipeline(list.passes), std::move(options)};
}

Pipeline namedPipeline(const std::string& name) {
  pipelineList(name);  // an unknown name is a UserError before any provider runs
  auto provider = optionProviders().find(name);
  return namedPipeline(name, provider == optionProviders().end() ? PassOptions{} : provider->second());
}

std::vector<std::string> pipelineNames() {
  std::vector<std::string> out;
  for (const auto& [n, p] : pipelines()) out.push_back(n);
  return out;
}

}  // namespace tessel
