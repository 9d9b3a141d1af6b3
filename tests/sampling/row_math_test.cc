#include "kvasir/sampling/row_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kvasir/sampling/fast_exp.h"

namespace kvasir {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(FastExp, WithinTwoUlpOfExp) {
  // Relative error bound: 2 ulp of a float is 2 * 2^-23 ~ 2.4e-7 relative; the Cephes polynomial
  // with Cody-Waite reduction is specified at about 1 ulp, so 2.4e-7 has headroom but catches any
  // wrong coefficient (those err by 1e-4 or more).
  double worst = 0.0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(fast_exp(x) - ref) / ref);
  }
  EXPECT_LT(worst, 2.4e-7);
}

TEST(FastExp, EdgeValues) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);  // the row maximum gets weight exactly 1
  EXPECT_EQ(fast_exp(-kInf), 0.0f);
  EXPECT_EQ(fast_exp(std::nanf("")), 0.0f);
  EXPECT_EQ(fast_exp(-87.5f), 0.0f);
  EXPECT_GT(fast_exp(-86.9f), 0.0f);
  EXPECT_TRUE(std::isfinite(fast_exp(1000.0f)));
  EXPECT_LE(fast_exp(-1e-7f), 1.0f);  // never above 1 for x < 0
}

TEST(RowMath, RowMaxSkipsNaN) {
  std::vector<float> v(37, -1.0f);
  v[5] = std::nanf("");
  v[30] = 4.0f;
  v[36] = 3.0f;  // in the scalar tail
  EXPECT_EQ(row_max(v.data(), 37), 4.0f);
  v[33] = 9.0f;
  EXPECT_EQ(row_max(v.data(), 37), 9.0f);
  std::vector<float> nans(9, std::nanf(""));
  EXPECT_EQ(row_max(nans.data(), 9), -kInf);
}

TEST(RowMath, ExpShiftedMatchesDoubleReference) {
  std::mt19937 gen(4);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (int n : {1, 7, 8, 1000, 1029}) {
    std::vector<float> x(n), out(n);
    for (auto& v : x) v = d(gen);
    if (n > 1) x[0] = -kInf;  // a banned token (a row of only -inf has no reference)
    const float mx = row_max(x.data(), n);
    const double sum = exp_shifted(x.data(), n, mx, 0.5f, out.data());
    double ref_sum = 0.0;
    for (int i = 0; i < n; ++i) {
      const double ref = std::exp((static_cast<double>(x[i]) - mx) * 0.5);
      ref_sum += ref;
      // fast_exp (~1e-7) after a float subtraction and multiply (~1 ulp of values up to ~20).
      EXPECT_NEAR(out[i], ref, 1e-6 * std::max(ref, 1e-30)) << i;
    }
    EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum);
  }
}

TEST(RowMath, ShiftedHandlesInfinities) {
  EXPECT_EQ(shifted(kInf, kInf), 0.0f);
  EXPECT_EQ(shifted(3.0f, kInf), -kInf);
  EXPECT_EQ(shifted(-kInf, -kInf), 0.0f);
  EXPECT_EQ(shifted(2.0f, 5.0f), -3.0f);
}

TEST(RowMath, CollectAtLeastMatchesBruteForce) {
  std::mt19937 gen(8);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int n : {5, 32, 100, 4099}) {
    std::vector<float> x(n);
    for (auto& v : x) v = d(gen);
    x[n / 2] = std::nanf("");
    for (float threshold : {-kInf, -1.0f, 0.5f, 2.5f, kInf}) {
      std::vector<int32_t> ids(n);
      const int32_t m = collect_at_least(x.data(), n, threshold, ids.data());
      std::vector<int32_t> ref;
      for (int i = 0; i < n; ++i) {
        if (x[i] >= threshold) ref.push_back(i);
      }
      ASSERT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + m), ref)
          << "n=" << n << " threshold=" << threshold;
    }
  }
}

}  // namespace
}  // namespace kvasir
