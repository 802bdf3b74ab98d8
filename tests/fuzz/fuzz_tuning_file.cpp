// libFuzzer target for tuning files (tessel compile --tuning-file): any text either yields kernel choices that all
// name convolution kernels of the runtime in the key's layout (NCHWc8 for "nchwc8 <geometry>", else NCHW), or is a
// UserError; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessel/rt/conv.h"
#include "tessel/support/error.h"
#include "tessel/targets/cpu/tuner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  tessel::cpu::TuningChoices choices;
  try {
    // The corpus files carry this model key, so mutations get past the model check to the choices.
    choices = tessel::cpu::parseTuningFile(text, "fuzz.json", "00112233445566ff");
  } catch (const tessel::UserError&) {
    return 0;
  }
  for (const auto& [region, layout] : choices.layouts)
    if (layout != "nchw" && layout != "nchwc8") {
      std::fprintf(stderr, "accepted layout '%s' for region '%s'\n", layout.c_str(), region.c_str());
      std::abort();
    }
  for (const auto& [geometry, kernel] : choices.kernels) {
    const tessel::rt::Conv2dKernel* k = tessel::rt::find_conv2d_kernel(kernel.c_str());
    const bool blocked = geometry.rfind(tessel::cpu::kBlockedKeyPrefix, 0) == 0;
    const auto layout = blocked ? tessel::rt::ConvLayout::NCHWc8 : tessel::rt::ConvLayout::NCHW;
    if (k == nullptr || k->layout != layout) {
      std::fprintf(stderr, "accepted kernel '%s' for '%s', which is not an %s kernel\n", kernel.c_str(), geometry.c_str(),
                   blocked ? "NCHWc8" : "NCHW");
      std::abort();
    }
  }
  return 0;
}
