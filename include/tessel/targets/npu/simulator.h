// Event-driven simulator of the virtual NPU: runs a Program against a DRAM image with real float32
// arithmetic, counts cycles with the analytical model, checks hazards, capacity and deadlock.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessel/hw/hardware_config.h"
#include "tessel/support/error.h"
#include "tessel/targets/npu/isa.h"

namespace tessel::npu {

/// The version of the simulator's cost model: bumped whenever an instruction's cycles change, so tuning records
/// (which cache simulated cycles) made with another cost model are refused.
inline constexpr int kSimulatorVersion = 1;

/// Off-chip memory: a byte array addressed by the ISA in 32-bit words (float32, little-endian).
class Dram {
 public:
  explicit Dram(uint64_t words = 0) : bytes_(words * 4, 0) {}
  uint64_t words() const { return bytes_.size() / 4; }
  float read(uint64_t word) const;
  void write(uint64_t word, float value);
  /// Copies `values` to consecutive words starting at `word`.
  void writeFloats(uint64_t word, const std::vector<float>& values);
  std::vector<float> readFloats(uint64_t word, uint64_t count) const;
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

/// Raised when a program cannot run to completion (deadlock, keep_weights without resident weights).
class SimulationError : public UserError {
 public:
  using UserError::UserError;
};

/// When one instruction ran.
struct InstructionTiming {
  uint64_t start = 0;   ///< cycle its unit took it
  uint64_t end = 0;     ///< start + occupancy: the unit is free again
  uint64_t finish = 0;  ///< results visible and tokens pushed (in-order completion per unit)
};

enum class HazardKind : uint8_t { ReadAfterWrite, WriteAfterRead, WriteAfterWrite };

/// A pair of instructions whose accesses to the same SRAM words happened out of program order, or that the
/// program's tokens do not order.
struct Hazard {
  HazardKind kind = HazardKind::ReadAfterWrite;
  size_t earlier = 0;  ///< index in program order of the first instruction of the pair
  size_t later = 0;
  Buffer buffer = Buffer::Input;
  uint64_t firstWord = 0;  ///< lowest conflicting word
  uint64_t words = 0;      ///< conflicting words
  /// No dependency token (or unit order) makes `later` wait for `earlier`: the pair is ordered, if at all,
  /// by this run's timing only.
  bool unsynchronised = false;
  std::string describe() const;
};

struct UnitStats {
  uint64_t instructions = 0;
  uint64_t busyCycles = 0;   ///< sum of occupancies
  uint64_t stallCycles = 0;  ///< cycles idle with an instruction at the head that could not start (tokens, interlock)
};

/// Lower bounds on the cycles of any schedule of the program's work (docs/npu.md, "Lower bounds").
struct LowerBounds {
  /// Longest chain of true (RAW) dependencies: a read at start waits for the producer's finish, a read at
  /// finish (accumulating gemm) only finishes no earlier than the producer.
  uint64_t criticalPathRaw = 0;
  uint64_t criticalPathUnitOrder = 0;  ///< same plus in-order issue and in-order completion on each unit
  std::array<uint64_t, kNumUnits> unitOccupancy{};  ///< sum of occupancies per unit
  uint64_t dramCycles = 0;             ///< max(bytes read / load bandwidth, bytes written / store bandwidth)
  uint64_t computeCycles = 0;          ///< MACs / (DIM * DIM)
  uint64_t bound() const;              ///< the largest of the above
};

/// Everything a run measured.
struct SimReport {
  uint64_t totalCycles = 0;
  double clockMhz = 0;
  uint32_t dim = 0;
  std::array<UnitStats, kNumUnits> units{};
  uint64_t macs = 0;
  double mmUtilization = 0;  ///< MACs / (totalCycles * DIM * DIM)
  uint64_t dramBytesRead = 0, dramBytesWritten = 0;
  std::array<uint64_t, kNumBuffers> peakSramBytes{};   ///< peak bytes holding live values (written, read later)
  std::array<uint64_t, kNumBuffers> footprintBytes{};  ///< highest address touched + 1, in bytes
  std::array<uint64_t, kNumBuffers> capacityBytes{};
  std::vector<Hazard> hazards;
  uint64_t uninitialisedReads = 0;  ///< SRAM words read before any instruction wrote them
  std::vector<InstructionTiming> timing;  ///< per instruction, program order
  /// Per buffer, (cycle, live bytes from that cycle on) steps, for the trace's counter tracks.
  std::array<std::vector<std::pair<uint64_t, uint64_t>>, kNumBuffers> sramUsage;
  LowerBounds bounds;

  /// Multi-line human-readable summary.
  std::string summary() const;
  /// One object: cycles, dram_bytes{read,written}, peak_sram_bytes{inp,...}, sram_capacity_bytes{...},
  /// mm_utilization, units{LD:{busy,stall,instructions},...}, lower_bounds{...}, hazards[...].
  nlohmann::json toJson() const;
};

struct SimOptions {
  bool checkHazards = true;  ///< run the hazard / liveness analysis (costs one pass over every word touched)
};

/// Validates (validateProgram) and runs `program` on a machine with parameters `cfg`, reading and
/// writing `dram`. Throws UserError for a refused program, SimulationError on deadlock.
SimReport simulate(const Program& program, const hw::NpuConfig& cfg, Dram& dram, const SimOptions& options = {});

/// Chrome / Perfetto trace (JSON "traceEvents"): one track per unit with one slice per instruction
/// (its occupancy), and one counter track per SRAM buffer with the live bytes. Timestamps are in
/// microseconds at the configured clock.
void writeChromeTrace(const Program& program, const SimReport& report, std::ostream& out);

}  // namespace tessel::npu
