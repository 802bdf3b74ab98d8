// Pass select-kernels (cpu target): picks each 2-D convolution's CPU kernel from the runtime's kernel list
// (tessel::rt::conv2d_kernels) with the runtime's own rule (rt::select_conv2d_kernel: which kernels pay
// off on which shapes) and records it as node->meta["kernel"]; the cpu target's code generator calls
// that kernel. Option select-kernels.avx512 = 1 targets a CPU with AVX-512 (tessel compile sets it from
// --march); kernel.<node name> = <kernel> overrides the rule for one node.
#include <fmt/format.h>

#include "kernel_rules.h"
#include "tessel/passes/pass.h"
#include "tessel/rt/conv.h"

namespace tessel::cpu {
namespace {

class SelectKernelsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    bool changed = false;
    for (const auto& n : model.graph->nodes()) {
      if (!isConvNode(*n)) continue;
      auto shape = conv2dShape(*n);
      if (!shape) continue;
      const auto* layoutMeta = n->meta.count("layout") ? std::get_if<std::string>(&n->meta.at("layout")) : nullptr;
      const rt::ConvLayout layout = layoutMeta && *layoutMeta == "nchwc8" ? rt::ConvLayout::NCHWc8 : rt::ConvLayout::NCHW;
      const std::string key = "kernel." + n->name();
      // The runtime's own rule (rt::select_conv2d_kernel), for a target with or without AVX-512.
      const bool avx512 = options.get("select-kernels.avx512", "0") == "1";
      const rt::Conv2dKernel* chosen = rt::select_conv2d_kernel(*shape, layout, avx512);
      std::string name = options.get(key, chosen->name);
      const rt::Conv2dKernel* k = rt::find_conv2d_kernel(name.c_str());
      if (!k) throw UserError(fmt::format("pass option {}={}: no such convolution kernel", key, name));
      if (k->layout != layout || !k->applicable(*shape))
        throw UserError(fmt::format("pass option {}={}: the kernel does not apply to {} ({} layout)", key, name,
                                    n->describe(), layout == rt::ConvLayout::NCHWc8 ? "nchwc8" : "nchw"));
      n->meta["kernel"] = name;
      changed = true;
    }
    return changed;
  }
};

}  // namespace

TESSEL_REGISTER_PASS(select_kernels, "select-kernels",
                     "choose each convolution's CPU kernel (meta kernel); option kernel.<node> overrides",
                     [] { return std::make_unique<SelectKernelsPass>(); });

}  // namespace tessel::cpu
