// Tests for the element-wise and row-wise ops (src/kvasir/kernels/cpu/ops.h) against scalar
// double-precision references, on every SIMD target this CPU supports. Lengths include
// non-multiples of every vector width (tails) and 1.
#include "kvasir/kernels/cpu/ops.h"

#include <gtest/gtest.h>
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {
namespace {

std::vector<float> random_vec(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The reference checks run on one thread; PooledEqualsSerial checks that splitting rows over a
// pool changes no bit.
ThreadPool& serial() {
  static ThreadPool pool(1);
  return pool;
}

const int64_t kLengths[] = {1, 3, 7, 8, 16, 17, 33, 100, 2048, 2051};

TEST(Ops, RmsNormMatchesReference) {
  // Float sum of squares over dim terms: relative error ~ sqrt(dim) * 2^-24 typically (dim * 2^-24
  // worst case, 1.2e-4 at 2051, never approached by random data); then 1/sqrt and two products
  // (~3 ulp). Tolerance 2e-6 relative to |x * scale * w|, plus 1e-7 absolute.
  for_each_target([] {
    for (int64_t dim : kLengths) {
      const int64_t rows = 3;
      std::vector<float> x = random_vec(rows * dim, -3.0f, 3.0f, 1),
                         w = random_vec(dim, -2.0f, 2.0f, 2);
      std::vector<float> out(rows * dim);
      const float eps = 1e-5f;
      rms_norm(x.data(), w.data(), out.data(), rows, dim, eps, serial());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i)
          ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
        const double scale = 1.0 / std::sqrt(ss / dim + eps);
        for (int64_t i = 0; i < dim; ++i) {
          const double ref = x[r * dim + i] * scale * w[i];
          ASSERT_NEAR(out[r * dim + i], ref, 2e-6 * std::abs(ref) + 1e-7) << "dim " << dim;
        }
      }
      // In place gives the same bits.
      std::vector<float> y = x;
      rms_norm(y.data(), w.data(), y.data(), rows, dim, eps, serial());
      ASSERT_EQ(std::memcmp(y.data(), out.data(), y.size() * 4), 0);
    }
  });
}

// Double reference for one row of one head.
void rope_reference(const float* x, double* out, int pos, int head_dim, int rope_dim,
                    const float* inv_freq, bool neox) {
  for (int i = 0; i < head_dim; ++i) out[i] = x[i];
  const int half = rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq[i];
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    out[a] = x[a] * std::cos(theta) - x[b] * std::sin(theta);
    out[b] = x[a] * std::sin(theta) + x[b] * std::cos(theta);
  }
}

TEST(Ops, RopeMatchesDoubleReference) {
  // The angle is exact (double) and cos/sin are rounded to float once, so each output is a float
  // rotation: error a few ulp of the pair's magnitude. Tolerance 1e-6 * (|x_a| + |x_b|) (the
  // required ~1e-5 relative, with margin); an angle formed in float would miss it by 100x at
  // position 100000. Dims past rope_dim must be untouched (bitwise).
  for_each_target([] {
    const int n_heads = 3;
    const std::vector<int32_t> pos = {0, 1, 17, 1999, 4095, 100000};
    for (bool neox : {false, true}) {
      for (auto [head_dim, rope_dim] :
           {std::pair{64, 64}, {128, 128}, {64, 32}, {80, 20}, {6, 6}}) {
        std::vector<float> inv_freq(rope_dim / 2);
        for (int i = 0; i < rope_dim / 2; ++i) {
          inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rope_dim));
        }
        const int64_t rows = static_cast<int64_t>(pos.size());
        std::vector<float> x = random_vec(rows * n_heads * head_dim, -1.0f, 1.0f, 3), y = x;
        rope(y.data(), pos.data(), rows, n_heads, head_dim, rope_dim, inv_freq.data(), neox,
             serial());
        std::vector<double> ref(head_dim);
        for (int64_t r = 0; r < rows; ++r) {
          for (int h = 0; h < n_heads; ++h) {
            const size_t off = (r * n_heads + h) * head_dim;
            rope_reference(x.data() + off, ref.data(), pos[r], head_dim, rope_dim, inv_freq.data(),
                           neox);
            for (int i = 0; i < head_dim; ++i) {
              if (i >= rope_dim) {
                ASSERT_EQ(y[off + i], x[off + i]);
                continue;
              }
              const int half = rope_dim / 2;
              const int partner = neox ? (i < half ? i + half : i - half) : (i ^ 1);
              const double tol = 1e-6 * (std::abs(x[off + i]) + std::abs(x[off + partner]));
              ASSERT_NEAR(y[off + i], ref[i], tol)
                  << "neox " << neox << " head_dim " << head_dim << " rope_dim " << rope_dim
                  << " pos " << pos[r] << " dim " << i;
            }
          }
        }
      }
    }
  });
}

