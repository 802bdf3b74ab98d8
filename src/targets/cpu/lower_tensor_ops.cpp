// Lowering of the tensor operators transformer models are made of: MatMul of two computed operands
// (batched, numpy broadcasting resolved here into per-batch offsets), tessel.Attention, LayerNormalization
// over trailing axes, Transpose, Split and Concat (inputs written in place where they can be), and nodes of
// any element type (Gather, Slice, Cast, broadcasting comparisons and logic). A node outside what a kernel
// covers returns false and runs through the host fallback.
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "lowerer.h"
#include "tessel/support/error.h"

namespace tessel::cpu {
namespace {

int64_t product(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, s.size());
  if (from >= to) return 1;
  const auto first = s.begin() + static_cast<std::ptrdiff_t>(from), last = s.begin() + static_cast<std::ptrdiff_t>(to);
  return std::accumulate(first, last, int64_t{1}, std::multiplies<>());
}

/// Clip of any element type with its min (b) and max (c) operands when given (a run-time or non-float bound:
/// the activation kernels take constant float bounds); opset < 11's attributes are the activation path's.
std::optional<ElementExpr> clipExpression(const Node* n) {
  if (n->hasAttr("min") || n->hasAttr("max")) return std::nullopt;
  std::string e = "a";
  if (n->numInputs() > 1 && n->input(1)) e = fmt::format("({0} < b ? b : {0})", e);
  if (n->numInputs() > 2 && n->input(2)) e = fmt::format("({0} > c ? c : {0})", e);
  return ElementExpr{e, n->numInputs()};
}

/// An ONNX axis attribute (negative: from the end) as an index into a shape of `rank` dims, or nullopt.
std::optional<size_t> axisIndex(int64_t axis, size_t rank) {
  if (axis < 0) axis += static_cast<int64_t>(rank);
  if (axis < 0 || axis >= static_cast<int64_t>(rank)) return std::nullopt;
  return static_cast<size_t>(axis);
}

/// The strides, along each axis of `out`, of an operand of shape `dims` right-aligned against it (numpy
/// broadcasting: 0 along the axes where the operand has size 1 or none), each element `unit` apart; nullopt
/// when dims does not broadcast to out.
std::optional<std::vector<int64_t>> broadcastStrides(const Shape& dims, const Shape& out, int64_t unit) {
  const size_t r = out.size();
  if (dims.size() > r) return std::nullopt;
  std::vector<int64_t> stride(r, 0);
  int64_t s = unit;
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t axis = r - 1 - k, d = dims.size() - 1 - k;
    if (dims[d] != 1 && dims[d] != out[axis]) return std::nullopt;
    stride[axis] = dims[d] == 1 ? 0 : s;
    s *= dims[d];
  }
  return stride;
}

/// Offsets (in floats) of each batch of an operand with batch dims `dims` (right-aligned) inside an
/// output batch of dims `out`, each batch `matrix` floats: numpy broadcasting (size-1 dims repeat).
std::vector<int64_t> batchOffsets(const Shape& dims, const Shape& out, int64_t matrix) {
  const size_t r = out.size();
  const std::vector<int64_t> stride = *broadcastStrides(dims, out, matrix);  // out is dims' broadcast
  std::vector<int64_t> offsets(static_cast<size_t>(product(out)));
  std::vector<int64_t> idx(r, 0);
  for (int64_t& off : offsets) {
    off = 0;
    for (size_t a = 0; a < r; ++a) off += idx[a] * stride[a];
    for (size_t a = r; a-- > 0;) {
      if (++idx[a] < out[a]) break;
      idx[a] = 0;
    }
  }
  return offsets;
}

}  // namespace

