// The element-wise engine shared by Tessel's math, logic, activation and selection operators: numpy
// broadcasting loops (collapsed to long contiguous rows), typed maps, and kernel/inference factories so
// that each operator is one lambda.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessel/ops/helpers.h"
#include "tessel/ops/registry.h"

namespace tessel::elementwise {

// ------------------------------------------------------------------------------------------ dtypes

/// Families of element types an operator accepts (the ONNX type constraints, coarsened).
enum class TypeSet {
  Float,     ///< f16, bf16, f32, f64
  Signed,    ///< signed integers and floats
  Numeric,   ///< all integers and floats (no bool)
  Integer,   ///< signed and unsigned integers
  Unsigned,  ///< unsigned integers
  Bool,      ///< bool only
  NumericOrBool,
  Any,       ///< every dtype, strings included
};

/// True when `t` belongs to `set`.
bool inTypeSet(DType t, TypeSet set);
/// "a floating-point type", "a numeric type", ... for diagnostics.
std::string typeSetName(TypeSet set);

/// Reads a stored element in its arithmetic type (float for f16/bf16).
template <class T>
inline compute_t<T> load(const T& v) {
  return static_cast<compute_t<T>>(v);
}

// ------------------------------------------------------------------------------------------ loops

/// A loop nest over an output shape with one stride vector per operand (operand 0 is the output,
/// then the inputs; broadcast axes have stride 0). Adjacent axes that every operand walks contiguously
/// are merged, so same-shape operands become one row and scalar/bias broadcasts become long rows.
class BroadcastLoop {
 public:
  BroadcastLoop(const Shape& out, const std::vector<Shape>& inputs);

  /// Calls row(offsets, length, innerStrides) for every innermost row: offsets[k] is operand k's first
  /// element, innerStrides[k] its step along the row.
  template <class Row>
  void forEachRow(Row&& row) const {
    if (total_ == 0) return;
    const size_t rank = extents_.size(), operands = strides_.size();
    std::vector<int64_t> offsets(operands, 0), inner(operands), counter(rank, 0);
    for (size_t k = 0; k < operands; ++k) inner[k] = strides_[k][rank - 1];
    const int64_t length = extents_[rank - 1];
    for (;;) {
      row(offsets.data(), length, inner.data());
      size_t axis = rank - 1;
      for (;;) {
        if (axis == 0) return;  // every outer axis wrapped around: done
        --axis;
        if (++counter[axis] < extents_[axis]) {
          for (size_t k = 0; k < operands; ++k) offsets[k] += strides_[k][axis];
          break;
        }
        counter[axis] = 0;
        for (size_t k = 0; k < operands; ++k) offsets[k] -= strides_[k][axis] * (extents_[axis] - 1);
      }
    }
  }

  /// Collapsed extents (at least one axis).
  const std::vector<int64_t>& extents() const { return extents_; }

 private:
  std::vector<int64_t> extents_;
  std::vector<std::vector<int64_t>> strides_;  ///< [operand][axis]
  int64_t total_ = 0;
};

/// out[i] = f(in[i]) over equal shapes; stored types In/Out, f sees compute types.
template <class In, class Out, class F>
void mapUnary(const Tensor& in, Tensor& out, F&& f) {
  const In* x = in.data<In>();
  Out* y = out.data<Out>();
  const int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<Out>(f(load(x[i])));
}

/// out = f(a, b) with numpy broadcasting (out must already have the broadcast shape). `out` may alias
/// `a` when a has the output's shape (variadic folds accumulate in place).
template <class A, class B, class Out, class F>
void mapBinary(const Tensor& a, const Tensor& b, Tensor& out, F&& f) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  Out* po = out.data<Out>();
  const int64_t n = out.numel();
  const bool aFull = a.shape() == out.shape(), bFull = b.shape() == out.shape();
  if (aFull && bFull) {  // the common case (residual adds): one contiguous pass
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<Out>(f(load(pa[i]), load(pb[i])));
    return;
  }
  if (aFull && b.numel() == 1) {
    const auto s = load(pb[0]);
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<Out>(f(load(pa[i]), s));
    return;
  }
  if (bFull && a.numel() == 1) {
    const auto s = load(pa[0]);
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<Out>(f(s, load(pb[i])));
    return;
  }
  BroadcastLoop loop(out.shape(), {a.shape(), b.shape()});
  loop.forEachRow([&](const int64_t* off, int64_t len, const int64_t* step) {
    Out* o = po + off[0];
    const A* x = pa + off[1];
    const B* y = pb + off[2];
    if (step[1] == 1 && step[2] == 0) {
      const auto s = load(y[0]);
      for (int64_t j = 0; j < len; ++j) o[j] = static_cast<Out>(f(load(x[j]), s));
    } else if (step[1] == 0 && step[2] == 1) {
      const auto s = load(x[0]);
      for (int64_t j = 0; j < len; ++j) o[j] = static_cast<Out>(f(s, load(y[j])));
    } else {
      for (int64_t j = 0; j < len; ++j) o[j] = static_cast<Out>(f(load(x[j * step[1]]), load(y[j * step[2]])));
    }
  });
}

