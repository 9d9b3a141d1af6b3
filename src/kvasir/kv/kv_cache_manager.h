// KV cache manager: per-sequence block tables over one BlockPool, with automatic prefix caching.
//
// Every full block of a sequence is identified by a chain hash: hash(parent block's hash, the
// block's 16 token ids), so equal hashes mean equal whole prefixes but for collisions. Once a
// block's K/V are computed it is registered in the prefix cache; a new request reuses the longest
// chain of cached blocks that matches its prompt (taking references, no copy), and computes only
// the rest. Unreferenced cached blocks stay reusable until the pool evicts them in LRU order.
// The cache's state (what is cached, the hash index, the eviction order) belongs to the BlockPool;
// this class does the per-sequence work: hashing, matching a prompt, registering full blocks.
// Every hit is verified (block_pool.h): the block's tokens and the identity of the cached block
// before it must match, so a hash collision — accidental or crafted — cannot hand a request K/V
// computed from another prefix. A block that duplicates one already cached (two requests computed
// the same prefix at once) stays private, and its sequence's chain continues from the cached one,
// so what follows it is still found.
//
// Memory is reserved per block as positions are reached (never by maximum length): a sequence's
// waste is at most its last partial block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvasir/kv/block_pool.h"

namespace kvasir {

// A sequence's KV state, owned by the caller (the scheduler's Sequence).
struct SeqBlocks {
  std::vector<int32_t> blocks;  // block table, position order
  int n_hashed = 0;             // leading full blocks known to the prefix cache (hit or registered)
  uint64_t last_hash = 0;       // chain hash of block n_hashed - 1
  uint64_t last_id = 0;         // cache id of the cached block equal to block n_hashed - 1
  bool cacheable = true;        // false once a block could not be cached (its hash was taken)
};

// The hash of a full block after the block whose chain hash is `parent` (0 for a first block).
using BlockHasher = uint64_t (*)(uint64_t parent, std::span<const int32_t> block_tokens);
uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens);

class KVCacheManager {
 public:
  // `hasher` is for tests (e.g. one that collides); the default is chain_hash.
  KVCacheManager(int32_t n_blocks, int block_size, bool prefix_caching,
                 BlockHasher hasher = chain_hash);

  int block_size() const { return block_size_; }
  int32_t n_blocks() const { return pool_.n_blocks(); }
  int32_t n_free() const { return pool_.n_free(); }
  int32_t n_used() const { return pool_.n_used(); }
  double usage() const { return double(n_used()) / double(n_blocks()); }
  bool prefix_caching() const { return prefix_caching_; }
  const BlockPool& pool() const { return pool_; }

  // For a sequence with no blocks yet: takes references to the longest cached chain of full
  // blocks matching `tokens`, at most max_blocks of them. Returns the number of tokens covered.
  int acquire_cached_prefix(std::span<const int32_t> tokens, int max_blocks, SeqBlocks& seq);

  // Makes the block table cover n_tokens positions. Returns false (allocating nothing) if the
  // pool cannot provide the missing blocks.
  bool allocate_slots(SeqBlocks& seq, int n_tokens);
  // Blocks missing for n_tokens positions.
  int blocks_needed(const SeqBlocks& seq, int n_tokens) const;

  // Registers the sequence's full blocks among its first n_computed tokens in the prefix cache.
  void cache_full_blocks(SeqBlocks& seq, std::span<const int32_t> tokens, int n_computed);

  // Shrinks the block table to the blocks covering n_tokens positions, releasing the rest: the
  // rollback of rejected speculative tokens. Blocks known to the prefix cache are kept (n_tokens
  // is raised to cover them), so only private, partly written blocks are given back.
  void truncate(SeqBlocks& seq, int n_tokens);

  // Releases the sequence's blocks (cached ones stay reusable) and resets it.
  void free(SeqBlocks& seq);

 private:
  BlockPool pool_;
  int block_size_;
  bool prefix_caching_;
  BlockHasher hasher_;
};

}  // namespace kvasir