bool Lowerer::lowerMatMulBatched(const Node* n) {
  Shape as = n->input(0)->type.staticShape(), bs = n->input(1)->type.staticShape();
  if (as.empty() || bs.empty()) return false;
  // 1-D operands: [K] is [1, K] on the left, [K, 1] on the right (ONNX/numpy); the output drops that axis.
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K) return false;
  const Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  Shape out(std::max(aBatch.size(), bBatch.size()), 1);
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t da = k < aBatch.size() ? aBatch[aBatch.size() - 1 - k] : 1;
    const int64_t db = k < bBatch.size() ? bBatch[bBatch.size() - 1 - k] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[out.size() - 1 - k] = std::max(da, db);
  }
  const int64_t batch = product(out);
  const std::string aOff = int64Array("MatA", batchOffsets(aBatch, out, M * K));
  const std::string bOff = int64Array("MatB", batchOffsets(bBatch, out, K * N));
  const int a = tensorOf(n->input(0)), b = tensorOf(n->input(1)), y = tensorOf(n->output(0));
  const double flops = 2.0 * batch * M * N * K;
  plan_.report.flops += flops;
  addStep({n->name(), "MatMul", "matmul_batched", flops},
          fmt::format("MatMul '{}' {} x ({}x{} by {}x{})", n->name(), batch, M, K, K, N),
          fmt::format("rt::matmul_batched({}, {}, {}, {}, {}, {}, {}, {}, {}, pool);", ref(a), aOff, ref(b), bOff,
                      ref(y), batch, M, N, K),
          {a, b}, {y});
  return true;
}

bool Lowerer::lowerAttention(const Node* n) {
  const Shape qs = n->input(0)->type.staticShape(), ks = n->input(1)->type.staticShape(),
              vs = n->input(2)->type.staticShape(), ys = n->output(0)->type.staticShape();
  if (qs.size() < 2 || ks.size() != qs.size() || vs.size() != qs.size()) return false;
  const size_t r = qs.size();
  // The kernel takes one batch for all three operands: no broadcasting between them.
  for (size_t i = 0; i + 2 < r; ++i)
    if (qs[i] != ks[i] || qs[i] != vs[i]) return false;
  const int64_t M = qs[r - 2], d = qs[r - 1], T = ks[r - 1], dv = vs[r - 1];
  if (ks[r - 2] != d || vs[r - 2] != T) return false;
  const int64_t batch = product(qs, 0, r - 2);
  const int q = tensorOf(n->input(0)), k = tensorOf(n->input(1)), v = tensorOf(n->input(2)),
            y = tensorOf(n->output(0));
  const float scale = n->attrFloat("scale");
  const double flops = 2.0 * batch * M * T * (d + dv);
  plan_.report.flops += flops;
  addStep({n->name(), "Attention", "attention", flops},
          fmt::format("Attention '{}' {} x (softmax({}x{} by {}x{}) by {}x{}) -> {}", n->name(), batch, M, d, d, T,
                      T, dv, shapeToString(ys)),
          fmt::format("rt::attention({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, pool);", ref(q), ref(k), ref(v), ref(y),
                      batch, M, d, T, dv, floatLiteral(scale)),
          {q, k, v}, {y});
  return true;
}

bool Lowerer::lowerLayerNorm(const Node* n) {
  // Mean and InvStdDev outputs (training) are not computed by the kernel.
  for (size_t i = 1; i < n->numOutputs(); ++i)
    if (n->output(i) && (!n->output(i)->uses().empty() || isGraphOutput(n->output(i)))) return false;
  const Shape xs = n->input(0)->type.staticShape();
  const auto axis = axisIndex(n->attrInt("axis"), xs.size());
  if (!axis) return false;
  const int64_t cols = product(xs, *axis), rows = product(xs) / std::max<int64_t>(cols, 1);
  // Scale and bias must cover the normalised axes element for element (no broadcasting inside them).
  for (size_t i = 1; i < 3; ++i)
    if (n->hasInput(i) && n->input(i)->type.staticSize() != cols) return false;
  const int x = tensorOf(n->input(0)), y = tensorOf(n->output(0)), g = tensorOf(n->input(1));
  const int b = n->hasInput(2) ? tensorOf(n->input(2)) : -1;
  std::vector<int> reads = {x, g};
  if (b >= 0) reads.push_back(b);
  addStep({n->name(), "LayerNormalization", "layer_norm"},
          fmt::format("LayerNormalization '{}' {} rows of {}", n->name(), rows, cols),
          fmt::format("rt::layer_norm({}, {}, {}, {}, {}, {}, {}, pool);", ref(x), ref(g), b >= 0 ? ref(b) : "nullptr",
                      ref(y), rows, cols, floatLiteral(n->attrFloat("epsilon"))),
          reads, {y}, x);
  return true;
}

