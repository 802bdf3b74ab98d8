// Renders a planned model as C++ against the runtime kernel library, with the C ABI of abi.h.
#include <fmt/format.h>

#include "plan.h"
#include "tessel/support/error.h"

namespace tessel::cpu {

std::string cppString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else out += c;
  }
  return out + "\"";
}

const char* cppElementType(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt8: case DType::Bool: return "uint8_t";
    case DType::UInt16: case DType::Float16: case DType::BFloat16: return "uint16_t";
    case DType::UInt32: return "uint32_t";
    case DType::UInt64: return "uint64_t";
    default: break;
  }
  TESSEL_ASSERT(false, "cpu target: no C++ element type for " + std::string(dtypeName(t)));
  return "float";
}

std::string loadElement(DType t, const std::string& element) {
  if (t == DType::Float16) return "rt::f16_to_float(" + element + ")";
  if (t == DType::BFloat16) return "rt::bf16_to_float(" + element + ")";
  return element;
}

std::string storeElement(DType t, const std::string& value) {
  if (t == DType::Float16) return "rt::float_to_f16(static_cast<float>(" + value + "))";
  if (t == DType::BFloat16) return "rt::float_to_bf16(static_cast<float>(" + value + "))";
  return fmt::format("static_cast<{}>({})", cppElementType(t), value);
}

namespace {

std::string pointerExpr(const Plan& plan, int id) {
  const int64_t slice = offsetInRoot(plan, id);
  const PlanTensor& root = plan.tensors[rootOf(plan, id)];
  const DType dtype = plan.tensors[id].dtype;
  // Arena and weight offsets count floats; a tensor of another type is reinterpreted at its offset (a
  // slice offset of a non-float tensor counts its own elements).
  const bool typed = dtype != DType::Float32;
  auto cast = [&](const std::string& p) {
    return typed ? fmt::format("reinterpret_cast<{}{}*>({})", root.kind == StorageKind::Weight || root.kind == StorageKind::Input ? "const " : "",
                               cppElementType(dtype), p)
                 : p;
  };
  auto plus = [&](const std::string& base) { return slice ? fmt::format("({} + {})", base, slice) : base; };
  switch (root.kind) {
    case StorageKind::Arena: return typed ? plus(cast(fmt::format("(A + {})", root.offset))) : fmt::format("(A + {})", root.offset + slice);
    case StorageKind::Input: return plus(fmt::format("in{}", root.index));
    case StorageKind::Output: return plus(fmt::format("out{}", root.index));
    case StorageKind::Weight: return typed ? plus(cast(fmt::format("(W + {})", root.offset))) : fmt::format("(W + {})", root.offset + slice);
  }
  return "nullptr";
}

/// Replaces every @ID@ in code with the tensor's pointer expression.
std::string resolve(const Plan& plan, const std::string& code) {
  std::string out;
  for (size_t i = 0; i < code.size(); ++i) {
    if (code[i] != '@') {
      out += code[i];
      continue;
    }
    size_t end = code.find('@', i + 1);
    TESSEL_ASSERT(end != std::string::npos, "unterminated tensor reference in generated code");
    out += pointerExpr(plan, std::stoi(code.substr(i + 1, end - i - 1)));
    i = end;
  }
  return out;
}


std::string descriptors(const Plan& plan, const std::vector<int>& ids, const std::string& prefix) {
  std::string dims, table;
  for (size_t i = 0; i < ids.size(); ++i) {
    const PlanTensor& t = plan.tensors[ids[i]];
    dims += fmt::format("const int64_t k{}Dims{}[] = {{{}}};\n", prefix, i, t.shape.empty() ? "0" : fmt::format("{}", fmt::join(t.shape, ", ")));
    table += fmt::format("    {{{}, {}, {}, k{}Dims{}}},\n", cppString(t.name), static_cast<int>(t.dtype), t.shape.size(), prefix, i);
  }
  if (ids.empty()) table = "    {nullptr, 0, 0, nullptr},\n";
  return dims + fmt::format("const tessel_tensor_desc k{}[] = {{\n{}}};\n", prefix, table);
}

const char* kIncludes = R"(#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <new>
#include <vector>

#include "tessel/rt/aligned_buffer.h"
#include "tessel/rt/attention.h"
#include "tessel/rt/conv.h"
#include "tessel/rt/conv_nd.h"
#include "tessel/rt/cpu.h"
#include "tessel/rt/detection.h"
#include "tessel/rt/eltwise.h"
#include "tessel/rt/epilogue.h"
#include "tessel/rt/gemm.h"
#include "tessel/rt/half.h"
#include "tessel/rt/index_ops.h"
#include "tessel/rt/indexing.h"
#include "tessel/rt/norm_ops.h"
#include "tessel/rt/pool.h"
#include "tessel/rt/pool_nd.h"
#include "tessel/rt/quantize.h"
#include "tessel/rt/recurrent.h"
#include "tessel/rt/resize.h"
#include "tessel/rt/dropout.h"
#include "tessel/rt/text_ops.h"
#include "tessel/rt/thread_pool.h"
#include "tessel/rt/transpose.h"
#include "tessel/rt/vmath.h"
#include "tessel_model_abi.h"
)";

