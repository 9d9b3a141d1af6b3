// Reference quantizers: bit-identical to ggml's (checked against checksums of ggml's own output for
// the same input, plus hand-worked blocks), dequantization exact, errors bounded.
#include "kvasir/tensor/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvasir/util/error.h"

namespace kvasir {
namespace {

// ---- Deterministic input shared with the generator of the golden checksums below ----
// splitmix64 -> floats of magnitudes 2^-20..2^20, with blocks (32 values) of special kinds:
// all zero, amax 127 with many exact .5 ties, Q4_0 max -8 with truncation edges, +m and -m both
// present, subnormal-range values and huge values.
uint64_t gen_state;
uint64_t gen_next() {
  uint64_t z = (gen_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
void make_input(float* x, int64_t nblocks) {
  gen_state = 12345;
  for (int64_t b = 0; b < nblocks; ++b) {
    float* v = x + b * 32;
    const int kind = static_cast<int>(b % 8);
    int e = static_cast<int>(gen_next() % 41) - 20;
    if (kind == 5) e = -130;
    if (kind == 6) e = 100;
    for (int j = 0; j < 32; ++j) {
      v[j] = static_cast<float>(static_cast<int32_t>(gen_next() >> 32)) * std::ldexp(1.0f, e - 31);
    }
    if (kind == 1) {
      for (int j = 0; j < 32; ++j) v[j] = 0.0f;
    } else if (kind == 2) {
      v[0] = 127.0f;
      for (int j = 1; j < 32; ++j) {
        v[j] =
            static_cast<float>(static_cast<int>(gen_next() % 253) - 126) + ((j & 1) ? 0.5f : -0.5f);
      }
    } else if (kind == 3) {
      v[0] = -8.0f;
      for (int j = 1; j < 32; ++j) {
        v[j] = static_cast<float>(static_cast<int>(gen_next() % 16) - 8) + ((j & 1) ? 0.5f : 0.25f);
      }
      v[7] = 8.0f;
    } else if (kind == 4) {
      for (int j = 0; j < 32; ++j) v[j] = v[j] * 0.25f;
      float m = std::ldexp(1.0f, e);
      if (gen_next() & 1) m = -m;
      v[3] = m;
      v[10] = -m;
    }
  }
}
uint64_t fnv1a(const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= c[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// Checksums of ggml's output (quantize_row_q8_0_ref, quantize_row_q4_0_ref,
// ggml_compute_fp32_to_fp16, ggml_compute_fp32_to_bf16 from llama.cpp's ggml, built without
// -march so no FMA contraction) on make_input(4096 blocks).
constexpr int64_t kGoldenBlocks = 4096;
constexpr uint64_t kGoldenInput = 0x202dc37edad970bcull;
constexpr uint64_t kGoldenQ8_0 = 0x183c8224e1571650ull;
constexpr uint64_t kGoldenQ4_0 = 0xd6f65c268c0c6a13ull;
constexpr uint64_t kGoldenF16 = 0xb4a4889af8398ee5ull;
constexpr uint64_t kGoldenBF16 = 0xd54f5428a49c9b0full;

class GgmlGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    x_.resize(kGoldenBlocks * 32);
    make_input(x_.data(), kGoldenBlocks);
    ASSERT_EQ(fnv1a(x_.data(), x_.size() * 4), kGoldenInput) << "input generator changed";
  }
  uint64_t checksum(DType t) {
    std::vector<uint8_t> out(row_bytes(t, static_cast<int64_t>(x_.size())));
    quantize_row(t, x_.data(), out.data(), static_cast<int64_t>(x_.size()));
    return fnv1a(out.data(), out.size());
  }
  std::vector<float> x_;
};

TEST_F(GgmlGolden, Q8_0) {
  EXPECT_EQ(checksum(DType::Q8_0), kGoldenQ8_0);
}
TEST_F(GgmlGolden, Q4_0) {
  EXPECT_EQ(checksum(DType::Q4_0), kGoldenQ4_0);
}
TEST_F(GgmlGolden, F16) {
  EXPECT_EQ(checksum(DType::F16), kGoldenF16);
}
TEST_F(GgmlGolden, BF16) {
  EXPECT_EQ(checksum(DType::BF16), kGoldenBF16);
}

TEST_F(GgmlGolden, ExplicitBlocksAsGgmlWritesThem) {
  // Block 2 (kind "ties", amax 127 so d = 1): ggml's codes, e.g. 23.5 -> 24 (ties away from 0).
  BlockQ8_0 q8;
  quantize_block_q8_0(x_.data() + 2 * 32, &q8);
  const int8_t want8[32] = {127, 24,  24,  76, -121, 127, 30,   -42,  -21, -26, 7,
                            115, -29, 52,  28, 11,   63,  -120, 69,   -13, 8,   -78,
                            118, 22,  -87, 93, -77,  -93, 117,  -113, -28, -88};
  EXPECT_EQ(q8.d, 0x3c00);
  EXPECT_EQ(std::memcmp(q8.qs, want8, 32), 0);
  // Block 3 (kind "q4 edges": max -8 so d = 1): ggml's nibbles.
  BlockQ4_0 q4;
  quantize_block_q4_0(x_.data() + 3 * 32, &q4);
  const uint8_t want4[16] = {0x40, 0xdc, 0xd4, 0xef, 0x04, 0xe3, 0xdc, 0xff,
                             0x93, 0xff, 0xe3, 0x18, 0x44, 0x7a, 0xff, 0xa2};
  EXPECT_EQ(q4.d, 0x3c00);
  EXPECT_EQ(std::memcmp(q4.qs, want4, 16), 0);
}

TEST(Quantize, Q8_0RoundsTiesAwayFromZero) {
  float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -126.5f};
  BlockQ8_0 b;
  quantize_block_q8_0(x, &b);
  EXPECT_EQ(b.d, fp32_to_fp16(1.0f));
  const int8_t want[7] = {127, 3, -3, 1, -1, 1, -127};
  for (int j = 0; j < 7; ++j) EXPECT_EQ(b.qs[j], want[j]) << j;
  for (int j = 7; j < 32; ++j) EXPECT_EQ(b.qs[j], 0) << j;
}

// The super-block activation quantizer: one float scale for 256 values (not rounded to fp16: a
// scale fp16 cannot hold exactly stays exact), ties away from zero, the largest magnitude at
// -127, and an all-zero super-block with scale 0.
TEST(Quantize, SuperblockQ8SharesOneFloatScale) {
  float x[256] = {};
  x[0] = 2.5f;
  x[1] = -2.5f;
  x[2] = -127.0f * 1.001f;  // amax: d = 1.001 (fp16 would round it to 1.0)
  x[255] = 1.6f * 1.001f;
  int8_t q[256];
  const float d = quantize_superblock_q8(x, q);
  EXPECT_EQ(d, 127.0f * 1.001f / 127.0f);
  EXPECT_NE(d, fp16_to_fp32(fp32_to_fp16(d)));
  EXPECT_EQ(q[2], -127);
  EXPECT_EQ(q[0], 2);  // 2.5 / 1.001 = 2.4975
  EXPECT_EQ(q[1], -2);
  EXPECT_EQ(q[255], 2);
  for (int j = 3; j < 255; ++j) ASSERT_EQ(q[j], 0) << j;
  const float zeros[256] = {};
  EXPECT_EQ(quantize_superblock_q8(zeros, q), 0.0f);
  for (int j = 0; j < 256; ++j) ASSERT_EQ(q[j], 0) << j;
}

TEST(Quantize, Q4_0UsesSignedMaxAndTruncates) {
  // max = -8 (first largest magnitude): d = 1, q = min(15, trunc(x + 8.5)).
  float x[32] = {-8.0f, 0.5f, -0.5f, 8.0f, -7.75f, 6.9f};
  BlockQ4_0 b;
  quantize_block_q4_0(x, &b);
  EXPECT_EQ(b.d, fp32_to_fp16(1.0f));
  const int want[6] = {0, 9, 8, 15, 0, 15};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(b.qs[j] & 0x0f, want[j]) << j;
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j] >> 4, 8) << j;  // x[16..31] = 0 -> 8
  // +4 found before -4: d = 4 / -8 = -0.5, so +4 -> 0 and -4 -> 16 clamped to 15.
  float y[32] = {};
  y[3] = 4.0f;
  y[10] = -4.0f;
  quantize_block_q4_0(y, &b);
  EXPECT_EQ(b.d, fp32_to_fp16(-0.5f));
  EXPECT_EQ(b.qs[3] & 0x0f, 0);
  EXPECT_EQ(b.qs[10] & 0x0f, 15);
}

TEST(Quantize, AllZeroBlock) {
  float x[32] = {};
  BlockQ8_0 a;
  BlockQ4_0 b;
  quantize_block_q8_0(x, &a);
  quantize_block_q4_0(x, &b);
  EXPECT_EQ(a.d, 0);
  EXPECT_EQ(b.d, 0x8000);  // 0 / -8 = -0, stored as fp16 -0 exactly as ggml does
  for (int j = 0; j < 32; ++j) EXPECT_EQ(a.qs[j], 0);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], 0x88);
}

