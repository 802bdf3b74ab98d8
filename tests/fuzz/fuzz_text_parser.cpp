// libFuzzer target for the .tir parser: any input either parses (and then must re-print and re-parse to the
// same text) or throws UserError; any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tessel/ir/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first 512 bytes after a 0xff byte act as side-file data, so @side references get exercised too.
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view side;
  if (size_t cut = input.find('\xff'); cut != std::string_view::npos) {
    side = input.substr(cut + 1);
    input = input.substr(0, cut);
  }
  std::unique_ptr<tessel::Model> model;
  try {
    model = tessel::parseModelText(input, "fuzz.tir", side);
  } catch (const tessel::UserError&) {
    return 0;
  }
  // A parsed model must print, and its printed form must parse back to the same text.
  std::string text = tessel::printModelText(*model);
  try {
    std::string again = tessel::printModelText(*tessel::parseModelText(text, "reprint.tir"));
    if (again != text) {
      std::fprintf(stderr, "round trip differs:\n%s\n---\n%s\n", text.c_str(), again.c_str());
      std::abort();
    }
  } catch (const tessel::UserError& e) {
    std::fprintf(stderr, "printed text does not parse: %s\n%s\n", e.what(), text.c_str());
    std::abort();
  }
  return 0;
}
