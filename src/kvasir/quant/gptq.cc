#include "kvasir/quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <numeric>

#include "kvasir/quant/cholesky.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

constexpr int64_t kTileRows = 8;

// GPTQ over rows [r0, r1), columns in the permuted order `perm` (invperm its inverse), with the
// inverse-Hessian factor u (n x n, permuted order). Writes codes/grids/dequant of those rows.
struct Tile {
  const float* w;
  int64_t cols;
  const std::vector<int64_t>* perm;
  const std::vector<int64_t>* invperm;
  const std::vector<int64_t>* first_pos;  // per group: the permuted position of its first column
  const std::vector<char>* dead;          // per original column
  const std::vector<double>* u;
  int64_t block;
  const double* gram;  // original order, for the grid search (null: min/max grids)
  int grid_steps;
};

// The grid of a group's current values x: min/max, or with a gram block the best of the shrunk
// ranges [f lo, f hi], f = 1, 0.95, ..., by the group's own output error (x - x') G_gg (x - x')^T.
Q4_1Grid group_grid(const float* x, const double* g, int64_t stride, int steps) {
  const auto [lo0, hi0] = std::minmax_element(x, x + kQ4_1Group);
  Q4_1Grid best = q4_1_grid(*lo0, *hi0);
  if (g == nullptr || steps == 0) return best;
  double best_err = INFINITY;
  double d[kQ4_1Group];
  for (int i = 0; i <= steps; ++i) {
    const float f = 1.0f - static_cast<float>(i) / 20.0f;
    const Q4_1Grid grid = q4_1_grid(f * *lo0, f * *hi0);
    for (int j = 0; j < kQ4_1Group; ++j)
      d[j] = double{x[j]} - double{q4_1_value(grid, q4_1_code(grid, x[j]))};
    double err = 0;
    for (int a = 0; a < kQ4_1Group; ++a) {
      double t = 0;
      for (int b = 0; b < kQ4_1Group; ++b) t += g[a * stride + b] * d[b];
      err += d[a] * t;
    }
    if (err < best_err) {
      best_err = err;
      best = grid;
    }
  }
  return best;
}

void run_tile(const Tile& t, int64_t r0, int64_t r1, std::vector<Q4_1Grid>& grids,
              std::vector<uint8_t>& codes, float* dequant) {
  const int64_t n = t.cols, groups = n / kQ4_1Group, nr = r1 - r0;
  const std::vector<int64_t>& perm = *t.perm;
  const std::vector<int64_t>& invperm = *t.invperm;
  const double* u = t.u->data();
  std::vector<double> wp(static_cast<size_t>(nr * n));  // the rows, permuted, being updated
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t p = 0; p < n; ++p) {
      const int64_t c = perm[static_cast<size_t>(p)];
      wp[static_cast<size_t>(r * n + p)] =
          (*t.dead)[static_cast<size_t>(c)] ? 0.0 : double{t.w[(r0 + r) * n + c]};
    }
  std::vector<double> err(static_cast<size_t>(nr * t.block));
  float vals[kQ4_1Group];
  for (int64_t i1 = 0; i1 < n; i1 += t.block) {
    const int64_t i2 = std::min(n, i1 + t.block), count = i2 - i1;
    for (int64_t p = i1; p < i2; ++p) {
      const int64_t c = perm[static_cast<size_t>(p)], g = c / kQ4_1Group;
      if ((*t.first_pos)[static_cast<size_t>(g)] == p) {
        // The group's grid, from its columns' current values (pending lazy updates applied).
        for (int64_t r = 0; r < nr; ++r) {
          const double* wr = wp.data() + r * n;
          const double* er = err.data() + r * t.block;
          for (int j = 0; j < kQ4_1Group; ++j) {
            const int64_t pj = invperm[static_cast<size_t>(g * kQ4_1Group + j)];
            double v = wr[pj];
            if (pj >= i2)
              for (int64_t k = i1; k < p; ++k) v -= er[k - i1] * u[k * n + pj];
            vals[j] = static_cast<float>(v);
          }
          grids[static_cast<size_t>((r0 + r) * groups + g)] =
              group_grid(vals, t.gram ? t.gram + g * kQ4_1Group * n + g * kQ4_1Group : nullptr, n,
                         t.grid_steps);
        }
      }
      const double upp = u[p * n + p];
      for (int64_t r = 0; r < nr; ++r) {
        double* wr = wp.data() + r * n;
        const Q4_1Grid& grid = grids[static_cast<size_t>((r0 + r) * groups + g)];
        const int q = q4_1_code(grid, static_cast<float>(wr[p]));
        const float v = q4_1_value(grid, q);
        codes[static_cast<size_t>((r0 + r) * n + c)] = static_cast<uint8_t>(q);
        dequant[(r0 + r) * n + c] = v;
        const double e = (wr[p] - double{v}) / upp;
        err[static_cast<size_t>(r * t.block + (p - i1))] = e;
        const double* up = u + p * n;
        for (int64_t j = p + 1; j < i2; ++j) wr[j] -= e * up[j];
      }
    }
    // The block's errors, applied to every later column at once.
    for (int64_t r = 0; r < nr; ++r) {
      double* wr = wp.data() + r * n;
      const double* er = err.data() + r * t.block;
      for (int64_t k = 0; k < count; ++k) {
        const double e = er[k];
        const double* uk = u + (i1 + k) * n;
        for (int64_t j = i2; j < n; ++j) wr[j] -= e * uk[j];
      }
    }
  }
}

}  // namespace

