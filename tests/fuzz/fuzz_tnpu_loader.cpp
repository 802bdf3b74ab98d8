// libFuzzer target for the .tnpu loader: any input either loads (and then must serialise and load back to
// the same bytes) or throws UserError; any other exception, crash or sanitizer report is a bug. When the
// first byte is odd the harness repairs the trailing checksum, so mutations reach the section parsers.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/model_file.h"

namespace {

/// Header: magic 8, version 4, hash 8, payload length 8, payload, checksum 8.
void repairChecksum(std::vector<uint8_t>& bytes) {
  if (bytes.size() < 36) return;
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t{bytes[20 + i]} << (8 * i);
  if (length > bytes.size() - 36) return;
  std::string payload(bytes.begin() + 28, bytes.begin() + 28 + static_cast<long>(length));
  uint64_t sum = tessel::hw::fnv1a64(payload);
  bytes.resize(28 + length + 8);
  for (int i = 0; i < 8; ++i) bytes[28 + length + i] = static_cast<uint8_t>(sum >> (8 * i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (!bytes.empty() && (bytes[0] & 1)) {
    bytes[0] = 'T';  // keep the magic intact when the flag bit was used
    repairChecksum(bytes);
  }
  tessel::npu::CompiledNpuModel model;
  try {
    model = tessel::npu::parseNpuModel(bytes, "fuzz.tnpu");
  } catch (const tessel::UserError&) {
    return 0;
  }
  std::vector<uint8_t> again = tessel::npu::serializeNpuModel(model);
  try {
    tessel::npu::serializeNpuModel(tessel::npu::parseNpuModel(again, "reserialised.tnpu"));
  } catch (const tessel::UserError& e) {
    std::fprintf(stderr, "a loaded .tnpu did not load back after serialising: %s\n", e.what());
    std::abort();
  }
  return 0;
}
