#include "kvasir/sampling/top_tokens.h"

#include <algorithm>
#include <numeric>

namespace kvasir {

namespace {
// Above this k the bounded heap loses to nth_element (measured at n = 152k).
constexpr int32_t kHeapMaxK = 256;

float sanitized(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }
}  // namespace

int32_t TopTokens::select(const float* values, int32_t n, int32_t k, int32_t* ids) {
  k = std::clamp(k, 0, std::max(n, 0));
  if (k == 0) return 0;
  using Item = std::pair<float, int32_t>;
  // "a before b" as a strict weak order; values are sanitized when read, so no NaN reaches it.
  const auto before = [](const Item& a, const Item& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (k <= kHeapMaxK) {
    // Max-heap under `before`: the top is the worst of the k kept so far.
    heap_.clear();
    heap_.reserve(kHeapMaxK);
    int32_t i = 0;
    for (; i < k; ++i) heap_.emplace_back(sanitized(values[i]), i);
    std::make_heap(heap_.begin(), heap_.end(), before);
    float worst = heap_.front().first;
    for (; i < n; ++i) {
      const float v = sanitized(values[i]);
      // Later ids lose ties, so only a strictly larger value can enter.
      if (v > worst) {
        std::pop_heap(heap_.begin(), heap_.end(), before);
        heap_.back() = Item(v, i);
        std::push_heap(heap_.begin(), heap_.end(), before);
        worst = heap_.front().first;
      }
    }
    std::sort_heap(heap_.begin(), heap_.end(), before);
    for (int32_t j = 0; j < k; ++j) ids[j] = heap_[j].second;
    return k;
  }
  const auto before_id = [values](int32_t a, int32_t b) {
    const float va = sanitized(values[a]), vb = sanitized(values[b]);
    return va > vb || (va == vb && a < b);
  };
  std::iota(ids, ids + n, 0);
  if (k < n) std::nth_element(ids, ids + k, ids + n, before_id);
  std::sort(ids, ids + k, before_id);
  return k;
}

}  // namespace kvasir
