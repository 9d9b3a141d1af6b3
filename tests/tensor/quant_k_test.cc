// Q2_K .. Q6_K and Q8_K: block layouts, hand-built blocks, error bounds and edge cases.
// Bit-exactness against ggml is ggml_quants_fixture_test.cc's job.
#include "kvasir/tensor/quant_k.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "tensor/quant_roundtrip.h"

namespace kvasir {
namespace {

using test::gaussian;
using test::importance_of;
using test::roundtrip;

constexpr DType kTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Bounds a little above what ggml's algorithms reach on unit gaussians (relative RMSE over the
// whole matrix, worst |error| / amax over one super-block).
struct Bound {
  DType t;
  double rel_rmse, max_err;
};
constexpr Bound kBounds[] = {{DType::Q2_K, 0.33, 0.6},
                             {DType::Q3_K, 0.17, 0.35},
                             {DType::Q4_K, 0.08, 0.17},
                             {DType::Q5_K, 0.04, 0.07},
                             {DType::Q6_K, 0.02, 0.05}};

TEST(QuantK, BlockSizesMatchDtypeTable) {
  EXPECT_EQ(dtype_info(DType::Q2_K).block_bytes, static_cast<int>(sizeof(BlockQ2_K)));
  EXPECT_EQ(dtype_info(DType::Q3_K).block_bytes, static_cast<int>(sizeof(BlockQ3_K)));
  EXPECT_EQ(dtype_info(DType::Q4_K).block_bytes, static_cast<int>(sizeof(BlockQ4_K)));
  EXPECT_EQ(dtype_info(DType::Q5_K).block_bytes, static_cast<int>(sizeof(BlockQ5_K)));
  EXPECT_EQ(dtype_info(DType::Q6_K).block_bytes, static_cast<int>(sizeof(BlockQ6_K)));
  EXPECT_EQ(dtype_info(DType::Q8_K).block_bytes, static_cast<int>(sizeof(BlockQ8_K)));
  for (DType t : kTypes) EXPECT_EQ(dtype_info(t).block_size, kQK_K) << dtype_name(t);
}

TEST(QuantK, RoundTripErrorIsBounded) {
  const int64_t rows = 8, cols = 1024;
  const auto x = gaussian(1, rows * cols, 1.0f);
  const auto w = importance_of(2, cols);
  for (const Bound& b : kBounds) {
    double weighted[2] = {0, 0};
    for (int im = 0; im < 2; ++im) {
      SCOPED_TRACE(std::string(dtype_name(b.t)) + (im ? " imatrix" : " ref"));
      const auto y = roundtrip(b.t, x, rows, cols, im ? w.data() : nullptr);
      double se = 0, sx = 0, worst = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double e = static_cast<double>(y[i]) - x[i];
        se += e * e;
        sx += static_cast<double>(x[i]) * x[i];
        weighted[im] += w[i % cols] * e * e;
      }
      for (size_t s = 0; s < x.size(); s += kQK_K) {
        double amax = 0, err = 0;
        for (size_t i = s; i < s + kQK_K; ++i) {
          amax = std::max(amax, static_cast<double>(std::fabs(x[i])));
          err = std::max(err, static_cast<double>(std::fabs(y[i] - x[i])));
        }
        worst = std::max(worst, err / amax);
      }
      EXPECT_LT(std::sqrt(se / sx), b.rel_rmse);
      EXPECT_LT(worst, b.max_err);
    }
    // The importance-weighted search is meant to lower the importance-weighted error.
    EXPECT_LT(weighted[1], weighted[0]) << dtype_name(b.t);
  }
}

TEST(QuantK, ScaledInputsScaleTheError) {
  // Over many decades (staying inside fp16's normal range for the super-block scales: at 1e-4
  // Q6_K's d = amax / 4096 is already an fp16 subnormal) the relative error stays the same and
  // nothing decodes to inf or NaN.
  const int64_t cols = 512;
  const auto base = gaussian(3, cols, 1.0f);
  const auto w = importance_of(4, cols);
  for (const Bound& b : kBounds) {
    for (float scale : {1e-2f, 1.0f, 1e2f, 1e4f}) {
      std::vector<float> x(base);
      for (auto& v : x) v *= scale;
      for (int im = 0; im < 2; ++im) {
        const auto y = roundtrip(b.t, x, 1, cols, im ? w.data() : nullptr);
        double se = 0, sx = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(b.t) << " scale " << scale;
          se += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
          sx += static_cast<double>(x[i]) * x[i];
        }
        EXPECT_LT(std::sqrt(se / sx), b.rel_rmse * 1.2) << dtype_name(b.t) << " scale " << scale;
      }
    }
  }
}

TEST(QuantK, TinyAndSubnormalInputsDecodeFinite) {
  const int64_t cols = 512;
  const auto w = importance_of(5, cols);
  for (DType t : kTypes) {
    for (float scale : {1e-8f, 1e-20f, 1e-38f, 1e-44f}) {
      auto x = gaussian(6, cols, 1.0f);
      for (auto& v : x) v *= scale;
      for (int im = 0; im < 2; ++im) {
        const auto y = roundtrip(t, x, 1, cols, im ? w.data() : nullptr);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(t) << " scale " << scale;
          // Below fp16's range the scales flush to zero; never does a tiny input blow up.
          ASSERT_LE(std::fabs(y[i]), std::max(1e-4f, 4 * std::fabs(x[i]) + 1e-4f));
        }
      }
    }
  }
}

