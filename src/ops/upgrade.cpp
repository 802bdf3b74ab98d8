// Shared steps of opset upgrades.
#include "tessel/ops/upgrade.h"

namespace tessel {

void moveAttrToInput(UpgradeContext& ctx, const std::string& attr, size_t inputIndex, Tensor value) {
  Node& node = ctx.node;
  if (!node.hasAttr(attr) || node.hasInput(inputIndex)) return;
  node.removeAttr(attr);
  Value* c = ctx.addConstant(node.name() + "_" + attr, std::move(value));
  while (node.numInputs() < inputIndex) node.addInput(nullptr);
  if (node.numInputs() == inputIndex) node.addInput(c);
  else node.setInput(inputIndex, c);
}

void moveIntsAttrToInput(UpgradeContext& ctx, const std::string& attr, size_t inputIndex) {
  if (!ctx.node.hasAttr(attr)) return;
  std::vector<int64_t> values = ctx.node.attrInts(attr);
  moveAttrToInput(ctx, attr, inputIndex, Tensor::fromVector<int64_t>({static_cast<int64_t>(values.size())}, values));
}

}  // namespace tessel