const char* kPrologue = R"(
namespace rt = tessel::rt;

// The weights blob (raw ONNX layouts, BatchNorm folded) is assembled into .rodata from the file below.
extern "C" const float tessel_weights_blob[];
asm(".section .rodata\n.balign 64\n.globl tessel_weights_blob\n.hidden tessel_weights_blob\n"
    "tessel_weights_blob:\n.incbin \"@WEIGHTS@\"\n.previous\n");

struct tessel_model {
  rt::ThreadPool* pool = nullptr;  // null on one thread: kernels then run inline with no pool cost
  rt::AlignedBuffer arena;         // every intermediate tensor, at planned offsets
  rt::AlignedBuffer packed;        // weights in the layouts the kernels want, packed at create time
  tessel_host_fn host = nullptr;   // runs nodes without a compiled kernel (see tessel_model_set_host)
  void* host_ctx = nullptr;
  double* prof = nullptr;          // per-step timing (see tessel_model_set_profile), null when off
  const char* error = "";          // why the last tessel_model_run failed (tessel_model_error)
};

namespace {

rt::Epilogue epi(const float* bias, const float* residual, rt::Activation act, float alpha, float beta,
                 bool bias_per_column) {
  rt::Epilogue e;
  e.bias = bias;
  e.residual = residual;
  e.act = act;
  e.alpha = alpha;
  e.beta = beta;
  e.bias_per_column = bias_per_column;
  return e;
}

// y = act(x), in place when x == y.
void activation(const float* x, float* y, int64_t n, const rt::Epilogue& e) {
  if (x != y) std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
  rt::apply_activation(y, n, e);
}

// Runs fallback node k through the host (the reference interpreter when loaded by tessel).
[[maybe_unused]] int fallback(tessel_model* m, int k, std::initializer_list<const void*> ins,
                              std::initializer_list<void*> outs) {
  if (m->host == nullptr) {
    m->error = "a node without a compiled kernel needs the host interpreter, see tessel_model_set_host";
    return 1;
  }
  const int32_t rc = m->host(m->host_ctx, k, ins.begin(), outs.begin());
  if (rc != 0) m->error = "a node run by the host interpreter failed";
  return rc;
}

// Per-step timing for tessel_model_set_profile: run<true> calls done(i) after step i. Laps<false> is
// empty, so run<false> (profiling off) has no timing code at all.
template <bool kOn>
struct Laps {
  Laps(double*, int) {}
  void done(int) {}
};
template <>
struct Laps<true> {
  double* ns;
  int64_t last;
  static int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  Laps(double* out, int num_steps) : ns(out), last(now()) { ns[num_steps] = static_cast<double>(last); }
  void done(int step) {
    int64_t t = now();
    ns[step] = static_cast<double>(t - last);
    last = t;
  }
};

// Copies one input of a Concat: outer slices of `chunk` floats into rows of `stride` at `offset`.
void concat_part(const float* x, float* y, int64_t outer, int64_t chunk, int64_t stride, int64_t offset) {
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(y + o * stride + offset, x + o * chunk, static_cast<size_t>(chunk) * sizeof(float));
}

// ONNX Cast between plain element types: a static_cast per element; to bool, any non-zero is true.
template <class To, bool kToBool, class From>
[[maybe_unused]] void cast_copy(const From* x, To* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = kToBool ? static_cast<To>(x[i] != From{}) : static_cast<To>(x[i]);
}

// Calls fn(i, offsets) for every element i of a row-major output of `rank` (<= 8) dims, with the element
// offsets of N inputs that advance by their own strides (0 along the axes they are broadcast over).
template <int N, class Fn>
[[maybe_unused]] void for_each_broadcast(const int64_t* shape, int rank, const int64_t (&strides)[N][8], Fn fn) {
  int64_t total = 1, idx[8] = {}, off[N] = {};
  for (int a = 0; a < rank; ++a) total *= shape[a];
  for (int64_t i = 0; i < total; ++i) {
    fn(i, off);
    for (int a = rank - 1; a >= 0; --a) {
      for (int k = 0; k < N; ++k) off[k] += strides[k][a];
      if (++idx[a] < shape[a]) break;
      for (int k = 0; k < N; ++k) off[k] -= shape[a] * strides[k][a];
      idx[a] = 0;
    }
  }
}

// The element-wise expressions compute in double, as the reference interpreter does for most operators.
template <class T>
[[maybe_unused]] inline double dbl(T x) {
  return static_cast<double>(x);
}
// Python-style remainder (the sign of the divisor), Mod with fmod=0.
[[maybe_unused]] inline double floor_mod(double a, double b) {
  const double r = std::fmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

// Mod of integers: Python-style (the sign of the divisor), or C's with fmod (the divisor is never 0 here).
template <class I>
[[maybe_unused]] inline I int_mod(I a, I b, bool fmod) {
  const I r = static_cast<I>(a % b);
  return !fmod && r != 0 && ((r < 0) != (b < 0)) ? static_cast<I>(r + b) : r;
}
// Whether any of n integers is 0 (an integer Div or Mod by it has no value).
template <class I>
[[maybe_unused]] bool any_zero(const I* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (b[i] == 0) return true;
  return false;
}

// Run-time shape checks: the shape a node's run-time operand (a shape or axes tensor) gives must be the
// static shape its compiled code was planned for (the model's declared output shape).
[[maybe_unused]] bool reshape_ok(const int64_t* in, int rin, const int64_t* shape, int k, bool allowzero,
                                 const int64_t* out, int rout) {
  if (k != rout) return false;
  int64_t total = 1, known = 1;
  for (int i = 0; i < rin; ++i) total *= in[i];
  int inferred = -1;
  for (int i = 0; i < k; ++i) {
    int64_t d = shape[i];
    if (d == 0 && !allowzero) {
      if (i >= rin) return false;
      d = in[i];
    }
    if (d == -1 && inferred < 0) {
      inferred = i;
      continue;
    }
    if (d < 0 || d != out[i]) return false;
    known *= d;
  }
  return inferred < 0 ? known == total : known != 0 && out[inferred] * known == total;
}

[[maybe_unused]] bool expand_ok(const int64_t* in, int rin, const int64_t* shape, int k, const int64_t* out, int rout) {
  const int r = rin > k ? rin : k;
  if (r != rout) return false;
  for (int i = 0; i < r; ++i) {
    const int64_t a = i >= r - rin ? in[i - (r - rin)] : 1, b = i >= r - k ? shape[i - (r - k)] : 1;
    if ((a != b && a != 1 && b != 1) || (a == 1 ? b : a) != out[i]) return false;
  }
  return true;
}

// Squeeze (unsqueeze false) or Unsqueeze by a run-time axes tensor.
[[maybe_unused]] bool axes_ok(const int64_t* in, int rin, const int64_t* axes, int k, bool unsqueeze, const int64_t* out,
                              int rout) {
  const int r = unsqueeze ? rin + k : rin;
  if (r > 16 || rout != (unsqueeze ? r : rin - k)) return false;
  bool marked[16] = {};
  for (int i = 0; i < k; ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r || marked[a]) return false;
    marked[a] = true;
  }
  const int64_t* whole = unsqueeze ? out : in;
  const int64_t* part = unsqueeze ? in : out;
  for (int i = 0, j = 0; i < r; ++i)
    if (marked[i] ? whole[i] != 1 : whole[i] != part[j++]) return false;
  return true;
}

// Reductions over the input axes whose `mapped` output stride is 0 (rank <= 8, `count` inputs per output).
enum ReduceKind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };
template <class T, class Acc>
[[maybe_unused]] void reduce_mapped(ReduceKind kind, const T* x, T* y, const int64_t* shape, const int64_t* mapped,
                                    int rank, int64_t out_n, int64_t count) {
  int64_t total = 1;
  for (int a = 0; a < rank; ++a) total *= shape[a];
  auto walk = [&](auto&& f) {
    int64_t idx[8] = {}, o = 0;
    for (int64_t i = 0; i < total; ++i) {
      f(i, o);
      for (int a = rank - 1; a >= 0; --a) {
        o += mapped[a];
        if (++idx[a] < shape[a]) break;
        o -= shape[a] * mapped[a];
        idx[a] = 0;
      }
    }
  };
  if (kind == kMean || kind == kL2 || kind == kLogSum || kind == kLogSumExp) {  // in double, as the reference
    std::vector<double> top(static_cast<size_t>(out_n), -INFINITY), sum(static_cast<size_t>(out_n), 0.0);
    if (kind == kLogSumExp) walk([&](int64_t i, int64_t o) { top[o] = std::max(top[o], static_cast<double>(x[i])); });
    walk([&](int64_t i, int64_t o) {
      const double v = static_cast<double>(x[i]);
      sum[o] += kind == kL2 ? v * v : kind == kLogSumExp ? std::exp(std::isinf(top[o]) ? v : v - top[o]) : v;
    });
    for (int64_t o = 0; o < out_n; ++o) {
      const double s = sum[o];
      y[o] = static_cast<T>(kind == kMean ? s / static_cast<double>(count) : kind == kL2 ? std::sqrt(s)
                            : kind == kLogSum ? std::log(s) : std::isinf(top[o]) ? std::log(s) : top[o] + std::log(s));
    }
    return;
  }
  const Acc lowest = std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                            : static_cast<Acc>(std::numeric_limits<T>::lowest());
  const Acc highest = std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity()
                                                             : static_cast<Acc>(std::numeric_limits<T>::max());
  std::vector<Acc> acc(static_cast<size_t>(out_n), kind == kProd ? Acc(1) : kind == kMax ? lowest : kind == kMin ? highest : Acc(0));
  walk([&](int64_t i, int64_t o) {
    const Acc v = static_cast<Acc>(x[i]);
    Acc& a = acc[o];
    switch (kind) {
      case kSum: a += v; break;
      case kSumSquare: a += v * v; break;
      case kL1: a += v < Acc(0) ? Acc(0) - v : v; break;
      case kProd: a *= v; break;
      case kMax: a = (v > a || v != v) ? v : a; break;  // NaN propagates
      case kMin: a = (v < a || v != v) ? v : a; break;
      default: break;
    }
  });
  for (int64_t o = 0; o < out_n; ++o) y[o] = static_cast<T>(acc[o]);
}

// Slice with run-time starts, ends, axes and steps (any may be null but starts and ends; k entries each):
// the start and step of every axis of x, false when they do not give the planned output shape ys.
template <class I>
[[maybe_unused]] bool slice_params(const int64_t* xs, int r, const I* starts, const I* ends, const I* axes,
                                   const I* steps, int k, const int64_t* ys, int64_t* start, int64_t* step) {
  int64_t len[8];
  for (int a = 0; a < r; ++a) start[a] = 0, step[a] = 1, len[a] = xs[a];
  for (int i = 0; i < k; ++i) {
    int64_t a = axes ? static_cast<int64_t>(axes[i]) : i;
    if (a < 0) a += r;
    const int64_t st = steps ? static_cast<int64_t>(steps[i]) : 1, dim = xs[a < 0 || a >= r ? 0 : a];
    if (a < 0 || a >= r || st == 0) return false;
    int64_t b = static_cast<int64_t>(starts[i]), e = static_cast<int64_t>(ends[i]);
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (st > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len[a] = e > b ? (e - b + st - 1) / st : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len[a] = b > e ? (b - e - st - 1) / -st : 0;
    }
    start[a] = b, step[a] = st;
  }
  for (int a = 0; a < r; ++a)
    if (len[a] != ys[a]) return false;
  return true;
}