TEST(QuantK, AllZeroRowsDecodeToZero) {
  const int64_t cols = 512;
  const std::vector<float> x(cols, 0.0f);
  const auto w = importance_of(7, cols);
  for (DType t : kTypes) {
    for (int im = 0; im < 2; ++im) {
      const auto y = roundtrip(t, x, 1, cols, im ? w.data() : nullptr);
      for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
    }
  }
}

TEST(QuantK, ConstantRowsAreNearlyExact) {
  const int64_t cols = 256;
  const auto w = importance_of(8, cols);
  for (DType t : kTypes) {
    for (float c : {0.5f, -0.5f, 3.0f, -1e3f}) {
      const std::vector<float> x(cols, c);
      for (int im = 0; im < 2; ++im) {
        const auto y = roundtrip(t, x, 1, cols, im ? w.data() : nullptr);
        for (float v : y) ASSERT_NEAR(v, c, 2e-3f * std::fabs(c)) << dtype_name(t) << " c=" << c;
      }
    }
  }
}

TEST(QuantK, OneOutlierIsReproducedAndTheRestStaysBounded) {
  // An outlier sets the super-block's scale range: it is itself reproduced within the format's
  // step, and (since the sub-block scales are quantized against the largest one) the other
  // weights lose resolution but stay within that step.
  auto x = gaussian(9, kQK_K, 1.0f);
  x[7] = 200.0f;
  for (const Bound& b : kBounds) {
    const auto y = roundtrip(b.t, x, 1, kQK_K, nullptr);
    EXPECT_NEAR(y[7], 200.0f, 200.0f * b.max_err) << dtype_name(b.t);
    for (int i = 0; i < kQK_K; ++i)
      ASSERT_NEAR(y[i], x[i], 200.0f * b.max_err) << dtype_name(b.t) << " " << i;
  }
}

TEST(QuantK, RowsAreIndependentAndMultiBlockImportanceIsPerColumn) {
  const int64_t rows = 3, cols = 768;
  const auto x = gaussian(10, rows * cols, 0.3f);
  const auto w = importance_of(11, cols);
  for (DType t : kTypes) {
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> all(rb * rows), one(rb);
    quantize_rows_k(t, x.data(), all.data(), rows, cols, w.data());
    for (int64_t r = 0; r < rows; ++r) {
      quantize_rows_k(t, x.data() + r * cols, one.data(), 1, cols, w.data());
      EXPECT_EQ(std::memcmp(one.data(), all.data() + r * rb, rb), 0) << dtype_name(t);
    }
    // Block b of a row sees importance[256 b ..]: quantizing the last block alone with its slice
    // of the importance gives the same bytes.
    const size_t bb = static_cast<size_t>(dtype_info(t).block_bytes);
    std::vector<uint8_t> last(bb);
    quantize_rows_k(t, x.data() + 2 * kQK_K, last.data(), 1, kQK_K, w.data() + 2 * kQK_K);
    EXPECT_EQ(std::memcmp(last.data(), all.data() + 2 * bb, bb), 0) << dtype_name(t);
  }
}

TEST(QuantK, RejectsRowsThatAreNotWholeSuperBlocks) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_THROW(quantize_rows_k(DType::Q4_K, x.data(), q.data(), 1, 300, nullptr), Error);
  EXPECT_THROW(dequantize_row_k(DType::Q4_K, q.data(), x.data(), 300), Error);
  EXPECT_THROW(quantize_rows_k(DType::Q8_0, x.data(), q.data(), 1, 256, nullptr), Error);
}

// ---- hand-built blocks: the documented layouts ----

