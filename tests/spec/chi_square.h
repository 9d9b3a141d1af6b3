// Pearson's chi-square statistic of observed counts against expected probabilities, and the
// critical values the distribution tests use.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace kvasir::test_util {

// Categories with expected count < min_expected are pooled into one (the usual validity rule);
// returns the statistic and sets *df to the degrees of freedom (categories after pooling - 1).
inline double chi_square(const std::vector<double>& p, const std::vector<int64_t>& counts, int* df,
                         double min_expected = 5.0) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double stat = 0, pooled_e = 0;
  int64_t pooled_o = 0;
  int cats = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    if (e < min_expected) {
      pooled_e += e;
      pooled_o += counts[i];
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++cats;
  }
  if (pooled_e > 0) {
    if (pooled_e >= 1e-12) stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cats;
  }
  *df = cats - 1;
  return stat;
}

// The chi-square quantile at upper tail 1e-6 for df degrees of freedom (Wilson-Hilferty
// approximation, within 2% of the exact value for df >= 3: ample for a threshold this far out).
// A correct sampler fails such a test once in a million runs; the seeds are fixed anyway.
inline double chi_square_critical_1e6(int df) {
  const double z = 4.7534;  // standard normal quantile at 1 - 1e-6
  const double k = df;
  const double a = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * a * a * a;
}

}  // namespace kvasir::test_util
