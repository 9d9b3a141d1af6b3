// Q4_1, Q5_0, Q5_1 and the importance-weighted Q4_0: block layouts, hand-worked blocks, error
// bounds and edge cases. Bit-exactness against ggml is ggml_quants_fixture_test.cc's job.
#include "kvasir/tensor/quant_legacy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
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

uint32_t qh_of(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

TEST(QuantLegacy, BlockLayoutsMatchGgml) {
  EXPECT_EQ(offsetof(BlockQ4_1, d), 0u);
  EXPECT_EQ(offsetof(BlockQ4_1, m), 2u);
  EXPECT_EQ(offsetof(BlockQ4_1, qs), 4u);
  EXPECT_EQ(offsetof(BlockQ5_0, qh), 2u);
  EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
  EXPECT_EQ(offsetof(BlockQ5_1, m), 2u);
  EXPECT_EQ(offsetof(BlockQ5_1, qh), 4u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
  EXPECT_EQ(dtype_info(DType::Q4_1).block_bytes, static_cast<int>(sizeof(BlockQ4_1)));
  EXPECT_EQ(dtype_info(DType::Q5_0).block_bytes, static_cast<int>(sizeof(BlockQ5_0)));
  EXPECT_EQ(dtype_info(DType::Q5_1).block_bytes, static_cast<int>(sizeof(BlockQ5_1)));
}

TEST(QuantLegacy, Q4_1HandWorkedBlock) {
  // 2 + (j % 16) * 0.5: min 2, max 9.5, d = 0.5 exactly; codes j % 16.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 2.0f + static_cast<float>(j % 16) * 0.5f;
  BlockQ4_1 b;
  quantize_rows(DType::Q4_1, x, &b, 1, 32, nullptr);
  EXPECT_EQ(fp16_to_fp32(b.d), 0.5f);
  EXPECT_EQ(fp16_to_fp32(b.m), 2.0f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], j | j << 4) << j;
  float y[32];
  dequantize_row(DType::Q4_1, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

TEST(QuantLegacy, Q5_0HandWorkedBlock) {
  // j - 16: the largest magnitude is -16 (first), so d = 1 and codes are j; the 5th bit is set
  // for j >= 16 (qh = 0xffff0000) and weight j+16 shares byte j with weight j.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  BlockQ5_0 b;
  quantize_rows(DType::Q5_0, x, &b, 1, 32, nullptr);
  EXPECT_EQ(fp16_to_fp32(b.d), 1.0f);
  EXPECT_EQ(qh_of(b.qh), 0xffff0000u);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], j | j << 4) << j;
  float y[32];
  dequantize_row(DType::Q5_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

TEST(QuantLegacy, Q5_0PositiveMaxClampsAt15) {
  // Largest magnitude positive: d = -max/16 < 0, so the max maps to code 0 (-16 * d = max) and
  // the most negative values would need code 32 > 31: they clamp.
  float x[32] = {};
  x[0] = 16.0f;
  x[1] = -16.0f;
  BlockQ5_0 b;
  quantize_rows(DType::Q5_0, x, &b, 1, 32, nullptr);
  EXPECT_EQ(fp16_to_fp32(b.d), -1.0f);
  float y[32];
  dequantize_row(DType::Q5_0, &b, y, 32);
  EXPECT_EQ(y[0], 16.0f);
  EXPECT_EQ(y[1], -15.0f);
  EXPECT_EQ(y[2], 0.0f);
}

TEST(QuantLegacy, Q5_1HandWorkedBlock) {
  // -3 + j * 0.25: min -3, max 4.75, d = 0.25; codes j.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = -3.0f + static_cast<float>(j) * 0.25f;
  BlockQ5_1 b;
  quantize_rows(DType::Q5_1, x, &b, 1, 32, nullptr);
  EXPECT_EQ(fp16_to_fp32(b.d), 0.25f);
  EXPECT_EQ(fp16_to_fp32(b.m), -3.0f);
  EXPECT_EQ(qh_of(b.qh), 0xffff0000u);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], j | j << 4) << j;
  float y[32];
  dequantize_row(DType::Q5_1, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

// Reference (round-to-nearest) quantizers: every value within about half a step of its block's
// grid (plus the fp16 rounding of the scale and min).
TEST(QuantLegacy, ReferenceRoundTripErrorBounds) {
  const int64_t rows = 16;
  const int64_t cols = 1024;
  const auto x = gaussian(7, static_cast<size_t>(rows * cols), 2.0f);
  struct Case {
    DType t;
    int levels;      // codes per block
    bool symmetric;  // scale from the signed absmax (else from max - min)
  };
  for (const Case c :
       {Case{DType::Q4_1, 16, false}, Case{DType::Q5_0, 32, true}, Case{DType::Q5_1, 32, false}}) {
    SCOPED_TRACE(dtype_name(c.t));
    const auto y = roundtrip(c.t, x, rows, cols, nullptr);
    for (size_t b = 0; b < x.size() / 32; ++b) {
      const float* xb = x.data() + b * 32;
      const auto [lo, hi] = std::minmax_element(xb, xb + 32);
      float step;
      if (c.symmetric) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
        step = amax / static_cast<float>(c.levels / 2);
      } else {
        step = (*hi - *lo) / static_cast<float>(c.levels - 1);
      }
      // Symmetric: the side opposite the absmax can be one code short (clamping), so a full step.
      const float bound = (c.symmetric ? 1.0f : 0.5f) * step * 1.02f + 1e-3f * std::fabs(*lo);
      for (int j = 0; j < 32; ++j) {
        ASSERT_LE(std::fabs(y[b * 32 + j] - xb[j]), bound) << "block " << b << " j " << j;
      }
    }
  }
}

// The importance-weighted searches: error comparable to (on the weighted measure, not worse than
// a few percent of) round-to-nearest, and blocks decode to values on their own grid.
TEST(QuantLegacy, WeightedQuantizersFitAsWellAsReference) {
  const int64_t rows = 8;
  const int64_t cols = 512;
  const auto x = gaussian(11, static_cast<size_t>(rows * cols), 1.0f);
  const auto w = importance_of(12, static_cast<size_t>(cols));
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    SCOPED_TRACE(dtype_name(t));
    const auto yr = roundtrip(t, x, rows, cols, nullptr);
    const auto yw = roundtrip(t, x, rows, cols, w.data());
    double err_ref = 0.0;
    double err_w = 0.0;
    double sum_x2 = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      // The measure the searches minimise: importance * sqrt(sigma2 + x^2), sigma2 ~ 1 here.
      const double wi = w[i % static_cast<size_t>(cols)] * std::sqrt(1.0 + x[i] * x[i]);
      err_ref += wi * (yr[i] - x[i]) * (yr[i] - x[i]);
      err_w += wi * (yw[i] - x[i]) * (yw[i] - x[i]);
      sum_x2 += wi * x[i] * x[i];
    }
    EXPECT_LT(err_w, err_ref * 1.02) << "weighted " << err_w << " vs reference " << err_ref;
    EXPECT_LT(err_w / sum_x2, t == DType::Q4_0 || t == DType::Q4_1 ? 0.02 : 0.005);
    EXPECT_NE(yr, yw);  // importance is used
  }
}

