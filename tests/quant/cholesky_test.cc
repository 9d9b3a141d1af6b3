// quant/cholesky.h against textbook references written out here the naive way: Cholesky by the
// column (Crout) recurrence, the inverse by Gauss-Jordan elimination with partial pivoting, and
// the GPTQ factor checked by its defining identity U^T U = H^-1 with U upper triangular.
#include "kvasir/quant/cholesky.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

namespace kvasir {
namespace {

// A = B B^T + n I: symmetric positive definite, with a spread of eigenvalues.
std::vector<double> random_spd(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> b(static_cast<size_t>(n * n)), a(static_cast<size_t>(n * n));
  for (double& v : b) v = d(rng);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = i == j ? 0.1 * n : 0.0;
      for (int k = 0; k < n; ++k) s += b[i * n + k] * b[j * n + k];
      a[i * n + j] = s;
    }
  return a;
}

// Crout: column by column, L[j][j] = sqrt(a[j][j] - sum_k L[j][k]^2), L[i][j] = (a[i][j] -
// sum_k L[i][k] L[j][k]) / L[j][j] for i > j.
std::vector<double> naive_cholesky(const std::vector<double>& a, int n) {
  std::vector<double> l(a.size(), 0.0);
  for (int j = 0; j < n; ++j) {
    double s = a[j * n + j];
    for (int k = 0; k < j; ++k) s -= l[j * n + k] * l[j * n + k];
    l[j * n + j] = std::sqrt(s);
    for (int i = j + 1; i < n; ++i) {
      double t = a[i * n + j];
      for (int k = 0; k < j; ++k) t -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = t / l[j * n + j];
    }
  }
  return l;
}

std::vector<double> naive_inverse(std::vector<double> a, int n) {
  std::vector<double> inv(a.size(), 0.0);
  for (int i = 0; i < n; ++i) inv[i * n + i] = 1;
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
    for (int k = 0; k < n; ++k) {
      std::swap(a[c * n + k], a[p * n + k]);
      std::swap(inv[c * n + k], inv[p * n + k]);
    }
    const double piv = a[c * n + c];
    for (int k = 0; k < n; ++k) {
      a[c * n + k] /= piv;
      inv[c * n + k] /= piv;
    }
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r * n + c];
      for (int k = 0; k < n; ++k) {
        a[r * n + k] -= f * a[c * n + k];
        inv[r * n + k] -= f * inv[c * n + k];
      }
    }
  }
  return inv;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(Cholesky, LowerFactorMatchesTheNaiveRecurrence) {
  for (int n : {1, 2, 7, 37, 96}) {
    const std::vector<double> a = random_spd(n, 100 + n);
    std::vector<double> l = a;
    ASSERT_TRUE(cholesky_lower(l, n)) << n;
    EXPECT_LT(max_abs_diff(l, naive_cholesky(a, n)), 1e-9) << n;
    // And it is a factor: L L^T = A (upper triangle of L zero).
    std::vector<double> back(a.size(), 0.0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < n; ++k) back[i * n + j] += l[i * n + k] * l[j * n + k];
    EXPECT_LT(max_abs_diff(back, a), 1e-9 * n) << n;
  }
}

TEST(Cholesky, InverseMatchesGaussJordan) {
  for (int n : {1, 3, 37, 96}) {
    const std::vector<double> a = random_spd(n, 200 + n);
    std::vector<double> l = a;
    ASSERT_TRUE(cholesky_lower(l, n));
    const std::vector<double> inv = cholesky_inverse(l, n);
    const std::vector<double> ref = naive_inverse(a, n);
    double scale = 0;
    for (double v : ref) scale = std::max(scale, std::fabs(v));
    EXPECT_LT(max_abs_diff(inv, ref), 1e-10 * scale) << n;
  }
}

TEST(Cholesky, GptqFactorIsTheUpperCholeskyOfTheInverse) {
  const int n = 64;
  const std::vector<double> h = random_spd(n, 7);
  std::vector<double> u;
  ASSERT_TRUE(gptq_inverse_factor(h, n, u));
  std::vector<double> utu(h.size(), 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (j < i) {
        EXPECT_EQ(u[i * n + j], 0.0);
      }
      for (int k = 0; k < n; ++k) utu[i * n + j] += u[k * n + i] * u[k * n + j];
    }
  const std::vector<double> ref = naive_inverse(h, n);
  double scale = 0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  EXPECT_LT(max_abs_diff(utu, ref), 1e-10 * scale);
  for (int i = 0; i < n; ++i) EXPECT_GT(u[i * n + i], 0.0);
}

TEST(Cholesky, RefusesWhatIsNotPositiveDefinite) {
  std::vector<double> a{1, 2, 2, 1};  // eigenvalues 3 and -1
  EXPECT_FALSE(cholesky_lower(a, 2));
  std::vector<double> z{0, 0, 0, 0};
  EXPECT_FALSE(cholesky_lower(z, 2));
  std::vector<double> nan{NAN};
  EXPECT_FALSE(cholesky_lower(nan, 1));
  std::vector<double> u;
  EXPECT_FALSE(gptq_inverse_factor({1, 2, 2, 1}, 2, u));
}

}  // namespace
}  // namespace kvasir
