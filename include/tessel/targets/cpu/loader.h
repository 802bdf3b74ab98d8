// Loads a model compiled by `tessel compile` (.so) and runs it on Tensors.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessel/ir/tensor.h"

namespace tessel::cpu {

/// Name, element type and shape of one input or output of a compiled model.
struct CompiledTensorInfo {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
};

/// One step (kernel call) of a compiled model's run function, for the profiler.
struct CompiledStepInfo {
  std::string node;    ///< graph node (the first of a fused chain)
  std::string op;      ///< what it computes, e.g. "conv+bn+Relu"
  std::string kernel;  ///< runtime function
  Shape shape;         ///< of its (first) output
  double flops = 0;    ///< 2 x multiply-adds of convolutions and GEMMs, else 0
};

/// A loaded compiled model with one instance (packed weights, arena, thread pool).
class CompiledModel {
 public:
  /// dlopens path and creates an instance on numThreads threads (<= 0: all cores). UserError when the
  /// file is not a Tessel model, has another ABI version, or the CPU lacks AVX2/FMA.
  CompiledModel(const std::string& path, int numThreads);
  ~CompiledModel();
  CompiledModel(const CompiledModel&) = delete;
  CompiledModel& operator=(const CompiledModel&) = delete;

  const std::vector<CompiledTensorInfo>& inputs() const { return inputs_; }
  const std::vector<CompiledTensorInfo>& outputs() const { return outputs_; }
  const std::string& hash() const { return hash_; }
  /// Floating-point operations of one inference (convolutions and GEMMs).
  double flops() const { return flops_; }
  /// Vector ISA the library was built for ("avx2", "avx512"; "" for a library from before tessel_model_isa).
  const std::string& isa() const { return isa_; }
  /// The kernel calls of one inference, in execution order.
  const std::vector<CompiledStepInfo>& steps() const { return steps_; }
  /// Per-step timing: while ns is non-null each run writes steps().size() + 1 doubles (each step's
  /// nanoseconds, then the steady-clock time in ns at which the first step started); nullptr turns it off.
  void setProfile(double* ns);
  /// Runs on named inputs (UserError for a missing input or a wrong dtype/shape); outputs in order.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);
  /// Runs on raw buffers already in descriptor order (for benchmarking: no checks, no allocation).
  void runRaw(const void* const* inputs, void* const* outputs);

 private:
  struct Api;
  struct Fallbacks;
  std::string path_;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  void* instance_ = nullptr;
  std::unique_ptr<Fallbacks> fallbacks_;
  std::vector<CompiledTensorInfo> inputs_, outputs_;
  std::vector<CompiledStepInfo> steps_;
  std::string hash_;
  double flops_ = 0;
  std::string isa_;
};

}  // namespace tessel::cpu
