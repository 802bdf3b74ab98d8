// libFuzzer target: the ONNX importer must turn any byte string into a model or a UserError, never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessel/frontend/onnx_importer.h"
#include "tessel/support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    tessel::ImportOptions options;
    options.inference = tessel::InferenceMode::Strict;
    auto model = tessel::importOnnxBytes(bytes, "fuzz.onnx", "/nonexistent-fuzz-dir", options);
    (void)model;
  } catch (const tessel::UserError&) {
    // Expected for malformed input.
  }
  return 0;  // InternalError and anything else propagate and are reported as a crash.
}
