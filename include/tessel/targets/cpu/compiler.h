// The cpu target's compile driver: model -> generated C++ (+ weights blob) -> shared library or app.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"
#include "tessel/passes/pass.h"

namespace tessel::cpu {

/// What `tessel compile` was asked for.
struct CompileOptions {
  std::string march = "native";  ///< passed to the C++ compiler as -march=
  /// Vector ISA of the generated code and the runtime kernels: "avx2" (AVX-512 off whatever --march has,
  /// -mno-avx512f: the 8-lane kernels), "avx512" (the 16-lane kernels; UserError when --march has no
  /// AVX-512F) or "auto" (what --march has). Both can be built and run on one AVX-512 machine.
  std::string isa = "auto";
  std::string cxx;               ///< C++ compiler; empty: $CXX, else g++
  bool tune = false;             ///< choose conv kernels by timing them on this machine
  /// With tune: where the choices are saved. Without: choices read from it (UserError when it was
  /// written for another model).
  std::string tuningFile;
  int defaultThreads = 0;        ///< threads a created instance uses when not told (0: all cores)
  /// Activation layout: "nchw"; "nchwc8" (select-layout's blocked regions around direct convolutions,
  /// reorders on their edges); "auto" (for a target without AVX-512 the regions that have a depthwise
  /// convolution the NCHW small-map depthwise kernel does not take, where the NCHWc8 kernels win; with
  /// AVX-512 nchw).
  std::string layout = "auto";
  /// Nodes without a compiled code path run through the host's reference interpreter (each listed in the
  /// report with its reason); false makes any such node a UserError (`tessel compile --no-host-fallback`).
  bool hostFallback = true;
  /// Inverted residual blocks (1x1 -> depthwise -> 1x1 conv) on large maps as one banded step
  /// (rt::conv_chain_nchw); false lowers each conv alone (`tessel compile --no-conv-chains`, for A/B timing).
  bool convChains = true;
  /// Called with a one-line description of each stage as it starts (the CLI prints it).
  std::function<void(const std::string&)> progress;
};

/// A node the compiled model runs through the host's reference interpreter, and why.
struct HostStep {
  std::string node;    ///< the node's description ("node 'n' (Op)")
  std::string op;
  std::string reason;  ///< why no compiled code path took it
};

/// Facts about a compiled model (the compile report).
struct CompileReport {
  size_t arenaBytes = 0;         ///< planned activation arena
  size_t naiveArenaBytes = 0;    ///< sum of all intermediate tensors (what no reuse would need)
  size_t weightBytes = 0;        ///< raw weights embedded in the library
  size_t packedWeightBytes = 0;  ///< weights after packing at create time
  int steps = 0;                 ///< kernel calls per inference
  int fusedNodes = 0;            ///< graph nodes folded into another kernel's call
  int inPlaceConcatInputs = 0;   ///< Concat inputs written straight into their slice of the output
  int scaledConvInputs = 0;      ///< channel-scale Muls (squeeze-and-excitation) folded into the pointwise conv after
  int inPlaceShuffleInputs = 0;  ///< of their inputs, convs that wrote their planes straight into the shuffled order
  int shuffledConcats = 0;       ///< Concat + channel shuffle (Reshape, Transpose) pairs run as one gather of planes
  int chainedConvBlocks = 0;     ///< inverted residual blocks (1x1, depthwise, 1x1) computed as one banded step
  double flops = 0;              ///< multiply-adds x 2 of the convolutions and GEMMs
  std::string hash;              ///< model + target hash embedded in the library
  std::string isa;               ///< vector ISA the code was generated for: "avx2" or "avx512"
  std::vector<std::string> fallbackNodes;  ///< nodes run by the host's reference interpreter
  std::vector<HostStep> hostSteps;         ///< the same nodes with the reason of each
  double generateSeconds = 0, cxxSeconds = 0;
  // --tune (zero without it)
  int tunedConvs = 0;            ///< conv geometries timed
  int tunedChanged = 0;          ///< of them, where the fastest kernel is not the untuned choice
  int tunerVectorLanes = 0;      ///< float lanes of the tuner build's widest vectors (16: AVX-512F, 8: AVX2)
  double tuneSeconds = 0;        ///< building (when not cached) and running the tuner
};

/// Generated source of a model: the C++ file and the weights blob it embeds (by .incbin of weightsFile).
struct GeneratedModel {
  std::string source;
  std::string weights;
  CompileReport report;
};

/// Lowers a typed model (static shapes) to C++ against the runtime library. `weightsFileName` is the
/// name the source's .incbin refers to (found through the assembler's include path).
/// UserError naming the nodes when an operator or a data type has no code path.
GeneratedModel generateModel(const Model& model, const CompileOptions& options,
                             const std::string& weightsFileName = "model.weights.bin");

/// The cpu target's pass pipeline for a compile with `options`: the "cpu" list of src/passes/pipelines.cpp
/// (clean-ups, constant folding, fusions, layout regions, kernel selection) with the pass options the flags
/// imply (the vector width of options.march, options.layout). `tessel opt --pipeline cpu` runs it with the
/// default options, as `tessel compile` without flags.
Pipeline passPipeline(const CompileOptions& options = {});

/// Runs passPipeline(options), whose result the code generator turns into kernel calls.
void prepareModel(Model& model, const CompileOptions& options = {});

/// Compiles a model into a shared library at outPath (C ABI of tessel/targets/cpu/abi.h).
CompileReport compileSharedLibrary(const Model& model, const std::string& outPath, const CompileOptions& options);

/// Writes source + weights (outPath and outPath's stem + ".weights.bin") without compiling.
CompileReport emitSource(const Model& model, const std::string& outPath, const CompileOptions& options);

/// Writes a standalone CMake project into dir: the generated model, a copy of the runtime and a main.cpp
/// reading .npy inputs and writing .npy outputs.
CompileReport emitApp(const Model& model, const std::string& dir, const CompileOptions& options);

}  // namespace tessel::cpu
