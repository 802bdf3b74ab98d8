// Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
// ReduceLogSumExp, ReduceSumSquare) over axes known at compile time, as one generated walk over the input
// (reduce_mapped in the generated prologue; sums in double for floats, as the reference interpreter does).
#include <fmt/format.h>

#include <map>

#include "lowerer.h"

namespace tessel::cpu {

bool Lowerer::lowerReduce(const Node* n) {
  static const std::map<std::string, const char*> kinds = {
      {"ReduceSum", "kSum"},       {"ReduceMean", "kMean"},     {"ReduceMax", "kMax"},
      {"ReduceMin", "kMin"},       {"ReduceProd", "kProd"},     {"ReduceL1", "kL1"},
      {"ReduceL2", "kL2"},         {"ReduceLogSum", "kLogSum"}, {"ReduceLogSumExp", "kLogSumExp"},
      {"ReduceSumSquare", "kSumSquare"}};
  auto kind = kinds.find(n->opType());
  if (kind == kinds.end() || n->numOutputs() != 1) return false;
  const DType dt = definitionOf(n->input(0))->type.dtype;
  const char* acc = nullptr;
  switch (dt) {
    case DType::Float32: case DType::Float64: acc = "double"; break;
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64: acc = "int64_t"; break;
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64: acc = "uint64_t"; break;
    default: return false;
  }
  // The axes: an attribute (older opsets) or a constant input; none means all (or none with noop_with_empty_axes).
  std::vector<int64_t> axes;
  if (n->numInputs() > 1 && n->input(1)) {
    const Tensor* t = constTensor(n->input(1));
    if (!t) return false;
    axes = t->toInt64Vector();
  } else if (n->hasAttr("axes")) {
    axes = n->attrInts("axes");
  }
  const Shape xs = definitionOf(n->input(0))->type.staticShape();
  const int64_t rank = static_cast<int64_t>(xs.size());
  if (rank > 8) return false;
  const bool noop = n->hasAttr("noop_with_empty_axes") && n->attrInt("noop_with_empty_axes") != 0;
  std::vector<bool> reduced(xs.size(), axes.empty() && !noop);
  for (int64_t a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank || reduced[a]) return false;
    reduced[a] = true;
  }
  // Each input axis's stride in the output (the kept shape's contiguous strides, 0 on reduced axes).
  std::vector<int64_t> mapped(xs.size(), 0);
  int64_t stride = 1, count = 1;
  for (int64_t a = rank - 1; a >= 0; --a) {
    if (reduced[a]) {
      count *= xs[a];
      continue;
    }
    mapped[a] = stride;
    stride *= xs[a];
  }
  const int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  if (plan_.tensors[y].numel != stride) return false;
  const std::string shape = int64Array("RdShape", xs.empty() ? std::vector<int64_t>{1} : std::vector<int64_t>(xs));
  const std::string strides = int64Array("RdMapped", mapped.empty() ? std::vector<int64_t>{0} : mapped);
  addStep({n->name(), n->opType(), "reduce_mapped"},
          fmt::format("{} '{}' {} over {} element(s) each", n->opType(), n->name(), shapeToString(xs), count),
          fmt::format("reduce_mapped<{}, {}>({}, {}, {}, {}, {}, {}, {}, {});", cppElementType(dt), acc, kind->second,
                      ref(x), ref(y), shape, strides, xs.size(), stride, count),
          {x}, {y});
  return true;
}

}  // namespace tessel::cpu
