// Index-driven operators of any element type as calls to rt/index_ops.h: ScatterElements (and the older
// Scatter), ScatterND, GatherND, OneHot, Compress, TopK, EyeLike, Pad (run-time pads), and DepthToSpace /
// SpaceToDepth as transposes of a 6-D view; TfIdfVectorizer over integer tokens (rt/text_ops.h). Run-time operands that decide a shape
// (OneHot's depth, TopK's K, Compress's condition) are checked against the planned output shape when the
// step runs; an index out of range fails the run naming the node.
#include <fmt/format.h>

#include <set>

#include "lowerer.h"

namespace tessel::cpu {
namespace {

bool isIndex(DType t) { return t == DType::Int64 || t == DType::Int32; }
bool movable(DType t) { return compiledDType(t); }
bool arithmetic(DType t) { return compiledDType(t) && t != DType::Float16 && t != DType::BFloat16; }

/// The `if (!call) { m->error = ...; return 2; }` block of a step whose kernel can refuse its operands.
std::string checked(const std::string& call, const Node* n, const std::string& why) {
  return fmt::format("if (!{}) {{\n    m->error = {};\n    return 2;\n  }}", call, cppString(n->describe() + ": " + why));
}

std::optional<std::string> reductionOf(const Node* n) {
  const std::string r = n->hasAttr("reduction") ? n->attrString("reduction") : "none";
  if (r == "none") return "None";
  if (r == "add") return "Add";
  if (r == "mul") return "Mul";
  if (r == "max") return "Max";
  if (r == "min") return "Min";
  return std::nullopt;
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

}  // namespace

bool Lowerer::lowerIndexOp(const Node* n) {
  static const std::set<std::string> kOps = {"ScatterElements", "Scatter", "ScatterND", "GatherND", "OneHot",
                                             "Compress", "TopK", "EyeLike", "Pad", "DepthToSpace", "SpaceToDepth"};
  if (!n->domain().empty() || !kOps.count(n->opType()) || !n->output(0)) return false;
  const std::string& op = n->opType();
  const Value* xv = definitionOf(n->input(0));
  const DType dt = xv->type.dtype, yt = n->output(0)->type.dtype;
  const Shape xs = xv->type.staticShape(), ys = n->output(0)->type.staticShape();
  if (xs.size() > 8 || ys.size() > 8) return false;
  std::vector<int> reads{tensorOf(xv)}, writes{tensorOf(n->output(0))};
  const std::string x = ref(reads[0]), y = ref(writes[0]);
  auto operand = [&](size_t i) {
    reads.push_back(tensorOf(definitionOf(n->input(i))));
    return ref(reads.back());
  };
  auto step = [&](const std::string& kernel, const std::string& code) {
    addStep({n->name(), op, kernel}, fmt::format("{} '{}' {} -> {}", op, n->name(), shapeToString(xs), shapeToString(ys)),
            code, reads, writes);
    return true;
  };
  const std::string copy = fmt::format("std::memcpy({}, {}, {});\n  ", y, x, shapeSize(xs) * dtypeSize(dt));
  if (isOp(*n, "ScatterElements") || isOp(*n, "Scatter")) {
    const Value* iv = definitionOf(n->input(1));
    const auto red = reductionOf(n);
    int64_t axis = n->attrInt("axis");
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (!isIndex(iv->type.dtype) || !red || (*red != "None" ? !arithmetic(dt) : !movable(dt)) || axis < 0 ||
        axis >= static_cast<int64_t>(xs.size()) || iv->type.rank() != xs.size())
      return false;
    const std::string i = operand(1), u = operand(2);
    return step("scatter_elements",
                copy + checked(fmt::format("rt::scatter_elements({}, {}, {}, {}, {}, {}, {}, rt::ScatterReduction::{})", y,
                                           int64Array("ScX", xs), i, u, int64Array("ScI", iv->type.staticShape()),
                                           xs.size(), axis, *red),
                               n, "an index is out of range"));
  }
  if (isOp(*n, "ScatterND") || isOp(*n, "GatherND")) {
    const Value* iv = definitionOf(n->input(1));
    const Shape is = iv->type.staticShape();
    const int64_t batch = isOp(*n, "GatherND") ? n->attrInt("batch_dims") : 0;
    if (!isIndex(iv->type.dtype) || is.empty() || batch < 0 || batch + 1 > static_cast<int64_t>(is.size())) return false;
    const int64_t k = is.back();
    if (batch + k > static_cast<int64_t>(xs.size())) return false;
    const int64_t tuples = product(is, batch, is.size() - 1), slice = product(xs, batch + k, xs.size());
    const std::string i = operand(1);
    if (isOp(*n, "GatherND")) {
      if (!movable(dt)) return false;
      return step("gather_nd", checked(fmt::format("rt::gather_nd({}, {}, {}, {}, {}, {}, {}, {}, {}, {})", x,
                                                   int64Array("GnX", xs), xs.size(), batch, i, tuples, k, slice,
                                                   dtypeSize(dt), y),
                                       n, "an index is out of range"));
    }
    const auto red = reductionOf(n);
    if (!red || (*red != "None" ? !arithmetic(dt) : !movable(dt))) return false;
    const std::string u = operand(2);
    return step("scatter_nd",
                copy + checked(fmt::format("rt::scatter_nd({}, {}, {}, {}, {}, {}, {}, {}, rt::ScatterReduction::{})", y,
                                           int64Array("SnX", xs), xs.size(), i, tuples, k, u, slice, *red),
                               n, "an index is out of range"));
  }
  if (isOp(*n, "OneHot")) {
    const Value* dv = definitionOf(n->input(1));
    const Value* vv = definitionOf(n->input(2));
    int64_t axis = n->attrInt("axis");
    const int64_t r = static_cast<int64_t>(xs.size());
    if (axis < 0) axis += r + 1;
    if (!arithmetic(dt) || dv->type.staticSize() != 1 || !arithmetic(dv->type.dtype) ||
        vv->type.staticSize() != 2 || !movable(yt) || axis < 0 || axis > r || ys.size() != xs.size() + 1)
      return false;
    const std::string d = operand(1), v = operand(2);
    return step("one_hot", checked(fmt::format("rt::one_hot({}, {}, {}, static_cast<double>(*{}), {}, {}, {})", x,
                                               product(xs, 0, axis), product(xs, axis, xs.size()), d, ys[axis], v, y),
                                   n, "the depth differs from the one this model was compiled for"));
  }
  if (isOp(*n, "Compress")) {
    const Value* cv = definitionOf(n->input(1));
    const bool flat = !n->hasAttr("axis");
    int64_t axis = flat ? 0 : n->attrInt("axis");
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (!movable(dt) || cv->type.rank() != 1 || axis < 0 || (!flat && axis >= static_cast<int64_t>(xs.size())))
      return false;
    const Shape view = flat ? Shape{shapeSize(xs)} : xs;
    const std::string c = operand(1);
    return step("compress",
                checked(fmt::format("rt::compress({}, {}, {}, {}, {}, {}, {}, {})", x, c, cv->type.staticSize(),
                                    product(view, 0, axis), view[axis], product(view, axis + 1, view.size()) * dtypeSize(dt),
                                    flat ? shapeSize(ys) : ys[axis], y),
                        n, "its condition keeps another number of entries than this model was compiled for"));
  }
  if (isOp(*n, "TopK")) {
    int64_t axis = n->attrInt("axis");
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    if (!arithmetic(dt) || axis < 0 || axis >= static_cast<int64_t>(xs.size()) || n->numOutputs() < 2 || !n->output(1) ||
        definitionOf(n->input(1))->type.staticSize() != 1 || (n->hasAttr("sorted") && n->attrInt("sorted") == 0))
      return false;
    writes.push_back(tensorOf(n->output(1)));
    const std::string k = operand(1);
    return step("top_k", checked(fmt::format("rt::top_k({}, {}, {}, {}, {}, {}, static_cast<int64_t>(*{}), {}, {})", x, y,
                                             ref(writes[1]), product(xs, 0, axis), xs[axis],
                                             product(xs, axis + 1, xs.size()), k, ys[axis],
                                             n->attrInt("largest") != 0),
                                 n, "K differs from the one this model was compiled for"));
  }
  if (isOp(*n, "Pad")) {
    const std::string mode = n->attrString("mode");
    if (!movable(dt) || xs.empty() || (n->numInputs() > 3 && n->input(3)) || n->numInputs() < 2 || !n->input(1) ||
        (mode != "constant" && mode != "reflect" && mode != "edge"))
      return false;
    const Value* pv = definitionOf(n->input(1));
    if (!isIndex(pv->type.dtype) || pv->type.staticSize() != 2 * static_cast<int64_t>(xs.size())) return false;
    const std::string pads = operand(1);
    std::string value = "nullptr";
    if (n->numInputs() > 2 && n->input(2) && definitionOf(n->input(2))->type.staticSize() > 0) {
      if (definitionOf(n->input(2))->type.dtype != dt) return false;
      value = operand(2);
    }
    return step("pad_nd", checked(fmt::format("rt::pad_nd({}, {}, {}, {}, rt::PadMode::{}, {}, {}, {}, {})", x,
                                              int64Array("PadX", xs), pads, xs.size(),
                                              mode == "edge" ? "Edge" : mode == "reflect" ? "Reflect" : "Constant", value,
                                              dtypeSize(dt), y, int64Array("PadY", ys)),
                                  n, "its pads give another output shape than this model was compiled for"));
  }
  if (isOp(*n, "DepthToSpace") || isOp(*n, "SpaceToDepth")) {  // a transpose of a 6-D view
    const int64_t b = n->attrInt("blocksize");
    if (dt != DType::Float32 || xs.size() != 4 || b < 1) return false;
    const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
    Shape view;
    std::vector<int64_t> perm;
    if (isOp(*n, "SpaceToDepth")) {
      if (H % b || W % b) return false;
      view = {N, C, H / b, b, W / b, b}, perm = {0, 3, 5, 1, 2, 4};
    } else if (C % (b * b)) {
      return false;
    } else if (n->attrString("mode") == "CRD") {
      view = {N, C / (b * b), b, b, H, W}, perm = {0, 1, 4, 2, 5, 3};
    } else {
      view = {N, b, b, C / (b * b), H, W}, perm = {0, 3, 4, 1, 5, 2};
    }
    return step("transpose", fmt::format("rt::transpose({}, {}, {}, 6, {}, pool);", x, int64Array("DsView", view),
                                         int64Array("DsPerm", perm), y));
  }
  if (isOp(*n, "EyeLike")) {
    if (!arithmetic(yt) || ys.size() != 2) return false;
    return step("eye_like", fmt::format("rt::eye_like({}, {}, {}, {});", y, ys[0], ys[1], n->attrInt("k")));
  }
  return false;
}

}  // namespace tessel::cpu

namespace tessel::cpu {

bool Lowerer::lowerTfIdf(const Node* n) {
  const Value* xv = definitionOf(n->input(0));
  const Shape xs = xv->type.staticShape(), ys = n->output(0)->type.staticShape();
  if (!isIndex(xv->type.dtype) || (xs.size() != 1 && xs.size() != 2) || !n->hasAttr("pool_int64s") ||
      ys.empty() || n->output(0)->type.dtype != DType::Float32)
    return false;
  const std::string mode = n->attrString("mode");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") return false;
  const std::vector<int64_t> pool = n->attrInts("pool_int64s"), counts = n->attrInts("ngram_counts"),
                             indexes = n->attrInts("ngram_indexes");
  // ngram_counts[level] is where the (level + 1)-grams start in the pool.
  std::vector<int64_t> first, length, column;
  for (size_t level = 0; level < counts.size(); ++level) {
    const int64_t size = static_cast<int64_t>(level + 1);
    const int64_t begin = counts[level],
                  end = level + 1 < counts.size() ? counts[level + 1] : static_cast<int64_t>(pool.size());
    for (int64_t at = begin; at + size <= end; at += size) {
      if (column.size() >= indexes.size()) return false;
      first.push_back(at), length.push_back(size), column.push_back(indexes[column.size()]);
    }
  }
  const int64_t width = ys.back();
  std::string weights = "nullptr";
  if (n->hasAttr("weights")) {
    const std::vector<float> w = n->attrFloats("weights");
    if (static_cast<int64_t>(w.size()) < width) return false;
    weights = fmt::format("kTfW{}", shapeCounter_++);
    std::string values;
    for (float v : w) values += floatLiteral(v) + ", ";
    plan_.globals += fmt::format("static const float {}[] = {{{}}};\n", weights, values);
  }
  const int x = tensorOf(xv), y = tensorOf(n->output(0));
  addStep({n->name(), "TfIdfVectorizer", "tfidf_vectorize"},
          fmt::format("TfIdfVectorizer '{}' {} -> {}, {} n-grams", n->name(), shapeToString(xs), shapeToString(ys),
                      column.size()),
          fmt::format("rt::tfidf_vectorize({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, rt::TfIdfMode::{}, {}, {}, {});",
                      ref(x), xs.size() == 2 ? xs[0] : 1, xs.back(), n->attrInt("min_gram_length"),
                      n->attrInt("max_gram_length"), n->attrInt("max_skip_count"), int64Array("TfPool", pool),
                      int64Array("TfFirst", first), int64Array("TfN", length), int64Array("TfCol", column),
                      column.size(), mode, weights, width, ref(y)),
          {x}, {y});
  return true;
}

}  // namespace tessel::cpu
