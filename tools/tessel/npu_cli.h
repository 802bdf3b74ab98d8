// The NPU branch of `tessel compile` (cmd_compile_npu.cpp) and the .tnpu path test sim shares.
#pragma once

#include <string>

#include "common.h"
#include "tessel/targets/npu/model_file.h"

namespace tessel::cli {

/// True when the path names a compiled NPU model (ends in .tnpu).
bool isNpuModelPath(const std::string& path);
/// Overrides of the compiler's NPU schedule (`tessel compile --npu-strategy/--npu-window`).
struct NpuScheduleFlags {
  std::string strategy;  ///< empty: the compiler's ("window")
  int64_t window = -1;   ///< -1: the compiler's choice
};

/// `tessel compile MODEL --target npu --hw CONFIG -o OUT.tnpu`; returns the --json object of the compile.
nlohmann::json compileNpuModel(const ModelOptions& model, const std::string& hwPath, std::string output, bool quiet,
                               const NpuScheduleFlags& flags = {});

}  // namespace tessel::cli