TEST(QuantK, Q4KLayout) {
  BlockQ4_K b{};
  b.d = fp32_to_fp16(0.5f);
  b.dmin = fp32_to_fp16(0.25f);
  // Sub-block j: scale j + 1 (j = 7: 40, exercising the split top bits), min 2 j.
  for (int j = 0; j < 8; ++j) {
    const int sc = j == 7 ? 40 : j + 1, m = 2 * j;
    if (j < 4) {
      b.scales[j] = static_cast<uint8_t>(sc);
      b.scales[j + 4] = static_cast<uint8_t>(m);
    } else {
      b.scales[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
      b.scales[j - 4] = static_cast<uint8_t>(b.scales[j - 4] | ((sc >> 4) << 6));
      b.scales[j] = static_cast<uint8_t>(b.scales[j] | ((m >> 4) << 6));
    }
  }
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  float y[kQK_K];
  dequantize_row_k(DType::Q4_K, &b, y, kQK_K);
  for (int j = 0; j < 8; ++j) {
    const float sc = j == 7 ? 40.0f : static_cast<float>(j + 1);
    for (int l = 0; l < 32; ++l) {
      const int q = j % 2 == 0 ? l % 16 : 15 - l % 16;
      EXPECT_EQ(y[32 * j + l],
                0.5f * sc * static_cast<float>(q) - 0.25f * static_cast<float>(2 * j))
          << j << " " << l;
    }
  }
}

TEST(QuantK, Q6KLayout) {
  BlockQ6_K b{};
  b.d = fp32_to_fp16(0.125f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j % 2 ? -(j + 1) : j + 1);
  // Code of weight i: i % 64.
  for (int i = 0; i < kQK_K; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32, q = i % 64;
    uint8_t& lo = b.ql[64 * h + l + 32 * (k & 1)];
    lo = static_cast<uint8_t>(lo | ((q & 0xF) << (k >= 2 ? 4 : 0)));
    b.qh[32 * h + l] = static_cast<uint8_t>(b.qh[32 * h + l] | ((q >> 4) << (2 * k)));
  }
  float y[kQK_K];
  dequantize_row_k(DType::Q6_K, &b, y, kQK_K);
  for (int i = 0; i < kQK_K; ++i)
    EXPECT_EQ(y[i], 0.125f * static_cast<float>(b.scales[i / 16]) * static_cast<float>(i % 64 - 32))
        << i;
}

TEST(QuantK, Q3KLayout) {
  BlockQ3_K b{};
  b.d = fp32_to_fp16(1.0f);
  // Scale of sub-block j: j * 4 - 32 + 3 stored + 32, i.e. codes 3, 7, .. 63.
  for (int j = 0; j < 16; ++j) {
    const int l = 4 * j + 3;
    if (j < 8)
      b.scales[j] = static_cast<uint8_t>(l & 0xF);
    else
      b.scales[j - 8] = static_cast<uint8_t>(b.scales[j - 8] | ((l & 0xF) << 4));
    b.scales[8 + j % 4] = static_cast<uint8_t>(b.scales[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
  }
  // Code of weight i: i % 8 (low 2 bits in qs, third bit in hmask).
  for (int i = 0; i < kQK_K; ++i) {
    const int q = i % 8, h = i / 128, k = (i % 128) / 32, l = i % 32;
    b.qs[32 * h + l] = static_cast<uint8_t>(b.qs[32 * h + l] | ((q & 3) << (2 * k)));
    if (q & 4) b.hmask[l] = static_cast<uint8_t>(b.hmask[l] | (1 << (i / 32)));
  }
  float y[kQK_K];
  dequantize_row_k(DType::Q3_K, &b, y, kQK_K);
  for (int i = 0; i < kQK_K; ++i) {
    const int j = i / 16;
    EXPECT_EQ(y[i], static_cast<float>(4 * j + 3 - 32) * static_cast<float>(i % 8 - 4)) << i;
  }
}

// ---- Q8_K ----

TEST(QuantK, Q8KCodesSumsAndScale) {
  auto x = gaussian(12, 2 * kQK_K, 2.0f);
  x[300] = -9.0f;  // block 1's amax is negative: its d is positive, the code -127
  BlockQ8_K b[2];
  quantize_row_q8_k(x.data(), b, 2 * kQK_K);
  for (int i = 0; i < 2; ++i) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[i * kQK_K + j]) > amax) {
        amax = std::fabs(x[i * kQK_K + j]);
        max = x[i * kQK_K + j];
      }
    }
    EXPECT_EQ(b[i].d, 1.0f / (-127.0f / max));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b[i].qs[16 * g + j];
      EXPECT_EQ(b[i].bsums[g], sum);
    }
    for (int j = 0; j < kQK_K; ++j) {
      EXPECT_GE(b[i].qs[j], -127);
      EXPECT_NEAR(b[i].d * b[i].qs[j], x[i * kQK_K + j], std::fabs(b[i].d) * 0.5f + 1e-6f);
    }
  }
  EXPECT_GT(b[1].d, 0.0f);
  EXPECT_EQ(b[1].qs[300 - kQK_K], -127);
}

TEST(QuantK, Q8KAllZeroBlock) {
  std::vector<float> x(kQK_K, 0.0f);
  BlockQ8_K b;
  std::memset(&b, 0x5a, sizeof b);
  quantize_row_q8_k(x.data(), &b, kQK_K);
  EXPECT_EQ(b.d, 0.0f);
  for (int8_t q : b.qs) EXPECT_EQ(q, 0);
  for (int16_t s : b.bsums) EXPECT_EQ(s, 0);
}

TEST(QuantK, Q8KRoundsHalfToEven) {
  // The scale is -max / 127 (the code of the extreme value is always -127): amax 127 gives d = -1
  // exactly and codes round-half-even(-x).
  std::vector<float> x(kQK_K, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  BlockQ8_K b;
  quantize_row_q8_k(x.data(), &b, kQK_K);
  EXPECT_EQ(b.d, -1.0f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], -2);
  EXPECT_EQ(b.qs[2], -4);
  EXPECT_EQ(b.qs[3], 2);
}

}  // namespace
}  // namespace kvasir
