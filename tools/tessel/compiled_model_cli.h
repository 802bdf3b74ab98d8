// CLI helpers for compiled models (.so): `tessel run x.so` and `tessel bench` share them.
#pragma once

#include <map>
#include <string>

#include "common.h"
#include "tessel/targets/cpu/loader.h"

namespace tessel::cli {

/// True when the path names a compiled model (ends in .so).
bool isCompiledModelPath(const std::string& path);
/// Inputs for a compiled model: the given files plus seeded random tensors (same values as for the .onnx).
std::map<std::string, Tensor> compiledModelInputs(const cpu::CompiledModel& model, const InputOptions& inputs,
                                                  bool quiet);
/// `tessel run OUT.so`: runs it and writes/prints the outputs like the interpreter path does.
void runCompiledModel(const std::string& path, const InputOptions& inputs, const std::string& outputDir, bool quiet,
                      int threads);

}  // namespace tessel::cli
