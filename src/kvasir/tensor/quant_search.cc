// Contraction off: ggml-base (where ggml's quantizers live) is built for the plain x86-64
// baseline, without FMA, so every a * b + c below must stay two roundings to be bit-identical.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kvasir/tensor/quant_search.h"

#include <algorithm>

// Operation for operation ggml's (same operand order, same int -> float conversion points, float
// accumulators summed in index order): resist "simplifying" an expression such as w * x * l.

namespace kvasir::quant_detail {

void weight_by_importance(int n, const float* x, const float* importance, float sigma2, float* w) {
  for (int i = 0; i < n; ++i) w[i] = importance[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

float fit_symmetric(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  float amax;
  const float max = signed_absmax(n, x, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  auto code = [nmax](float v) { return std::clamp(nearest_int(v), -nmax, nmax - 1); };
  auto weight = [x, qw](int i) { return qw ? qw[i] : x[i] * x[i]; };

  float iscale = -fnmax / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = code(iscale * x[i]);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(i), fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(fnmax + 0.1f * static_cast<float>(step)) / max;
    sumlx = 0.0f;
    suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float w = weight(i), fl = static_cast<float>(code(iscale * x[i]));
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      // Rare: redo the rounding rather than store codes on every try.
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(code(iscale * x[i]) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                 uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {  // max >= min unless both are NaN, so this is make_qkx3's max <= min too
    std::memset(L, 0, static_cast<size_t>(n));
    *neg_min = -min;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  auto code = [nmax](float v) { return std::clamp(nearest_int(v), 0, nmax); };
  auto error = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };

  float iscale = fnmax / (max - min);
  float scale = 1.0f / iscale;
  float best_err = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(code(iscale * (x[i] - min)));
    best_err += w[i] * error(scale * static_cast<float>(L[i]) + min - x[i]);
  }
  if (nstep < 1) {
    *neg_min = -min;
    return scale;
  }
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + fnmax) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = code(iscale * (x[i] - min));
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0.0f) {
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0.0f;
    for (int i = 0; i < n; ++i)
      err += w[i] * error(this_scale * static_cast<float>(Laux[i]) + this_min - x[i]);
    if (err < best_err) {
      std::memcpy(L, Laux, static_cast<size_t>(n));
      best_err = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

}  // namespace kvasir::quant_detail
