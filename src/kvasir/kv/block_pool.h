// Pool of KV cache blocks: a fixed set of block ids handed out to sequences, with the
// bookkeeping automatic prefix caching needs.
//
// Each block is in one of three states:
//   free       — on the free list, holds nothing useful;
//   in use     — ref count > 0 (one reference per sequence whose block table holds it);
//   cached     — ref count 0 but holding a full block registered in the prefix cache: it stays
//                reusable (a later request can take a reference again) until allocation needs
//                the memory, at which point cached blocks are evicted in LRU order (least
//                recently released first).
// allocate() never throws in the hot path: it reports failure by returning false so the
// scheduler can preempt. The pool calls `on_evict(block)` when it evicts a cached block, so the
// prefix cache can forget it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace kvasir {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  // Blocks that allocate() can hand out: free plus evictable cached ones.
  int32_t n_free() const { return static_cast<int32_t>(free_.size()) + n_cached_idle_; }
  int32_t n_used() const { return n_blocks() - n_free(); }
  int32_t n_cached_idle() const { return n_cached_idle_; }

  // Appends n blocks (ref count 1) to `out`, taking free blocks first, then evicting cached ones
  // in LRU order; returns false (and changes nothing) if fewer than n are available.
  bool allocate(int32_t n, std::vector<int32_t>& out);
  // Takes a reference to a block that is in use or cached (a prefix-cache hit).
  void add_ref(int32_t block);
  // Drops one reference. At zero the block becomes cached (if marked cached) or free.
  void release(int32_t block);
  // Releases each block, last first (so a sequence's tail is evicted before its head), and
  // clears the vector.
  void release_all(std::vector<int32_t>& blocks);
  int32_t ref_count(int32_t block) const { return ref_[static_cast<size_t>(block)]; }

  // Prefix-cache state of a block: a cached block survives release until evicted.
  void set_cached(int32_t block, bool cached);
  bool is_cached(int32_t block) const { return cached_[static_cast<size_t>(block)] != 0; }
  void set_evict_callback(std::function<void(int32_t)> fn) { on_evict_ = std::move(fn); }

 private:
  void lru_remove(int32_t b);
  void lru_push_back(int32_t b);

  std::vector<int32_t> ref_;
  std::vector<uint8_t> cached_;
  std::vector<int32_t> free_;  // stack of free block ids
  // Intrusive doubly linked LRU list of cached blocks with ref count 0 (head = oldest).
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  int32_t n_cached_idle_ = 0;
  std::function<void(int32_t)> on_evict_;
};

}  // namespace kvasir
