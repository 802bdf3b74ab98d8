// What the operator tests share: one node in a graph of its own, run through the reference interpreter.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessel/interp/interpreter.h"
#include "tessel/ops/registry.h"
#include "tessel/ops/shape_inference.h"

namespace tessel::testing {

/// One node in a graph of its own. Inputs marked constant become initializers (so inference sees them).
struct SingleNode {
  Graph graph;
  Node* node = nullptr;
  std::map<std::string, Tensor> feeds;

  SingleNode(const std::string& op, const std::vector<std::pair<Tensor, bool>>& inputs, size_t numOutputs,
             const std::map<std::string, AttrValue>& attrs = {}, int64_t opset = 17) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& [t, constant] = inputs[i];
      std::string name = "in" + std::to_string(i);
      if (!t.defined()) ins.push_back(nullptr);
      else if (constant) ins.push_back(graph.addConstant(name, t));
      else {
        ins.push_back(graph.addInput(name, TensorType::fromShape(t.dtype(), t.shape())));
        feeds[name] = t;
      }
    }
    std::vector<std::string> outs;
    for (size_t i = 0; i < numOutputs; ++i) outs.push_back("out" + std::to_string(i));
    node = graph.addNode(op, ins, outs, "n_" + op);
    for (const auto& [k, v] : attrs) node->setAttr(k, v);
    if (node->def() && node->def()->upgradeFn) {
      UpgradeContext ctx{*node, opset, graph};
      node->def()->upgradeFn(ctx);
    }
    for (Value* v : node->outputs()) graph.addOutput(v);
  }
  std::vector<Tensor> run() {
    inferShapes(graph);
    return Interpreter(graph).run(feeds);
  }
  std::string outputType(size_t i) {
    inferShapes(graph);
    return node->output(i)->type.toString();
  }
};

/// An input fed at run time / an input that is an initializer.
inline std::pair<Tensor, bool> data(Tensor t) { return {std::move(t), false}; }
inline std::pair<Tensor, bool> constant(Tensor t) { return {std::move(t), true}; }

}  // namespace tessel::testing
