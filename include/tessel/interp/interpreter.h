// The reference interpreter: runs any graph with the registry's reference kernels. It is the oracle that
// every optimised path (cpu kernels, generated code, the NPU simulator) is checked against.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessel/ir/graph.h"

namespace tessel {

struct InterpreterOptions {
  uint64_t seed = 0;  ///< seeds random-number operators
};

/// Executes a graph node by node in topological order. Intermediate tensors are released after their
/// last use, so large models run in bounded memory.
class Interpreter {
 public:
  explicit Interpreter(const Graph& graph, InterpreterOptions options = {});
  ~Interpreter();

  /// Runs the graph on named inputs; returns its outputs in graph-output order. Throws UserError when an
  /// input is missing, has the wrong element type or shape, or a kernel rejects its inputs (the message
  /// names the node).
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

  /// Checks a tensor against a declared input; UserError naming the input and the expected type.
  static void checkInput(const Value& declared, const Tensor& actual);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessel
