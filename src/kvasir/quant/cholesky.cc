#include "kvasir/quant/cholesky.h"

#include <cmath>

namespace kvasir {

namespace {

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

}  // namespace

bool cholesky_lower(std::vector<double>& a, int64_t n) {
  // Row by row (Cholesky–Banachiewicz): L[i][j] = (a[i][j] - L[i][:j] . L[j][:j]) / L[j][j].
  for (int64_t i = 0; i < n; ++i) {
    double* li = a.data() + i * n;
    for (int64_t j = 0; j < i; ++j) {
      const double* lj = a.data() + j * n;
      li[j] = (li[j] - dot(li, lj, j)) / lj[j];
    }
    const double d = li[i] - dot(li, li, i);
    if (!(d > 0) || !std::isfinite(d)) return false;
    li[i] = std::sqrt(d);
    for (int64_t j = i + 1; j < n; ++j) li[j] = 0;
  }
  return true;
}

std::vector<double> cholesky_inverse(const std::vector<double>& l, int64_t n) {
  // M = L^-1 is lower triangular; mt holds it transposed (mt[j][i] = M[i][j]) so that the
  // substitution for column j of M reads contiguous rows: M[i][j] = -(L[i][j:i] . M[j:i][j]) /
  // L[i][i] for i > j, M[j][j] = 1 / L[j][j].
  std::vector<double> mt(static_cast<size_t>(n * n), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    double* mj = mt.data() + j * n;
    mj[j] = 1.0 / l[static_cast<size_t>(j * n + j)];
    for (int64_t i = j + 1; i < n; ++i) {
      const double* li = l.data() + i * n;
      mj[i] = -dot(li + j, mj + j, i - j) / li[i];
    }
  }
  // a^-1 = M^T M: entry (i, j) = sum over k >= max(i, j) of M[k][i] M[k][j].
  std::vector<double> inv(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const double v = dot(mt.data() + i * n + i, mt.data() + j * n + i, n - i);
      inv[static_cast<size_t>(i * n + j)] = v;
      inv[static_cast<size_t>(j * n + i)] = v;
    }
  return inv;
}

bool gptq_inverse_factor(const std::vector<double>& h, int64_t n, std::vector<double>& u) {
  std::vector<double> l = h;
  if (!cholesky_lower(l, n)) return false;
  std::vector<double> inv = cholesky_inverse(l, n);
  if (!cholesky_lower(inv, n)) return false;
  // U = L^T for h^-1 = L L^T.
  u.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j)
      u[static_cast<size_t>(j * n + i)] = inv[static_cast<size_t>(i * n + j)];
  return true;
}

}  // namespace kvasir
