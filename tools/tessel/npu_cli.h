// CLI helpers for compiled NPU models (.tnpu): compile --target npu, run, sim and disasm share them.
#pragma once

#include <map>
#include <string>

#include "common.h"
#include "tessel/targets/npu/model_file.h"

namespace tessel::cli {

/// True when the path names a compiled NPU model (ends in .tnpu).
bool isNpuModelPath(const std::string& path);
/// `tessel compile MODEL --target npu --hw CONFIG -o OUT.tnpu`.
void compileNpuModel(const ModelOptions& model, const std::string& hwPath, std::string output);
/// Loads a .tnpu; with a non-empty hwPath refuses a file compiled for another configuration.
npu::CompiledNpuModel loadNpuModel(const std::string& path, const std::string& hwPath);
/// Inputs for a compiled NPU model: given files plus seeded random tensors (the same as for the .onnx).
std::map<std::string, Tensor> npuModelInputs(const npu::CompiledNpuModel& model, const InputOptions& inputs, bool quiet);
/// `tessel run OUT.tnpu`: runs it and writes/prints the outputs like the interpreter path does.
void runNpuModelCli(const std::string& path, const InputOptions& inputs, const std::string& outputDir, bool quiet,
                    const std::string& hwPath = "");

}  // namespace tessel::cli
