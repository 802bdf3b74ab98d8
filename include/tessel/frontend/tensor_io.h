// Reading and writing tensors: numpy .npy and .npz files and ONNX TensorProto (.pb) files.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessel/ir/tensor.h"

namespace onnx {
class TensorProto;
}

namespace tessel {

/// Reads a .npy file (little-endian, C order; every numeric dtype, bool, complex and unicode strings).
/// UserError naming the file on a malformed header, an unsupported dtype or a truncated body.
Tensor readNpy(const std::string& path);
/// Parses the bytes of a .npy file; `origin` names it in errors.
Tensor parseNpy(std::string_view bytes, const std::string& origin);
/// The bytes of a .npy file holding `tensor` (see writeNpy).
std::string encodeNpy(const Tensor& tensor);
/// Writes a .npy file (bfloat16 as its uint16 bit patterns, ONNX's numpy convention; strings as fixed-width
/// unicode '<U').
void writeNpy(const std::string& path, const Tensor& tensor);

/// Reads a serialised onnx.TensorProto (the backend test suite's input_N.pb / output_N.pb).
Tensor readTensorProtoFile(const std::string& path);
/// Converts a TensorProto to a Tensor; `baseDir` resolves external data. `what` names it in errors.
Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string& baseDir, const std::string& what);
/// One array of a .npz archive: its name (the member name without ".npy") and contents.
using NamedTensor = std::pair<std::string, Tensor>;
/// Reads a numpy .npz archive (np.savez: stored members, np.savez_compressed: deflated; zip64 too), arrays
/// in archive order. UserError naming the file and member on anything malformed.
std::vector<NamedTensor> readNpz(const std::string& path);
/// Parses the bytes of a .npz archive; `origin` names it in errors.
std::vector<NamedTensor> parseNpz(std::string_view bytes, const std::string& origin);
/// Writes a .npz archive (stored members, like np.savez) that numpy.load reads.
void writeNpz(const std::string& path, const std::vector<NamedTensor>& arrays);

/// Loads .npy, .pb or .npz by extension (UserError for anything else). From a .npz it takes the array named
/// `arrayName`, or the only array when there is just one.
Tensor readTensorFile(const std::string& path, const std::string& arrayName = "");

}  // namespace tessel
