// Deterministic rows for the quantizer fixtures (tests/fixtures/ggml-quants/): the harness that ran
// ggml's own quantizers on them (harness.c there) generates the same floats with the same
// arithmetic, in C. Everything below is exact or a single IEEE operation in a fixed order, so C and
// C++ (x86-64, SSE, no fast-math) produce identical bits. Keep the two in step.
#pragma once

#include <cstdint>
#include <vector>

#include "kvasir/util/splitmix64.h"

namespace kvasir::test {

// Uniform in [-1, 1) on a 2^-23 grid (exact).
inline float uniform_pm1(uint64_t& s) {
  return static_cast<float>(static_cast<int32_t>(splitmix64_next(s) >> 40)) * (1.0f / 8388608.0f) -
         1.0f;
}

// Row r of `cols` values, from a stream seeded with seed * 1000003 + r. Kinds by r % 8:
//   0-3: bell-shaped (sum of 4 uniforms) times 10^(r % 5 - 3): 1e-3 .. 10
//   4:   all zeros
//   5:   constant 0.5
//   6:   bell-shaped with one outlier x50 at column (r * 37) % cols
//   7:   uniform in [0, 2): positive only
inline std::vector<float> quant_test_row(uint64_t seed, int64_t r, int64_t cols) {
  static const float kScale[5] = {1e-3f, 1e-2f, 1e-1f, 1.0f, 10.0f};
  uint64_t s = seed * 1000003ull + static_cast<uint64_t>(r);
  std::vector<float> x(static_cast<size_t>(cols));
  const int kind = static_cast<int>(r % 8);
  for (int64_t c = 0; c < cols; ++c) {
    float v;
    if (kind == 4) {
      v = 0.0f;
    } else if (kind == 5) {
      v = 0.5f;
    } else if (kind == 7) {
      v = uniform_pm1(s) + 1.0f;
    } else {
      float a = uniform_pm1(s);
      a = a + uniform_pm1(s);
      a = a + uniform_pm1(s);
      a = a + uniform_pm1(s);
      v = a * kScale[r % 5];
    }
    x[static_cast<size_t>(c)] = v;
  }
  if (kind == 6) x[static_cast<size_t>((r * 37) % cols)] *= 50.0f;
  return x;
}

// rows x cols of quant_test_row, row-major.
inline std::vector<float> quant_test_matrix(uint64_t seed, int64_t rows, int64_t cols) {
  std::vector<float> m;
  m.reserve(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = quant_test_row(seed, r, cols);
    m.insert(m.end(), row.begin(), row.end());
  }
  return m;
}

// Importance weights (an imatrix entry) for `cols` columns: 0.25 + (u + 1), in [0.25, 2.25). (No
// product feeds a sum anywhere here: a compiler may fuse a * b + c into one FMA, which would round
// differently from the other side's separate operations.)
inline std::vector<float> quant_test_importance(uint64_t seed, int64_t cols) {
  uint64_t s = seed * 7919ull + 17ull;
  std::vector<float> w(static_cast<size_t>(cols));
  for (auto& v : w) {
    v = (uniform_pm1(s) + 1.0f) + 0.25f;
  }
  return w;
}

}  // namespace kvasir::test