/// out = f(a, b, c) with numpy broadcasting (Where, Clip-like selections).
template <class A, class B, class C, class Out, class F>
void mapTernary(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out, F&& f) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  const C* pc = c.data<C>();
  Out* po = out.data<Out>();
  BroadcastLoop loop(out.shape(), {a.shape(), b.shape(), c.shape()});
  loop.forEachRow([&](const int64_t* off, int64_t len, const int64_t* step) {
    for (int64_t j = 0; j < len; ++j)
      po[off[0] + j] = static_cast<Out>(
          f(load(pa[off[1] + j * step[1]]), load(pb[off[2] + j * step[2]]), load(pc[off[3] + j * step[3]])));
  });
}

/// Broadcast shape of every present input of the kernel's node (UserError naming the node otherwise).
Shape broadcastInputShapes(const KernelContext& ctx);

/// Fails (UserError naming the node) unless input i's dtype is in `set`.
void requireType(const KernelContext& ctx, size_t i, TypeSet set);
/// Fails unless every present input has input 0's dtype.
void requireSameTypes(const KernelContext& ctx);

/// Calls fn(TypeTag<T>) for the first T among Ts whose dtype is t (t must be one of them).
template <class... Ts, class Fn>
void dispatchAmong(DType t, Fn&& fn) {
  bool done = ((dtypeOf<Ts>() == t ? (fn(TypeTag<Ts>{}), true) : false) || ...);
  TESSEL_ASSERT(done, "dispatchAmong: unexpected element type");
}

/// Calls fn(TypeTag<T>) for dtype t restricted to the set S (fails naming the node when outside it).
/// S is a template argument so that only the element types of the set are instantiated.
template <TypeSet S, class Fn>
void dispatchTypeSet(const KernelContext& ctx, DType t, Fn&& fn) {
  if (!inTypeSet(t, S)) ctx.fail("element type {} is not supported; expected {}", dtypeName(t), typeSetName(S));
  if constexpr (S == TypeSet::Float) {
    dispatchAmong<float, double, float16, bfloat16>(t, fn);
  } else if constexpr (S == TypeSet::Signed) {
    dispatchAmong<float, double, float16, bfloat16, int8_t, int16_t, int32_t, int64_t>(t, fn);
  } else if constexpr (S == TypeSet::Numeric) {
    dispatchAmong<float, double, float16, bfloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                  uint64_t>(t, fn);
  } else if constexpr (S == TypeSet::Integer) {
    dispatchAmong<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>(t, fn);
  } else if constexpr (S == TypeSet::Unsigned) {
    dispatchAmong<uint8_t, uint16_t, uint32_t, uint64_t>(t, fn);
  } else if constexpr (S == TypeSet::Bool) {
    dispatchAmong<bool>(t, fn);
  } else if constexpr (S == TypeSet::NumericOrBool) {
    dispatchNumeric(t, ctx.node().describe(), fn);
  } else {
    dispatchAny(t, ctx.node().describe(), fn);
  }
}

// ------------------------------------------------------------------------------------------ kernels