bool Lowerer::lowerTranspose(const Node* n) {
  const Shape xs = n->input(0)->type.staticShape();
  std::vector<int64_t> perm(xs.size());
  if (n->hasAttr("perm")) {
    perm = n->attrInts("perm");
  } else {
    std::iota(perm.rbegin(), perm.rend(), 0);  // reversed axes
  }
  if (perm.size() != xs.size() || xs.size() > 8) return false;
  const int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  const std::string shape = int64Array("TrShape", xs), p = int64Array("TrPerm", perm);
  addStep({n->name(), "Transpose", "transpose"},
          fmt::format("Transpose '{}' {} perm [{}]", n->name(), shapeToString(xs), fmt::join(perm, ", ")),
          fmt::format("rt::transpose({}, {}, {}, {}, {}, pool);", ref(x), shape, p, xs.size(), ref(y)), {x}, {y});
  return true;
}

bool Lowerer::lowerSplit(const Node* n) {
  const Shape xs = n->input(0)->type.staticShape();
  const auto found = axisIndex(n->attrInt("axis"), xs.size());
  if (!found) return false;
  const size_t axis = *found;
  const int64_t outer = product(xs, 0, axis), inner = product(xs, axis + 1);
  const int x = tensorOf(n->input(0));
  // With nothing outside the split axis, each output is a contiguous slice of the input: an alias with
  // an offset, no copy. Otherwise each output copies its rows.
  const bool slices = outer == 1;
  std::string code;
  std::vector<int> writes;
  int64_t offset = 0;
  for (size_t i = 0; i < n->numOutputs(); ++i) {
    const Value* o = n->output(i);
    if (!o) return false;
    const int64_t chunk = o->type.staticShape()[axis] * inner;
    const int y = tensorOf(o);
    if (slices && !isGraphOutput(o)) {
      plan_.tensors[y].aliasOf = x;
      plan_.tensors[y].aliasOffset = offset;
    } else {
      code += fmt::format("split_part({}, {}, {}, {}, {}, {});\n  ", ref(x), ref(y), outer, chunk, xs[axis] * inner,
                          offset);
      writes.push_back(y);
    }
    offset += chunk;
  }
  if (code.empty()) return true;
  code.resize(code.size() - 3);
  addStep({n->name(), "Split", "split_part"}, fmt::format("Split '{}' {} along axis {}", n->name(), shapeToString(xs), axis),
          code, {x}, writes);
  return true;
}

bool Lowerer::lowerGather(const Node* n) {
  const Value* data = n->input(0);
  const Value* indices = n->input(1);
  const DType it = indices->type.dtype;
  if (it != DType::Int64 && it != DType::Int32) return false;
  const Shape ds = data->type.staticShape();
  const auto found = axisIndex(n->attrInt("axis"), ds.size());
  if (!found) return false;
  const size_t axis = *found;
  const int64_t outer = product(ds, 0, axis), dim = ds[axis];
  const int64_t innerBytes = product(ds, axis + 1) * static_cast<int64_t>(dtypeSize(data->type.dtype));
  const int d = tensorOf(data), i = tensorOf(indices), y = tensorOf(n->output(0));
  const int64_t count = plan_.tensors[i].numel;
  const bool i64 = plan_.tensors[i].dtype == DType::Int64;
  addStep({n->name(), "Gather", "gather"},
          fmt::format("Gather '{}' {} indices into axis {} of {}", n->name(), count, axis, shapeToString(ds)),
          fmt::format("if (!rt::gather({}, {}, {}, {}, {}, {}, {}, {}, pool)) {{\n"
                      "    m->error = {};\n    return 2;\n  }}",
                      ref(d), outer, dim, innerBytes, i64 ? ref(i) : "nullptr", i64 ? "nullptr" : ref(i), count,
                      ref(y), cppString(fmt::format("{}: an index is out of range [{}, {})", n->describe(), -dim, dim))),
          {d, i}, {y});
  return true;
}

