#include "kvasir/kv/block_pool.h"

#include <cassert>
#include <cstring>

#include "kvasir/util/error.h"

namespace kvasir {

BlockPool::BlockPool(int32_t n_blocks, int block_size) : block_size_(block_size) {
  if (n_blocks <= 0) fail("block pool needs at least one block, got {}", n_blocks);
  if (block_size < 0) fail("block pool: block size {} < 0", block_size);
  const auto n = static_cast<size_t>(n_blocks);
  ref_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  cache_id_.assign(n, 0);
  hash_of_.assign(n, 0);
  parent_of_.assign(n, 0);
  tokens_of_.assign(n * static_cast<size_t>(block_size), 0);
  by_hash_.reserve(block_size > 0 ? n : 0);
  // Low ids first.
  for (int32_t b = 0; b < n_blocks; ++b) queue_push_back(b);
}

void BlockPool::queue_push_front(int32_t b) {
  const auto i = static_cast<size_t>(b);
  prev_[i] = -1;
  next_[i] = head_;
  if (head_ >= 0)
    prev_[static_cast<size_t>(head_)] = b;
  else
    tail_ = b;
  head_ = b;
  n_free_++;
}

void BlockPool::queue_push_back(int32_t b) {
  const auto i = static_cast<size_t>(b);
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0)
    next_[static_cast<size_t>(tail_)] = b;
  else
    head_ = b;
  tail_ = b;
  n_free_++;
}

void BlockPool::queue_remove(int32_t b) {
  const auto i = static_cast<size_t>(b);
  if (prev_[i] >= 0)
    next_[static_cast<size_t>(prev_[i])] = next_[i];
  else
    head_ = next_[i];
  if (next_[i] >= 0)
    prev_[static_cast<size_t>(next_[i])] = prev_[i];
  else
    tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  n_free_--;
}

void BlockPool::evict(int32_t b) {
  const auto i = static_cast<size_t>(b);
  auto it = by_hash_.find(hash_of_[i]);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  cache_id_[i] = 0;
  n_cached_idle_--;
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > n_free_) return false;
  for (int32_t k = 0; k < n; ++k) {
    const int32_t b = head_;
    queue_remove(b);
    if (is_cached(b)) evict(b);
    ref_[static_cast<size_t>(b)] = 1;
    out.push_back(b);
  }
  return true;
}

void BlockPool::add_ref(int32_t block) {
  int32_t& r = ref_[static_cast<size_t>(block)];
  if (r == 0) {  // a cached block comes back into use
    assert(is_cached(block));
    queue_remove(block);
    n_cached_idle_--;
  }
  r++;
}

void BlockPool::release(int32_t block) {
  int32_t& r = ref_[static_cast<size_t>(block)];
  assert(r > 0);
  if (--r > 0) return;
  if (is_cached(block)) {
    queue_push_back(block);
    n_cached_idle_++;
  } else {
    queue_push_front(block);
  }
}

void BlockPool::release_all(std::vector<int32_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) release(*it);
  blocks.clear();
}

int32_t BlockPool::find_cached(uint64_t hash, uint64_t parent_id,
                               std::span<const int32_t> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const int32_t b = it->second;
  const auto i = static_cast<size_t>(b);
  const auto bs = static_cast<size_t>(block_size_);
  if (parent_of_[i] != parent_id || tokens.size() != bs ||
      std::memcmp(&tokens_of_[i * bs], tokens.data(), sizeof(int32_t) * bs) != 0)
    return -1;  // the hash is another block's
  return b;
}

uint64_t BlockPool::cache_block(int32_t block, uint64_t hash, uint64_t parent_id,
                                std::span<const int32_t> tokens) {
  const auto i = static_cast<size_t>(block);
  const auto bs = static_cast<size_t>(block_size_);
  if (block_size_ == 0) fail("block pool: this pool has no prefix cache");
  if (tokens.size() != bs)
    fail("block pool: a cached block holds {} tokens, got {}", block_size_, tokens.size());
  if (ref_[i] == 0 || is_cached(block))
    fail("block pool: only a block in use and not yet cached can be cached (block {})", block);
  if (by_hash_.count(hash) != 0) return 0;
  by_hash_.emplace(hash, block);
  cache_id_[i] = next_cache_id_++;
  hash_of_[i] = hash;
  parent_of_[i] = parent_id;
  std::memcpy(&tokens_of_[i * bs], tokens.data(), sizeof(int32_t) * bs);
  return cache_id_[i];
}

}  // namespace kvasir