// Tile: y[i] = x[i mod xs] over a row-major output of rank r (<= 8).
[[maybe_unused]] void tile_copy(const char* x, const int64_t* xs, char* y, const int64_t* ys, int r, int64_t bytes) {
  int64_t total = 1, idx[8] = {}, xstride[8];
  for (int64_t a = r - 1, s = 1; a >= 0; --a) xstride[a] = s, s *= xs[a];
  for (int a = 0; a < r; ++a) total *= ys[a];
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0;
    for (int a = 0; a < r; ++a) off += (idx[a] % xs[a]) * xstride[a];
    std::memcpy(y + i * bytes, x + off * bytes, static_cast<size_t>(bytes));
    for (int a = r - 1; a >= 0; --a) {
      if (++idx[a] < ys[a]) break;
      idx[a] = 0;
    }
  }
}

// Index and axis operators of any element type over [outer, n, inner] views (lower_axis_ops.cpp).
// ArgMax (max) / ArgMin: the first extreme along the middle axis, or the last with `last`.
template <class T>
[[maybe_unused]] void arg_extreme(const T* x, int64_t* y, int64_t outer, int64_t n, int64_t inner, bool max, bool last) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T* p = x + o * n * inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k) {
        const T v = p[k * inner], b = p[best * inner];
        if (max ? (v > b || (last && v == b)) : (v < b || (last && v == b))) best = k;
      }
      y[o * inner + i] = best;
    }
}