bool Lowerer::lowerSlice(const Node* n) {
  const Shape xs = n->input(0)->type.staticShape(), ys = n->output(0)->type.staticShape();
  const size_t r = xs.size();
  // starts/ends/axes/steps: inputs from opset 10, attributes before; they must be known here.
  auto ints = [&](size_t input, const char* attr) -> std::optional<std::vector<int64_t>> {
    if (n->numInputs() > 1) {
      if (!n->hasInput(input)) return std::vector<int64_t>{};
      const Tensor* t = constTensor(n->input(input));
      if (!t) return std::nullopt;
      std::vector<int64_t> v(static_cast<size_t>(t->numel()));
      for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<int64_t>(t->elementAsDouble(static_cast<int64_t>(k)));
      return v;
    }
    return n->hasAttr(attr) ? n->attrInts(attr) : std::vector<int64_t>{};
  };
  auto starts = ints(1, "starts"), axes = ints(3, "axes"), steps = ints(4, "steps");
  if (!starts || !axes || !steps || ys.size() != r || r > 8) return false;
  std::vector<int64_t> start(r, 0), step(r, 1);
  for (size_t k = 0; k < starts->size(); ++k) {
    int64_t a = k < axes->size() ? (*axes)[k] : static_cast<int64_t>(k);
    if (a < 0) a += static_cast<int64_t>(r);
    if (a < 0 || a >= static_cast<int64_t>(r)) return false;
    const int64_t st = k < steps->size() ? (*steps)[k] : 1, dim = xs[a];
    if (st == 0) return false;
    int64_t s0 = (*starts)[k] < 0 ? (*starts)[k] + dim : (*starts)[k];
    s0 = st > 0 ? std::clamp<int64_t>(s0, 0, dim) : std::clamp<int64_t>(s0, 0, dim - 1);
    start[a] = s0, step[a] = st;
  }
  const int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  // A contiguous block (unit steps, every axis before the first cut one of size 1, every axis after it
  // whole) is a slice of the input's storage: an alias with an offset, no copy.
  size_t cut = 0;  // the first axis the slice cuts
  while (cut < r && ys[cut] == xs[cut]) ++cut;
  bool contiguous = std::all_of(step.begin(), step.end(), [](int64_t s) { return s == 1; });
  if (cut < r) {
    contiguous = contiguous && product(xs, 0, cut) == 1;
    for (size_t a = cut + 1; a < r; ++a) contiguous = contiguous && ys[a] == xs[a];
  }
  if (contiguous && !isGraphOutput(n->output(0))) {
    int64_t offset = 0;
    if (cut < r) offset = start[cut] * product(xs, cut + 1);
    plan_.tensors[y].aliasOf = x;
    plan_.tensors[y].aliasOffset = offset;
    return true;
  }
  const std::string xsName = int64Array("SlX", xs), startName = int64Array("SlStart", start),
                    stepName = int64Array("SlStep", step), ysName = int64Array("SlY", ys);
  addStep({n->name(), "Slice", "strided_copy"}, fmt::format("Slice '{}' {} -> {}", n->name(), shapeToString(xs), shapeToString(ys)),
          fmt::format("rt::strided_copy({}, {}, {}, {}, {}, {}, {}, {}, pool);", ref(x), xsName, startName, stepName,
                      ysName, r, dtypeSize(n->input(0)->type.dtype), ref(y)),
          {x}, {y});
  return true;
}

