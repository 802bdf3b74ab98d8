// The cpu target's lowered form: kernel calls in order over tensors with planned storage (internal).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"
#include "tessel/targets/cpu/compiler.h"

namespace tessel::cpu {

/// Where a tensor's floats live at run time.
enum class StorageKind { Arena, Input, Output, Weight };

/// One float tensor of the lowered model.
struct PlanTensor {
  std::string name;
  Shape shape;
  int64_t numel = 0;
  DType dtype = DType::Float32;
  StorageKind kind = StorageKind::Arena;
  int index = -1;       ///< input/output position for Input/Output
  int64_t offset = 0;   ///< floats into the arena or the weights blob
  int aliasOf = -1;     ///< shares the storage of this tensor (reshapes, in-place ops, Concat slices)
  int64_t aliasOffset = 0;  ///< floats into aliasOf's storage: an in-place Concat input is a slice of its output
  int firstStep = -1, lastStep = -1;  ///< liveness (of the root, after alias resolution)
  /// Storage in 4-byte units (offsets of the arena and of the weights blob are counted in floats).
  int64_t storageFloats() const { return (numel * static_cast<int64_t>(dtypeSize(dtype)) + 3) / 4; }
};

/// The C++ element type of a tensor in generated code (bool as one byte, 16-bit floats as raw bits).
const char* cppElementType(DType t);
/// The C++ expression reading `element` (of type t) as a number: 16-bit floats are converted to float.
std::string loadElement(DType t, const std::string& element);
/// The C++ expression storing `value` (a number) as an element of type t (16-bit floats from float bits).
std::string storeElement(DType t, const std::string& value);

/// One statement group of the generated run function. `code` names tensors as @ID@; the emitter
/// replaces them with pointer expressions once storage is planned.
struct PlanStep {
  std::string node;    ///< graph node it computes (profiling metadata, see tessel_step_info)
  std::string op;      ///< what it computes ("conv+bn+Relu")
  std::string kernel;  ///< runtime function it calls
  double flops = 0;    ///< 2 x multiply-adds of convolutions and GEMMs, else 0
  std::string comment;
  std::string code;
  std::vector<int> reads, writes;
  int inplaceCandidate = -1;  ///< a read whose storage the (single) write may take over if it dies here
};

/// A node run by the host's reference interpreter: its one-node model in text IR inside the weights blob.
struct PlanFallback {
  std::string description;
  std::string op;
  std::string reason;  ///< why no compiled code path took the node
  int64_t textOffset, textBytes, sideOffset, sideBytes;  ///< bytes into the weights blob
};

/// A lowered model.
struct Plan {
  std::vector<PlanTensor> tensors;
  std::vector<PlanStep> steps;
  std::vector<int> inputs, outputs;  ///< tensor ids in graph order
  std::string weights;               ///< raw weight bytes (float32, 64-byte aligned entries)
  std::vector<PlanFallback> fallbacks;
  std::string globals;               ///< namespace-scope declarations (shapes)
  std::string initCode;              ///< packing statements run at create time
  int64_t packedFloats = 0;
  int64_t arenaFloats = 0;
  int defaultThreads = 0;  ///< create(0) uses this (0: all hardware threads)
  CompileReport report;
};

/// The tensor whose storage `id` shares (follows aliasOf to the end).
inline int rootOf(const Plan& plan, int id) {
  while (plan.tensors[id].aliasOf >= 0) id = plan.tensors[id].aliasOf;
  return id;
}

/// Floats from the start of rootOf(id)'s storage to id's (non-zero for in-place Concat slices).
inline int64_t offsetInRoot(const Plan& plan, int id) {
  int64_t offset = 0;
  for (; plan.tensors[id].aliasOf >= 0; id = plan.tensors[id].aliasOf) offset += plan.tensors[id].aliasOffset;
  return offset;
}

/// Lowers the cpu pass pipeline's result (UserError listing the unsupported nodes); each conv runs the kernel
/// select-kernels recorded.
Plan lowerGraph(const Graph& graph, const CompileOptions& options = {});
/// Assigns arena offsets from liveness, reusing dead blocks and honouring in-place candidates.
void planMemory(Plan& plan);
/// The #include lines every generated source starts with (precompiled once by the compile driver).
std::string generatedIncludes();
/// Renders the C++ source of a planned model.
std::string emitSource(const Plan& plan, const std::string& weightsFileName, const std::string& modelName);

/// C++ string literal (quotes included, escapes for quotes, backslashes and control characters).
std::string cppString(const std::string& s);
/// C++ literal for a float that round-trips (handles infinities).
std::string floatLiteral(float v);

}  // namespace tessel::cpu
