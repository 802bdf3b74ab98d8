// libFuzzer target for .npz archives (tessel run/compare --input FILE.npz): any bytes either parse (and the arrays
// then write and read back identically) or are a UserError; any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "tessel/frontend/tensor_io.h"
#include "tessel/support/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<tessel::NamedTensor> arrays;
  try {
    arrays = tessel::parseNpz(bytes, "fuzz.npz");
  } catch (const tessel::UserError&) {
    return 0;
  }
  // Numeric arrays must survive a round trip byte for byte (strings are re-encoded through UTF-8, which
  // does not keep code points that are not characters, so they are left out of this check).
  for (const auto& [name, t] : arrays)
    if (t.dtype() == tessel::DType::String) return 0;
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("fuzz-npz-" + std::to_string(getpid()) + ".npz")).string();
  try {
    tessel::writeNpz(path, arrays);
    std::vector<tessel::NamedTensor> again = tessel::readNpz(path);
    bool same = again.size() == arrays.size();
    for (size_t i = 0; same && i < arrays.size(); ++i)
      same = again[i].first == arrays[i].first && again[i].second.identical(arrays[i].second);
    if (!same) {
      std::fprintf(stderr, "a parsed .npz did not round-trip\n");
      std::abort();
    }
  } catch (const tessel::UserError& e) {
    std::fprintf(stderr, "a parsed .npz did not write and read back: %s\n", e.what());
    std::abort();
  }
  return 0;
}