bool Lowerer::lowerCast(const Node* n) {
  // CastLike converts to the element type of its second input: the output's.
  const DType from = n->input(0)->type.dtype, to = n->output(0)->type.dtype;
  const int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  const int64_t count = plan_.tensors[x].numel;
  const std::string what = fmt::format("{} '{}' {} -> {}, {} elements", n->opType(), n->name(), dtypeName(from),
                                       dtypeName(to), count);
  auto plain = [](DType t) { return t != DType::Float16 && t != DType::BFloat16; };
  if (plain(from) && plain(to)) {
    addStep({n->name(), n->opType(), "cast_copy"}, what,
            fmt::format("cast_copy<{}, {}>({}, {}, {});", cppElementType(to), to == DType::Bool ? "true" : "false",
                        ref(x), ref(y), count),
            {x}, {y});
    return true;
  }
  // 16-bit floats through float; f32 -> bf16 truncates (ONNX 1.12's Cast, as the interpreter).
  std::string value = loadElement(from, "x[i]");
  if (from == DType::Float64 || isInteger(from)) value = fmt::format("static_cast<float>({})", value);
  std::string store = from == DType::Float32 && to == DType::BFloat16 ? "rt::float_to_bf16_truncate(" + value + ")"
                      : to == DType::Bool                             ? fmt::format("{} != 0", value)
                                                                      : storeElement(to, value);
  addStep({n->name(), n->opType(), "cast_convert"}, what,
          fmt::format("{{\n    const auto* x = {};\n    auto* y = {};\n    for (int64_t i = 0; i < {}; ++i) y[i] = {};\n  }}",
                      ref(x), ref(y), count, store),
          {x}, {y});
  return true;
}

bool Lowerer::lowerBroadcastOp(const Node* n) {
  // Element-wise ops of any element type with numpy broadcasting, written as one scalar expression per
  // element (masks and index arithmetic in transformer exports: Equal, Where, Expand, Not, ...; the
  // expressions: element_expressions.cpp).
  const std::optional<ElementExpr> e = isOp(*n, "Clip") ? clipExpression(n) : elementExpression(n);
  if (!e) return false;
  const std::string& expr = e->expr;
  const size_t arity = e->arity;
  const Shape ys = n->output(0)->type.staticShape();
  const size_t r = ys.size();
  if (r > 8) return false;
  const int y = tensorOf(n->output(0));
  std::vector<int> ins;
  std::string strides, params, names = "abc";
  for (size_t k = 0; k < arity; ++k) {
    const Value* v = n->input(k);
    if (v == nullptr) {  // an absent optional operand (Clip's min): the expression does not read it
      strides += fmt::format("{}{{}}", k ? ", " : "");
      continue;
    }
    const Shape vs = v->type.staticShape();
    // Strides of the input right-aligned against the output; 0 where it is broadcast.
    auto st = broadcastStrides(vs, ys, 1);
    if (!st) return false;
    st->resize(8, 0);
    ins.push_back(tensorOf(v));
    strides += fmt::format("{}{{{}}}", k ? ", " : "", fmt::join(*st, ", "));
    params += fmt::format("    const auto {} = {};\n", names[k],
                          loadElement(v->type.dtype, fmt::format("{}[off[{}]]", ref(ins.back()), k)));
  }
  // An integer Div or Mod by zero has no value: the run fails naming the node, as the interpreter does.
  const DType yt = n->output(0)->type.dtype;
  std::string guard;
  if ((isOp(*n, "Div") || isOp(*n, "Mod")) && !isFloat(yt))
    guard = fmt::format("if (any_zero({}, {})) {{\n    m->error = {};\n    return 2;\n  }}\n  ", ref(ins[1]),
                        plan_.tensors[ins[1]].numel, cppString(n->describe() + ": an integer division by zero"));
  const std::string shape = int64Array("BcShape", ys.empty() ? std::vector<int64_t>{1} : std::vector<int64_t>(ys));
  const std::string code = fmt::format(
      "{{\n    static const int64_t kStrides[{}][8] = {{{}}};\n"
      "    auto* y = {};\n"
      "    for_each_broadcast<{}>({}, {}, kStrides, [&](int64_t i, const int64_t* off) {{\n{}"
      "      y[i] = {};\n    }});\n  }}",
      arity, strides, ref(y), arity, shape, std::max<size_t>(r, 1), params, storeElement(yt, expr));
  addStep({n->name(), n->opType(), "broadcast_loop"},
          fmt::format("{} '{}' -> {} {}", n->opType(), n->name(), dtypeName(yt), shapeToString(ys)), guard + code, ins,
          {y});
  return true;
}

