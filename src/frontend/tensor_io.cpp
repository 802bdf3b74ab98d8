// .npy and TensorProto readers/writers with careful validation of sizes and types.
#include "tessel/frontend/tensor_io.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <onnx/onnx_pb.h>
#include <regex>
#include <sstream>

namespace tessel {
namespace {

std::string readFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct NpyDtype {
  const char* descr;
  DType dtype;
};
constexpr NpyDtype kNpyTypes[] = {
    {"<f4", DType::Float32}, {"<f8", DType::Float64}, {"<f2", DType::Float16}, {"|i1", DType::Int8},
    {"<i2", DType::Int16},   {"<i4", DType::Int32},   {"<i8", DType::Int64},   {"|u1", DType::UInt8},
    {"<u2", DType::UInt16},  {"<u4", DType::UInt32},  {"<u8", DType::UInt64},  {"|b1", DType::Bool},
    {"<c8", DType::Complex64}, {"<c16", DType::Complex128}, {"|i1", DType::Int8}, {"<b1", DType::Bool},
};

std::u32string utf8ToUtf32(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int len;
    if (c < 0x80) { cp = c; len = 1; }
    else if ((c >> 5) == 6) { cp = c & 0x1f; len = 2; }
    else if ((c >> 4) == 14) { cp = c & 0x0f; len = 3; }
    else { cp = c & 0x07; len = 4; }
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3f);
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string utf32ToUtf8(const char32_t* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && p[i]; ++i) {
    char32_t c = p[i];
    if (c < 0x80) out += static_cast<char>(c);
    else if (c < 0x800) { out += static_cast<char>(0xc0 | (c >> 6)); out += static_cast<char>(0x80 | (c & 0x3f)); }
    else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12)); out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18)); out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f)); out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

}  // namespace

Tensor readNpy(const std::string& path) { return parseNpy(readFileBytes(path), path); }

Tensor parseNpy(std::string_view bytes, const std::string& path) {
  auto bad = [&](const std::string& why) -> UserError { return UserError(fmt::format("'{}' is not a valid .npy file: {}", path, why)); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) throw bad("missing the \\x93NUMPY magic");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw bad("truncated header");
    headerLen = 0;
    for (int i = 0; i < 4; ++i) headerLen |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + static_cast<size_t>(i)])) << (8 * i);
    headerStart = 12;
  } else {
    throw bad(fmt::format("unsupported format version {}", major));
  }
  if (headerStart + headerLen > bytes.size()) throw bad("truncated header");
  std::string header(bytes.substr(headerStart, headerLen));
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')"))) throw bad("no 'descr' in header");
  std::string descr = m[1];
  if (std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*True)"))) throw bad("Fortran-order arrays are not supported; save with C order");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))"))) throw bad("no 'shape' in header");
  Shape shape;
  std::string dims = m[1];
  std::regex num(R"(\d+)");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    if (it->str().size() > 15) throw bad(fmt::format("dimension {} is too large", it->str()));
    shape.push_back(std::stoll(it->str()));
  }
  const char* body = bytes.data() + headerStart + headerLen;
  size_t bodySize = bytes.size() - headerStart - headerLen;
  if (descr.size() > 2 && (descr[1] == 'U') && (descr[0] == '<' || descr[0] == '|')) {
    std::string digits = descr.substr(2);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw bad(fmt::format("unsupported dtype '{}'", descr));
    size_t width = std::stoul(digits);
    double need = static_cast<double>(width) * 4;
    for (int64_t d : shape) need *= static_cast<double>(d);
    if (static_cast<double>(bodySize) < need)  // checked before allocating: the header may claim any shape
      throw bad(fmt::format("body has {} bytes, expected {}", bodySize, need));
    Tensor t(DType::String, shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<std::string>()[i] = utf32ToUtf8(reinterpret_cast<const char32_t*>(body + static_cast<size_t>(i) * width * 4), width);
    return t;
  }
  DType dtype = DType::Undefined;
  for (const auto& n : kNpyTypes)
    if (descr == n.descr) dtype = n.dtype;
  if (descr == "<f4" || descr == "=f4") dtype = DType::Float32;
  if (dtype == DType::Undefined) throw bad(fmt::format("unsupported dtype '{}'", descr));
  double need = static_cast<double>(dtypeSize(dtype));
  for (int64_t d : shape) need *= static_cast<double>(d);
  if (static_cast<double>(bodySize) < need)  // checked before allocating: the header may claim any shape
    throw bad(fmt::format("truncated data: {} bytes, expected {} for {}[{}]", bodySize, need, dtypeName(dtype), shapeToString(shape)));
  Tensor t(dtype, shape);
  std::memcpy(t.rawData(), body, t.nbytes());
  return t;
}

