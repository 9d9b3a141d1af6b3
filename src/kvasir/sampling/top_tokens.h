// TopTokens: selects the k best entries of a logit (or probability) row without sorting the whole
// row. Order is total and deterministic: higher value first, equal values by lower token id, NaN
// ranks as -inf, -0 equals +0. So the selected set and its order do not depend on the standard
// library's sorting algorithms, and truncation samplers keep exactly k tokens even with ties.
//
// Small k: one pass with a bounded heap of k (value, id) pairs; chunks of 32 values whose maximum
// cannot enter the heap are skipped after a vectorizable max, so the pass is close to a plain
// read of the row. Large k: radix select of the k-th largest value on the float bit pattern (a
// few O(n) counting passes), then a sort of the k survivors. Buffers are kept between calls, so
// steady-state use does not allocate.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kvasir {

class TopTokens {
 public:
  // Writes the ids of the min(k, n) best entries of values[0..n) to ids, best first, and returns
  // min(k, n) (0 for k <= 0).
  int32_t select(const float* values, int32_t n, int32_t k, int32_t* ids);

 private:
  int32_t select_large(const float* values, int32_t n, int32_t k, int32_t* ids);

  std::vector<std::pair<float, int32_t>> heap_;
  std::vector<int32_t> hist_;
  std::vector<int32_t> cand_;
  std::vector<uint32_t> keys_;
  std::vector<std::pair<uint32_t, int32_t>> keyed_;
};

}  // namespace kvasir
