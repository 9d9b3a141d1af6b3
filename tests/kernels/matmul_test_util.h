// Helpers of the matmul tests (matmul_test.cc, matmul_kquant_test.cc): random weights quantized by
// the reference quantizer, the matmul of a MatrixView, and the fixture that runs a test body once
// per SIMD target this CPU supports.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/tensor/quantize.h"
#include "test_util/random.h"

namespace kvasir::cpu {

struct Weights {
  DType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  MatrixView matrix() const { return {type, rows, cols, bytes.data()}; }
};

inline Weights make_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> w = test_util::random_normal(rows * cols, seed, 0.5f);
  return {t, rows, cols, quantize_tensor(t, w.data(), rows, cols)};
}

inline std::vector<float> run_matmul(const Weights& w, const float* x, int64_t n_tokens,
                                     ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(n_tokens * w.rows), -1.0f);
  matmul(w.matrix(), x, n_tokens, y.data(), pool);
  return y;
}

// Q8_K activations as the super-block kernels read them (matmul.h): per token, 256-column
// super-blocks of codes sharing one float scale, by the reference quantizer.
struct SuperActivations {
  int64_t cols;
  std::vector<int8_t> q;   // n_tokens x cols codes
  std::vector<float> d;    // n_tokens x cols / 256 scales
  int8_t code(int64_t t, int64_t k) const { return q[static_cast<size_t>(t * cols + k)]; }
  float scale(int64_t t, int64_t k) const { return d[static_cast<size_t>((t * cols + k) / 256)]; }
};
inline SuperActivations quantize_super(const std::vector<float>& x, int64_t n_tokens,
                                       int64_t cols) {
  SuperActivations a{cols, std::vector<int8_t>(x.size()),
                     std::vector<float>(static_cast<size_t>(n_tokens * cols / 256))};
  for (size_t s = 0; s < a.d.size(); ++s)
    a.d[s] = quantize_superblock_q8(x.data() + s * 256, a.q.data() + s * 256);
  return a;
}

// Runs the test body once per SIMD target this machine supports, restoring the default after.
class PerTarget : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { force_simd_target(GetParam()); }
  void TearDown() override { force_simd_target(""); }
};

}  // namespace kvasir::cpu
