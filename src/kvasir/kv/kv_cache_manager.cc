#include "kvasir/kv/kv_cache_manager.h"

#include <algorithm>
#include <cstring>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {
inline uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

KVCacheManager::KVCacheManager(int32_t n_blocks, int block_size, bool prefix_caching)
    : pool_(n_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
  if (block_size <= 0) fail("block size must be positive, got {}", block_size);
  const auto n = static_cast<size_t>(n_blocks);
  hash_of_.assign(n, 0);
  parent_hash_of_.assign(n, 0);
  if (prefix_caching_) tokens_of_.assign(n * static_cast<size_t>(block_size), 0);
  pool_.set_evict_callback([this](int32_t b) { forget(b); });
  by_hash_.reserve(n);
}

uint64_t KVCacheManager::chain_hash(uint64_t parent, std::span<const int32_t> toks) const {
  uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull);
  for (int32_t t : toks) h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x632be59bd9b4e019ull));
  return h;
}

void KVCacheManager::forget(int32_t block) {
  auto it = by_hash_.find(hash_of_[static_cast<size_t>(block)]);
  if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
}

int KVCacheManager::acquire_cached_prefix(std::span<const int32_t> tokens, int max_blocks,
                                          SeqBlocks& seq) {
  if (!prefix_caching_ || !seq.blocks.empty()) return 0;
  const int bs = block_size_;
  const int n_full = std::min<int>(static_cast<int>(tokens.size()) / bs, max_blocks);
  uint64_t h = 0;
  for (int b = 0; b < n_full; ++b) {
    auto blk_tokens = tokens.subspan(static_cast<size_t>(b) * bs, static_cast<size_t>(bs));
    const uint64_t hb = chain_hash(h, blk_tokens);
    auto it = by_hash_.find(hb);
    if (it == by_hash_.end()) break;
    const int32_t blk = it->second;
    const auto i = static_cast<size_t>(blk);
    if (parent_hash_of_[i] != h ||
        std::memcmp(&tokens_of_[i * bs], blk_tokens.data(), sizeof(int32_t) * bs) != 0)
      break;  // hash collision: not our prefix
    pool_.add_ref(blk);
    seq.blocks.push_back(blk);
    seq.n_hashed = b + 1;
    seq.last_hash = hb;
    h = hb;
  }
  return seq.n_hashed * bs;
}

int KVCacheManager::blocks_needed(const SeqBlocks& seq, int n_tokens) const {
  const int need = (n_tokens + block_size_ - 1) / block_size_;
  return std::max(0, need - static_cast<int>(seq.blocks.size()));
}

bool KVCacheManager::allocate_slots(SeqBlocks& seq, int n_tokens) {
  const int missing = blocks_needed(seq, n_tokens);
  if (missing == 0) return true;
  return pool_.allocate(missing, seq.blocks);
}

void KVCacheManager::cache_full_blocks(SeqBlocks& seq, std::span<const int32_t> tokens,
                                       int n_computed) {
  if (!prefix_caching_) return;
  const int bs = block_size_;
  const int n_full = std::min<int>(n_computed / bs, static_cast<int>(seq.blocks.size()));
  for (int b = seq.n_hashed; b < n_full; ++b) {
    auto blk_tokens = tokens.subspan(static_cast<size_t>(b) * bs, static_cast<size_t>(bs));
    const uint64_t hb = chain_hash(seq.last_hash, blk_tokens);
    const int32_t blk = seq.blocks[static_cast<size_t>(b)];
    const auto i = static_cast<size_t>(blk);
    if (!pool_.is_cached(blk) && by_hash_.find(hb) == by_hash_.end()) {
      by_hash_.emplace(hb, blk);
      hash_of_[i] = hb;
      parent_hash_of_[i] = seq.last_hash;
      std::memcpy(&tokens_of_[i * bs], blk_tokens.data(), sizeof(int32_t) * bs);
      pool_.set_cached(blk, true);
    }
    // A duplicate of an already cached block stays private; the chain continues by hash.
    seq.n_hashed = b + 1;
    seq.last_hash = hb;
  }
}

void KVCacheManager::free(SeqBlocks& seq) {
  pool_.release_all(seq.blocks);
  seq.n_hashed = 0;
  seq.last_hash = 0;
}

}  // namespace kvasir
