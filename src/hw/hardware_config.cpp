// Loading and validating the hardware configuration file (devices, NPU parameters, overrides) and its hash.
#include "tessel/hw/hardware_config.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "hw/config_reader.h"
#include "tessel/support/error.h"

namespace tessel::hw {

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

void readUnitTiming(const JsonReader& units, const char* unitName, NpuUnitTiming& out) {
  JsonReader unit = units.object(unitName);
  out.setupCycles = unit.u32("setup_cycles", 0, 1u << 20);
  out.latencyCycles = unit.u32("latency_cycles", 0, 1u << 20);
  out.queueDepth = unit.u32("queue_depth", 1, 1u << 16);
  unit.rejectUnknownKeys();
}

// Largest buffer the 20-bit SRAM word address of the ISA can reach (docs/npu.md, "Encoding").
constexpr uint64_t kMaxBufferBytes = (uint64_t{1} << 20) * 4;

void readNpu(const JsonReader& dev, NpuConfig& npu) {
  npu.dim = dev.u32("array_dim", 1, 256);
  npu.clockMhz = dev.positiveNumber("clock_mhz");
  const uint64_t tileBytes = uint64_t{npu.dim} * npu.dim * 4;
  JsonReader buffers = dev.object("buffers");
  const char* keys[4] = {"input_bytes", "weight_bytes", "accumulator_bytes", "output_bytes"};
  for (size_t b = 0; b < 4; ++b) {
    uint64_t bytes = buffers.u64(keys[b], 1, kMaxBufferBytes);
    if (bytes % 4 != 0 || bytes < tileBytes) {
      buffers.fail(keys[b], fmt::format("expected a multiple of 4 bytes holding at least one {}x{} float32 tile "
                                        "({} bytes), got {}", npu.dim, npu.dim, tileBytes, bytes));
    }
    npu.bufferBytes[b] = bytes;
  }
  buffers.rejectUnknownKeys();
  JsonReader dma = dev.object("dma");
  npu.loadBytesPerCycle = dma.u32("load_bytes_per_cycle", 1, 4096);
  npu.storeBytesPerCycle = dma.u32("store_bytes_per_cycle", 1, 4096);
  npu.dmaRowCycles = dma.u32("row_cycles", 0, 4096);
  dma.rejectUnknownKeys();
  JsonReader vec = dev.object("vector");
  npu.vectorLanes = vec.u32("lanes", 1, 4096);
  npu.vectorCyclesPerVector = vec.u32("cycles_per_vector", 1, 1024);
  npu.vectorCyclesPerVectorComplex = vec.u32("cycles_per_vector_complex", 1, 1024);
  vec.rejectUnknownKeys();
  JsonReader units = dev.object("units");
  readUnitTiming(units, "load", npu.load);
  readUnitTiming(units, "matrix", npu.matrix);
  readUnitTiming(units, "vector", npu.vector);
  readUnitTiming(units, "store", npu.store);
  units.rejectUnknownKeys();
}

Device readDevice(const JsonReader& dev) {
  Device d;
  d.name = dev.nonEmptyString("name");
  std::string kind = dev.oneOf("kind", {"cpu", "npu"});
  d.kind = kind == "cpu" ? DeviceKind::Cpu : DeviceKind::Npu;
  dev.optionalString("description");
  if (dev.has("ops") && dev.raw("ops").is_string()) {
    dev.oneOf("ops", {"all"});
    d.supportsAllOps = true;
  } else {
    JsonReader ops = dev.object("ops");
    for (const std::string& op : ops.keys()) {
      const auto& known = knownOperatorNames();
      if (std::find(known.begin(), known.end(), op) == known.end()) {
        ops.fail(op, "unknown operator '" + op + "' (expected an ONNX operator name Tessel knows, e.g. Conv, Gemm, Relu)");
      }
      d.ops[op] = readOpConstraints(ops.object(op));
    }
  }
  if (d.kind == DeviceKind::Npu) {
    readNpu(dev, d.npu);
    if (dev.has("data_movement")) d.dataMovement = dev.boolean("data_movement");
  }
  dev.rejectUnknownKeys();
  return d;
}

}  // namespace

HardwareConfig HardwareConfig::fromJson(const nlohmann::json& doc, const std::string& origin) {
  JsonReader root(doc, origin, "");
  HardwareConfig cfg;
  cfg.name_ = root.nonEmptyString("name");
  root.optionalString("description");
  JsonReader devices = root.array("devices");
  if (devices.size() == 0) devices.failSelf("expected at least one device");
  bool haveCpu = false;
  for (size_t i = 0; i < devices.size(); ++i) {
    Device d = readDevice(devices.element(i));
    for (const Device& other : cfg.devices_) {
      if (other.name == d.name) devices.element(i).fail("name", "duplicate device name '" + d.name + "'");
    }
    haveCpu |= d.kind == DeviceKind::Cpu;
    cfg.devices_.push_back(std::move(d));
  }
  if (!haveCpu) devices.failSelf("expected a device of kind \"cpu\" (the fallback for unsupported operators)");
  if (root.has("overrides")) {
    JsonReader overrides = root.object("overrides");
    for (const std::string& node : overrides.keys()) {
      std::string target = overrides.nonEmptyString(node);
      bool known = std::any_of(cfg.devices_.begin(), cfg.devices_.end(),
                               [&](const Device& d) { return d.name == target; });
      if (!known) overrides.fail(node, "expected the name of a device of this file, got '" + target + "'");
      cfg.overrides_[node] = target;
    }
  }
  root.rejectUnknownKeys();
  cfg.canonical_ = doc.dump();
  cfg.hash_ = fnv1a64(cfg.canonical_);
  return cfg;
}

HardwareConfig HardwareConfig::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(path + ": cannot open hardware configuration file");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError(path + ": not valid JSON: " + e.what());
  }
  return fromJson(doc, path);
}

const Device& HardwareConfig::device(const std::string& name) const {
  for (const Device& d : devices_) {
    if (d.name == name) return d;
  }
  std::string names;
  for (const Device& d : devices_) names += (names.empty() ? "" : ", ") + d.name;
  throw UserError("hardware configuration '" + name_ + "' has no device '" + name + "' (devices: " + names + ")");
}

const Device* HardwareConfig::firstNpu() const {
  for (const Device& d : devices_) {
    if (d.kind == DeviceKind::Npu) return &d;
  }
  return nullptr;
}

std::optional<std::string> HardwareConfig::overrideFor(const std::string& nodeName) const {
  auto it = overrides_.find(nodeName);
  if (it == overrides_.end()) return std::nullopt;
  return it->second;
}

std::string HardwareConfig::hashHex() const { return fmt::format("{:016x}", hash_); }

SupportResult HardwareConfig::supports(const std::string& deviceName, const OpQuery& query) const {
  const Device& dev = device(deviceName);
  if (!query.nodeName.empty()) {
    if (auto pinned = overrideFor(query.nodeName); pinned && *pinned != deviceName) {
      return {false, "node '" + query.nodeName + "' is pinned to device '" + *pinned + "' by overrides"};
    }
  }
  if (dev.supportsAllOps) return {true, ""};
  auto it = dev.ops.find(query.opType);
  if (it == dev.ops.end()) {
    if (dev.kind == DeviceKind::Npu && dev.dataMovement && isDataMovementOp(query.opType)) return {true, ""};
    return {false, "device '" + deviceName + "' does not list operator " + query.opType};
  }
  std::string why = checkOpConstraints(it->second, query);
  if (!why.empty()) return {false, query.opType + " on device '" + deviceName + "': " + why};
  return {true, ""};
}

}  // namespace tessel::hw