void writeNpy(const std::string& path, const Tensor& tensor) {
  std::string bytes = encodeNpy(tensor);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw UserError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw UserError(fmt::format("error writing '{}'", path));
}

std::string encodeNpy(const Tensor& tensorIn) {
  Tensor tensor = tensorIn;
  if (tensorIn.dtype() == DType::BFloat16) {  // numpy has no bfloat16: store the bits as uint16 (ONNX's convention)
    tensor = Tensor(DType::UInt16, tensorIn.shape());
    std::memcpy(tensor.rawData(), tensorIn.rawData(), tensorIn.nbytes());
  }
  std::string descr;
  size_t width = 0;
  if (tensor.dtype() == DType::String) {
    for (int64_t i = 0; i < tensor.numel(); ++i) width = std::max(width, utf8ToUtf32(tensor.data<std::string>()[i]).size());
    width = std::max<size_t>(width, 1);
    descr = fmt::format("<U{}", width);
  } else {
    descr = std::string(dtypeNumpyDescr(tensor.dtype()));
  }
  std::string shape = "(";
  for (size_t i = 0; i < tensor.rank(); ++i) shape += std::to_string(tensor.shape()[i]) + (tensor.rank() == 1 ? "," : (i + 1 < tensor.rank() ? ", " : ""));
  shape += ")";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  out += header;
  if (tensor.dtype() == DType::String) {
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      std::u32string s = utf8ToUtf32(tensor.data<std::string>()[i]);
      s.resize(width, U'\0');
      out.append(reinterpret_cast<const char*>(s.data()), width * 4);
    }
  } else {
    out.append(static_cast<const char*>(tensor.rawData()), tensor.nbytes());
  }
  return out;
}

/// Elements a TensorProto carries inline for its data type (-1 when raw_data is not a whole number of them).
int64_t inlineElements(const onnx::TensorProto& p, DType dtype) {
  if (dtype == DType::String) return p.string_data_size();
  if (p.has_raw_data()) {
    size_t size = dtypeSize(dtype);
    return p.raw_data().size() % size == 0 ? static_cast<int64_t>(p.raw_data().size() / size) : -1;
  }
  switch (dtype) {
    case DType::Float32: return p.float_data_size();
    case DType::Complex64: return p.float_data_size() / 2;
    case DType::Float64: return p.double_data_size();
    case DType::Complex128: return p.double_data_size() / 2;
    case DType::Int64: return p.int64_data_size();
    case DType::UInt32:
    case DType::UInt64: return p.uint64_data_size();
    default: return p.int32_data_size();
  }
}

