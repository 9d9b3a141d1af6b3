// Vocabulary-row loops for the sampler: maximum, shifted exponentials and their sum. Written as
// plain branch-free loops with 8 independent partial results, so they auto-vectorize without
// reassociating floating-point math: the results are bit-identical whatever the vector width.
// Each is compiled twice (target_clones: AVX2 and baseline x86-64) and picked at load time.
#pragma once

#include <cstdint>

#include "kvasir/sampling/fast_exp.h"

namespace kvasir {

// x - max, with the infinities handled: the maximum itself maps to 0 even when it is +-inf, so
// the best token(s) get weight exactly 1 and a finite logit under a +inf maximum gets 0. NaN
// stays NaN (and fast_exp maps it to 0).
inline float shifted(float x, float max) {
  return select_float(x == max, 0.0f, x - max);
}

// Largest non-NaN value of x[0..n) (-inf if none).
float row_max(const float* x, int32_t n);

// out[i] = fast_exp(shifted(x[i], max) * scale) for i < n; returns their sum (float partial sums
// over at most n / 8 terms each, added in double). out must not overlap x unless out == x.
double exp_shifted(const float* x, int32_t n, float max, float scale, float* out);

// Writes the ids i with x[i] >= threshold (NaN never) to ids, in increasing order; returns how
// many. Chunks whose maximum is below threshold are skipped after a vectorized max.
int32_t collect_at_least(const float* x, int32_t n, float threshold, int32_t* ids);

}  // namespace kvasir