// ShuffleNet's channel shuffle at batch 1: Concat along channels, Reshape [1, C, H, W] -> [1, G, C/G, H, W],
// Transpose [0, 2, 1, 3, 4], each the only user of the one before. One step copies every input plane straight to
// its shuffled place (concat channel g C/G + j is output channel j G + g), read from wherever the inputs are.
// Otherwise the Concat copies the inputs it cannot write in place (the half passed through from the previous
// block, a view of its shuffle) and the Transpose copies everything again: 0.5 + 1 plane copies per channel
// against 1, and one kernel call instead of two.
std::optional<Lowerer::ShuffleOfConcat> Lowerer::shuffleOfConcat(const Node* n) const {
  if (!isOp(*n, "Concat") || absorbed_.count(n)) return std::nullopt;
  const Value* cat = n->output(0);
  if (!cat->type.isStatic() || cat->type.rank() != 4 || runsBlocked(*n)) return std::nullopt;
  const Shape cs = cat->type.staticShape();
  int64_t axis = n->attrInt("axis");
  if (axis < 0) axis += 4;
  if (axis != 1 || cs[0] != 1) return std::nullopt;
  const Node* r = singleUser(cat);
  if (!r || !isOp(*r, "Reshape") || absorbed_.count(r) || runsBlocked(*r) || r->input(0) != cat) return std::nullopt;
  const Value* rv = r->output(0);
  if (!rv->type.isStatic() || rv->type.rank() != 5) return std::nullopt;
  const Shape rs = rv->type.staticShape();
  if (rs[0] != 1 || rs[1] * rs[2] != cs[1] || rs[3] != cs[2] || rs[4] != cs[3]) return std::nullopt;
  const Node* t = singleUser(rv);
  if (!t || !isOp(*t, "Transpose") || absorbed_.count(t) || runsBlocked(*t) || !t->hasAttr("perm") ||
      t->attrInts("perm") != std::vector<int64_t>{0, 2, 1, 3, 4} || !t->output(0)->type.isStatic())
    return std::nullopt;
  for (const Value* in : n->inputs())
    if (!in || !in->type.isStatic() || in->type.dtype != DType::Float32) return std::nullopt;
  return ShuffleOfConcat{r, t, rs[1], rs[2]};
}

bool Lowerer::lowerShuffledConcat(const Node* n) {
  const auto shuffle = shuffleOfConcat(n);
  if (!shuffle) return false;
  const Node* r = shuffle->reshape;
  const Node* t = shuffle->transpose;
  const Shape cs = n->output(0)->type.staticShape();
  const int64_t G = shuffle->groups, K = shuffle->perGroup, C = cs[1], hw = cs[2] * cs[3];
  const int y = tensorOf(t->output(0));
  std::string code = fmt::format("{{\n    const float* src[{}];\n", C);
  std::vector<int> reads;
  int64_t offset = 0;
  for (const Value* in : n->inputs()) {
    const int64_t c = in->type.staticShape()[1];
    std::string plane = "nullptr";  // its conv wrote these planes (and only this one occurrence)
    if (!inPlaceShuffleInputs_.count(in)) {
      const int x = tensorOf(in);
      plane = fmt::format("{} + (p - {}) * {}", ref(x), offset, hw);
      reads.push_back(x);
    }
    code += fmt::format("    for (int64_t p = {}; p < {}; ++p) src[p % {} * {} + p / {}] = {};\n", offset, offset + c, K,
                        G, K, plane);
    offset += c;
  }
  code += fmt::format("    rt::gather_planes(src, {}, {}, {}, pool);\n  }}", ref(y), C, hw);
  absorbed_.insert(r);
  absorbed_.insert(t);
  plan_.report.fusedNodes += 2;
  plan_.report.shuffledConcats++;
  addStep({t->name(), "Concat+shuffle", "gather_planes"},
          fmt::format("Concat '{}' and channel shuffle '{}' -> {} ({} groups)", n->name(), t->name(),
                      shapeToString(cs), G),
          code, reads, {y});
  return true;
}

