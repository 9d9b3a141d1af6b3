// Internal to the GGUF quantizers (quant_legacy.cc, quant_k.cc, quant_iq4.cc): the scalar
// pieces of ggml-quants.c (the pinned llama.cpp) that more than one format family uses, written
// once. They follow ggml bit for bit: the same operations in the same order, the same
// int -> float conversion points, float accumulators summed in index order, no contraction of
// a * b + c (ggml-base is built for the x86-64 baseline, without FMA). A rewrite that is "the
// same maths" is not good enough; ggml_quants_fixture_test compares the bytes.
//
//   nearest_int           ggml's nearest_int (round to nearest even through the mantissa)
//   signed_absmax         the `amax < fabsf(x)` scan picking the value a symmetric scale maps to
//   weight_by_importance  ggml's qw[i] * sqrtf(sigma2 + x[i]*x[i]) per-weight importance
//   fit_symmetric         make_qx_quants (rmse_type 1)
//   fit_affine            make_qkx2_quants and make_qkx3_quants (one routine serves both)
// The out-of-line ones live in quant_search.cc, compiled with contraction off like its users.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kvasir::quant_detail {

// A group whose largest magnitude is below this counts as all zero (ggml's GROUP_MAX_EPS).
inline constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, via the 1.5 * 2^23 trick ggml uses: exact for |v| < 2^22, and
// for larger magnitudes the same (wrapped) integer ggml's version yields. (A lone addition, so it
// is the same whatever contraction setting the includer has.)
inline int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// The first of x[0..n) of largest magnitude, with its sign; *amax (when given) gets that
// magnitude. 0 for all zeros; NaNs are never picked. Comparisons only, no arithmetic.
inline float signed_absmax(int n, const float* x, float* amax = nullptr) {
  float best = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > best) {
      best = a;
      max = x[i];
    }
  }
  if (amax != nullptr) *amax = best;
  return max;
}

// w[i] = importance[i] * sqrt(sigma2 + x[i]^2) for i < n, the per-weight importance of ggml's
// _impl quantizers (sigma2 is the caller's: each format scales the mean square its own way).
void weight_by_importance(int n, const float* x, const float* importance, float sigma2, float* w);

// Symmetric fit of x[0..n) to codes l in [-nmax, nmax), stored in L as l + nmax: the weighted
// least-squares scale of the absmax-derived code assignment and of 18 perturbed ones
// (inverse scales -(nmax + 0.1 k) / max, k = +-1..9), keeping the best. Weights are qw when given,
// else x^2. Returns the scale; an all-zero group (below kGroupMaxEps) gets L = 0 and scale 0.
// ggml's make_qx_quants with rmse_type 1.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L, const float* qw);

// Affine fit x ~ scale * q + min, q in [0, nmax], min <= 0, weights w: start from the min/max
// codes, then for nstep + 1 candidate inverse scales (rmin + rdelta * k + nmax) / (max - min)
// solve the weighted least-squares scale and min of that code assignment, keeping whichever has
// the smallest weighted error (absolute when use_mad, else squared). Returns the scale; *neg_min
// gets -min. Laux is n bytes of scratch. ggml's make_qkx2_quants and, with weights given,
// make_qkx3_quants (whose `max <= min` test is the same as make_qkx2's `max == min` here).
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                 uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad);

}  // namespace kvasir::quant_detail
