// Random test data: random_normal(n, seed, stddev), n floats drawn from N(0, stddev^2) by
// std::normal_distribution<float> over std::mt19937(seed), the same values for the same arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvasir::test_util {

inline std::vector<float> random_normal(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace kvasir::test_util
