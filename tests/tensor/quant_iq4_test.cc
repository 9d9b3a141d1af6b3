// IQ4_NL and IQ4_XS: block layouts, the level table, exactly representable blocks, error bounds
// and edge cases. Bit-exactness against ggml is ggml_quants_fixture_test.cc's job.
#include "kvasir/tensor/quant_iq4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include "kvasir/tensor/quantize.h"
#include "kvasir/util/error.h"
#include "tensor/quant_roundtrip.h"

namespace kvasir {
namespace {

using test::gaussian;
using test::roundtrip;

TEST(IQ4, TableAndLayoutsMatchGgml) {
  const int8_t ggml[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                           1,    13,   25,  38,  53,  69,  89,  113};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(kIQ4NLValues[i], ggml[i]) << i;
  EXPECT_EQ(offsetof(BlockIQ4_NL, qs), 2u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, scales_h), 2u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, scales_l), 4u);
  EXPECT_EQ(offsetof(BlockIQ4_XS, qs), 8u);
  EXPECT_EQ(dtype_info(DType::IQ4_NL).block_bytes, static_cast<int>(sizeof(BlockIQ4_NL)));
  EXPECT_EQ(dtype_info(DType::IQ4_XS).block_bytes, static_cast<int>(sizeof(BlockIQ4_XS)));
  EXPECT_EQ(dtype_info(DType::IQ4_XS).block_size, kQKIQ4_XS);
}

// Values s * level with s a power of two are found exactly: the scale search hits s, and every
// product in the fit is exact, so the least-squares scale is s to the bit.
TEST(IQ4, NlRepresentableBlockIsExact) {
  const float s = 1.0f / 128.0f;
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = s * static_cast<float>(kIQ4NLValues[(j * 7) % 16]);
  for (const bool weighted : {false, true}) {
    std::vector<float> w(32, 1.0f);
    BlockIQ4_NL b;
    quantize_rows(DType::IQ4_NL, x.data(), &b, 1, 32, weighted ? w.data() : nullptr);
    EXPECT_EQ(fp16_to_fp32(b.d), s);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(b.qs[j] & 0xf, (j * 7) % 16);
      EXPECT_EQ(b.qs[j] >> 4, ((j + 16) * 7) % 16);
    }
    float y[32];
    dequantize_row(DType::IQ4_NL, &b, y, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
  }
}

TEST(IQ4, XsRepresentableSuperBlockIsExact) {
  // Group g has scale 2^-(6 + g % 6): group scales land on ls - 32 = -32 >> (g % 6) of
  // super-scale -2^-6/32 (a ratio of 2^-6 would already round to ls - 32 = 0).
  std::vector<float> x(256);
  for (int g = 0; g < 8; ++g) {
    const float s = std::ldexp(1.0f, -6 - g % 6);
    for (int j = 0; j < 32; ++j) x[g * 32 + j] = s * static_cast<float>(kIQ4NLValues[(j + g) % 16]);
  }
  BlockIQ4_XS b;
  quantize_rows(DType::IQ4_XS, x.data(), &b, 1, 256, nullptr);
  EXPECT_EQ(fp16_to_fp32(b.d), -std::ldexp(1.0f, -6) / 32.0f);
  for (int g = 0; g < 8; ++g) {
    const int ls = ((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xf) | ((b.scales_h >> (2 * g)) & 3)
                                                                      << 4;
    EXPECT_EQ(ls - 32, -(32 >> (g % 6))) << g;
  }
  std::vector<float> y(256);
  dequantize_row(DType::IQ4_XS, &b, y.data(), 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], x[i]) << i;
}

TEST(IQ4, AllZeroBlocks) {
  std::vector<float> x(256, 0.0f);
  BlockIQ4_NL nl;
  quantize_rows(DType::IQ4_NL, x.data(), &nl, 1, 32, nullptr);
  EXPECT_EQ(nl.d, 0);
  for (uint8_t q : nl.qs) EXPECT_EQ(q, 0x88);  // level 1, the one nearest 0 from above
  BlockIQ4_XS xs;
  quantize_rows(DType::IQ4_XS, x.data(), &xs, 1, 256, nullptr);
  EXPECT_EQ(xs.d, 0x8000);         // -0 / 32, as ggml writes it
  EXPECT_EQ(xs.scales_h, 0xaaaa);  // ls = 32 for every group
  for (uint8_t s : xs.scales_l) EXPECT_EQ(s, 0);
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS}) {
    const auto y = roundtrip(t, x, static_cast<int64_t>(x.size()) / 256, 256, nullptr);
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
}

TEST(IQ4, RoundTripErrorBounds) {
  const int64_t cols = 1024;
  const auto x = gaussian(21, 16 * cols, 1.5f);
  std::mt19937_64 rng(22);
  std::uniform_real_distribution<float> ud(0.1f, 3.0f);
  std::vector<float> w(cols);
  for (auto& v : w) v = ud(rng);
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS}) {
    for (const float* imp :
         {static_cast<const float*>(nullptr), static_cast<const float*>(w.data())}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (imp ? " weighted" : " plain"));
      const auto y = roundtrip(t, x, static_cast<int64_t>(x.size()) / cols, cols, imp);
      double err = 0.0;
      double sum = 0.0;
      for (size_t i = 0; i < x.size(); ++i) {
        err += (y[i] - x[i]) * (y[i] - x[i]);
        sum += x[i] * x[i];
      }
      // 4-bit non-linear: relative RMS error around 10%.
      EXPECT_LT(std::sqrt(err / sum), 0.13);
      // No value further than one (largest) table step from its input within its group.
      for (size_t g = 0; g < x.size() / 32; ++g) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[g * 32 + j]));
        for (int j = 0; j < 32; ++j) {
          ASSERT_LE(std::fabs(y[g * 32 + j] - x[g * 32 + j]), amax * 0.25f) << g << " " << j;
        }
      }
    }
  }
}

TEST(IQ4, ImportanceChangesTheFitAndNonFiniteDoesNotCrash) {
  auto x = gaussian(31, 512, 1.0f);
  std::vector<float> w(512);
  for (size_t i = 0; i < w.size(); ++i) w[i] = i % 3 == 0 ? 0.0f : 2.0f;
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS}) {
    EXPECT_NE(roundtrip(t, x, static_cast<int64_t>(x.size()) / 512, 512, nullptr),
              roundtrip(t, x, static_cast<int64_t>(x.size()) / 512, 512, w.data()));
  }
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[300] = std::numeric_limits<float>::infinity();
  x[301] = -3e38f;
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS}) {
    EXPECT_EQ(roundtrip(t, x, static_cast<int64_t>(x.size()) / 512, 512, nullptr).size(), x.size());
    EXPECT_EQ(roundtrip(t, x, static_cast<int64_t>(x.size()) / 512, 512, w.data()).size(),
              x.size());
  }
}

TEST(IQ4, RejectsBadLengthAndType) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_THROW(quantize_rows_iq4(DType::IQ4_XS, x.data(), q.data(), 1, 288, nullptr), Error);
  EXPECT_THROW(quantize_rows_iq4(DType::IQ4_NL, x.data(), q.data(), 1, 40, nullptr), Error);
  EXPECT_THROW(quantize_rows_iq4(DType::Q4_0, x.data(), q.data(), 1, 32, nullptr), Error);
  EXPECT_THROW(dequantize_row_iq4(DType::IQ4_XS, q.data(), x.data(), 32), Error);
}

}  // namespace
}  // namespace kvasir
