#include "kvasir/sampling/top_tokens.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace kvasir {

namespace {
// Above this k the bounded heap's insertions cost more than the radix select's counting passes
// (measured at n = 152k).
constexpr int32_t kHeapMaxK = 256;

float sanitized(float v) {
  return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
}
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
    // Later ids lose ties, so only a strictly larger value can enter (NaN never does). Most
    // chunks hold no such value; their maximum (a vectorizable loop) rules them out at once.
    const auto offer = [&](int32_t j) {
      const float v = values[j];
      if (v > worst) {
        std::pop_heap(heap_.begin(), heap_.end(), before);
        heap_.back() = Item(v, j);
        std::push_heap(heap_.begin(), heap_.end(), before);
        worst = heap_.front().first;
      }
    };
    constexpr int32_t kChunk = 32;
    for (; i < n && i % kChunk != 0; ++i) offer(i);
    for (; i + kChunk <= n; i += kChunk) {
      float lane[8];
      for (float& l : lane) l = -std::numeric_limits<float>::infinity();  // NaN never enters
      for (int c = 0; c < kChunk; c += 8) {
        for (int j = 0; j < 8; ++j)
          lane[j] = values[i + c + j] > lane[j] ? values[i + c + j] : lane[j];
      }
      bool any = false;
      for (int j = 0; j < 8; ++j) any |= lane[j] > worst;
      if (!any) continue;
      for (int32_t j = i; j < i + kChunk; ++j) offer(j);
    }
    for (; i < n; ++i) offer(i);
    std::sort_heap(heap_.begin(), heap_.end(), before);
    for (int32_t j = 0; j < k; ++j) ids[j] = heap_[j].second;
    return k;
  }
  return select_large(values, n, k, ids);
}

namespace {

// A uint32 whose unsigned order is the float order: NaN as -inf, -0 as +0 (they compare equal).
// Branch-free, so the pass computing keys for a whole row vectorizes.
uint32_t order_key(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  bits = v == 0.0f ? 0u : bits;
  bits = v != v ? 0xFF800000u : bits;  // -inf
  const uint32_t flip = static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u;
  return bits ^ flip;
}

}  // namespace

int32_t TopTokens::select_large(const float* values, int32_t n, int32_t k, int32_t* ids) {
  // Radix select of the k-th largest key in three digits (11, 11 and 10 bits): count the digit,
  // find the bucket holding the k-th, narrow the candidates to it, repeat.
  constexpr int kShift[3] = {21, 10, 0};
  constexpr uint32_t kMask[3] = {0x7FFu, 0x7FFu, 0x3FFu};
  keys_.resize(n);
  uint32_t* keys = keys_.data();
  for (int32_t i = 0; i < n; ++i) keys[i] = order_key(values[i]);
  // Four interleaved histograms, so runs of equal digits do not serialize on one counter.
  hist_.assign(4 * 2048, 0);
  int32_t i4 = 0;
  for (; i4 + 4 <= n; i4 += 4) {
    for (int j = 0; j < 4; ++j) ++hist_[j * 2048 + (keys[i4 + j] >> kShift[0])];
  }
  for (; i4 < n; ++i4) ++hist_[keys[i4] >> kShift[0]];
  for (int b = 0; b < 2048; ++b) {
    hist_[b] += hist_[2048 + b] + hist_[2 * 2048 + b] + hist_[3 * 2048 + b];
  }
  int32_t need = k;  // how many of the current candidates, from the top, are still to be taken
  uint32_t prefix = 0;
  for (int d = 0;; ++d) {
    int32_t bucket = static_cast<int32_t>(kMask[d]);
    while (hist_[bucket] < need) need -= hist_[bucket--];
    prefix |= static_cast<uint32_t>(bucket) << kShift[d];
    if (d == 2) break;
    // Candidates for the next digit: keys that agree with the prefix so far.
    const uint32_t high_mask = ~((1u << kShift[d]) - 1u);
    if (d == 0) {
      cand_.clear();
      for (int32_t i = 0; i < n; ++i) {
        if ((keys[i] & high_mask) == prefix) cand_.push_back(i);
      }
    } else {
      size_t m = 0;
      for (int32_t i : cand_) {
        if ((keys[i] & high_mask) == prefix) cand_[m++] = i;
      }
      cand_.resize(m);
    }
    hist_.assign(2048, 0);
    for (int32_t i : cand_) ++hist_[(keys[i] >> kShift[d + 1]) & kMask[d + 1]];
  }
  // prefix is now the k-th largest key; `need` of the tokens equal to it are taken (lowest ids).
  int32_t m = 0;
  for (int32_t i = 0; i < n; ++i) {
    const uint32_t key = keys[i];
    if (key > prefix || (key == prefix && need-- > 0)) ids[m++] = i;
  }
  // Order the k survivors best first.
  keyed_.clear();
  for (int32_t j = 0; j < m; ++j) keyed_.emplace_back(keys[ids[j]], ids[j]);
  std::sort(keyed_.begin(), keyed_.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (int32_t j = 0; j < m; ++j) ids[j] = keyed_[j].second;
  return m;
}

}  // namespace kvasir