GptqResult gptq_q4_1(const float* w, int64_t rows, int64_t cols, const double* gram,
                     const GptqOptions& opt, ThreadPool* pool) {
  if (rows <= 0 || cols <= 0 || cols % kQ4_1Group != 0)
    fail("gptq: a {} x {} matrix does not split into groups of 32 columns", rows, cols);
  if (opt.block <= 0 || opt.block % kQ4_1Group != 0)
    fail("gptq: the block size {} is not a positive multiple of 32", opt.block);
  if (!(opt.damp >= 0) || !std::isfinite(opt.damp))
    fail("gptq: dampening {} is not a finite non-negative number", opt.damp);
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(w[i])) fail("gptq: the weights are not finite");
  const int64_t n = cols, groups = n / kQ4_1Group;

  std::vector<char> dead(static_cast<size_t>(n), 0);
  std::vector<double> diag(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    diag[static_cast<size_t>(i)] = gram[i * n + i];
    if (!std::isfinite(gram[i * n + i])) fail("gptq: the Hessian is not finite");
    if (!(gram[i * n + i] > 0)) {
      dead[static_cast<size_t>(i)] = 1;
      diag[static_cast<size_t>(i)] = 1;
    }
  }
  std::vector<int64_t> perm(static_cast<size_t>(n)), invperm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (opt.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return diag[static_cast<size_t>(a)] > diag[static_cast<size_t>(b)];
    });
  for (int64_t p = 0; p < n; ++p) invperm[static_cast<size_t>(perm[static_cast<size_t>(p)])] = p;
  std::vector<int64_t> first_pos(static_cast<size_t>(groups), n);
  for (int64_t p = 0; p < n; ++p) {
    int64_t& f = first_pos[static_cast<size_t>(perm[static_cast<size_t>(p)] / kQ4_1Group)];
    f = std::min(f, p);
  }

  // H in the permuted order, dead inputs isolated; then dampened and factored.
  std::vector<double> h(static_cast<size_t>(n * n));
  double mean_diag = 0;
  for (int64_t a = 0; a < n; ++a) {
    const int64_t ca = perm[static_cast<size_t>(a)];
    for (int64_t b = 0; b < n; ++b) {
      const int64_t cb = perm[static_cast<size_t>(b)];
      const bool off = dead[static_cast<size_t>(ca)] || dead[static_cast<size_t>(cb)];
      h[static_cast<size_t>(a * n + b)] = a == b ? diag[static_cast<size_t>(ca)]
                                          : off  ? 0.0
                                                 : gram[ca * n + cb];
    }
    mean_diag += diag[static_cast<size_t>(ca)];
  }
  mean_diag /= static_cast<double>(n);
  GptqResult res;
  std::vector<double> u;
  double damp = opt.damp;
  for (int attempt = 0;; ++attempt) {
    std::vector<double> hd = h;
    for (int64_t i = 0; i < n; ++i) hd[static_cast<size_t>(i * n + i)] += damp * mean_diag;
    if (gptq_inverse_factor(hd, n, u)) break;
    if (attempt == 3)
      fail("gptq: the Hessian is not positive definite even with dampening {}", damp);
    damp = damp > 0 ? damp * 10 : 0.01;
  }
  res.damp = damp;

  std::vector<Q4_1Grid> grids(static_cast<size_t>(rows * groups));
  std::vector<uint8_t> codes(static_cast<size_t>(rows * n));
  res.dequant.assign(static_cast<size_t>(rows * n), 0.0f);
  const Tile tile{w,     n,  &perm,     &invperm, &first_pos,
                  &dead, &u, opt.block, gram,     opt.grid_search ? 10 : 0};
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      run_tile(tile, t * kTileRows, std::min(rows, (t + 1) * kTileRows), grids, codes,
               res.dequant.data());
  };
  if (pool != nullptr && pool->size() > 1 && tiles > 1) {
    std::exception_ptr first;
    std::mutex mu;
    pool->parallel_for(tiles, [&](int64_t b, int64_t e, int) {
      try {
        run(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
    if (first) std::rethrow_exception(first);
  } else {
    run(0, tiles);
  }
  res.blocks.resize(static_cast<size_t>(rows * groups));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      res.blocks[static_cast<size_t>(r * groups + g)] = q4_1_pack(
          grids[static_cast<size_t>(r * groups + g)], codes.data() + r * n + g * kQ4_1Group);
  return res;
}

}  // namespace kvasir
