#include "kvasir/quant/recon_error.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvasir {

double gram_quadratic(const float* a, const float* b, int64_t rows, int64_t cols,
                      const double* gram, ThreadPool* pool) {
  std::vector<double> per_row(static_cast<size_t>(rows));
  auto run = [&](int64_t r0, int64_t r1) {
    std::vector<double> d(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < cols; ++j)
        d[static_cast<size_t>(j)] = double{a[r * cols + j]} - (b ? double{b[r * cols + j]} : 0.0);
      double s = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const double* gi = gram + i * cols;
        double t = 0;
        for (int64_t j = 0; j < cols; ++j) t += gi[j] * d[static_cast<size_t>(j)];
        s += d[static_cast<size_t>(i)] * t;
      }
      per_row[static_cast<size_t>(r)] = s;
    }
  };
  if (pool != nullptr && pool->size() > 1 && rows > 1)
    pool->parallel_for(rows, [&](int64_t b0, int64_t e0, int) { run(b0, e0); });
  else
    run(0, rows);
  double s = 0;
  for (double v : per_row) s += v;
  return s;
}

double relative_output_error(const float* w, const float* w_hat, int64_t rows, int64_t cols,
                             const double* gram, ThreadPool* pool) {
  const double ref = gram_quadratic(w, nullptr, rows, cols, gram, pool);
  if (!(ref > 0)) return 0;
  const double err = gram_quadratic(w, w_hat, rows, cols, gram, pool);
  return std::sqrt(std::max(0.0, err) / ref);
}

}  // namespace kvasir