Tensor tensorFromProto(const onnx::TensorProto& p, const std::string& baseDir, const std::string& what) {
  auto dtype = static_cast<DType>(p.data_type());
  if (p.data_type() <= 0 || p.data_type() > 16)
    throw UserError(fmt::format("{}: unsupported tensor data type {}", what, p.data_type()));
  Shape shape(p.dims().begin(), p.dims().end());
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw UserError(fmt::format("{}: negative dimension {} in shape", what, d));
    if (d != 0 && n > (int64_t{1} << 50) / d)
      throw UserError(fmt::format("{}: shape [{}] has more elements than can be stored", what, fmt::join(shape, ",")));
    n *= d;
  }
  // Check the data against the shape before allocating: a corrupt header must not ask for terabytes.
  if (p.data_location() != onnx::TensorProto::EXTERNAL) {
    int64_t have = inlineElements(p, dtype);
    if (have != n) {
      if (p.has_raw_data() && dtype != DType::String)
        throw UserError(fmt::format("{}: raw data has {} bytes but its shape [{}] of {} needs {}", what,
                                    p.raw_data().size(), fmt::join(shape, ","), dtypeName(dtype),
                                    n * static_cast<int64_t>(dtypeSize(dtype))));
      throw UserError(fmt::format("{}: has {} value(s) but its shape [{}] needs {}", what, have, fmt::join(shape, ","), n));
    }
  } else if (dtype == DType::String) {
    throw UserError(fmt::format("{}: string tensors cannot use external data", what));
  }
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    }
    if (location.empty()) throw UserError(fmt::format("{}: external data without a location", what));
    std::filesystem::path file = std::filesystem::path(baseDir) / location;
    const int64_t need = n * static_cast<int64_t>(dtypeSize(dtype));
    std::ifstream in(file, std::ios::binary);
    if (!in) throw UserError(fmt::format("{}: cannot open external data file '{}'", what, file.string()));
    in.seekg(0, std::ios::end);
    auto fileSize = static_cast<int64_t>(in.tellg());
    if (length >= 0 && length != need) throw UserError(fmt::format("{}: external data length {} != {} bytes needed", what, length, need));
    if (offset < 0 || offset + need > fileSize)
      throw UserError(fmt::format("{}: external data range [{}, {}) is outside '{}' ({} bytes)", what, offset, offset + need, file.string(), fileSize));
    Tensor t(dtype, shape);
    in.seekg(offset);
    in.read(static_cast<char*>(t.rawData()), need);
    return t;
  }
  Tensor t(dtype, shape);
  if (dtype == DType::String) {
    for (int64_t i = 0; i < n; ++i) t.data<std::string>()[i] = p.string_data(static_cast<int>(i));
    return t;
  }
  if (p.has_raw_data()) {
    std::memcpy(t.rawData(), p.raw_data().data(), t.nbytes());
    return t;
  }
  switch (dtype) {
    case DType::Float32:
      std::copy(p.float_data().begin(), p.float_data().end(), t.data<float>());
      break;
    case DType::Complex64:
      std::copy(p.float_data().begin(), p.float_data().end(), reinterpret_cast<float*>(t.rawData()));
      break;
    case DType::Float64:
      std::copy(p.double_data().begin(), p.double_data().end(), t.data<double>());
      break;
    case DType::Complex128:
      std::copy(p.double_data().begin(), p.double_data().end(), reinterpret_cast<double*>(t.rawData()));
      break;
    case DType::Int64:
      std::copy(p.int64_data().begin(), p.int64_data().end(), t.data<int64_t>());
      break;
    case DType::UInt32:
    case DType::UInt64:
      for (int64_t i = 0; i < n; ++i) {
        uint64_t v = p.uint64_data(static_cast<int>(i));
        if (dtype == DType::UInt32) t.data<uint32_t>()[i] = static_cast<uint32_t>(v);
        else t.data<uint64_t>()[i] = v;
      }
      break;
    default:  // int32_data carries int8/16/32, uint8/16, bool, float16 and bfloat16 bits
      dispatchNumeric(dtype, what, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* d = t.data<T>();
        for (int64_t i = 0; i < n; ++i) {
          int32_t v = p.int32_data(static_cast<int>(i));
          if constexpr (std::is_same_v<T, float16>) d[i] = float16::fromBits(static_cast<uint16_t>(v));
          else if constexpr (std::is_same_v<T, bfloat16>) d[i] = bfloat16::fromBits(static_cast<uint16_t>(v));
          else d[i] = static_cast<T>(v);
        }
      });
  }
  return t;
}

Tensor readTensorProtoFile(const std::string& path) {
  std::string bytes = readFileBytes(path);
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes)) throw UserError(fmt::format("'{}' is not a valid ONNX TensorProto file", path));
  return tensorFromProto(proto, std::filesystem::path(path).parent_path().string(), fmt::format("tensor file '{}'", path));
}

Tensor readTensorFile(const std::string& path, const std::string& arrayName) {
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".npy") return readNpy(path);
  if (ext == ".pb") return readTensorProtoFile(path);
  if (ext == ".npz") {
    std::vector<NamedTensor> arrays = readNpz(path);
    std::vector<std::string> names;
    for (const auto& [name, t] : arrays) {
      if (name == arrayName) return t;
      names.push_back("'" + name + "'");
    }
    if (arrays.size() == 1) return arrays.front().second;
    throw UserError(fmt::format("'{}' holds {} arrays ({}) and none is named '{}'", path, arrays.size(),
                                fmt::join(names, ", "), arrayName));
  }
  throw UserError(fmt::format("'{}': expected a .npy, .npz or .pb (ONNX TensorProto) tensor file", path));
}

}  // namespace tessel
