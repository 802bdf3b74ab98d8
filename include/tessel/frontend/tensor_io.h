// Reading and writing tensors: numpy .npy files and ONNX TensorProto (.pb) files.
#pragma once

#include <string>

#include "tessel/ir/tensor.h"

namespace onnx {
class TensorProto;
}

namespace tessel {

/// Reads a .npy file (little-endian, C order; every numeric dtype, bool, complex and unicode strings).
/// UserError naming the file on a malformed header, an unsupported dtype or a truncated body.
Tensor readNpy(const std::string& path);
/// Writes a .npy file (bfloat16 as its uint16 bit patterns, ONNX's numpy convention; strings as fixed-width
/// unicode '<U').
void writeNpy(const std::string& path, const Tensor& tensor);

/// Reads a serialised onnx.TensorProto (the backend test suite's input_N.pb / output_N.pb).
Tensor readTensorProtoFile(const std::string& path);
/// Converts a TensorProto to a Tensor; `baseDir` resolves external data. `what` names it in errors.
Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string& baseDir, const std::string& what);
/// Loads .npy or .pb by extension (UserError for anything else).
Tensor readTensorFile(const std::string& path);

}  // namespace tessel
