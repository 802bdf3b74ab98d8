// `tessel compile --tune`: the convolutions whose kernel the cpu lowering chooses, and timing their
// candidate kernels with the runtime compiled for the model's --march (not the one inside `tessel`).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"
#include "tessel/rt/conv.h"
#include "tessel/targets/cpu/compiler.h"

namespace tessel::cpu {

/// One convolution geometry to tune.
struct ConvTuneJob {
  std::string key;                      ///< the tuning file's key (convTuningKey: layout and geometry)
  rt::Conv2dShape shape;
  std::vector<std::string> candidates;  ///< every applicable kernel of the conv's layout, in the runtime's list order
  std::string untuned;                  ///< what select-kernels chose without tuning (meta kernel)
};

/// The 16 fields of rt::Conv2dShape, space-separated (what the conv tuner reads).
std::string convGeometryKey(const rt::Conv2dShape& s);

/// The tuning file's key of a conv: its geometry key for an NCHW conv, "nchwc8 " + geometry key for one in a
/// blocked region (the same geometry may run in both layouts, with different kernels).
std::string convTuningKey(const rt::Conv2dShape& s, rt::ConvLayout layout);
/// What a blocked conv's tuning key starts with.
inline const std::string kBlockedKeyPrefix = "nchwc8 ";

/// The select-kernels option that carries a measured choice: kTunedKernelOption + convTuningKey = kernel.
inline const std::string kTunedKernelOption = "select-kernels.tuned.";

/// The distinct (layout, geometry) pairs of the convolutions the code generator calls a kernel for, in graph
/// order (src/targets/cpu/lower_conv_gemm.cpp), each with the kernel select-kernels recorded (`untuned`) and
/// the candidates: every applicable kernel of the conv's layout (NCHW, or NCHWc8 in a blocked region) that
/// reads the same input layout as the untuned one, AVX-512 ones only when `avx512` (the target has it).
std::vector<ConvTuneJob> convTuneJobs(const Graph& graph, bool avx512);

/// What a tuning file decides: conv kernels, and (records of `tessel tune --target cpu`) layout regions.
struct TuningChoices {
  std::map<std::string, std::string> kernels;  ///< convTuningKey -> kernel name ("conv_kernels")
  /// layout region key (select-layout's layoutRegions) -> "nchw" | "nchwc8" ("layout_regions"; optional)
  std::map<std::string, std::string> layouts;
  bool empty() const { return kernels.empty() && layouts.empty(); }
  bool operator==(const TuningChoices&) const = default;
};

/// The choices of a tuning file's text. UserError naming `origin` when it is not JSON, was written for a
/// model other than `modelKey`, names a geometry or kernel that does not exist, or a layout other than nchw
/// and nchwc8 (src/targets/cpu/tuning_file.cpp). Region keys are checked by select-layout when compiling.
TuningChoices parseTuningFile(const std::string& text, const std::string& origin, const std::string& modelKey);

/// A copy of a prepared model (prepareModel with `options`) with a tuning file's choices: the passes that make
/// those decisions, select-layout (when a region's layout is chosen) and select-kernels, run again with them
/// (src/targets/cpu/compiler.cpp).
std::unique_ptr<Model> withTunedChoices(const Model& model, const TuningChoices& choices, const CompileOptions& options);

/// What the tuner measured.
struct ConvTimings {
  int vectorLanes = 0;  ///< float lanes of the tuner build's widest vectors: 16 with AVX-512F, else 8
  /// Per job, per candidate: best single-thread time in ms; negative when the tuner's runtime lacks the
  /// kernel or finds it not applicable.
  std::vector<std::vector<double>> ms;
};

/// Builds the tuner (runtime/tools/conv_tuner.cpp) against the runtime compiled with `options`' compiler
/// and --march (both cached in the runtime cache) and runs it once for all jobs
/// (src/targets/cpu/compiler.cpp). UserError when it cannot be built or run on this machine.
ConvTimings timeConvKernels(const std::vector<ConvTuneJob>& jobs, const CompileOptions& options);

}  // namespace tessel::cpu
