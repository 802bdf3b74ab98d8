// Lowering of the tensor operators transformer models are made of: MatMul of two computed operands
// (batched, numpy broadcasting resolved here into per-batch offsets), tessel.Attention, LayerNormalization
// over trailing axes, Transpose and Split. A node outside what a kernel covers returns false and runs
// through the host fallback.
#include <functional>
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

/// Offsets (in floats) of each batch of an operand with batch dims `dims` (right-aligned) inside an
/// output batch of dims `out`, each batch `matrix` floats: numpy broadcasting (size-1 dims repeat).
std::vector<int64_t> batchOffsets(const Shape& dims, const Shape& out, int64_t matrix) {
  const size_t r = out.size();
  std::vector<int64_t> stride(r, 0);
  int64_t s = matrix;
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t axis = r - 1 - k, d = dims.size() - 1 - k;
    stride[axis] = dims[d] == 1 ? 0 : s;
    s *= dims[d];
  }
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
    if (n->output(i) && !n->output(i)->uses().empty()) return false;
  for (const Value* o : graph_.outputs())
    for (size_t i = 1; i < n->numOutputs(); ++i)
      if (o == n->output(i)) return false;
  const Shape xs = n->input(0)->type.staticShape();
  int64_t axis = n->attrInt("axis");
  if (axis < 0) axis += static_cast<int64_t>(xs.size());
  if (axis < 0 || axis >= static_cast<int64_t>(xs.size())) return false;
  const int64_t cols = product(xs, axis), rows = product(xs) / std::max<int64_t>(cols, 1);
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
  int64_t axis = n->attrInt("axis");
  if (axis < 0) axis += static_cast<int64_t>(xs.size());
  if (axis < 0 || axis >= static_cast<int64_t>(xs.size())) return false;
  const int64_t outer = product(xs, 0, axis), inner = product(xs, axis + 1);
  const int x = tensorOf(n->input(0));
  // With nothing outside the split axis, each output is a contiguous slice of the input: an alias with
  // an offset, no copy. Otherwise each output copies its rows.
  const bool slices = outer == 1 && plan_.tensors[x].kind != StorageKind::Output;
  std::string code;
  std::vector<int> writes;
  int64_t offset = 0;
  for (size_t i = 0; i < n->numOutputs(); ++i) {
    const Value* o = n->output(i);
    if (!o) return false;
    const int64_t chunk = o->type.staticShape()[axis] * inner;
    const int y = tensorOf(o);
    bool isGraphOutput = false;
    for (const Value* g : graph_.outputs()) isGraphOutput = isGraphOutput || g == o;
    if (slices && !isGraphOutput) {
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

}  // namespace tessel::cpu
