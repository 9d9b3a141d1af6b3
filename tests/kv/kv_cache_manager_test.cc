#include "kvasir/kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvasir {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(BlockPool, AllocateReleaseAndRefCounts) {
  BlockPool p(4);
  std::vector<int32_t> a;
  ASSERT_TRUE(p.allocate(3, a));
  EXPECT_EQ(p.n_free(), 1);
  std::vector<int32_t> b;
  EXPECT_FALSE(p.allocate(2, b));
  EXPECT_TRUE(b.empty()) << "a failed allocation must not take anything";
  p.add_ref(a[0]);
  p.release_all(a);
  EXPECT_EQ(p.n_free(), 3);  // a[0] still referenced once
  EXPECT_EQ(p.ref_count(0), 1);
}

TEST(BlockPool, CachedBlocksAreEvictedInLruOrder) {
  BlockPool p(3);
  std::vector<int32_t> evicted;
  p.set_evict_callback([&](int32_t b) { evicted.push_back(b); });
  std::vector<int32_t> a;
  ASSERT_TRUE(p.allocate(3, a));
  for (int32_t b : a) p.set_cached(b, true);
  p.release(a[1]);
  p.release(a[0]);
  p.release(a[2]);
  EXPECT_EQ(p.n_free(), 3);
  EXPECT_EQ(p.n_cached_idle(), 3);
  p.add_ref(a[0]);  // a hit takes a[0] out of the LRU
  std::vector<int32_t> b;
  ASSERT_TRUE(p.allocate(2, b));
  EXPECT_EQ(evicted, (std::vector<int32_t>{a[1], a[2]}));
}

TEST(KVCacheManager, NoReservationByMaxLength) {
  KVCacheManager m(100, 16, true);
  SeqBlocks s;
  ASSERT_TRUE(m.allocate_slots(s, 1));
  EXPECT_EQ(s.blocks.size(), 1u);
  ASSERT_TRUE(m.allocate_slots(s, 16));
  EXPECT_EQ(s.blocks.size(), 1u);
  ASSERT_TRUE(m.allocate_slots(s, 17));
  EXPECT_EQ(s.blocks.size(), 2u);
  m.free(s);
  EXPECT_EQ(m.n_used(), 0);
}

TEST(KVCacheManager, PrefixReuseFollowsTheChain) {
  KVCacheManager m(100, 4, true);
  auto t = iota_tokens(18);
  SeqBlocks a;
  ASSERT_TRUE(m.allocate_slots(a, 18));
  m.cache_full_blocks(a, t, 18);  // 4 full blocks
  EXPECT_EQ(a.n_hashed, 4);

  SeqBlocks b;
  auto u = t;
  u[9] = 999;  // differs inside block 2
  EXPECT_EQ(m.acquire_cached_prefix(u, 100, b), 8);
  EXPECT_EQ(b.blocks, (std::vector<int32_t>{a.blocks[0], a.blocks[1]}));
  EXPECT_EQ(m.pool().ref_count(a.blocks[0]), 2);

  // Same block content at another position is a different chain: no hit.
  SeqBlocks c;
  std::vector<int32_t> v = {4, 5, 6, 7, 4, 5, 6, 7};
  EXPECT_EQ(m.acquire_cached_prefix(v, 100, c), 0);

  // max_blocks caps the reuse.
  SeqBlocks d;
  EXPECT_EQ(m.acquire_cached_prefix(t, 3, d), 12);

  m.free(a);
  m.free(b);
  m.free(d);
  EXPECT_EQ(m.n_used(), 0);
  // Released cached blocks still hit.
  SeqBlocks e;
  EXPECT_EQ(m.acquire_cached_prefix(t, 100, e), 16);
  m.free(e);
}

TEST(KVCacheManager, EvictedBlocksStopHitting) {
  KVCacheManager m(4, 4, true);
  auto t = iota_tokens(16);
  SeqBlocks a;
  ASSERT_TRUE(m.allocate_slots(a, 16));
  m.cache_full_blocks(a, t, 16);
  m.free(a);
  SeqBlocks other;
  ASSERT_TRUE(m.allocate_slots(other, 8));  // evicts 2 blocks (the tail of a, released first)
  SeqBlocks b;
  EXPECT_EQ(m.acquire_cached_prefix(t, 100, b), 8);
  m.free(b);
  m.free(other);
}

}  // namespace
}  // namespace kvasir
