#include "kvasir/kv/kv_cache_manager.h"

#include <algorithm>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {
inline uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t chain_hash(uint64_t parent, std::span<const int32_t> toks) {
  uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull);
  for (int32_t t : toks)
    h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x632be59bd9b4e019ull));
  return h;
}

KVCacheManager::KVCacheManager(int32_t n_blocks, int block_size, bool prefix_caching,
                               BlockHasher hasher)
    : pool_(n_blocks, prefix_caching && block_size > 0 ? block_size : 0),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      hasher_(hasher) {
  if (block_size <= 0) fail("block size must be positive, got {}", block_size);
}

int KVCacheManager::acquire_cached_prefix(std::span<const int32_t> tokens, int max_blocks,
                                          SeqBlocks& seq) {
  if (!prefix_caching_ || !seq.blocks.empty()) return 0;
  const int bs = block_size_;
  const int n_full = std::min<int>(static_cast<int>(tokens.size()) / bs, max_blocks);
  for (int b = 0; b < n_full; ++b) {
    auto blk_tokens = tokens.subspan(static_cast<size_t>(b) * bs, static_cast<size_t>(bs));
    const uint64_t hb = hasher_(seq.last_hash, blk_tokens);
    const int32_t blk = pool_.find_cached(hb, seq.last_id, blk_tokens);
    if (blk < 0) break;
    pool_.add_ref(blk);
    seq.blocks.push_back(blk);
    seq.n_hashed = b + 1;
    seq.last_hash = hb;
    seq.last_id = pool_.cache_id(blk);
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
  if (!prefix_caching_ || !seq.cacheable) return;
  const int bs = block_size_;
  const int n_full = std::min<int>(n_computed / bs, static_cast<int>(seq.blocks.size()));
  for (int b = seq.n_hashed; b < n_full; ++b) {
    auto blk_tokens = tokens.subspan(static_cast<size_t>(b) * bs, static_cast<size_t>(bs));
    const uint64_t hb = hasher_(seq.last_hash, blk_tokens);
    const int32_t blk = seq.blocks[static_cast<size_t>(b)];
    uint64_t id = pool_.cache_block(blk, hb, seq.last_id, blk_tokens);
    if (id == 0) {
      // The hash is taken. By a duplicate of this very block: it stays private and the chain
      // continues from the cached copy. By a collision: nothing after it can be verified, so this
      // sequence caches no more.
      const int32_t dup = pool_.find_cached(hb, seq.last_id, blk_tokens);
      if (dup < 0) {
        seq.cacheable = false;
        return;
      }
      id = pool_.cache_id(dup);
    }
    seq.n_hashed = b + 1;
    seq.last_hash = hb;
    seq.last_id = id;
  }
}

void KVCacheManager::truncate(SeqBlocks& seq, int n_tokens) {
  const int keep = std::max((std::max(n_tokens, 0) + block_size_ - 1) / block_size_, seq.n_hashed);
  while (static_cast<int>(seq.blocks.size()) > keep) {
    pool_.release(seq.blocks.back());
    seq.blocks.pop_back();
  }
}

void KVCacheManager::free(SeqBlocks& seq) {
  pool_.release_all(seq.blocks);
  seq.n_hashed = 0;
  seq.last_hash = 0;
  seq.last_id = 0;
  seq.cacheable = true;
}

}  // namespace kvasir
