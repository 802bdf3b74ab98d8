// The hardware configuration file: devices of a system (cpu, npus), their machine parameters and the
// operators each supports with their data attributes; validated on load, hashed for compiled files.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessel::hw {

/// Timing parameters of one NPU unit (see docs/npu.md, "Timing model").
struct NpuUnitTiming {
  uint32_t setupCycles = 0;    ///< fixed cycles added to every instruction's occupancy
  uint32_t latencyCycles = 0;  ///< extra cycles between the end of occupancy and the results being visible
  uint32_t queueDepth = 1;     ///< instructions the unit's in-order queue holds
};

/// Machine parameters of one virtual NPU. Plain values: the simulator needs nothing else.
struct NpuConfig {
  uint32_t dim = 16;        ///< the matrix unit is a dim x dim array (dim*dim MACs per cycle)
  double clockMhz = 1000;   ///< for reporting times only; the model counts cycles
  /// Capacities in bytes of the four on-chip buffers, indexed like npu::Buffer
  /// (input, weight, accumulator, output). Every buffer holds float32 words.
  std::array<uint64_t, 4> bufferBytes{32768, 262144, 131072, 32768};
  NpuUnitTiming load{40, 10, 16}, matrix{20, 0, 16}, vector{10, 4, 16}, store{40, 10, 16};
  uint32_t loadBytesPerCycle = 16;   ///< DMA bandwidth DRAM -> SRAM
  uint32_t storeBytesPerCycle = 16;  ///< DMA bandwidth SRAM -> DRAM
  uint32_t dmaRowCycles = 1;         ///< extra cycles per contiguous DRAM burst (row) of a transfer
  uint32_t vectorLanes = 16;         ///< elements the vector unit processes per cycle
  uint32_t vectorCyclesPerVector = 1;        ///< cycles per lanes-wide vector, simple ops
  uint32_t vectorCyclesPerVectorComplex = 4; ///< cycles per vector for sigmoid/tanh/exp/div

  /// Capacity in float32 words of a buffer (index as npu::Buffer).
  uint64_t bufferWords(size_t buffer) const { return bufferBytes.at(buffer) / 4; }
};

/// A value constraint of an operator attribute: either "any" or a list of allowed values.
struct AllowedValues {
  bool any = true;
  std::vector<int64_t> values;
  bool allows(int64_t v) const;
  std::string describe() const;
};

/// Allowed group values of a convolution: "any", or a list of integers and/or "depthwise".
struct AllowedGroups {
  bool any = true;
  bool depthwise = false;
  std::vector<int64_t> values;
  std::string describe() const;
};

/// The data attributes a device accepts for one operator type.
struct OpConstraints {
  std::vector<std::string> elementTypes;  ///< empty = any
  std::vector<std::string> layouts;       ///< empty = any
  AllowedValues kernelSizes, strides, dilations;
  AllowedGroups groups;
  std::optional<int64_t> maxInChannels, maxOutChannels;
};

/// What the partitioner asks about one node. Plain values, so hw does not depend on the IR.
/// Empty vectors / zero values mean "not applicable to this op".
struct OpQuery {
  std::string opType;        ///< ONNX operator name, e.g. "Conv"
  std::string elementType;   ///< dtype name as in support/dtype.h, e.g. "f32"
  std::string layout;        ///< e.g. "NCHW"; empty when not applicable
  std::vector<int64_t> kernelShape, strides, dilations;
  int64_t group = 1;
  int64_t inChannels = 0, outChannels = 0;
  std::string nodeName;      ///< for per-node overrides
};

/// Answer of HardwareConfig::supports: reason is set when supported is false.
struct SupportResult {
  bool supported = false;
  std::string reason;
};

enum class DeviceKind { Cpu, Npu };

/// One device of the system.
struct Device {
  std::string name;
  DeviceKind kind = DeviceKind::Cpu;
  bool supportsAllOps = false;               ///< "ops": "all"
  std::map<std::string, OpConstraints> ops;  ///< op type -> constraints
  NpuConfig npu;                             ///< meaningful when kind == Npu
  /// NPU only: operators that only move data (Concat, Flatten, Reshape, Squeeze, Unsqueeze, Identity) are
  /// accepted without being listed, since the DMA engines do them ("data_movement": false turns this off).
  bool dataMovement = true;
};

/// The validated contents of a hardware configuration file (format: docs/hardware-config.md).
class HardwareConfig {
 public:
  /// Reads and validates a file; throws UserError naming the file, the JSON key path and what was expected.
  static HardwareConfig load(const std::string& path);
  /// Validates an already parsed document; `origin` names it in error messages (e.g. the file path).
  static HardwareConfig fromJson(const nlohmann::json& doc, const std::string& origin);

  const std::string& name() const { return name_; }
  const std::vector<Device>& devices() const { return devices_; }
  /// The device with this name; throws UserError listing the known devices when there is none.
  const Device& device(const std::string& name) const;
  /// The first device of kind Npu, or nullptr.
  const Device* firstNpu() const;
  /// Per-node overrides: node name -> device name.
  const std::map<std::string, std::string>& overrides() const { return overrides_; }
  /// The device a node is pinned to by overrides, if any.
  std::optional<std::string> overrideFor(const std::string& nodeName) const;

  /// Whether `deviceName` can run the operator described by `query`; when not, says why
  /// (a per-node override to another device also answers false).
  SupportResult supports(const std::string& deviceName, const OpQuery& query) const;

  /// FNV-1a 64 over the canonical JSON dump (sorted keys, no whitespace): stable across key order
  /// and formatting, changes with any value. Compiled model files record it.
  uint64_t hash() const { return hash_; }
  /// hash() as 16 lower-case hex digits.
  std::string hashHex() const;
  /// The canonical JSON text the hash is computed over.
  const std::string& canonicalJson() const { return canonical_; }

 private:
  std::string name_;
  std::vector<Device> devices_;
  std::map<std::string, std::string> overrides_;
  std::string canonical_;
  uint64_t hash_ = 0;
};

/// Operators that only move or re-view data (no arithmetic), which an NPU device runs with its DMA engines.
bool isDataMovementOp(const std::string& opType);

/// FNV-1a 64-bit hash of a byte string.
uint64_t fnv1a64(const std::string& bytes);

/// The ONNX operator names a configuration may mention (anything else is rejected as unknown).
const std::vector<std::string>& knownOperatorNames();

}  // namespace tessel::hw
