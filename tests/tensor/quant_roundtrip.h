// Helpers of the quantizer unit tests (quant_k_test, quant_legacy_test, quant_iq4_test): gaussian
// rows, importance weights, and a quantize -> dequantize round trip through quantize.h.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kvasir/tensor/dtype.h"
#include "kvasir/tensor/quantize.h"

namespace kvasir::test {

inline std::vector<float> gaussian(uint64_t seed, size_t n, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

// Importance weights in [0.1, 3).
inline std::vector<float> importance_of(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> ud(0.1f, 3.0f);
  std::vector<float> w(n);
  for (auto& v : w) v = ud(rng);
  return w;
}

// x (rows x cols) quantized to t with `importance` (or null), then dequantized.
inline std::vector<float> roundtrip(DType t, const std::vector<float>& x, int64_t rows,
                                    int64_t cols, const float* importance) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
  quantize_rows(t, x.data(), q.data(), rows, cols, importance);
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t, q.data() + static_cast<size_t>(r) * rb, y.data() + r * cols, cols);
  return y;
}

}  // namespace kvasir::test