// Softmax (kind 0), LogSoftmax (1) or Hardmax (2) along the middle axis, in double.
template <class T>
[[maybe_unused]] void softmax_axis(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, int kind) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k)
        if (x[base + k * inner] > x[base + best * inner]) best = k;
      const double top = static_cast<double>(x[base + best * inner]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(static_cast<double>(x[base + k * inner]) - top);
      for (int64_t k = 0; k < n; ++k) {
        const double v = static_cast<double>(x[base + k * inner]) - top;
        y[base + k * inner] = static_cast<T>(kind == 2 ? (k == best ? 1.0 : 0.0) : kind == 1 ? v - std::log(sum)
                                                                                         : std::exp(v) / sum);
      }
    }
}

// The [outer, n, inner] view of a shape of rank r cut at a run-time axis (negative: from the end); false when
// the axis is outside the rank.
[[maybe_unused]] bool axis_view(const int64_t* shape, int r, int64_t axis, int64_t* view) {
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return false;
  view[0] = view[1] = view[2] = 1;
  for (int a = 0; a < r; ++a) view[a < axis ? 0 : a == axis ? 1 : 2] *= shape[a];
  return true;
}

// CumSum along the middle axis (exclusive: each sum without its own element; reverse: from the end).
template <class T>
[[maybe_unused]] void cum_sum(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      T acc = T(0);
      for (int64_t kk = 0; kk < n; ++kk) {
        const int64_t at = (o * n + (reverse ? n - 1 - kk : kk)) * inner + i;
        const T v = x[at];
        if (exclusive) y[at] = acc;
        acc = static_cast<T>(acc + v);
        if (!exclusive) y[at] = acc;
      }
    }
}

// Trilu: the upper (j - i >= k) or lower (j - i <= k) triangle of each [rows, cols] matrix, zeros elsewhere.
template <class T>
[[maybe_unused]] void trilu(const T* x, T* y, int64_t batch, int64_t rows, int64_t cols, int64_t k, bool upper) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = (b * rows + i) * cols + j;
        y[at] = (upper ? j - i >= k : j - i <= k) ? x[at] : T(0);
      }
}

