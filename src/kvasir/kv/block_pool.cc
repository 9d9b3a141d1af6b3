#include "kvasir/kv/block_pool.h"

#include <cassert>

#include "kvasir/util/error.h"

namespace kvasir {

BlockPool::BlockPool(int32_t n_blocks) {
  if (n_blocks <= 0) fail("block pool needs at least one block, got {}", n_blocks);
  ref_.assign(static_cast<size_t>(n_blocks), 0);
  free_.reserve(static_cast<size_t>(n_blocks));
  // Hand out low ids first (pop from the back).
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > n_free()) return false;
  for (int32_t i = 0; i < n; ++i) {
    int32_t b = free_.back();
    free_.pop_back();
    ref_[static_cast<size_t>(b)] = 1;
    out.push_back(b);
  }
  return true;
}

void BlockPool::add_ref(int32_t block) {
  assert(ref_[static_cast<size_t>(block)] > 0);
  ref_[static_cast<size_t>(block)]++;
}

void BlockPool::release(int32_t block) {
  int32_t& r = ref_[static_cast<size_t>(block)];
  assert(r > 0);
  if (--r == 0) free_.push_back(block);
}

void BlockPool::release_all(std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) release(b);
  blocks.clear();
}

}  // namespace kvasir
