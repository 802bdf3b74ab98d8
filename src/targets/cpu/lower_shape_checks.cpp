// Run-time shape operands. A node whose output shape depends on a tensor known only at run time (the shape
// of a Reshape or Expand, the axes of a Squeeze or Unsqueeze, the starts/ends of a Slice, Range's bounds,
// ConstantOfShape's shape, Tile's repeats) is compiled for the static shape inference or the model's
// declaration gives its output; the generated code computes the shape from the operand when it runs and
// fails the run (exit 2 naming the node) when it differs. Operands no check covers keep the node on the
// host fallback, which checks the shapes it computes.
#include <fmt/format.h>

#include "lowerer.h"

namespace tessel::cpu {
namespace {

/// The `m->error = ...; return 2;` block of a failed run-time shape check of n.
std::string shapeError(const Node* n, const Shape& planned) {
  return fmt::format("{{\n    m->error = {};\n    return 2;\n  }}",
                     cppString(fmt::format("{}: its run-time operands give another output shape than the {} this "
                                           "model was compiled for", n->describe(), shapeToString(planned))));
}

bool isIndexType(DType t) { return t == DType::Int64 || t == DType::Int32; }

}  // namespace

bool Lowerer::checkRunTimeShape(const Node* n) {
  if (!n->domain().empty()) return true;
  const std::string& op = n->opType();
  if (!isOp(*n, "Reshape") && !isOp(*n, "Expand") && !isOp(*n, "Squeeze") && !isOp(*n, "Unsqueeze")) return true;
  if (n->numInputs() < 2 || !n->input(1) || isConst(n->input(1))) return true;
  const Value* operand = definitionOf(n->input(1));
  if (operand->type.dtype != DType::Int64 || !operand->type.isStatic() || operand->type.rank() > 1) return false;
  const Shape xs = definitionOf(n->input(0))->type.staticShape(), ys = n->output(0)->type.staticShape();
  const int64_t count = operand->type.staticSize();
  const std::string in = int64Array("ChkIn", xs), out = int64Array("ChkOut", ys);
  const int s = tensorOf(operand);
  std::string test;
  if (isOp(*n, "Reshape"))
    test = fmt::format("reshape_ok({}, {}, {}, {}, {}, {}, {})", in, xs.size(), ref(s), count,
                       n->hasAttr("allowzero") && n->attrInt("allowzero") != 0, out, ys.size());
  else if (isOp(*n, "Expand"))
    test = fmt::format("expand_ok({}, {}, {}, {}, {}, {})", in, xs.size(), ref(s), count, out, ys.size());
  else
    test = fmt::format("axes_ok({}, {}, {}, {}, {}, {}, {})", in, xs.size(), ref(s), count, isOp(*n, "Unsqueeze"), out,
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

bool Lowerer::lowerSliceAtRunTime(const Node* n) {
  if (n->numInputs() < 3) return false;
  const DType it = definitionOf(n->input(1))->type.dtype;
  if (!isIndexType(it)) return false;
  const int64_t k = definitionOf(n->input(1))->type.staticSize();
  std::vector<std::string> operands;
  std::vector<int> reads{tensorOf(n->input(0))};
  for (size_t i = 1; i < 5; ++i) {
    const Value* v = i < n->numInputs() ? n->input(i) : nullptr;
    if (!v) {
      operands.push_back("nullptr");
      continue;
    }
    const TensorType& t = definitionOf(v)->type;
    if (t.dtype != it || t.rank() != 1 || t.staticSize() != k) return false;
    reads.push_back(tensorOf(v));
    operands.push_back(ref(reads.back()));
  }
  const Shape xs = definitionOf(n->input(0))->type.staticShape(), ys = n->output(0)->type.staticShape();
  if (xs.empty() || xs.size() > 8 || ys.size() != xs.size()) return false;
  const int y = tensorOf(n->output(0));
  const std::string xsName = int64Array("SlX", xs), ysName = int64Array("SlY", ys);
  addStep({n->name(), "Slice", "strided_copy"},
          fmt::format("Slice '{}' {} -> {}, starts and ends known at run time", n->name(), shapeToString(xs),
                      shapeToString(ys)),
          fmt::format("{{\n    int64_t start[8], step[8];\n    if (!slice_params<{}>({}, {}, {}, {}, {}, {}, {}, {}, start, "
                      "step)) {}\n    rt::strided_copy({}, {}, start, step, {}, {}, {}, {}, pool);\n  }}",
                      cppElementType(it), xsName, xs.size(), operands[0], operands[1], operands[2], operands[3], k,
                      ysName, shapeError(n, ys), ref(reads[0]), xsName, ysName, xs.size(),
                      dtypeSize(definitionOf(n->input(0))->type.dtype), ref(y)),
          reads, {y});
  return true;
}

bool Lowerer::lowerRange(const Node* n) {
  const DType t = n->output(0)->type.dtype;
  if (t == DType::Float16 || t == DType::BFloat16 || n->numInputs() != 3) return false;
  const Shape ys = n->output(0)->type.staticShape();
  if (ys.size() != 1) return false;
  const int start = tensorOf(n->input(0)), limit = tensorOf(n->input(1)), delta = tensorOf(n->input(2));
  const int y = tensorOf(n->output(0));
  const char* type = cppElementType(t);
  addStep({n->name(), "Range", "range"}, fmt::format("Range '{}' of {} {}", n->name(), ys[0], dtypeName(t)),
          fmt::format("{{\n    const {0} first = *{1}, delta = *{2};\n"
                      "    const double count = std::ceil((dbl(*{3}) - dbl(first)) / dbl(delta));\n"
                      "    if (!(std::max(count, 0.0) == {4}.0)) {5}\n"
                      "    for (int64_t i = 0; i < {4}; ++i) {6}[i] = static_cast<{0}>(first + static_cast<{0}>(i) * delta);\n  }}",
                      type, ref(start), ref(delta), ref(limit), ys[0], shapeError(n, ys), ref(y)),
          {start, limit, delta}, {y});
  return true;
}

bool Lowerer::lowerConstantOfShape(const Node* n) {
  const DType t = n->output(0)->type.dtype;
  if (t == DType::Float16 || t == DType::BFloat16) return false;
  const Value* shape = definitionOf(n->input(0));
  const Shape ys = n->output(0)->type.staticShape();
  if (shape->type.dtype != DType::Int64 || shape->type.staticSize() != static_cast<int64_t>(ys.size())) return false;
  double value = 0;
  if (n->hasAttr("value")) {
    const Tensor& v = n->attrTensor("value");
    if (v.numel() != 1) return false;
    value = v.elementAsDouble(0);
  }
  const std::string literal = t == DType::Float32 ? floatLiteral(static_cast<float>(value)) : fmt::format("{:.17g}", value);
  const int s = tensorOf(shape), y = tensorOf(n->output(0));
  std::string check = "false";
  for (size_t a = 0; a < ys.size(); ++a) check += fmt::format(" || {}[{}] != {}", ref(s), a, ys[a]);
  addStep({n->name(), "ConstantOfShape", "fill"}, fmt::format("ConstantOfShape '{}' {}", n->name(), shapeToString(ys)),
          fmt::format("if ({}) {}\n  std::fill_n({}, {}, static_cast<{}>({}));", check, shapeError(n, ys), ref(y),
                      shapeSize(ys), cppElementType(t), literal),
          {s}, {y});
  return true;
}

bool Lowerer::lowerTile(const Node* n) {
  const Value* x = definitionOf(n->input(0));
  const Value* repeats = definitionOf(n->input(1));
  const Shape xs = x->type.staticShape(), ys = n->output(0)->type.staticShape();
  if (xs.empty() || xs.size() > 8 || ys.size() != xs.size() || repeats->type.dtype != DType::Int64 ||
      repeats->type.staticSize() != static_cast<int64_t>(xs.size()) || shapeSize(xs) == 0)
    return false;
  const int xi = tensorOf(x), r = tensorOf(repeats), y = tensorOf(n->output(0));
  std::string check = "false";
  for (size_t a = 0; a < xs.size(); ++a) check += fmt::format(" || {}[{}] * {} != {}", ref(r), a, xs[a], ys[a]);
  const std::string xsName = int64Array("TlX", xs), ysName = int64Array("TlY", ys);
  addStep({n->name(), "Tile", "tile_copy"}, fmt::format("Tile '{}' {} -> {}", n->name(), shapeToString(xs), shapeToString(ys)),
          fmt::format("if ({}) {}\n  tile_copy(reinterpret_cast<const char*>({}), {}, reinterpret_cast<char*>({}), {}, {}, {});",
                      check, shapeError(n, ys), ref(xi), xsName, ref(y), ysName, xs.size(), dtypeSize(x->type.dtype)),
          {xi, r}, {y});
  return true;
}

}  // namespace tessel::cpu
