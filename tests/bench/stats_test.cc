// Statistics helpers: median/min/max/mean of repetitions and interpolated percentiles.
#include "kvasir/bench/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvasir/util/error.h"

namespace kvasir::bench {
namespace {

TEST(Stats, OddCountMedianIsTheMiddleValue) {
  std::vector<double> v{3.0, 1.0, 2.0};
  Summary s = summarize(v);
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.median, 2.0);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 3.0);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
}

TEST(Stats, EvenCountMedianAveragesTheMiddlePair) {
  std::vector<double> v{4.0, 1.0, 10.0, 2.0};
  Summary s = summarize(v);
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(s.mean, 4.25);
}

TEST(Stats, SingleValue) {
  std::vector<double> v{7.5};
  Summary s = summarize(v);
  EXPECT_EQ(s.n, 1);
  EXPECT_EQ(s.median, 7.5);
  EXPECT_EQ(s.min, 7.5);
  EXPECT_EQ(s.max, 7.5);
}

TEST(Stats, InputOrderDoesNotMatterAndIsNotModified) {
  std::vector<double> a{5, 9, 1, 7, 3};
  std::vector<double> b{1, 3, 5, 7, 9};
  std::vector<double> a_copy = a;
  EXPECT_EQ(summarize(a).median, summarize(b).median);
  EXPECT_EQ(a, a_copy);
}

TEST(Stats, PercentileInterpolatesBetweenOrderStatistics) {
  std::vector<double> v;
  for (int i = 11; i >= 1; --i) v.push_back(i);  // 1..11, reversed
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 11.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 6.0);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 10.0);
  std::vector<double> two{0.0, 10.0};
  EXPECT_DOUBLE_EQ(percentile(two, 25), 2.5);
  EXPECT_DOUBLE_EQ(percentile(two, 99), 9.9);
}

TEST(Stats, RejectsEmptyNanAndBadPercentile) {
  std::vector<double> empty;
  EXPECT_THROW(summarize(empty), Error);
  EXPECT_THROW(percentile(empty, 50), Error);
  std::vector<double> nan{1.0, std::nan("")};
  EXPECT_THROW(summarize(nan), Error);
  std::vector<double> ok{1.0, 2.0};
  EXPECT_THROW(percentile(ok, -1), Error);
  EXPECT_THROW(percentile(ok, 100.5), Error);
  EXPECT_THROW(percentile(ok, std::nan("")), Error);
}

}  // namespace
}  // namespace kvasir::bench
