#include "kvasir/kv/block_pool.h"

#include <cassert>

#include "kvasir/util/error.h"

namespace kvasir {

BlockPool::BlockPool(int32_t n_blocks) {
  if (n_blocks <= 0) fail("block pool needs at least one block, got {}", n_blocks);
  const auto n = static_cast<size_t>(n_blocks);
  ref_.assign(n, 0);
  cached_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  free_.reserve(n);
  // Hand out low ids first (pop from the back).
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::lru_remove(int32_t b) {
  const auto i = static_cast<size_t>(b);
  if (prev_[i] >= 0) next_[static_cast<size_t>(prev_[i])] = next_[i]; else head_ = next_[i];
  if (next_[i] >= 0) prev_[static_cast<size_t>(next_[i])] = prev_[i]; else tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  n_cached_idle_--;
}

void BlockPool::lru_push_back(int32_t b) {
  const auto i = static_cast<size_t>(b);
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0) next_[static_cast<size_t>(tail_)] = b; else head_ = b;
  tail_ = b;
  n_cached_idle_++;
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > n_free()) return false;
  for (int32_t k = 0; k < n; ++k) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {  // evict the least recently used cached block
      b = head_;
      lru_remove(b);
      cached_[static_cast<size_t>(b)] = 0;
      if (on_evict_) on_evict_(b);
    }
    ref_[static_cast<size_t>(b)] = 1;
    out.push_back(b);
  }
  return true;
}

void BlockPool::add_ref(int32_t block) {
  int32_t& r = ref_[static_cast<size_t>(block)];
  if (r == 0) {
    assert(cached_[static_cast<size_t>(block)]);
    lru_remove(block);  // a cached block comes back into use
  }
  r++;
}

void BlockPool::release(int32_t block) {
  int32_t& r = ref_[static_cast<size_t>(block)];
  assert(r > 0);
  if (--r > 0) return;
  if (cached_[static_cast<size_t>(block)]) {
    lru_push_back(block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::release_all(std::vector<int32_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) release(*it);
  blocks.clear();
}

void BlockPool::set_cached(int32_t block, bool cached) {
  const auto i = static_cast<size_t>(block);
  if (cached_[i] == cached) return;
  if (!cached && ref_[i] == 0) {  // an idle cached block stops being cached: it becomes free
    lru_remove(block);
    free_.push_back(block);
  }
  cached_[i] = cached;
}

}  // namespace kvasir
