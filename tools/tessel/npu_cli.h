// What the NPU commands (sim, disasm) share: recognising a compiled NPU model's path.
#pragma once

#include <string>

#include "common.h"
#include "tessel/targets/npu/model_file.h"

namespace tessel::cli {

/// True when the path names a compiled NPU model (ends in .tnpu).
inline bool isNpuModelPath(const std::string& path) {
  return path.size() > 5 && path.substr(path.size() - 5) == ".tnpu";
}

}  // namespace tessel::cli
