// Summary statistics of repeated measurements (BENCH.md: report the median with min and max).
//
// summarize() takes the per-repetition values (any order) and returns their count, median (the
// mean of the two middle values for an even count), min, max and mean. percentile() interpolates
// linearly between order statistics (p in [0, 100]; p=50 is the median). Both throw
// kvasir::Error on an empty input or a NaN value, and percentile() on p outside [0, 100].
#pragma once

#include <span>

namespace kvasir::bench {

struct Summary {
  int n = 0;
  double median = 0;
  double min = 0;
  double max = 0;
  double mean = 0;
};

Summary summarize(std::span<const double> values);

double percentile(std::span<const double> values, double p);

}  // namespace kvasir::bench
