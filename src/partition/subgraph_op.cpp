// The subgraph operator tessel.Subgraph: a group of nodes placed on one device by the partitioner. Its
// reference kernel runs the body, so a partitioned graph still runs (and is checked) in the interpreter.
#include "tessel/ops/registry.h"

namespace tessel {
namespace {

void inferSubgraph(InferContext& ctx) {
  const Graph& body = ctx.node().attrGraph("body");
  if (body.inputs().size() != ctx.numInputs())
    ctx.fail("body '{}' has {} input(s), the node has {}", body.name(), body.inputs().size(), ctx.numInputs());
  if (body.outputs().size() != ctx.numOutputs())
    ctx.fail("body '{}' has {} output(s), the node has {}", body.name(), body.outputs().size(), ctx.numOutputs());
  for (size_t i = 0; i < ctx.numOutputs(); ++i)
    if (ctx.hasOutput(i)) ctx.setOutputType(i, body.outputs()[i]->type);
}

void subgraphKernel(KernelContext& ctx) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < ctx.numInputs(); ++i) inputs.push_back(ctx.input(i));
  std::vector<Tensor> outputs = ctx.runSubgraph(ctx.attrGraph("body"), inputs);
  for (size_t i = 0; i < outputs.size(); ++i) ctx.setOutput(i, std::move(outputs[i]));
}

Cost subgraphCost(const Node& node) {
  Cost total;
  for (const auto& n : node.attrGraph("body").nodes())
    if (n->def() && n->def()->costFn) {
      Cost c = n->def()->costFn(*n);
      total.flops += c.flops;
      total.bytesRead += c.bytesRead;
      total.bytesWritten += c.bytesWritten;
    }
  return total;
}

}  // namespace

TESSEL_REGISTER_OP(tessel_Subgraph) {
  return OpDef("Subgraph", "tessel")
      .inputs(0, kVariadic)
      .outputs(1, kVariadic)
      .requiredAttr("body", AttrKind::Graph)
      .describe("a subgraph placed on one device by the partitioner; runs `body` (inputs and outputs in order)")
      .infer(inferSubgraph)
      .kernel(subgraphKernel)
      .cost(subgraphCost);
}

}  // namespace tessel
