// fp16 / bf16 scalar conversions of dtype.h, checked exhaustively (all 65536 halves) and on many
// floats chosen around every rounding boundary: fp16 against the CPU's F16C instructions
// (IEEE round-to-nearest-even, subnormals, overflow to inf), bf16 against an independent
// round-to-nearest-even computed in double.
#include "kvasir/tensor/dtype.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kvasir {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

__attribute__((target("f16c"))) uint16_t f16c_from_float(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
__attribute__((target("f16c"))) float f16c_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}

bool have_f16c() {
  return __builtin_cpu_supports("f16c");
}

bool half_is_nan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

TEST(Fp16, AllHalvesToFloatMatchF16C) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  int checked = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = fp16_to_fp32(static_cast<uint16_t>(h));
    const float hw = f16c_to_float(static_cast<uint16_t>(h));
    if (half_is_nan(static_cast<uint16_t>(h))) {
      // F16C quiets signalling NaNs (sets bit 22); the payload and sign are otherwise kept.
      ASSERT_TRUE(std::isnan(ours)) << h;
      ASSERT_EQ(bits_of(ours) | 0x00400000u, bits_of(hw)) << h;
    } else {
      ASSERT_EQ(bits_of(ours), bits_of(hw)) << "half 0x" << std::hex << h;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);
}

TEST(Fp16, AllHalvesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (half_is_nan(static_cast<uint16_t>(h))) continue;
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h) << h;
  }
}

// Floats at and next to every midpoint between adjacent halves (where rounding decides), plus a
// sweep over the whole float range and the special values.
std::vector<float> fp16_probe_floats() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = fp16_to_fp32(static_cast<uint16_t>(h));
    // Next half up (0x7c00 is inf: the midpoint to the "next binade" 65536 decides overflow).
    const double hi = h + 1 < 0x7c00 ? fp16_to_fp32(static_cast<uint16_t>(h + 1)) : 65536.0;
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: needs 12 significant bits
    const uint32_t mb = bits_of(mid);
    for (int d = -2; d <= 2; ++d) {
      const float f = from_bits(mb + static_cast<uint32_t>(d));
      v.push_back(f);
      v.push_back(-f);
    }
    v.push_back(static_cast<float>(lo));
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099)
    v.push_back(from_bits(static_cast<uint32_t>(u)));
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            65504.0f,
                            65519.996f,
                            65520.0f,
                            1e-8f,
                            std::ldexp(1.0f, -25),
                            std::ldexp(3.0f, -26),
                            std::ldexp(1.0f, -24),
                            std::ldexp(1.0f, -14),
                            std::ldexp(1023.5f, -24)};
  for (float f : specials) v.push_back(f);
  return v;
}

TEST(Fp16, FloatToHalfMatchesF16C) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  const std::vector<float> probes = fp16_probe_floats();
  ASSERT_GT(probes.size(), 1000000u);
  for (float f : probes) {
    const uint16_t ours = fp32_to_fp16(f);
    const uint16_t hw = f16c_from_float(f);
    if (std::isnan(f)) {
      // F16C keeps the top payload bits; we (like ggml) return the canonical quiet NaN.
      ASSERT_TRUE(half_is_nan(ours) && half_is_nan(hw) && (ours & 0x8000) == (hw & 0x8000));
      continue;
    }
    ASSERT_EQ(ours, hw) << "float bits 0x" << std::hex << bits_of(f);
  }
}

TEST(Fp16, NanStaysNanWithSign) {
  for (uint32_t payload : {0x1u, 0x400000u, 0x7fffffu, 0x123u}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint16_t h = fp32_to_fp16(from_bits(sign | 0x7f800000u | payload));
      EXPECT_TRUE(half_is_nan(h)) << std::hex << h;
      EXPECT_EQ(h & 0x8000, sign >> 16);
    }
  }
}

// Independent reference: the nearer of the two bf16 values bracketing f, ties to even.
uint16_t ref_bf16(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t lo = u >> 16;  // truncation toward zero (same sign)
  const auto value = [](uint32_t p) {
    // 0x7f80 as the upper neighbour of the largest finite bf16 stands for 2^128 (rounds to inf).
    if ((p & 0x7fff) == 0x7f80)
      return std::copysign(std::ldexp(1.0, 128), (p & 0x8000) ? -1.0 : 1.0);
    return static_cast<double>(from_bits(p << 16));
  };
  const double x = f;
  const double dlo = std::fabs(x - value(lo));
  const double dhi = std::fabs(value(lo + 1) - x);
  if (dlo < dhi) return static_cast<uint16_t>(lo);
  if (dhi < dlo) return static_cast<uint16_t>(lo + 1);
  return static_cast<uint16_t>((lo & 1) ? lo + 1 : lo);
}

TEST(Bf16, RoundToNearestEvenEverywhere) {
  int checked = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7fff) >= 0x7f80) continue;  // inf / nan patterns
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const uint32_t u = h << 16 | low;
      if ((u & 0x7fffffff) > 0x7f800000) continue;
      const float f = from_bits(u);
      ASSERT_EQ(fp32_to_bf16(f), ref_bf16(f)) << "float bits 0x" << std::hex << u;
      ++checked;
    }
  }
  EXPECT_GT(checked, 380000);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
}

TEST(Bf16, NanStaysQuietNan) {
  for (uint32_t u : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7f810000u}) {
    const uint16_t h = fp32_to_bf16(from_bits(u));
    EXPECT_TRUE(std::isnan(bf16_to_fp32(h))) << std::hex << u;
    EXPECT_EQ(h & 0x8000, (u >> 16) & 0x8000);
  }
}

TEST(Bf16, ToFloatIsExactWidening) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(bits_of(bf16_to_fp32(static_cast<uint16_t>(h))), h << 16);
  }
}

TEST(DType, InfoMatchesGgml) {
  EXPECT_EQ(row_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(DType::BF16, 3), 6u);
  EXPECT_EQ(dtype_from_name("q4_0"), DType::Q4_0);
  EXPECT_FALSE(dtype_info(uint32_t{4}).has_value());  // ggml's removed Q4_2
}

}  // namespace
}  // namespace kvasir