bool Lowerer::lowerConcat(const Node* n) {
  if (lowerShuffledConcat(n)) return true;
  for (const Value* in : n->inputs())
    if (inPlaceShuffleInputs_.count(in))
      throw InternalError(fmt::format("cpu lowering: {} was to gather its shuffle, whose input '{}' a conv wrote in place",
                                      n->describe(), in->name()));
  int y = tensorOf(n->output(0));
  const Shape ys = plan_.tensors[y].shape;  // a copy: tensorOf() below may grow plan_.tensors
  int64_t axis = n->attrInt("axis");
  if (axis < 0) axis += static_cast<int64_t>(ys.size());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= ys[i];
  for (size_t i = axis + 1; i < ys.size(); ++i) inner *= ys[i];
  // With nothing outside the concat axis (batch 1 along channels), each input is one contiguous slice
  // of the output: an input computed by an earlier step is written there directly (an alias with an
  // offset), and only the others (graph inputs, weights, aliases, repeated inputs) are copied.
  std::set<int> seen;
  auto sliceable = [&](int x) {
    const PlanTensor& t = plan_.tensors[x];
    return outer == 1 && plan_.tensors[y].kind == StorageKind::Arena && plan_.tensors[y].aliasOf < 0 &&
           t.kind == StorageKind::Arena && t.aliasOf < 0 && producedBySteps_.count(x);
  };
  std::string code;
  std::vector<int> reads;
  int64_t offset = 0;
  for (const Value* in : n->inputs()) {
    int x = tensorOf(in);
    int64_t chunk = plan_.tensors[x].shape[axis] * inner;
    if (sliceable(x) && seen.insert(x).second) {
      plan_.tensors[x].aliasOf = y;
      plan_.tensors[x].aliasOffset = offset;
      ++plan_.report.inPlaceConcatInputs;
    } else {
      code += fmt::format("concat_part({}, {}, {}, {}, {}, {});\n  ", ref(x), ref(y), outer, chunk, ys[axis] * inner,
                          offset);
      reads.push_back(x);
    }
    offset += chunk;
  }
  if (code.empty()) return true;  // every input already sits in its slice
  code.resize(code.size() - 3);
  addStep({n->name(), "Concat", "concat_part"}, fmt::format("Concat '{}' -> {}", n->name(), shapeToString(ys)), code,
          reads, {y});
  return true;
}

bool Lowerer::lowerSoftmax(const Node* n) {
  const std::string& op = n->opType();
  const char* kernel = isOp(*n, "Softmax") ? "softmax" : "log_softmax";
  int x = tensorOf(n->input(0)), y = tensorOf(n->output(0));
  const Shape& xs = plan_.tensors[x].shape;
  int64_t axis = n->attrInt("axis");
  if (axis < 0) axis += static_cast<int64_t>(xs.size());
  if (axis != static_cast<int64_t>(xs.size()) - 1) return false;
  addStep({n->name(), op, kernel}, fmt::format("{} '{}'", op, n->name()),
          fmt::format("rt::{}({}, {}, {}, {}, pool);", kernel, ref(x), ref(y), shapeSize(xs) / xs.back(), xs.back()),
          {x}, {y});
  return true;
}

}  // namespace tessel::cpu