TEST(Quantize, NonFiniteInputDoesNotCrash) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[9] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> out(row_bytes(DType::Q4_0, 32) + row_bytes(DType::Q8_0, 32));
  quantize_row(DType::Q8_0, x, out.data(), 32);
  quantize_row(DType::Q4_0, x, out.data(), 32);
  SUCCEED();
}

TEST(Dequantize, IsScaleTimesCode) {
  BlockQ8_0 a{};
  a.d = fp32_to_fp16(0.25f);
  for (int j = 0; j < 32; ++j) a.qs[j] = static_cast<int8_t>(j * 8 - 127);
  float out[32];
  dequantize_row(DType::Q8_0, &a, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.25f * static_cast<float>(j * 8 - 127));
  BlockQ4_0 b{};
  b.d = fp32_to_fp16(-1.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  dequantize_row(DType::Q4_0, &b, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], -1.5f * static_cast<float>(j - 8));
    EXPECT_EQ(out[j + 16], -1.5f * static_cast<float>(7 - j));
  }
}

// Round-trip error bounds on smooth random data (no block holds both +max and -max exactly).
// Q8_0: rounding to the nearest code loses at most d/2; storing d as fp16 moves every code's value
// by at most 127 * |d - fp16(d)| <= 127 * d * 2^-11 = 0.062 d. So |x - x'| <= 0.5625 d.
// Q4_0 (|d| = amax / 8): likewise |d|/2 plus 8 * |d| * 2^-11 (codes -8..7); but on the side
// opposite to the max's sign the largest code is 7, so values beyond 7.5 |d| there lose
// |x| - 7 |d| instead. F16 / BF16: relative half-ulp, 2^-11 and 2^-8, plus half the smallest
// fp16 subnormal (2^-25) for tiny values.
TEST(Dequantize, RoundTripErrorBounds) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 32 * 256;
  std::vector<float> x(n), back(n);
  for (auto& v : x) v = nd(rng);
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), back.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        double bound = 0;
        switch (t) {
          case DType::F16:
            bound = std::fabs(x[i]) * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
            break;
          case DType::BF16:
            bound = std::fabs(x[i]) * std::ldexp(1.0, -8);
            break;
          case DType::Q8_0:
            bound = 0.5625 * amax / 127.0;
            break;
          default: {
            const double d = amax / 8.0;
            bound = std::max(0.5 * d, std::fabs(x[i]) - 7 * d) + 8 * d * std::ldexp(1.0, -11);
            break;
          }
        }
        ASSERT_LE(std::fabs(static_cast<double>(back[i]) - x[i]), bound * 1.0001 + 1e-30)
            << dtype_name(t) << " element " << i;
      }
    }
  }
}