TEST(Ops, RopeRejectsBadShapes) {
  float x[8] = {};
  const int32_t pos[1] = {0};
  const float f[4] = {1, 1, 1, 1};
  EXPECT_THROW(rope(x, pos, 1, 1, 8, 7, f, false, serial()), Error);   // odd rope_dim
  EXPECT_THROW(rope(x, pos, 1, 1, 8, 10, f, false, serial()), Error);  // rope_dim > head_dim
}

TEST(Ops, SwigluMatchesReference) {
  // exp (<= 1 ulp), one add, one divide, one multiply: <= ~4 ulp; tolerance 1e-6 relative.
  for_each_target([] {
    for (int64_t n : kLengths) {
      std::vector<float> g = random_vec(n, -20.0f, 20.0f, 4), u = random_vec(n, -3.0f, 3.0f, 5);
      if (n >= 8) {  // extremes: exp(-g) overflowing, tiny and huge gates
        g[0] = -100.0f;
        g[1] = 100.0f;
        g[2] = -88.5f;
        g[3] = 0.0f;
        g[4] = -1e-30f;
      }
      std::vector<float> out(n);
      swiglu(g.data(), u.data(), out.data(), n, serial());
      for (int64_t i = 0; i < n; ++i) {
        const double gd = g[i];
        const double ref = gd / (1.0 + std::exp(-gd)) * u[i];
        ASSERT_NEAR(out[i], ref, 1e-6 * std::abs(ref) + 1e-30) << "n " << n << " g " << g[i];
      }
      // out may alias gate.
      swiglu(g.data(), u.data(), g.data(), n, serial());
      ASSERT_EQ(std::memcmp(g.data(), out.data(), n * 4), 0);
    }
  });
}

TEST(Ops, AddIsExact) {
  for_each_target([] {
    for (int64_t n : kLengths) {
      std::vector<float> x = random_vec(n, -5.0f, 5.0f, 6), y = random_vec(n, -5.0f, 5.0f, 7);
      std::vector<float> want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = x[i] + y[i];
      add(x.data(), y.data(), n, serial());
      ASSERT_EQ(std::memcmp(x.data(), want.data(), n * 4), 0) << "n " << n;
    }
  });
}

TEST(Ops, AddBiasAddsTheBiasToEveryRow) {
  for (int64_t dim : kLengths) {
    const int64_t rows = 5;
    std::vector<float> x = random_vec(rows * dim, -5.0f, 5.0f, 9), b = random_vec(dim, -1, 1, 10);
    std::vector<float> want = x;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < dim; ++i) want[r * dim + i] += b[i];
    add_bias(x.data(), b.data(), rows, dim, serial());
    ASSERT_EQ(std::memcmp(x.data(), want.data(), x.size() * 4), 0) << "dim " << dim;
  }
}