// GatherElements along `axis` (rank r <= 8): y takes the indices' shape; false on an index out of range.
template <class I>
[[maybe_unused]] bool gather_elements(const char* x, const int64_t* xs, const I* idx, const int64_t* is, int r,
                                      int axis, char* y, int64_t bytes) {
  return rt::for_each_axis_index(xs, idx, is, r, axis, [&](int64_t i, int64_t off) {
    std::memcpy(y + i * bytes, x + off * bytes, static_cast<size_t>(bytes));
  });
}

// LayerNormalization of `outer` rows of `n` elements in double, as the reference: y, and per row the mean and
// 1 / sqrt(var + eps) (either may be null).
template <class T, class S>
[[maybe_unused]] void layer_norm_rows(const T* x, const T* scale, const T* bias, T* y, S* mean, S* inv, int64_t outer,
                                      int64_t n, double eps) {
  for (int64_t o = 0; o < outer; ++o) {
    const T* row = x + o * n;
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += static_cast<double>(row[i]);
    m /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) v += (static_cast<double>(row[i]) - m) * (static_cast<double>(row[i]) - m);
    const double r = 1.0 / std::sqrt(v / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      y[o * n + i] = static_cast<T>((static_cast<double>(row[i]) - m) * r * static_cast<double>(scale[i]) +
                                    (bias ? static_cast<double>(bias[i]) : 0.0));
    if (mean) mean[o] = static_cast<S>(m);
    if (inv) inv[o] = static_cast<S>(r);
  }
}

// NegativeLogLikelihoodLoss (softmax false) and SoftmaxCrossEntropyLoss (true) over scores [n, c, d] and
// labels [n, d] in double, as the reference: loss [n, d] (reduction 0), or its sum (1) or weighted mean (2)
// in loss[0]; log_prob [n, c, d] when asked. False on a label outside [0, c) that is not ignored.
template <class T, class L>
[[maybe_unused]] bool class_loss(const T* scores, const L* labels, const T* weight, T* loss, T* log_prob, int64_t n,
                                 int64_t c, int64_t d, int reduction, bool softmax, bool has_ignore, int64_t ignore) {
  std::vector<double> x(static_cast<size_t>(n * c * d));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(scores[i]);
  if (softmax)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j) {
        double top = -INFINITY, sum = 0;
        for (int64_t k = 0; k < c; ++k) top = std::max(top, x[(i * c + k) * d + j]);
        for (int64_t k = 0; k < c; ++k) sum += std::exp(x[(i * c + k) * d + j] - top);
        for (int64_t k = 0; k < c; ++k) x[(i * c + k) * d + j] -= top + std::log(sum);
      }
  if (log_prob)
    for (size_t i = 0; i < x.size(); ++i) log_prob[i] = static_cast<T>(x[i]);
  double weight_sum = 0, loss_sum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const int64_t label = static_cast<int64_t>(labels[i * d + j]);
      double value = 0;
      if (!(has_ignore && label == ignore)) {
        if (label < 0 || label >= c) return false;
        const double w = weight ? static_cast<double>(weight[label]) : 1.0;
        value = -x[(i * c + label) * d + j] * w;
        weight_sum += w;
        loss_sum += value;
      }
      if (reduction == 0) loss[i * d + j] = static_cast<T>(value);
    }
  if (reduction != 0) loss[0] = static_cast<T>(reduction == 1 ? loss_sum : loss_sum / weight_sum);
  return true;
}

// Scan: copies position `index` along an axis of a tensor (outer x length x innerBytes) into a tensor without
// that axis (take), or back into it (!take).
[[maybe_unused]] void axis_slice(const void* from, void* to, int64_t outer, int64_t length, int64_t inner_bytes,
                                 int64_t index, bool take) {
  const char* x = static_cast<const char*>(from);
  char* y = static_cast<char*>(to);
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t whole = (o * length + index) * inner_bytes, part = o * inner_bytes;
    std::memcpy(y + (take ? part : whole), x + (take ? whole : part), static_cast<size_t>(inner_bytes));
  }
}

// Copies one output of a Split: rows of `stride` floats at `offset`, `chunk` floats each, into outer slices.
[[maybe_unused]] void split_part(const float* x, float* y, int64_t outer, int64_t chunk, int64_t stride,
                                 int64_t offset) {
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(y + o * chunk, x + o * stride + offset, static_cast<size_t>(chunk) * sizeof(float));
}

)";

