// Recurrent layers in portable C++ (see tessel/rt/recurrent.h); the reference is src/ops/rnn.cpp.
#include "tessel/rt/recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tessel::rt {
namespace {

double activate(RnnActivation a, double alpha, double beta, double x) {
  switch (a) {
    case RnnActivation::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case RnnActivation::Tanh: return std::tanh(x);
    case RnnActivation::Relu: return std::max(0.0, x);
    case RnnActivation::Affine: return alpha * x + beta;
    case RnnActivation::LeakyRelu: return x >= 0 ? x : alpha * x;
    case RnnActivation::ThresholdedRelu: return x > alpha ? x : 0.0;
    case RnnActivation::ScaledTanh: return alpha * std::tanh(beta * x);
    case RnnActivation::HardSigmoid: return std::clamp(alpha * x + beta, 0.0, 1.0);
    case RnnActivation::Elu: return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
    case RnnActivation::Softsign: return x / (1.0 + std::fabs(x));
    case RnnActivation::Softplus: return std::log1p(std::exp(x));
  }
  return x;
}

double dot(const float* row, const double* v, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += static_cast<double>(row[k]) * v[k];
  return s;
}

}  // namespace

bool recurrent(const RnnShape& s, const float* x, const float* w, const float* r, const float* bias,
               const int32_t* seq_lens, const float* init_h, const float* init_c, const float* peep, float* y,
               float* y_h, float* y_c) {
  const int64_t H = s.hidden, I = s.input, B = s.batch, T = s.seq, D = s.directions;
  const int64_t G = s.cell == RnnCell::Simple ? 1 : s.cell == RnnCell::Gru ? 3 : 4, GH = G * H;
  if (seq_lens)
    for (int64_t b = 0; b < B; ++b)
      if (seq_lens[b] < 0 || seq_lens[b] > T) return false;
  auto stateAt = [&](int64_t d, int64_t b) { return (s.batch_first ? (b * D + d) : (d * B + b)) * H; };
  auto yAt = [&](int64_t t, int64_t d, int64_t b) {
    return (s.batch_first ? ((b * T + t) * D + d) : ((t * D + d) * B + b)) * H;
  };
  if (y) std::memset(y, 0, static_cast<size_t>(T * D * B * H) * sizeof(float));
  std::vector<double> h(H), c(H), xt(I), xw(GH), hr(GH), next(H), resetH(H), z(H), rg(H);
  for (int64_t d = 0; d < D; ++d) {
    const bool reverse = s.reverse_only || d == 1;
    // Activation k of this direction; its input clipped (not the LSTM's output activation of the cell).
    auto f = [&](int k, double v, bool clipped = true) {
      if (clipped && s.clip > 0) v = std::clamp(v, -static_cast<double>(s.clip), static_cast<double>(s.clip));
      return activate(s.act[d][k], s.alpha[d][k], s.beta[d][k], v);
    };
    const float* wd = w + d * GH * I;
    const float* rd = r + d * GH * H;
    const float* pd = peep ? peep + d * 3 * H : nullptr;
    for (int64_t b = 0; b < B; ++b) {
      auto wb = [&](int64_t j) { return bias ? static_cast<double>(bias[d * 2 * GH + j]) : 0.0; };
      auto rb = [&](int64_t j) { return bias ? static_cast<double>(bias[d * 2 * GH + GH + j]) : 0.0; };
      auto pp = [&](int64_t j) { return pd ? static_cast<double>(pd[j]) : 0.0; };
      for (int64_t j = 0; j < H; ++j) {
        h[j] = init_h ? init_h[stateAt(d, b) + j] : 0.0;
        c[j] = init_c ? init_c[stateAt(d, b) + j] : 0.0;
      }
      const int64_t len = seq_lens ? seq_lens[b] : T;
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = reverse ? len - 1 - step : step;
        const float* xrow = x + (s.batch_first ? (b * T + t) : (t * B + b)) * I;
        for (int64_t k = 0; k < I; ++k) xt[k] = xrow[k];
        for (int64_t j = 0; j < GH; ++j) {
          xw[j] = dot(wd + j * I, xt.data(), I) + wb(j);
          hr[j] = dot(rd + j * H, h.data(), H);
        }
        for (int64_t j = 0; j < H; ++j) {
          if (s.cell == RnnCell::Simple) {
            next[j] = f(0, xw[j] + hr[j] + rb(j));
          } else if (s.cell == RnnCell::Gru) {  // gates z, r, h
            z[j] = f(0, xw[j] + hr[j] + rb(j));
            rg[j] = f(0, xw[j + H] + hr[j + H] + rb(j + H));
            resetH[j] = rg[j] * h[j];
          } else {  // LSTM gates i, o, f, c; peepholes i, o, f
            const double cprev = c[j];
            const double i = f(0, xw[j] + hr[j] + rb(j) + pp(j) * cprev);
            const double fg = s.input_forget ? 1 - i : f(0, xw[j + 2 * H] + hr[j + 2 * H] + rb(j + 2 * H) + pp(j + 2 * H) * cprev);
            const double g = f(1, xw[j + 3 * H] + hr[j + 3 * H] + rb(j + 3 * H));
            const double cnew = fg * cprev + i * g;
            const double o = f(0, xw[j + H] + hr[j + H] + rb(j + H) + pp(j + H) * cnew);
            c[j] = cnew;
            next[j] = o * f(2, cnew, false);
          }
        }
        if (s.cell == RnnCell::Gru)
          for (int64_t j = 0; j < H; ++j) {
            const double pre = s.linear_before_reset ? xw[j + 2 * H] + rg[j] * (hr[j + 2 * H] + rb(j + 2 * H))
                                                     : xw[j + 2 * H] + dot(rd + (j + 2 * H) * H, resetH.data(), H) + rb(j + 2 * H);
            next[j] = (1 - z[j]) * f(1, pre) + z[j] * h[j];
          }
        h = next;
        if (y)
          for (int64_t j = 0; j < H; ++j) y[yAt(t, d, b) + j] = static_cast<float>(h[j]);
      }
      for (int64_t j = 0; j < H; ++j) {
        if (y_h) y_h[stateAt(d, b) + j] = static_cast<float>(h[j]);
        if (y_c) y_c[stateAt(d, b) + j] = static_cast<float>(c[j]);
      }
    }
  }
  return true;
}

}  // namespace tessel::rt
