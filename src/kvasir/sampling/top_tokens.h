// TopTokens: selects the k best entries of a logit (or probability) row without sorting the whole
// row. Order is total and deterministic: higher value first, equal values by lower token id, NaN
// ranks as -inf. So the selected set and its order do not depend on the standard library's
// sorting algorithms, and truncation samplers keep exactly k tokens even with ties.
//
// Small k: one pass with a bounded heap of k (value, id) pairs, O(n log k) worst case and close to
// O(n) in practice. Large k: nth_element over an index array, then a sort of the k survivors.
// The heap buffer is kept between calls, so steady-state use does not allocate.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace kvasir {

// The ranking used everywhere in sampling: a ranks before b.
inline bool ranks_before(float va, int32_t a, float vb, int32_t b) {
  if (std::isnan(va)) va = -std::numeric_limits<float>::infinity();
  if (std::isnan(vb)) vb = -std::numeric_limits<float>::infinity();
  return va > vb || (va == vb && a < b);
}

class TopTokens {
 public:
  // Writes the ids of the min(k, n) best entries of values[0..n) to ids, best first; ids must
  // have room for n entries (the large-k path uses all of them as scratch). Returns min(k, n).
  int32_t select(const float* values, int32_t n, int32_t k, int32_t* ids);

 private:
  std::vector<std::pair<float, int32_t>> heap_;
};

}  // namespace kvasir
