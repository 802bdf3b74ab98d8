// Run-time shape operands. A node whose output shape depends on a tensor known only at run time (the shape
// of a Reshape or Expand, the axes of a Squeeze or Unsqueeze) is compiled for the static shape inference or
// the model's declaration gives its output; the generated code checks, before the node's kernel, that the
// operand gives that shape (exit 2 naming the node otherwise). Operands no check covers keep the node on
// the host fallback, which checks the shapes it computes.
#include <fmt/format.h>

#include "lowerer.h"

namespace tessel::cpu {

bool Lowerer::checkRunTimeShape(const Node* n) {
  if (!n->domain().empty()) return true;
  const std::string& op = n->opType();
  if (op == "Slice") {  // starts, ends, axes and steps are read at compile time
    for (size_t i = 1; i < n->numInputs(); ++i)
      if (n->input(i) && !isConst(n->input(i))) return false;
    return true;
  }
  if (op != "Reshape" && op != "Expand" && op != "Squeeze" && op != "Unsqueeze") return true;
  if (n->numInputs() < 2 || !n->input(1) || isConst(n->input(1))) return true;
  const Value* operand = definitionOf(n->input(1));
  if (operand->type.dtype != DType::Int64 || !operand->type.isStatic() || operand->type.rank() > 1) return false;
  const Shape xs = definitionOf(n->input(0))->type.staticShape(), ys = n->output(0)->type.staticShape();
  const int64_t count = operand->type.staticSize();
  const std::string in = int64Array("ChkIn", xs), out = int64Array("ChkOut", ys);
  const int s = tensorOf(operand);
  std::string test;
  if (op == "Reshape")
    test = fmt::format("reshape_ok({}, {}, {}, {}, {}, {}, {})", in, xs.size(), ref(s), count,
                       n->hasAttr("allowzero") && n->attrInt("allowzero") != 0, out, ys.size());
  else if (op == "Expand")
    test = fmt::format("expand_ok({}, {}, {}, {}, {}, {})", in, xs.size(), ref(s), count, out, ys.size());
  else
    test = fmt::format("axes_ok({}, {}, {}, {}, {}, {}, {})", in, xs.size(), ref(s), count, op == "Unsqueeze", out,
                       ys.size());
  addStep({n->name(), op + " shape check", "shape check"},
          fmt::format("{} '{}': the run-time operand '{}' must give {}", op, n->name(), operand->name(),
                      shapeToString(ys)),
          fmt::format("if (!{}) {{\n    m->error = {};\n    return 2;\n  }}", test,
                      cppString(fmt::format("{}: input '{}' gives another output shape than the {} this model was "
                                            "compiled for", n->describe(), operand->name(), shapeToString(ys)))),
          {s}, {});
  return true;
}

}  // namespace tessel::cpu
