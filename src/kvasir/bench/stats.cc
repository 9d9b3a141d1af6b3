#include "kvasir/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvasir/util/error.h"

namespace kvasir::bench {
namespace {

std::vector<double> sorted_copy(std::span<const double> values, const char* what) {
  if (values.empty()) fail("{}: no values", what);
  std::vector<double> v(values.begin(), values.end());
  for (double x : v)
    if (std::isnan(x)) fail("{}: value is NaN", what);
  std::sort(v.begin(), v.end());
  return v;
}

// Linear interpolation between order statistics of a sorted, non-empty vector.
double interpolate(const std::vector<double>& v, double p) {
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

}  // namespace

Summary summarize(std::span<const double> values) {
  std::vector<double> v = sorted_copy(values, "summarize");
  Summary s;
  s.n = static_cast<int>(v.size());
  s.min = v.front();
  s.max = v.back();
  s.median = interpolate(v, 50.0);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

double percentile(std::span<const double> values, double p) {
  if (!(p >= 0.0 && p <= 100.0)) fail("percentile: p = {} is outside [0, 100]", p);
  return interpolate(sorted_copy(values, "percentile"), p);
}

}  // namespace kvasir::bench
