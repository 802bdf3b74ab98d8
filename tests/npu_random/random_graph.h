// Random graphs for the NPU lowering tests: small DAGs of Conv (kernel 1-7, stride 1-2, dilation, asymmetric
// padding, grouped and depthwise, odd sizes, with or without bias), pools, element-wise and shape operators,
// and the check that compiles one for a hardware configuration the way `tessel compile --target npu` does,
// simulates it and compares it with the reference interpreter. Used by tests/unit/npu_random_graph_test.cpp
// and by the long-run driver tessel_npu_random (tests/npu_random/main.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"

namespace tessel::test {

/// Variations of the random graphs.
struct RandomGraphOptions {
  /// Channel counts of the input and of dense and pointwise convolutions rounded up to multiples of 8 (the CPU
  /// target's NCHWc8 regions need them); the seed's other choices stay as they are.
  bool channelsOfEight = false;
};

/// A valid model (opset 17, shapes inferred) of 2-12 nodes drawn from `seed`; the same seed gives the same model.
std::unique_ptr<Model> randomNpuGraph(uint64_t seed, const RandomGraphOptions& options = {});

/// Tolerance of checkOnNpu: an output matches when max |npu - ref| <= kRelTolerance * max |ref| + kAbsTolerance.
inline constexpr float kRelTolerance = 1e-4f;
inline constexpr float kAbsTolerance = 1e-5f;

/// Uniform [-1, 1) values for every input of `model`, drawn from `seed`.
std::map<std::string, Tensor> randomInputs(const Model& model, uint64_t seed);

/// Compares output `name` computed by `what` ("NPU", "cpu avx2 nchwc8 2 threads") with the interpreter's: an empty
/// string when max |got - want| <= slack * (kRelTolerance * max |want| + kAbsTolerance), else what differs.
std::string compareOutput(const std::string& name, const Tensor& got, const Tensor& want, const std::string& what,
                          float slack = 1);

/// What one compile-and-run found.
struct NpuCheck {
  std::vector<std::string> problems;  ///< empty: outputs match, verifier and hazard checker clean
  size_t nodes = 0;                   ///< nodes after the npu pipeline (lowered ones and host ones)
  std::vector<std::string> hostOps;   ///< operator of each node the partitioner left on the host
  size_t subgraphs = 0;               ///< NPU calls
  uint64_t cycles = 0;                ///< simulated NPU cycles over all calls
  size_t fusedGroups = 0;             ///< groups of the schedules that fuse several nodes (row tiles, halos)
  size_t inputNorms = 0;              ///< convolutions that normalise their loaded input blocks (NodeTiling::inputNorm)
  size_t residualsInAcc = 0;          ///< convolutions adding a residual in the accumulator (NodeTiling::residualInAcc)
  size_t maxPools = 0;                ///< convolutions pooling their accumulator tiles (NodeTiling::maxPool)
  size_t residualConvs = 0;           ///< shortcut convolutions computed into an accumulator (NodeTiling::residualConv)
  size_t passesInside = 0;            ///< convolutions running their passes inside each tile (NodeTiling::inputResident)
  size_t channelChains = 0;           ///< groups running a depthwise and a 1x1 convolution as a channel chain
  size_t expandChains = 0;            ///< of those, chains with an expand stage first
  size_t sharedWindows = 0;           ///< of those, windows in the accumulator beside matrix-unit blocks' (windowInAcc + matrixEvery)
  size_t biasLoads = 0;               ///< tilings whose bias a load broadcasts into the accumulator (NodeTiling::biasLoad)
  size_t layerNorms = 0;              ///< LayerNormalization nodes lowered (the decomposed LayerNorms recombined)
  size_t preparedOracle = 0;          ///< outputs that matched the prepared graph's reference, not the graph's (checkOnNpu)
};

/// Compiles `model` for the configuration file `configPath` through the target registry's "npu" target (its
/// pipeline, partitioning, lowering, the verifier; host part left to the interpreter), writes the .tnpu into
/// `workDir`, reads it back (verified again on loading), runs it on the simulator with uniform [-1, 1) inputs
/// drawn from `inputSeed` and compares with the reference interpreter. Every exception is reported as a problem.
/// `settings` are the npu target's (npu-strategy, npu-window: `tessel compile --npu-strategy ...`).
NpuCheck checkOnNpu(const Model& model, const std::string& configPath, uint64_t inputSeed, const std::string& workDir,
                    const std::map<std::string, std::string>& settings = {});

/// A copy of a configuration file whose NPU Conv accepts any kernel size and dilation (the lowering handles them;
/// the shipped configurations list only some), written into `workDir`; returns its path.
std::string widenedConfig(const std::string& configPath, const std::string& workDir);

/// Totals over checked graphs.
struct RandomRunStats {
  size_t graphs = 0, compiles = 0, nodes = 0, hostNodes = 0, failures = 0;
  size_t graphsAllOnNpu = 0;
  size_t fusedGroups = 0;  ///< graphs whose nodes the shipped configurations all place on the NPU
  size_t inputNorms = 0;   ///< NpuCheck::inputNorms summed
  size_t residualsInAcc = 0;  ///< NpuCheck::residualsInAcc summed
  size_t maxPools = 0;        ///< NpuCheck::maxPools summed
  size_t residualConvs = 0;   ///< NpuCheck::residualConvs summed
  size_t passesInside = 0;    ///< NpuCheck::passesInside summed
  size_t channelChains = 0;   ///< NpuCheck::channelChains summed
  size_t expandChains = 0;    ///< NpuCheck::expandChains summed
  size_t sharedWindows = 0;   ///< NpuCheck::sharedWindows summed
  size_t biasLoads = 0;       ///< NpuCheck::biasLoads summed
  size_t layerNorms = 0;      ///< NpuCheck::layerNorms summed
  size_t preparedOracle = 0;  ///< NpuCheck::preparedOracle summed
  uint64_t cycles = 0;
  std::map<std::string, size_t> hostOps;  ///< nodes left on the host, by operator
};

/// The shipped configurations the random graphs are compiled for: configs/default.json, tiny.json, edge.json.
std::vector<std::string> randomTestConfigs();

/// Checks graph `seed` with each configuration (input seed = `seed`); when a shipped configuration leaves a Conv on
/// the host (kernel size or dilation it does not list), once more with one of them widened (widenedConfig,
/// chosen by the seed). Returns one describeFailure text per failing configuration; when `saveDir` is not
/// empty, a failing graph is also written there as SEED.tir for `tessel compile`/`tessel compare`.
std::vector<std::string> checkRandomGraph(uint64_t seed, const std::vector<std::string>& configs, const std::string& workDir,
                                          RandomRunStats& stats, const std::string& saveDir = "");

/// The seed and graph of a failure, to replay it: the seed, the environment to rerun it and the text IR.
std::string describeFailure(uint64_t seed, const std::string& config, const Model& model, const NpuCheck& check);

/// The command line of the long-run drivers (tessel_npu_random, tessel_cpu_random): [--seed S] [--graphs N] [--save DIR].
struct RandomRunArgs {
  uint64_t seed = 1, graphs = 0;
  std::string save;  ///< where failing graphs are written as SEED.tir (none when empty)
};

/// Parses it (`graphs` defaults to `defaultGraphs`); an unknown argument or a number that is not one prints the usage
/// of `tool` on stderr and gives nullopt.
std::optional<RandomRunArgs> parseRandomRunArgs(int argc, char** argv, const std::string& tool, uint64_t defaultGraphs);

/// The environment variable `name` as a number, `fallback` when it is unset or empty (the randomised unit tests'
/// first seed and graph count).
uint64_t envNumber(const char* name, uint64_t fallback);

}  // namespace tessel::test
