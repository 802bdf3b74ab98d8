// Shared helpers for the runtime kernel tests: random data, naive references, tolerant comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tessel/rt/epilogue.h"

namespace tessel::rt::test {

/// Uniform random floats in [lo, hi), deterministic per seed.
inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

/// Reference activation in double precision, written independently of the kernels.
inline double ref_activation(double x, const Epilogue& ep) {
  switch (ep.act) {
    case Activation::None: return x;
    case Activation::Relu: return x > 0 ? x : 0;
    case Activation::Clip: return std::min<double>(std::max<double>(x, ep.alpha), ep.beta);
    case Activation::LeakyRelu: return x >= 0 ? x : ep.alpha * x;
    case Activation::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Activation::HardSigmoid: return std::clamp(ep.alpha * x + ep.beta, 0.0, 1.0);
    case Activation::HardSwish: return x * std::clamp(x / 6.0 + 0.5, 0.0, 1.0);
    case Activation::Silu: return x / (1.0 + std::exp(-x));
    case Activation::Gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::Tanh: return std::tanh(x);
  }
  return x;
}

/// Every activation kind with typical parameters, for sweeping epilogues.
inline std::vector<Epilogue> all_activations() {
  std::vector<Epilogue> v;
  v.push_back(Epilogue::none());
  v.push_back(Epilogue::with_act(Activation::Relu));
  v.push_back(Epilogue::relu6());
  v.push_back(Epilogue::with_act(Activation::LeakyRelu, 0.1f));
  v.push_back(Epilogue::with_act(Activation::Sigmoid));
  v.push_back(Epilogue::with_act(Activation::HardSigmoid, 0.2f, 0.5f));
  v.push_back(Epilogue::with_act(Activation::HardSwish));
  v.push_back(Epilogue::with_act(Activation::Silu));
  v.push_back(Epilogue::with_act(Activation::Gelu));
  v.push_back(Epilogue::with_act(Activation::Tanh));
  return v;
}

/// Asserts |got - want| <= rel_tol * max|want| (+ a tiny absolute floor) elementwise.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel_tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-6;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? 1e300 : err;
      worst_i = i;
    }
  }
  EXPECT_LE(worst / scale, rel_tol) << what << ": worst at " << worst_i << " got " << got[worst_i]
                                    << " want " << want[worst_i] << " (scale " << scale << ")";
}

}  // namespace tessel::rt::test
