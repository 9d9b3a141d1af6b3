#include "kvasir/quant/awq.h"

#include <algorithm>
#include <cmath>

#include "kvasir/quant/recon_error.h"
#include "kvasir/util/error.h"

namespace kvasir {

AwqScales awq_search_scales(std::span<const AwqMatrix> mats, int64_t cols, const double* gram,
                            std::span<const double> mean_abs, std::span<const int64_t> tie,
                            const AwqOptions& opt, ThreadPool* pool) {
  if (cols <= 0 || cols % kQ4_1Group != 0)
    fail("awq: rows of {} do not split into groups of 32", cols);
  if (static_cast<int64_t>(mean_abs.size()) != cols ||
      (!tie.empty() && static_cast<int64_t>(tie.size()) != cols))
    fail("awq: statistics for {} channels, weights of {}", mean_abs.size(), cols);
  if (opt.n_grid < 1) fail("awq: the alpha grid needs at least one step");
  // s_x per channel (tied channels: the mean over the tie), floored so that dead channels get a
  // finite scale (AutoAWQ clamps the scales at 1e-4 after the power).
  std::vector<double> sx(mean_abs.begin(), mean_abs.end());
  if (!tie.empty()) {
    std::vector<double> sum(static_cast<size_t>(cols), 0.0), n(static_cast<size_t>(cols), 0.0);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t rep = tie[static_cast<size_t>(j)];
      if (rep < 0 || rep >= cols || tie[static_cast<size_t>(rep)] != rep)
        fail("awq: channel {} is tied to {}, which is not a representative", j, rep);
      sum[static_cast<size_t>(rep)] += mean_abs[static_cast<size_t>(j)];
      n[static_cast<size_t>(rep)] += 1;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const size_t rep = static_cast<size_t>(tie[static_cast<size_t>(j)]);
      sx[static_cast<size_t>(j)] = sum[rep] / n[rep];
    }
  }
  for (double v : sx)
    if (!std::isfinite(v) || v < 0) fail("awq: activation statistics are not finite");

  AwqScales best;
  std::vector<float> s(static_cast<size_t>(cols)), ws, deq;
  std::vector<BlockQ4_1> blocks;
  for (int i = 0; i <= opt.n_grid; ++i) {
    const double alpha = static_cast<double>(i) / opt.n_grid;
    double smax = 0, smin = INFINITY;
    std::vector<double> raw(static_cast<size_t>(cols));
    for (int64_t j = 0; j < cols; ++j) {
      const double v = std::max(std::pow(sx[static_cast<size_t>(j)], alpha), 1e-4);
      raw[static_cast<size_t>(j)] = v;
      smax = std::max(smax, v);
      smin = std::min(smin, v);
    }
    const double norm = std::sqrt(smax * smin);
    for (int64_t j = 0; j < cols; ++j)
      s[static_cast<size_t>(j)] = static_cast<float>(raw[static_cast<size_t>(j)] / norm);
    double loss = 0;
    for (const AwqMatrix& m : mats) {
      const size_t n = static_cast<size_t>(m.rows * cols);
      ws.resize(n);
      deq.resize(n);
      blocks.resize(n / kQ4_1Group);
      for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t j = 0; j < cols; ++j)
          ws[static_cast<size_t>(r * cols + j)] = m.w[r * cols + j] * s[static_cast<size_t>(j)];
      q4_1_round_rows(ws.data(), m.rows, cols, blocks.data(), deq.data());
      for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t j = 0; j < cols; ++j)
          deq[static_cast<size_t>(r * cols + j)] /= s[static_cast<size_t>(j)];
      loss += gram_quadratic(m.w, deq.data(), m.rows, cols, gram, pool);
    }
    if (i == 0) best.loss_plain = loss;
    if (i == 0 || loss < best.loss) {
      best.loss = loss;
      best.alpha = alpha;
      best.scales = s;
    }
  }
  return best;
}

std::vector<BlockQ4_1> awq_quantize_q4_1(const float* ws, int64_t rows, int64_t cols,
                                         const double* gram_scaled, bool clip,
                                         const AwqOptions& opt, float* dequant, ThreadPool* pool) {
  if (cols <= 0 || cols % kQ4_1Group != 0)
    fail("awq: rows of {} do not split into groups of 32", cols);
  const int64_t groups = cols / kQ4_1Group;
  std::vector<BlockQ4_1> out(static_cast<size_t>(rows * groups));
  const int steps = clip ? static_cast<int>(std::floor(opt.clip_grid * opt.max_shrink)) : 0;
  for (int64_t i = 0; i < rows * cols; ++i)  // here, not on the pool's threads
    if (!std::isfinite(ws[i]) || std::fabs(ws[i]) > 32000.0f)
      fail("awq: a scaled weight ({}) does not fit Q4_1's fp16 grid", ws[i]);
  auto run = [&](int64_t r0, int64_t r1) {
    float x[kQ4_1Group], v[kQ4_1Group];
    uint8_t codes[kQ4_1Group], best_codes[kQ4_1Group];
    double d[kQ4_1Group];
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        const float* w = ws + r * cols + g * kQ4_1Group;
        const auto [lo0, hi0] = std::minmax_element(w, w + kQ4_1Group);
        const float amax = std::max(std::fabs(*lo0), std::fabs(*hi0));
        Q4_1Grid best_grid;
        double best_err = INFINITY;
        for (int i = 0; i <= steps; ++i) {
          const float f = 1.0f - static_cast<float>(i) / static_cast<float>(opt.clip_grid);
          const float lo = std::max(*lo0, -f * amax), hi = std::min(*hi0, f * amax);
          if (lo > hi) continue;
          const Q4_1Grid grid = q4_1_grid(lo, hi);
          for (int j = 0; j < kQ4_1Group; ++j) {
            codes[j] = static_cast<uint8_t>(q4_1_code(grid, w[j]));
            x[j] = q4_1_value(grid, codes[j]);
            d[j] = double{w[j]} - double{x[j]};
          }
          double err = 0;
          if (steps > 0) {
            const double* gb = gram_scaled + (g * kQ4_1Group) * cols + g * kQ4_1Group;
            for (int a = 0; a < kQ4_1Group; ++a) {
              double t = 0;
              for (int b = 0; b < kQ4_1Group; ++b) t += gb[a * cols + b] * d[b];
              err += d[a] * t;
            }
          }
          if (err < best_err) {
            best_err = err;
            best_grid = grid;
            std::copy(codes, codes + kQ4_1Group, best_codes);
            std::copy(x, x + kQ4_1Group, v);
          }
        }
        out[static_cast<size_t>(r * groups + g)] = q4_1_pack(best_grid, best_codes);
        if (dequant) std::copy(v, v + kQ4_1Group, dequant + r * cols + g * kQ4_1Group);
      }
  };
  if (pool != nullptr && pool->size() > 1 && rows > 1)
    pool->parallel_for(rows, [&](int64_t b, int64_t e, int) { run(b, e); });
  else
    run(0, rows);
  return out;
}

}  // namespace kvasir
