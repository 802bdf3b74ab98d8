// libFuzzer target for hardware configuration files: any text either loads (and then its canonical form must load
// back to the same hash, and every device must answer supports() queries) or is a UserError; any other
// exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessel/hw/hardware_config.h"
#include "tessel/support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;  // HardwareConfig::load reports this as "not valid JSON"
  tessel::hw::HardwareConfig config;
  try {
    config = tessel::hw::HardwareConfig::fromJson(doc, "fuzz.json");
  } catch (const tessel::UserError&) {
    return 0;
  }
  try {
    auto again = tessel::hw::HardwareConfig::fromJson(nlohmann::json::parse(config.canonicalJson()), "canonical.json");
    if (again.hash() != config.hash() || again.canonicalJson() != config.canonicalJson()) {
      std::fprintf(stderr, "canonical form changed on reload:\n%s\n%s\n", config.canonicalJson().c_str(),
                   again.canonicalJson().c_str());
      std::abort();
    }
  } catch (const tessel::UserError& e) {
    std::fprintf(stderr, "the canonical form of a valid configuration does not load: %s\n", e.what());
    std::abort();
  }
  tessel::hw::OpQuery conv{"Conv", "f32", "NCHW", {3, 3}, {1, 1}, {1, 1}, 1, 16, 32, "conv1"};
  tessel::hw::OpQuery relu{"Relu", "f32", "", {}, {}, {}, 1, 0, 0, "relu1"};
  for (const auto& device : config.devices()) {
    (void)config.supports(device.name, conv);
    (void)config.supports(device.name, relu);
  }
  return 0;
}