TEST(QuantLegacy, AllZeroBlocks) {
  std::vector<float> x(64, 0.0f);
  const auto w = importance_of(3, 64);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    for (const float* imp : {static_cast<const float*>(nullptr), w.data()}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (imp ? " weighted" : " reference"));
      const auto y = roundtrip(t, x, 1, 64, imp);
      for (float v : y) EXPECT_EQ(v, 0.0f);
    }
  }
}

TEST(QuantLegacy, ConstantBlockIsExact) {
  // max == min: d = 0 and m carries the value (asymmetric); symmetric ones put it on -nmax * d.
  std::vector<float> x(32, 0.75f);
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    SCOPED_TRACE(dtype_name(t));
    const auto y = roundtrip(t, x, 1, 32, nullptr);
    for (float v : y) EXPECT_EQ(v, 0.75f);
  }
}

TEST(QuantLegacy, ZeroImportanceAndNonFiniteInputDoNotCrash) {
  auto x = gaussian(5, 256, 1.0f);
  std::vector<float> zero_w(256, 0.0f);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    const auto y = roundtrip(t, x, 1, 256, zero_w.data());
    EXPECT_EQ(y.size(), x.size());
  }
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[40] = std::numeric_limits<float>::infinity();
  x[77] = -std::numeric_limits<float>::infinity();
  x[100] = 3e38f;
  const auto w = importance_of(6, 256);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    for (const float* imp : {static_cast<const float*>(nullptr), w.data()}) {
      const auto y = roundtrip(t, x, 1, 256, imp);
      EXPECT_EQ(y.size(), x.size());
    }
  }
}

TEST(QuantLegacy, RowsAreIndependent) {
  // quantize_rows over several rows equals quantizing each row alone (the weighted ones use the
  // row's own mean square).
  const int64_t rows = 4;
  const int64_t cols = 128;
  const auto x = gaussian(9, static_cast<size_t>(rows * cols), 1.0f);
  const auto w = importance_of(10, static_cast<size_t>(cols));
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> all(rb * rows);
    std::vector<uint8_t> one(rb);
    quantize_rows(t, x.data(), all.data(), rows, cols, w.data());
    for (int64_t r = 0; r < rows; ++r) {
      quantize_rows(t, x.data() + r * cols, one.data(), 1, cols, w.data());
      EXPECT_EQ(std::memcmp(one.data(), all.data() + r * rb, rb), 0) << r;
    }
  }
}

TEST(QuantLegacy, RejectsBadLengthAndType) {
  std::vector<float> x(48, 1.0f);
  std::vector<uint8_t> q(64);
  EXPECT_THROW(quantize_rows_legacy(DType::Q4_1, x.data(), q.data(), 1, 48, nullptr), Error);
  EXPECT_THROW(quantize_rows_legacy(DType::Q8_0, x.data(), q.data(), 1, 32, nullptr), Error);
  EXPECT_THROW(dequantize_row_legacy(DType::Q4_0, q.data(), x.data(), 32), Error);
}

}  // namespace
}  // namespace kvasir
