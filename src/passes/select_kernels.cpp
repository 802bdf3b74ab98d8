// Pass select-kernels: picks each 2-D convolution's CPU kernel from the runtime's kernel list
// (tessel::rt::conv2d_kernels) with the runtime's own rule (rt::select_conv2d_kernel: which kernels pay
// off on which shapes) and records it as node->meta["kernel"]; the cpu target's code generator calls
// that kernel. Option select-kernels.avx512 = 1 targets a CPU with AVX-512 (tessel compile sets it from
// --march); kernel.<node name> = <kernel> overrides the rule for one node.
#include <fmt/format.h>

#include "rewrite.h"
#include "tessel/passes/pass.h"
#include "tessel/rt/conv.h"

namespace tessel {
namespace {

std::optional<rt::Conv2dShape> convShape(const Node& n) {
  const Value* x = n.input(0);
  const Value* w = n.input(1);
  const Value* y = n.output(0);
  if (!passes::isStaticF32(x) || !w || !w->type.isStatic() || !passes::isStaticF32(y) || x->type.rank() != 4)
    return std::nullopt;
  Shape xs = x->type.staticShape(), ws = w->type.staticShape(), ys = y->type.staticShape();
  rt::Conv2dShape s;
  s.batch = xs[0], s.in_channels = xs[1], s.in_h = xs[2], s.in_w = xs[3];
  s.out_channels = ws[0], s.kernel_h = ws[2], s.kernel_w = ws[3];
  s.groups = n.attrInt("group");
  if (n.hasAttr("strides")) s.stride_h = n.attrInts("strides")[0], s.stride_w = n.attrInts("strides")[1];
  if (n.hasAttr("dilations")) s.dilation_h = n.attrInts("dilations")[0], s.dilation_w = n.attrInts("dilations")[1];
  const std::string autoPad = n.attrString("auto_pad");
  if (autoPad == "NOTSET" && n.hasAttr("pads")) {
    auto p = n.attrInts("pads");
    s.pad_top = p[0], s.pad_left = p[1], s.pad_bottom = p[2], s.pad_right = p[3];
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    // Total padding that yields the inferred output size; the odd unit goes last for SAME_UPPER.
    const int64_t th = std::max<int64_t>(0, (ys[2] - 1) * s.stride_h + s.dilation_h * (s.kernel_h - 1) + 1 - s.in_h);
    const int64_t tw = std::max<int64_t>(0, (ys[3] - 1) * s.stride_w + s.dilation_w * (s.kernel_w - 1) + 1 - s.in_w);
    const bool upper = autoPad == "SAME_UPPER";
    s.pad_top = upper ? th / 2 : th - th / 2, s.pad_bottom = th - s.pad_top;
    s.pad_left = upper ? tw / 2 : tw - tw / 2, s.pad_right = tw - s.pad_left;
  }
  return s;
}

class SelectKernelsPass : public Pass {
 public:
  bool run(Model& model, const PassOptions& options) override {
    bool changed = false;
    for (const auto& n : model.graph->nodes()) {
      const bool conv = (n->opType() == "FusedConv" && n->domain() == "tessel") || (n->opType() == "Conv" && n->domain().empty());
      if (!conv) continue;
      auto shape = convShape(*n);
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

}  // namespace tessel
