// Operators along one axis or over index tensors, of any numeric element type, as generated loops over an
// [outer, n, inner] view (the templates are in the generated prologue, emit_cpp.cpp): ArgMax/ArgMin,
// Softmax/LogSoftmax/Hardmax on any axis (or the opset < 13 2-D form), CumSum, Trilu, GatherElements;
// Shape and Size of a static tensor are constants.
#include <fmt/format.h>

#include <cstring>
#include <set>

#include "lowerer.h"

namespace tessel::cpu {
namespace {

/// The [outer, n, inner] view of shape cut at axis (n is the axis' extent; coerce: every axis from `axis` on).
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
std::optional<AxisView> viewAt(const Shape& s, int64_t axis, bool coerce = false) {
  const int64_t r = static_cast<int64_t>(s.size());
  if (axis < 0) axis += r;
  if (axis < 0 || (axis >= r && !(r == 0 && axis == 0))) return std::nullopt;
  AxisView v;
  for (int64_t a = 0; a < r; ++a) (a < axis ? v.outer : a == axis || coerce ? v.n : v.inner) *= s[a];
  return v;
}

bool numeric(DType t) { return compiledDType(t) && t != DType::Float16 && t != DType::BFloat16 && t != DType::Bool; }

}  // namespace

bool Lowerer::lowerAxisOp(const Node* n) {
  const std::string& op = n->opType();
  static const std::set<std::string> kOps = {"Shape", "Size", "ArgMax", "ArgMin", "Softmax", "LogSoftmax",
                                             "Hardmax", "CumSum", "Trilu", "GatherElements"};
  if (n->domain().empty() && isOp(*n, "LayerNormalization")) return lowerLayerNormRows(n);
  if (n->domain().empty() && (isOp(*n, "NegativeLogLikelihoodLoss") || isOp(*n, "SoftmaxCrossEntropyLoss")))
    return lowerClassLoss(n);
  if (!n->domain().empty() || !kOps.count(op) || n->numInputs() < 1 || !n->input(0) || n->numOutputs() != 1 ||
      !n->output(0))
    return false;
  const Value* xv = definitionOf(n->input(0));
  const DType dt = xv->type.dtype;
  const Shape xs = xv->type.staticShape(), ys = n->output(0)->type.staticShape();
  if (isOp(*n, "Shape") || isOp(*n, "Size")) {  // constants of a static shape
    std::vector<int64_t> values;
    if (isOp(*n, "Size")) {
      values.push_back(shapeSize(xs));
    } else {
      const int64_t r = static_cast<int64_t>(xs.size());
      int64_t start = n->attrInt("start"), end = n->hasAttr("end") ? n->attrInt("end") : r;
      start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
      end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
      for (int64_t a = start; a < end; ++a) values.push_back(xs[a]);
    }
    if (static_cast<int64_t>(values.size()) != shapeSize(ys)) return false;
    std::string bytes(values.size() * sizeof(int64_t), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    PlanTensor t;
    t.name = n->output(0)->name();
    t.shape = ys;
    t.numel = shapeSize(ys);
    t.dtype = DType::Int64;
    t.kind = StorageKind::Weight;
    t.offset = addWeightBytes(bytes) / 4;
    plan_.tensors.push_back(std::move(t));
    ids_[n->output(0)] = static_cast<int>(plan_.tensors.size()) - 1;
    return true;
  }
  if (!numeric(dt)) return false;
  const char* type = cppElementType(dt);
  const int x = tensorOf(xv), y = tensorOf(n->output(0));
  auto step = [&](const std::string& kernel, const std::string& code, std::vector<int> reads) {
    addStep({n->name(), op, kernel}, fmt::format("{} '{}' {} -> {}", op, n->name(), shapeToString(xs), shapeToString(ys)),
            code, std::move(reads), {y});
    return true;
  };
  if (isOp(*n, "ArgMax") || isOp(*n, "ArgMin")) {
    auto v = viewAt(xs, n->attrInt("axis"));
    if (!v || v->n == 0) return false;
    return step("arg_extreme", fmt::format("arg_extreme<{}>({}, {}, {}, {}, {}, {}, {});", type, ref(x), ref(y), v->outer,
                                           v->n, v->inner, isOp(*n, "ArgMax"), n->attrInt("select_last_index") != 0),
                {x});
  }
  if (isOp(*n, "Softmax") || isOp(*n, "LogSoftmax") || isOp(*n, "Hardmax")) {
    if (dt != DType::Float32 && dt != DType::Float64) return false;
    auto v = viewAt(xs, n->attrInt("axis"), n->hasAttr("coerce_2d") && n->attrInt("coerce_2d") != 0);
    if (!v || v->n == 0) return false;
    return step("softmax_axis", fmt::format("softmax_axis<{}>({}, {}, {}, {}, {}, {});", type, ref(x), ref(y), v->outer,
                                            v->n, v->inner, isOp(*n, "Softmax") ? 0 : isOp(*n, "LogSoftmax") ? 1 : 2),
                {x});
  }
  if (isOp(*n, "CumSum")) {
    const Tensor* axis = n->numInputs() > 1 ? constTensor(n->input(1)) : nullptr;
    if (!axis && n->numInputs() > 1 && definitionOf(n->input(1))->type.staticSize() == 1 && !xs.empty()) {
      // The axis is a run-time scalar: the [outer, n, inner] view is computed when the step runs.
      const Value* av = definitionOf(n->input(1));
      const int a = tensorOf(av);
      return step("cum_sum",
                  fmt::format("{{\n    int64_t axis = static_cast<int64_t>(*{0}), view[3] = {{1, 1, 1}};\n"
                              "    if (!axis_view({1}, {2}, axis, view)) {{\n      m->error = {3};\n      return 2;\n    }}\n"
                              "    cum_sum<{4}>({5}, {6}, view[0], view[1], view[2], {7}, {8});\n  }}",
                              ref(a), int64Array("CsX", xs), xs.size(),
                              cppString(n->describe() + ": the axis is outside the input's rank"), type, ref(x), ref(y),
                              n->attrInt("exclusive") != 0, n->attrInt("reverse") != 0),
                  {x, a});
    }
    if (!axis || axis->numel() != 1) return false;
    auto v = viewAt(xs, axis->toInt64Vector()[0]);
    if (!v) return false;
    return step("cum_sum", fmt::format("cum_sum<{}>({}, {}, {}, {}, {}, {}, {});", type, ref(x), ref(y), v->outer, v->n,
                                       v->inner, n->attrInt("exclusive") != 0, n->attrInt("reverse") != 0),
                {x});
  }
  if (isOp(*n, "Trilu")) {
    if (xs.size() < 2) return false;
    const int64_t rows = xs[xs.size() - 2], cols = xs.back();
    std::vector<int> reads{x};
    std::string k = "0";
    if (n->numInputs() > 1 && n->input(1)) {
      const Value* kv = definitionOf(n->input(1));
      if (kv->type.dtype != DType::Int64 || kv->type.staticSize() != 1) return false;
      reads.push_back(tensorOf(kv));
      k = fmt::format("*{}", ref(reads.back()));
    }
    return step("trilu", fmt::format("trilu<{}>({}, {}, {}, {}, {}, {}, {});", type, ref(x), ref(y),
                                     rows * cols == 0 ? 0 : shapeSize(xs) / (rows * cols), rows, cols, k,
                                     !n->hasAttr("upper") || n->attrInt("upper") != 0),
                reads);
  }
  if (isOp(*n, "GatherElements")) {
    const Value* iv = definitionOf(n->input(1));
    const DType it = iv->type.dtype;
    const Shape is = iv->type.staticShape();
    int64_t axis = n->attrInt("axis");
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if ((it != DType::Int64 && it != DType::Int32) || xs.empty() || xs.size() > 8 || is.size() != xs.size() ||
        axis < 0 || axis >= static_cast<int64_t>(xs.size()))
      return false;
    const int i = tensorOf(iv);
    return step("gather_elements",
                fmt::format("if (!gather_elements<{}>(reinterpret_cast<const char*>({}), {}, {}, {}, {}, {}, "
                            "reinterpret_cast<char*>({}), {})) {{\n    m->error = {};\n    return 2;\n  }}",
                            cppElementType(it), ref(x), int64Array("GeX", xs), ref(i), int64Array("GeI", is), xs.size(),
                            axis, ref(y), dtypeSize(dt),
                            cppString(n->describe() + ": an index is out of range")),
                {x, i});
  }
  return false;
}

bool Lowerer::lowerLayerNormRows(const Node* n) {
  if (n->numInputs() < 2 || !n->output(0)) return false;
  const Value* xv = definitionOf(n->input(0));
  const DType dt = xv->type.dtype;
  if (dt != DType::Float32 && dt != DType::Float64) return false;
  const Shape xs = xv->type.staticShape();
  auto v = viewAt(xs, n->attrInt("axis"), true);
  if (!v || v->n == 0) return false;
  std::vector<int> reads{tensorOf(xv)}, writes{tensorOf(n->output(0))};
  std::string operands[2] = {"nullptr", "nullptr"}, stats[2] = {"nullptr", "nullptr"};
  for (size_t i = 1; i < 3 && i < n->numInputs(); ++i) {
    if (!n->input(i)) continue;
    const Value* p = definitionOf(n->input(i));
    if (p->type.dtype != dt || p->type.staticSize() != v->n) return false;  // Scale and B of the normalised shape
    reads.push_back(tensorOf(p));
    operands[i - 1] = ref(reads.back());
  }
  DType stash = DType::Float32;
  for (size_t i = 1; i < 3 && i < n->numOutputs(); ++i) {
    if (!n->output(i)) continue;
    stash = n->output(i)->type.dtype;
    if (stash != DType::Float32 && stash != DType::Float64) return false;
    writes.push_back(tensorOf(n->output(i)));
    stats[i - 1] = ref(writes.back());
  }
  addStep({n->name(), "LayerNormalization", "layer_norm_rows"},
          fmt::format("LayerNormalization '{}' {} rows of {}", n->name(), v->outer, v->n),
          fmt::format("layer_norm_rows<{}, {}>({}, {}, {}, {}, {}, {}, {}, {}, {});", cppElementType(dt),
                      cppElementType(stash), ref(reads[0]), operands[0], operands[1], ref(writes[0]), stats[0],
                      stats[1], v->outer, v->n, n->attrFloat("epsilon")),
          reads, writes);
  return true;
}

bool Lowerer::lowerClassLoss(const Node* n) {
  const bool softmax = isOp(*n, "SoftmaxCrossEntropyLoss");
  if (n->numInputs() < 2 || !n->output(0)) return false;
  const Value* sv = definitionOf(n->input(0));
  const Value* lv = definitionOf(n->input(1));
  const DType dt = sv->type.dtype, lt = lv->type.dtype;
  if ((dt != DType::Float32 && dt != DType::Float64) || (lt != DType::Int64 && lt != DType::Int32)) return false;
  const Shape ss = sv->type.staticShape();
  if (ss.size() < 2) return false;
  const int64_t batch = ss[0], classes = ss[1], rest = shapeSize(ss) / std::max<int64_t>(1, batch * classes);
  if (batch * classes == 0 || lv->type.staticSize() != batch * rest) return false;
  const std::string reduction = n->attrString("reduction");
  const int r = reduction == "none" ? 0 : reduction == "sum" ? 1 : 2;
  std::vector<int> reads{tensorOf(sv), tensorOf(lv)}, writes{tensorOf(n->output(0))};
  std::string weight = "nullptr", logProb = "nullptr";
  if (n->numInputs() > 2 && n->input(2)) {
    const Value* wv = definitionOf(n->input(2));
    if (wv->type.dtype != dt || wv->type.staticSize() != classes) return false;
    reads.push_back(tensorOf(wv));
    weight = ref(reads.back());
  }
  if (softmax && n->numOutputs() > 1 && n->output(1)) {
    writes.push_back(tensorOf(n->output(1)));
    logProb = ref(writes.back());
  }
  const bool ignore = n->hasAttr("ignore_index");
  addStep({n->name(), n->opType(), "class_loss"}, fmt::format("{} '{}' {}", n->opType(), n->name(), shapeToString(ss)),
          fmt::format("if (!class_loss<{}, {}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})) {{\n    m->error = {};\n"
                      "    return 2;\n  }}",
                      cppElementType(dt), cppElementType(lt), ref(reads[0]), ref(reads[1]), weight, ref(writes[0]),
                      logProb, batch, classes, rest, r, softmax, ignore, ignore ? n->attrInt("ignore_index") : 0,
                      cppString(n->describe() + ": a target value is outside the class range")),
          reads, writes);
  return true;
}

}  // namespace tessel::cpu
