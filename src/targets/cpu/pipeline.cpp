// The cpu target's pass pipeline: the "cpu" list of src/passes/pipelines.cpp with the options a compile's
// flags imply. `tessel compile` (prepareModel) and `tessel opt --pipeline cpu` both run it.
#include <fmt/format.h>

#include "host_compiler.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/compiler.h"

namespace tessel::cpu {
namespace {

/// The select-layout mode for the compile's --layout.
std::string resolvedLayout(const CompileOptions& options) {
  if (options.layout == "nchw" || options.layout == "nchwc8") return options.layout;
  if (options.layout != "auto")
    throw UserError(fmt::format("--layout {}: expected nchw, nchwc8 or auto", options.layout));
  // Without AVX-512 the NCHWc8 depthwise and 1x1 kernels beat the NCHW ones (MobileNetV2 with
  // --march haswell: 0.92x the time); with it the NCHW kernels are faster.
  return targetHasAvx512(options) ? "nchw" : "auto";
}

}  // namespace

Pipeline passPipeline(const CompileOptions& options) {
  // Layout regions and kernel choice follow the target's vector width (the runtime's own rules).
  PassOptions passOptions;
  const std::string avx512 = targetHasAvx512(options) ? "1" : "0";
  passOptions.values["select-layout.mode"] = resolvedLayout(options);
  passOptions.values["select-layout.avx512"] = avx512;
  passOptions.values["select-kernels.avx512"] = avx512;
  return namedPipeline("cpu", std::move(passOptions));
}

void prepareModel(Model& model, const CompileOptions& options) { passPipeline(options).run(model); }

// `tessel opt --pipeline cpu` runs what `tessel compile` runs without flags.
TESSEL_REGISTER_PIPELINE_OPTIONS(cpu, "cpu", [] { return passPipeline(CompileOptions{}).options; });

}  // namespace tessel::cpu
