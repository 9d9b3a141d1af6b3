// Token helpers for tests: random_tokens(n, n_vocab, seed), a reproducible random token sequence
// (std::mt19937, each id rng() % n_vocab), and argmax(row, n), the greedy choice over a row of
// logits (the lowest id among equal maxima, as the sampler breaks ties).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace kvasir::test_util {

inline std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

inline int32_t argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

}  // namespace kvasir::test_util
