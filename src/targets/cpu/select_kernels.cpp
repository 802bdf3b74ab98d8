// Pass select-kernels (cpu target): the one place a 2-D convolution's CPU kernel is chosen, recorded as
// node->meta["kernel"] for the code generator. The choice is, by precedence: option kernel.<node name> =
// <kernel> (a user's override); option select-kernels.tuned.<key> = <kernel> (the measured choice of tessel
// compile --tune or a tuning file, keyed by tuner.h's convTuningKey: layout and geometry); else the
// runtime's own rule (rt::select_conv2d_kernel over tessel::rt::conv2d_kernels: which kernels pay off on
// which shapes), for a CPU with AVX-512 when select-kernels.avx512 = 1 (tessel compile sets it from --march).
#include <fmt/format.h>

#include "kernel_rules.h"
#include "tessel/passes/pass.h"
#include "tessel/rt/conv.h"
#include "tessel/targets/cpu/tuner.h"

namespace tessel::cpu {
namespace {

/// The kernel name for one conv, checked to exist and apply (UserError naming the option that chose it).
std::string chooseKernel(const Node& n, const rt::Conv2dShape& shape, rt::ConvLayout layout, const PassOptions& options) {
  const bool avx512 = options.get("select-kernels.avx512", "0") == "1";
  std::string name = rt::select_conv2d_kernel(shape, layout, avx512)->name;
  std::string source = "the runtime's rule";
  if (auto tuned = options.values.find(kTunedKernelOption + convTuningKey(shape, layout));
      tuned != options.values.end())
    name = tuned->second, source = "tuning file";
  if (auto user = options.values.find("kernel." + n.name()); user != options.values.end())
    name = user->second, source = "pass option " + user->first;
  const rt::Conv2dKernel* k = rt::find_conv2d_kernel(name.c_str());
  if (!k) throw UserError(fmt::format("{}: no convolution kernel '{}'", source, name));
  if (k->layout != layout || !k->applicable(shape))
    throw UserError(fmt::format("{}: kernel '{}' does not apply to {} ({} layout)", source, name, n.describe(),
                                layout == rt::ConvLayout::NCHWc8 ? "nchwc8" : "nchw"));
  return name;
}

class SelectKernelsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    bool changed = false;
    for (const auto& n : model.graph->nodes()) {
      if (!isConvNode(*n)) continue;
      auto shape = conv2dShape(*n);
      if (!shape) continue;
      const rt::ConvLayout layout = runsBlocked(*n) ? rt::ConvLayout::NCHWc8 : rt::ConvLayout::NCHW;
      n->meta["kernel"] = chooseKernel(*n, *shape, layout, options);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(select_kernels, "select-kernels",
                     "choose each convolution's CPU kernel (meta kernel); options kernel.<node>, select-kernels.tuned.<geometry>",
                     [] { return std::make_unique<SelectKernelsPass>(); });

}  // namespace tessel::cpu
