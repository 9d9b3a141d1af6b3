#include "kvasir/sampling/top_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace kvasir {
namespace {

// Reference: stable sort of all ids by value descending (NaN last), so ties keep id order.
std::vector<int32_t> reference_top(const std::vector<float>& v, int32_t k) {
  std::vector<int32_t> ids(v.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto key = [&](int32_t i) {
    return std::isnan(v[i]) ? -std::numeric_limits<float>::infinity() : v[i];
  };
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
  ids.resize(std::min<size_t>(k, ids.size()));
  return ids;
}

TEST(TopTokens, HandPickedTies) {
  const std::vector<float> v = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  std::vector<int32_t> ids(v.size());
  TopTokens top;
  ASSERT_EQ(top.select(v.data(), 5, 2, ids.data()), 2);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  ASSERT_EQ(top.select(v.data(), 5, 4, ids.data()), 4);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 4), (std::vector<int32_t>{1, 2, 4, 3}));
}

TEST(TopTokens, SignedZerosTie) {
  const std::vector<float> v = {-0.0f, 0.0f, -1.0f};
  std::vector<int32_t> ids(3);
  TopTokens top;
  top.select(v.data(), 3, 1, ids.data());
  EXPECT_EQ(ids[0], 0);  // -0 == +0: the lower id wins
}

TEST(TopTokens, MatchesStableSortOnBothPaths) {
  std::mt19937 gen(3);
  const int32_t n = 20000;
  std::vector<float> v(n);
  // Few distinct values so that ties are everywhere, plus NaN and infinities.
  std::uniform_int_distribution<int> level(0, 50);
  for (auto& x : v) x = static_cast<float>(level(gen)) * 0.25f;
  v[17] = std::numeric_limits<float>::quiet_NaN();
  v[18] = std::numeric_limits<float>::infinity();
  v[19] = -std::numeric_limits<float>::infinity();
  v[20] = -0.0f;
  v[21] = 0.0f;
  std::vector<int32_t> ids(n);
  TopTokens top;
  for (int32_t k : {0, 1, 2, 7, 255, 256, 257, 1000, n - 1, n, n + 3}) {
    const int32_t got = top.select(v.data(), n, k, ids.data());
    const auto ref = reference_top(v, k);
    ASSERT_EQ(got, static_cast<int32_t>(ref.size()));
    ASSERT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + got), ref) << "k=" << k;
  }
}

}  // namespace
}  // namespace kvasir