/// Kernel for y = f(x), same dtype, x's dtype in the set S. `make(ctx)` returns the element function (so it
/// can read attributes once); the element function receives compute-type values (float for f16/bf16).
template <TypeSet S, class Make>
KernelFn unaryKernelWith(Make make) {
  return [make](KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    auto f = make(static_cast<const KernelContext&>(ctx));
    dispatchTypeSet<S>(ctx, x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& y = ctx.allocateOutput(0, x.dtype(), x.shape());
      mapUnary<T, T>(x, y, f);
    });
  };
}
/// unaryKernelWith for element functions without attributes.
template <TypeSet S, class F>
KernelFn unaryKernel(F f) {
  return unaryKernelWith<S>([f](const KernelContext&) { return f; });
}

/// Kernel for y = f(x) with a bool result (IsNaN, IsInf, Not).
template <TypeSet S, class Make>
KernelFn predicateKernelWith(Make make) {
  return [make](KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    auto f = make(static_cast<const KernelContext&>(ctx));
    dispatchTypeSet<S>(ctx, x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& y = ctx.allocateOutput(0, DType::Bool, x.shape());
      mapUnary<T, bool>(x, y, f);
    });
  };
}

/// Kernel for y = f(a, b) with broadcasting; both inputs of one dtype in `set`; result of that dtype.
template <TypeSet S, class Make>
KernelFn binaryKernelWith(Make make) {
  return [make](KernelContext& ctx) {
    requireSameTypes(ctx);
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    auto f = make(static_cast<const KernelContext&>(ctx));
    Shape shape = broadcastInputShapes(ctx);
    dispatchTypeSet<S>(ctx, a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& y = ctx.allocateOutput(0, a.dtype(), shape);
      mapBinary<T, T, T>(a, b, y, f);
    });
  };
}
template <TypeSet S, class F>
KernelFn binaryKernel(F f) {
  return binaryKernelWith<S>([f](const KernelContext&) { return f; });
}

/// Kernel for a broadcasting comparison (same-dtype inputs in `set`, bool result).
template <TypeSet S, class F>
KernelFn comparisonKernel(F f) {
  return [f](KernelContext& ctx) {
    requireSameTypes(ctx);
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Shape shape = broadcastInputShapes(ctx);
    auto run = [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& y = ctx.allocateOutput(0, DType::Bool, shape);
      mapBinary<T, T, bool>(a, b, y, f);
    };
    if constexpr (S == TypeSet::Any) {  // strings compare, complex numbers do not order: no dispatchAny
      if (a.dtype() == DType::String) return run(TypeTag<std::string>{});
      dispatchTypeSet<TypeSet::NumericOrBool>(ctx, a.dtype(), run);
    } else {
      dispatchTypeSet<S>(ctx, a.dtype(), run);
    }
  };
}

/// Kernel folding any number of inputs with f (Max, Min, Sum); when `divideByCount`, the result is
/// divided by the number of inputs (Mean).
template <TypeSet S, class F>
KernelFn variadicKernel(F f, bool divideByCount = false) {
  return [f, divideByCount](KernelContext& ctx) {
    if (ctx.numInputs() == 0) ctx.fail("expected at least one input");
    requireSameTypes(ctx);
    Shape shape = broadcastInputShapes(ctx);
    const Tensor& first = ctx.input(0);
    dispatchTypeSet<S>(ctx, first.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& acc = ctx.allocateOutput(0, first.dtype(), shape);
      // acc = broadcast(input 0), then acc = f(acc, input i) in place.
      mapBinary<T, T, T>(first, acc, acc, [](auto x, auto) { return x; });
      for (size_t i = 1; i < ctx.numInputs(); ++i) mapBinary<T, T, T>(acc, ctx.input(i), acc, f);
      if (divideByCount) {
        const auto count = static_cast<compute_t<T>>(ctx.numInputs());
        mapUnary<T, T>(acc, acc, [count](auto x) { return x / count; });
      }
    });
  };
}

// ------------------------------------------------------------------------------------------ inference

/// Inference for y = f(x): output type of input 0; fails when x's dtype (if known) is outside `set`.
InferFn inferUnary(TypeSet set);
/// Inference for a predicate: bool output with x's shape.
InferFn inferPredicate(TypeSet set);
/// Inference for broadcasting ops over same-dtype inputs; the result has that dtype, or bool when
/// `boolResult`.
InferFn inferBroadcasting(TypeSet set, bool boolResult = false);

/// Fails the inference unless input i's dtype is unknown or in `set`.
void checkInputType(InferContext& ctx, size_t i, TypeSet set);

}  // namespace tessel::elementwise