TEST(Quantize, TensorIsRowsOfQuantizedRows) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  const int64_t rows = 5, cols = 96;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = ud(rng);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    const std::vector<uint8_t> all = quantize_tensor(t, x.data(), rows, cols);
    const size_t rb = row_bytes(t, cols);
    ASSERT_EQ(all.size(), rb * rows);
    std::vector<uint8_t> one(rb);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row(t, x.data() + r * cols, one.data(), cols);
      EXPECT_EQ(std::memcmp(one.data(), all.data() + r * rb, rb), 0) << dtype_name(t);
    }
  }
}

TEST(Quantize, RejectsUnsupportedTypeAndBadLength) {
  float x[64] = {};
  uint8_t out[256];
  EXPECT_THROW(quantize_row(DType::Q4_K, x, out, 64), Error);  // 64: not a multiple of 256
  EXPECT_THROW(quantize_row(DType::Q8_0, x, out, 48), Error);
  EXPECT_THROW(dequantize_row(DType::Q4_0, out, x, 33), Error);
  EXPECT_THROW(quantize_tensor(DType::Q4_0, x, 2, 31), Error);
  EXPECT_TRUE(has_reference_quantizer(DType::BF16));
  EXPECT_TRUE(has_reference_quantizer(DType::Q6_K));
  EXPECT_FALSE(has_reference_quantizer(DType::IQ2_XXS));  // a format we do not read yet
  EXPECT_THROW(quantize_row(DType::IQ2_XXS, x, out, 256), Error);
  try {
    quantize_row(DType::Q8_0, x, out, 48);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("48"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvasir
