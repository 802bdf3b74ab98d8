// Lowering of NPU subgraphs to instruction streams (S4.3, S2.1): one operator interpreter per op family
// (Conv incl. grouped/depthwise, Gemm/MatMul, element-wise and activations, pools) with tiles sized to the
// configured buffers, a DRAM layout for the subgraph's tensors, and running a lowered subgraph on the simulator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/graph.h"
#include "tessel/targets/npu/isa.h"
#include "tessel/targets/npu/schedule.h"
#include "tessel/targets/npu/simulator.h"

namespace tessel::npu {

/// Runs the clean-up passes the NPU flow expects before partitioning (shape inference, constant folding,
/// identity removal, BatchNorm folding, dead code).
void prepareModelForNpu(Model& model);

/// Whether the lowering can express this node (asked by the partitioner after the configuration said
/// yes): static float32 shapes, constant weights, pads the load instruction can produce, ... When not,
/// the reason names what ruled it out.
hw::SupportResult loweringSupport(const Node& node, const hw::Device& device);

/// A tensor of the subgraph's interface in DRAM. Rank-4 tensors are stored channels-last (NHWC); the
/// logical shape stays ONNX's (NCHW). Everything on the NPU is float32.
struct DramTensor {
  std::string name;
  Shape shape;               ///< logical (ONNX) shape
  bool channelsLast = false; ///< rank 4: stored as N, H, W, C
  uint64_t addr = 0;         ///< first word
  uint64_t words = 0;
};

/// Instructions emitted for one graph node (for reports and the disassembly). After scheduling a node's
/// instructions are interleaved with other nodes'; LoweredSubgraph::instructionOp says which is whose.
struct LoweredOp {
  std::string node;
  std::string opType;
  size_t instructions = 0;
  std::string tiling;  ///< e.g. "+ fused relu"
};

/// The work a subgraph's nodes need whatever the schedule: the basis of the schedule-independent lower bound.
struct SubgraphWork {
  uint64_t macs = 0;              ///< multiply-accumulates of convolutions, Gemm and MatMul on the matrix unit
  uint64_t vectorCycles = 0;      ///< lane-cycles the vector unit must spend (elements x cycles per vector)
  /// Multiply-accumulates of depthwise convolutions, which either unit can do: the vector unit one per lane and
  /// cycle, the matrix unit DIM per cycle (one diagonal block row).
  uint64_t depthwiseMacs = 0;
  uint64_t compulsoryLoadBytes = 0;   ///< inputs and constants, each read once
  uint64_t compulsoryStoreBytes = 0;  ///< outputs, each written once
  /// Cycles of the depthwise work at the faster of the two units' rates.
  uint64_t depthwiseCycles(const hw::NpuConfig& cfg) const;
  /// Largest of MACs / DIM^2, vector work / lanes, the matrix and vector work plus the depthwise work shared by
  /// both units, compulsory loads / load bandwidth and stores / store bandwidth: no schedule of these nodes on
  /// this machine can take fewer cycles.
  uint64_t lowerBound(const hw::NpuConfig& cfg) const;
  nlohmann::json toJson(const hw::NpuConfig& cfg) const;
};

/// The work of a subgraph body (every node as the NPU would run it: depthwise convolutions on either unit,
/// activations, element-wise ops and pooling windows as vector element operations; a convolution's bias is not
/// counted, a DMA can add it).
SubgraphWork subgraphWork(const Graph& body, const hw::NpuConfig& cfg);

/// One subgraph lowered to a program plus everything needed to run it.
struct LoweredSubgraph {
  std::string name;    ///< the subgraph node's name
  std::string device;  ///< device name in the configuration
  Program program;
  std::vector<DramTensor> inputs, outputs;  ///< in the body's input / output order
  std::vector<float> constants;             ///< initial contents of DRAM words [0, constants.size())
  uint64_t dramWords = 0;                   ///< total DRAM image size
  uint64_t compulsoryDramBytes = 0;         ///< each input, output and constant moved once
  SubgraphWork work;                        ///< schedule-independent work and bound
  std::vector<LoweredOp> ops;
  std::vector<uint32_t> instructionOp;      ///< per instruction of `program`, its index in `ops`
  NpuSchedule schedule;                     ///< the schedule the program was lowered with
  uint64_t modelledCycles = 0;              ///< the scheduler's own estimate (the simulator's rules)
};

/// Lowers a subgraph body (nodes all accepted by loweringSupport) for the NPU `device` with the given
/// (verified) schedule. Throws UserError naming the node when a node cannot be lowered.
LoweredSubgraph lowerSubgraph(const Graph& body, const hw::Device& device, const NpuSchedule& schedule);
/// The same with defaultSchedule().
LoweredSubgraph lowerSubgraph(const Graph& body, const hw::Device& device, const std::string& name);

/// Graphviz text of the instruction dependency graph (S2.3) of instructions [first, first + count) of the
/// subgraph lowered with `schedule`, in the lowering's order before scheduling: each node an instruction
/// (unit, disassembly, parallel level, critical-path height), each edge its dependency kinds (RAW solid,
/// WAR dashed, WAW dotted).
std::string dependencyGraphDot(const Graph& body, const hw::Device& device, const NpuSchedule& schedule, size_t first,
                               size_t count);

/// Result of running a lowered subgraph.
struct NpuRun {
  std::vector<Tensor> outputs;  ///< in the body's output order, ONNX layout
  SimReport report;
};

/// Writes the inputs (ONNX layout, converted to the DRAM layout) and the constants into a fresh DRAM image,
/// simulates the program and reads the outputs back. Throws UserError for inputs of the wrong shape.
NpuRun runLowered(const LoweredSubgraph& lowered, const hw::NpuConfig& config, const std::vector<Tensor>& inputs,
                  const SimOptions& options = {});

}  // namespace tessel::npu