// Large steps split their rows over the pool: every result must be bit-identical to the one
// thread's (the forward pass's batch invariance rests on it). Shapes above the split threshold,
// with row counts and lengths that do not divide evenly.
TEST(Ops, PooledEqualsSerial) {
  ThreadPool pool(3);
  const int64_t rows = 67, dim = 2051;
  const std::vector<float> x = random_vec(rows * dim, -3.0f, 3.0f, 11),
                           w = random_vec(dim, -2.0f, 2.0f, 12),
                           u = random_vec(rows * dim, -3.0f, 3.0f, 13);
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  {
    std::vector<float> a(x.size()), b(x.size());
    rms_norm(x.data(), w.data(), a.data(), rows, dim, 1e-5f, serial());
    rms_norm(x.data(), w.data(), b.data(), rows, dim, 1e-5f, pool);
    EXPECT_TRUE(same(a, b)) << "rms_norm";
  }
  {
    std::vector<float> a = x, b = x;
    add(a.data(), u.data(), rows * dim, serial());
    add(b.data(), u.data(), rows * dim, pool);
    EXPECT_TRUE(same(a, b)) << "add";
    a = x, b = x;
    add_bias(a.data(), w.data(), rows, dim, serial());
    add_bias(b.data(), w.data(), rows, dim, pool);
    EXPECT_TRUE(same(a, b)) << "add_bias";
    std::vector<float> ga(x.size()), gb(x.size());
    swiglu(x.data(), u.data(), ga.data(), rows * dim - 5, serial());
    swiglu(x.data(), u.data(), gb.data(), rows * dim - 5, pool);
    EXPECT_TRUE(same(ga, gb)) << "swiglu";
  }
  {
    const int n_heads = 7, head_dim = 96;
    const int64_t n = 97;
    std::vector<int32_t> pos(n);
    for (int64_t t = 0; t < n; ++t) pos[t] = static_cast<int32_t>(3 * t + 1);
    std::vector<float> inv(head_dim / 2);
    for (int i = 0; i < head_dim / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / head_dim);
    std::vector<float> a = random_vec(n * n_heads * head_dim, -1, 1, 14), b = a;
    rope(a.data(), pos.data(), n, n_heads, head_dim, head_dim, inv.data(), true, serial());
    rope(b.data(), pos.data(), n, n_heads, head_dim, head_dim, inv.data(), true, pool);
    EXPECT_TRUE(same(a, b)) << "rope";
  }
}

TEST(Ops, SoftmaxMatchesReference) {
  // x - max is rounded to float (error up to 2^-24 * |x - max|, which exp turns into that much
  // relative error), exp (<= 1 ulp), a float sum of n terms (relative error ~sqrt(n) * 2^-24
  // typical), one multiply: tolerance (1e-6 + 2^-23 * |x - max|) relative, for n <= 32000.
  for_each_target([] {
    for (int64_t n :
         {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{31}, int64_t{2051}, int64_t{32000}}) {
      std::vector<float> x = random_vec(n, -15.0f, 15.0f, 8);
      std::vector<float> y = x;
      softmax(y.data(), n);
      double mx = -INFINITY, sum = 0;
      for (float v : x) mx = std::max(mx, static_cast<double>(v));
      for (float v : x) sum += std::exp(v - mx);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = std::exp(x[i] - mx) / sum;
        const double tol = ref * (1e-6 + std::ldexp(std::abs(x[i] - mx), -23)) + 1e-38;
        ASSERT_NEAR(y[i], ref, tol) << "n " << n << " i " << i;
      }
    }
    // Large logits do not overflow; -inf entries get probability 0.
    std::vector<float> z = {1000.0f, 999.0f, -INFINITY, 1000.0f};
    softmax(z.data(), 4);
    const double e1 = std::exp(-1.0), s = 2 + e1;
    EXPECT_NEAR(z[0], 1 / s, 1e-7);
    EXPECT_NEAR(z[1], e1 / s, 1e-7);
    EXPECT_EQ(z[2], 0.0f);
    EXPECT_NEAR(z[3], 1 / s, 1e-7);
  });
}

}  // namespace
}  // namespace kvasir::cpu
