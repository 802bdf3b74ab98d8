// Float32 semantics of every NPU instruction (docs/npu.md, "Instructions"): reads at start, writes at finish.
#include "execute.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

namespace tessel::npu::detail {

namespace {

uint64_t word(const SramOperand& op, uint32_t o, uint32_t i, uint32_t c) {
  return op.addr + uint64_t{o} * op.strideOuter + uint64_t{i} * op.strideInner + c;
}

/// The vector unit's erf: x P(x^2) / Q(x^2), a rational 13/8 approximation on [-4, 4] (Eigen's, as the CPU
/// runtime's verf), +-1 beyond. Error bounds: docs/npu.md, "Approximations"; test NpuVector.ErfAndGeluWithinTheirBounds.
float erfApprox(float x) {
  static constexpr float p[] = {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                                -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                                -1.60960333262415e-02f};
  static constexpr float q[] = {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                                -7.37332916720468e-03f, -1.42647390514189e-02f};
  const float xc = std::min(std::max(x, -4.0f), 4.0f), x2 = xc * xc;
  float num = p[0], den = q[0];
  for (size_t i = 1; i < std::size(p); ++i) num = num * x2 + p[i];
  for (size_t i = 1; i < std::size(q); ++i) den = den * x2 + q[i];
  return xc * num / den;
}

float unary(VecOp op, float a, float imm0, float imm1) {
  switch (op) {
    case VecOp::Copy: return a;
    case VecOp::Fill: return imm0;
    case VecOp::Relu: return a > 0 ? a : 0.0f;
    case VecOp::Clip: return std::min(std::max(a, imm0), imm1);
    case VecOp::LeakyRelu: return a >= 0 ? a : a * imm0;
    case VecOp::Scale: return a * imm0 + imm1;
    case VecOp::Sigmoid: return 1.0f / (1.0f + std::exp(-a));
    case VecOp::Silu: return a * unary(VecOp::Sigmoid, a, imm0, imm1);
    case VecOp::Rsqrt: return 1.0f / std::sqrt(a * imm0 + imm1);
    case VecOp::Sqrt: return std::sqrt(a);
    case VecOp::Tanh: return std::tanh(a);
    case VecOp::Exp: return std::exp(a);
    case VecOp::HardSigmoid: return std::max(0.0f, std::min(1.0f, a * imm0 + imm1));
    case VecOp::HardSwish: return a * std::max(0.0f, std::min(1.0f, a * imm0 + imm1));
    case VecOp::Erf: return erfApprox(a);
    case VecOp::Gelu: return 0.5f * a * (1.0f + erfApprox(a * 0.70710678118654752f));
    case VecOp::GeluTanh: return 0.5f * a * (1.0f + std::tanh(0.7978845608028654f * (a + 0.044715f * a * a * a)));
    default: return 0;
  }
}

float binary(VecOp op, float a, float b, float d) {
  switch (op) {
    case VecOp::Add: return a + b;
    case VecOp::Sub: return a - b;
    case VecOp::Mul: return a * b;
    case VecOp::Div: return a / b;
    case VecOp::Max: return std::max(a, b);
    case VecOp::Min: return std::min(a, b);
    case VecOp::MulAcc: return d + a * b;
    default: return 0;
  }
}

void load(const Instruction& in, MachineState& s, PendingWrites& w) {
  w.buffer = in.dst.buffer;
  uint32_t rows = in.padTop + in.outer + in.padBottom, cols = in.padLeft + in.inner + in.padRight;
  w.words.reserve(size_t{rows} * cols * in.vecLen);
  w.values.reserve(size_t{rows} * cols * in.vecLen);
  for (uint32_t y = 0; y < rows; ++y) {
    for (uint32_t x = 0; x < cols; ++x) {
      bool inside = y >= in.padTop && y < in.padTop + in.outer && x >= in.padLeft && x < in.padLeft + in.inner;
      uint64_t src = in.dramAddr + uint64_t{y - in.padTop} * in.dramStrideOuter + uint64_t{x - in.padLeft} * in.dramStrideInner;
      for (uint32_t c = 0; c < in.vecLen; ++c) {
        w.words.push_back(word(in.dst, y, x, c));
        w.values.push_back(inside ? s.dram->read(src + c) : 0.0f);
      }
    }
  }
}

void store(const Instruction& in, MachineState& s, PendingWrites& w) {
  w.toDram = true;
  const auto& src = s.sram[static_cast<size_t>(in.srcA.buffer)];
  w.words.reserve(size_t{in.outer} * in.inner * in.vecLen);
  w.values.reserve(size_t{in.outer} * in.inner * in.vecLen);
  for (uint32_t o = 0; o < in.outer; ++o) {
    for (uint32_t i = 0; i < in.inner; ++i) {
      for (uint32_t c = 0; c < in.vecLen; ++c) {
        w.words.push_back(in.dramAddr + uint64_t{o} * in.dramStrideOuter + uint64_t{i} * in.dramStrideInner + c);
        w.values.push_back(src[word(in.srcA, o, i, c)]);
      }
    }
  }
}

void gemm(const Instruction& in, MachineState& s, PendingWrites& w) {
  const auto& inp = s.sram[static_cast<size_t>(Buffer::Input)];
  if (in.keepWeights) {
    if (s.weightK != in.gemmK || s.weightN != in.gemmN) {
      throw SimulationError(fmt::format("gemm with keep_weights expects a resident {}x{} weight block, the array holds {}x{}",
                                        in.gemmK, in.gemmN, s.weightK, s.weightN));
    }
  } else {
    const auto& wgt = s.sram[static_cast<size_t>(Buffer::Weight)];
    s.weights.assign(wgt.begin() + in.srcB.addr, wgt.begin() + in.srcB.addr + uint64_t{in.gemmK} * in.gemmN);
    s.weightK = in.gemmK;
    s.weightN = in.gemmN;
  }
  w.buffer = Buffer::Accumulator;
  w.addToExisting = in.accumulate;
  const size_t rows = size_t{in.outer} * in.inner, n = in.gemmN;
  w.words.resize(rows * n);
  w.values.assign(rows * n, 0.0f);
  const float* wt = s.weights.data();
  size_t at = 0;
  for (uint32_t o = 0; o < in.outer; ++o) {
    for (uint32_t i = 0; i < in.inner; ++i, at += n) {
      // sum_k in order for every column, as a k-outer loop over a row of n partial sums.
      const float* x = inp.data() + word(in.srcA, o, i, 0);
      float* sum = w.values.data() + at;
      for (uint32_t k = 0; k < in.gemmK; ++k) {
        const float xk = x[k];
        const float* wk = wt + size_t{k} * n;
        for (size_t c = 0; c < n; ++c) sum[c] += xk * wk[c];
      }
      const uint64_t d = word(in.dst, o, i, 0);
      for (size_t c = 0; c < n; ++c) w.words[at + c] = d + c;
    }
  }
}

void vector(const Instruction& in, MachineState& s, PendingWrites& w) {
  auto buf = [&](const SramOperand& op) -> const std::vector<float>& { return s.sram[static_cast<size_t>(op.buffer)]; };
  w.buffer = in.dst.buffer;
  if (in.opcode == Opcode::VecReduce) {
    const bool isMax = in.vecOp == VecOp::ReduceMax;
    for (uint32_t c = 0; c < in.vecLen; ++c) {
      float acc = in.accumulate ? buf(in.dst)[in.dst.addr + c] : (isMax ? -INFINITY : 0.0f);
      for (uint32_t o = 0; o < in.outer; ++o) {
        for (uint32_t i = 0; i < in.inner; ++i) {
          float a = buf(in.srcA)[word(in.srcA, o, i, c)];
          acc = isMax ? std::max(acc, a) : acc + a;
        }
      }
      w.words.push_back(in.dst.addr + c);
      w.values.push_back(acc);
    }
    return;
  }
  w.words.reserve(size_t{in.outer} * in.inner * in.vecLen);
  w.values.reserve(size_t{in.outer} * in.inner * in.vecLen);
  for (uint32_t o = 0; o < in.outer; ++o) {
    for (uint32_t i = 0; i < in.inner; ++i) {
      for (uint32_t c = 0; c < in.vecLen; ++c) {
        uint64_t d = word(in.dst, o, i, c);
        float a = in.vecOp == VecOp::Fill ? 0.0f : buf(in.srcA)[word(in.srcA, o, i, c)];
        float v = 0;
        if (in.opcode == Opcode::VecUnary) {
          v = unary(in.vecOp, a, in.imm0, in.imm1);
        } else if (in.opcode == Opcode::VecAffine) {
          v = a * buf(in.srcB)[in.srcB.addr + c] + buf(in.srcC)[in.srcC.addr + c];
        } else {
          float dOld = in.vecOp == VecOp::MulAcc ? buf(in.dst)[d] : 0.0f;
          v = binary(in.vecOp, a, buf(in.srcB)[word(in.srcB, o, i, c)], dOld);
        }
        w.words.push_back(d);
        w.values.push_back(v);
      }
    }
  }
}

}  // namespace

PendingWrites executeAtStart(const Instruction& in, MachineState& state) {
  PendingWrites w;
  switch (in.opcode) {
    case Opcode::Sync: break;
    case Opcode::Load: load(in, state, w); break;
    case Opcode::Store: store(in, state, w); break;
    case Opcode::Gemm: gemm(in, state, w); break;
    default: vector(in, state, w); break;
  }
  return w;
}

void commit(const PendingWrites& w, MachineState& state) {
  if (w.toDram) {
    for (size_t k = 0; k < w.words.size(); ++k) state.dram->write(w.words[k], w.values[k]);
    return;
  }
  auto& buf = state.sram[static_cast<size_t>(w.buffer)];
  for (size_t k = 0; k < w.words.size(); ++k) {
    if (w.addToExisting) {
      buf[w.words[k]] += w.values[k];
    } else {
      buf[w.words[k]] = w.values[k];
    }
  }
}

}  // namespace tessel::npu::detail
