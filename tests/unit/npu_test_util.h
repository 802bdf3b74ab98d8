// Helpers shared by the NPU and partitioning tests: shipped hardware configurations and seeded inputs.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "tessel/hw/hardware_config.h"
#include "tessel/ir/tensor.h"

namespace tessel::test {

/// One of the configurations shipped in configs/ (e.g. "tiny.json").
inline hw::HardwareConfig shippedConfig(const std::string& name) {
  return hw::HardwareConfig::load(std::string(TESSEL_SOURCE_DIR) + "/configs/" + name);
}

/// A float32 tensor of uniform values in [-1, 1), reproducible from `seed`.
inline Tensor randomTensor(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(static_cast<size_t>(shapeSize(s)));
  for (float& x : v) x = d(rng);
  return Tensor::fromVector(s, v);
}

}  // namespace tessel::test
