// Pool of KV cache blocks, and the one owner of every block's state: reference counts, the queue
// of free blocks and the prefix cache's index of cached blocks (vLLM v1's block_pool).
//
// A block is in use (ref count > 0: held by that many sequences' block tables) or free (ref
// count 0). Free blocks wait in ONE eviction-ordered queue and allocate() takes them from its
// front. A free block may still hold a cached full block (registered by cache_block()): it stays
// reusable — add_ref() takes it back out of the queue, a prefix-cache hit — until allocation
// reaches it, which evicts it (the index forgets it; nobody else needs telling). Empty blocks
// queue in front of cached ones (the most recently freed first, as a stack: its memory is the
// warmest), cached ones behind them in the order they were freed (least recently used first), so
// nothing cached is evicted while an empty block remains.
//
// The index maps a block hash to the cached block holding it and keeps, per cached block, what
// a hit is verified against: its block_size token ids and the cache id of the cached block
// before it in its sequence (0 for a first block). Cache ids are unique for the pool's life
// (a block cached again gets a new one), so a chain of verified hits is a chain of blocks each
// computed right after the one matched before it: a hash collision, accidental or crafted, can
// cost a hit but never hand a sequence K/V computed from another prefix.
//
// allocate() never throws in the hot path: it reports failure by returning false so the
// scheduler can preempt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvasir {

class BlockPool {
 public:
  // block_size: tokens a cached block holds (its verification copy); 0 for a pool without a
  // prefix cache (cache_block() is then refused).
  explicit BlockPool(int32_t n_blocks, int block_size = 0);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  // Blocks allocate() can hand out: the free queue, cached blocks included.
  int32_t n_free() const { return n_free_; }
  int32_t n_used() const { return n_blocks() - n_free(); }
  // Cached blocks (in use or free) and those of them that are free (evictable).
  int32_t n_cached() const { return static_cast<int32_t>(by_hash_.size()); }
  int32_t n_cached_idle() const { return n_cached_idle_; }

  // Appends n blocks (ref count 1) from the front of the free queue to `out`, evicting cached
  // ones it reaches; returns false (and changes nothing) if fewer than n are free.
  bool allocate(int32_t n, std::vector<int32_t>& out);
  // Takes a reference to a block that is in use or cached (a prefix-cache hit).
  void add_ref(int32_t block);
  // Drops one reference. At zero the block joins the free queue (behind the empty blocks if it
  // is cached, in front of them if not).
  void release(int32_t block);
  // Releases each block, last first (so a sequence's tail is evicted before its head), and
  // clears the vector.
  void release_all(std::vector<int32_t>& blocks);
  int32_t ref_count(int32_t block) const { return ref_[static_cast<size_t>(block)]; }

  // ---- the prefix cache's index ----
  // The cached block registered under `hash` after the cached block `parent_id` (0: a first
  // block) holding exactly `tokens`; -1 if there is none.
  int32_t find_cached(uint64_t hash, uint64_t parent_id, std::span<const int32_t> tokens) const;
  // Registers `block` (in use, full, not cached) as holding `tokens` after the cached block
  // `parent_id`, under `hash`. Returns its new cache id, or 0 when `hash` is already taken: by a
  // duplicate (then find_cached() finds the other block) or by a collision.
  uint64_t cache_block(int32_t block, uint64_t hash, uint64_t parent_id,
                       std::span<const int32_t> tokens);
  bool is_cached(int32_t block) const { return cache_id_[static_cast<size_t>(block)] != 0; }
  // The block's cache id, 0 when it is not cached.
  uint64_t cache_id(int32_t block) const { return cache_id_[static_cast<size_t>(block)]; }

 private:
  // The free queue: an intrusive doubly linked list over block ids (head = next to allocate).
  void queue_push_front(int32_t b);
  void queue_push_back(int32_t b);
  void queue_remove(int32_t b);
  void evict(int32_t b);

  int block_size_;
  std::vector<int32_t> ref_;
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  int32_t n_free_ = 0;
  int32_t n_cached_idle_ = 0;
  // Index: hash -> block, and per block its cache id, hash, parent's cache id and tokens.
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::vector<uint64_t> cache_id_;
  std::vector<uint64_t> hash_of_;
  std::vector<uint64_t> parent_of_;
  std::vector<int32_t> tokens_of_;
  uint64_t next_cache_id_ = 1;
};

}  // namespace kvasir