/// The step metadata table (tessel_step_info) and kNumSteps.
std::string stepTable(const Plan& plan) {
  std::string dims, table;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep& s = plan.steps[i];
    Shape shape = s.writes.empty() ? Shape{} : plan.tensors[s.writes[0]].shape;
    dims += fmt::format("const int64_t kStepDims{}[] = {{{}}};\n", i,
                        shape.empty() ? "0" : fmt::format("{}", fmt::join(shape, ", ")));
    table += fmt::format("    {{{}, {}, {}, {}, kStepDims{}, {:.17g}}},\n", cppString(s.node), cppString(s.op),
                         cppString(s.kernel), shape.size(), i, s.flops);
  }
  if (plan.steps.empty()) table = "    {nullptr, nullptr, nullptr, 0, nullptr, 0.0},\n";
  return dims + fmt::format("const int kNumSteps = {};\nconst tessel_step_info kSteps[] = {{\n{}}};\n",
                            plan.steps.size(), table);
}

}  // namespace

std::string generatedIncludes() { return kIncludes; }

std::string emitSource(const Plan& plan, const std::string& weightsFileName, const std::string& modelName) {
  std::string src = fmt::format(
      "// Generated by tessel compile (Tessel cpu target) from model '{}'; do not edit.\n"
      "// {} kernel calls, arena {} bytes, weights {} bytes (packed {} bytes), hash {}.\n",
      modelName, plan.steps.size(), plan.arenaFloats * 4, plan.weights.size(), plan.packedFloats * 4,
      plan.report.hash);
  std::string prologue = std::string(kIncludes) + kPrologue;
  prologue.replace(prologue.find("@WEIGHTS@"), 9, weightsFileName);
  src += prologue;
  src += "// Kernel geometry.\n" + plan.globals + "\n";
  src += descriptors(plan, plan.inputs, "Inputs") + descriptors(plan, plan.outputs, "Outputs") + "\n";
  src += "void pack_weights(float* P) {\n  const float* W = tessel_weights_blob;\n" + plan.initCode + "  (void)W;\n  (void)P;\n}\n\n";
  std::string fallbacks;
  for (const PlanFallback& f : plan.fallbacks)
    fallbacks += fmt::format("    {{{}, {}, {}, {}}},  // {}\n", f.textOffset, f.textBytes, f.sideOffset, f.sideBytes,
                             f.description);
  if (fallbacks.empty()) fallbacks = "    {0, 0, 0, 0},\n";
  src += "// Nodes run by the host: byte offsets/sizes of their text IR and side data in the blob.\n"
         "const int64_t kFallbacks[][4] = {\n" + fallbacks + "};\n\n";
  src += "// Steps for the profiler: node, what, runtime function, output rank and dims, FLOPs.\n" +
         stepTable(plan) + "\n";
  src += "template <bool kProfile>\n"
         "int run(tessel_model* m, const void* const* inputs, void* const* outputs) {\n"
         "  rt::ThreadPool* pool = m->pool;\n  float* A = m->arena.data();\n  const float* P = m->packed.data();\n"
         "  const float* W = tessel_weights_blob;\n  Laps<kProfile> laps(m->prof, kNumSteps);\n";
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const char* type = cppElementType(plan.tensors[plan.inputs[i]].dtype);
    src += fmt::format("  const {0}* in{1} = static_cast<const {0}*>(inputs[{1}]);\n", type, i);
  }
  for (size_t i = 0; i < plan.outputs.size(); ++i) {
    const char* type = cppElementType(plan.tensors[plan.outputs[i]].dtype);
    src += fmt::format("  {0}* out{1} = static_cast<{0}*>(outputs[{1}]);\n", type, i);
  }
  src += "  (void)pool;\n  (void)A;\n  (void)P;\n  (void)W;\n";
  for (size_t i = 0; i < plan.steps.size(); ++i)
    src += fmt::format("  // {}\n  {}\n  laps.done({});\n", plan.steps[i].comment, resolve(plan, plan.steps[i].code), i);
  src += "  return 0;\n}\n\n}  // namespace\n\n";
  src += fmt::format(R"(#define TESSEL_EXPORT extern "C" __attribute__((visibility("default")))
TESSEL_EXPORT int32_t tessel_abi_version(void) {{ return TESSEL_ABI_VERSION; }}
TESSEL_EXPORT const char* tessel_model_hash(void) {{ return "{}"; }}
TESSEL_EXPORT int32_t tessel_model_num_inputs(void) {{ return {}; }}
TESSEL_EXPORT int32_t tessel_model_num_outputs(void) {{ return {}; }}
TESSEL_EXPORT const tessel_tensor_desc* tessel_model_input(int32_t i) {{ return i >= 0 && i < {} ? &kInputs[i] : nullptr; }}
TESSEL_EXPORT const tessel_tensor_desc* tessel_model_output(int32_t i) {{ return i >= 0 && i < {} ? &kOutputs[i] : nullptr; }}
TESSEL_EXPORT int64_t tessel_model_arena_bytes(void) {{ return {}; }}
TESSEL_EXPORT int32_t tessel_model_num_fallbacks(void) {{ return {}; }}
TESSEL_EXPORT void tessel_model_fallback(int32_t i, const char** text, int64_t* text_bytes, const char** side,
                                         int64_t* side_bytes) {{
  const char* blob = reinterpret_cast<const char*>(tessel_weights_blob);
  *text = blob + kFallbacks[i][0];
  *text_bytes = kFallbacks[i][1];
  *side = blob + kFallbacks[i][2];
  *side_bytes = kFallbacks[i][3];
}}
TESSEL_EXPORT void tessel_model_set_host(tessel_model* m, tessel_host_fn fn, void* ctx) {{
  m->host = fn;
  m->host_ctx = ctx;
}}
TESSEL_EXPORT double tessel_model_flops(void) {{ return {:.17g}; }}
TESSEL_EXPORT const char* tessel_model_isa(void) {{
#if defined(__AVX512F__)
  return "avx512";
#else
  return "avx2";
#endif
}}
TESSEL_EXPORT int32_t tessel_model_num_steps(void) {{ return kNumSteps; }}
TESSEL_EXPORT const tessel_step_info* tessel_model_step(int32_t i) {{ return i >= 0 && i < kNumSteps ? &kSteps[i] : nullptr; }}
TESSEL_EXPORT void tessel_model_set_profile(tessel_model* m, double* ns) {{ m->prof = ns; }}
TESSEL_EXPORT const char* tessel_model_error(const tessel_model* m) {{ return m->error; }}

TESSEL_EXPORT tessel_model* tessel_model_create(int32_t num_threads) {{
  if (!rt::cpu_has_avx2_fma()) return nullptr;
#if defined(__AVX512F__)
  if (!__builtin_cpu_supports("avx512f")) return nullptr;  // built with --isa avx512 or an AVX-512 --march
#endif
  if (num_threads <= 0) num_threads = {};
  if (num_threads <= 0) num_threads = rt::hardware_thread_count();
  tessel_model* m = new (std::nothrow) tessel_model;
  if (m == nullptr) return nullptr;
  try {{
    if (num_threads > 1) m->pool = new rt::ThreadPool(num_threads);
    m->arena.resize({});
    m->packed.resize({});
  }} catch (...) {{
    delete m->pool;
    delete m;
    return nullptr;
  }}
  pack_weights(m->packed.data());
  return m;
}}

TESSEL_EXPORT int32_t tessel_model_run(tessel_model* m, const void* const* inputs, void* const* outputs) {{
  m->error = "";
  return m->prof != nullptr ? run<true>(m, inputs, outputs) : run<false>(m, inputs, outputs);
}}

TESSEL_EXPORT void tessel_model_destroy(tessel_model* m) {{
  if (m == nullptr) return;
  delete m->pool;
  delete m;
}}
)",
                     plan.report.hash, plan.inputs.size(), plan.outputs.size(), plan.inputs.size(),
                     plan.outputs.size(), plan.arenaFloats * 4, plan.fallbacks.size(), plan.report.flops, plan.defaultThreads,
                     plan.arenaFloats, plan.packedFloats);
  return src;
}

}  // namespace tessel::cpu
