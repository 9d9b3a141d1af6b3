// Pool of KV cache blocks: a fixed set of block ids handed out to sequences.
//
// Blocks are reference-counted so several sequences can share a block (prefix caching); a block
// returns to the free list when its count drops to zero. allocate() never blocks and never throws
// in the hot path: it reports failure by returning false so the scheduler can preempt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvasir {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_blocks() - n_free(); }

  // Appends n fresh blocks (ref count 1) to `out`; returns false (and changes nothing) if fewer
  // than n are free.
  bool allocate(int32_t n, std::vector<int32_t>& out);
  void add_ref(int32_t block);
  // Drops one reference; the block is free again when none are left.
  void release(int32_t block);
  void release_all(std::vector<int32_t>& blocks);  // releases each and clears the vector
  int32_t ref_count(int32_t block) const { return ref_[static_cast<size_t>(block)]; }

 private:
  std::vector<int32_t> ref_;
  std::vector<int32_t> free_;  // stack of free block ids
};

}  // namespace kvasir
