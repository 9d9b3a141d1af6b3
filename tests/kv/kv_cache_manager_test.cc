// KVCacheManager (src/kvasir/kv/kv_cache_manager.h): block tables without reservation, prefix
// reuse along the hash chain, eviction, and what a hash collision must never do.
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

// Every first block hashes alike: all of them collide.
uint64_t colliding_first_blocks(uint64_t parent, std::span<const int32_t> toks) {
  return parent == 0 ? 42 : chain_hash(parent, toks);
}

TEST(KVCacheManager, TwoBlocksWithOneHashDoNotShareKV) {
  KVCacheManager m(16, 4, true, colliding_first_blocks);
  SeqBlocks a;
  auto ta = iota_tokens(4, 0);
  ASSERT_TRUE(m.allocate_slots(a, 4));
  m.cache_full_blocks(a, ta, 4);
  SeqBlocks c;
  auto tc = iota_tokens(4, 100);  // another block, the same hash
  EXPECT_EQ(m.acquire_cached_prefix(tc, 100, c), 0);
  EXPECT_TRUE(c.blocks.empty());
  EXPECT_EQ(m.acquire_cached_prefix(ta, 100, c), 4);  // the real owner still hits
  m.free(a);
  m.free(c);
}

// A crafted first block that collides with a victim's makes its own continuation hash like the
// victim's continuation. The victim must match its own first block and then NOT the attacker's
// second block (whose K/V were computed after the attacker's first block).
TEST(KVCacheManager, ACollisionBelowDoesNotLetAContinuationHit) {
  KVCacheManager m(16, 4, true, colliding_first_blocks);
  const std::vector<int32_t> victim_first = iota_tokens(4, 0), attacker_first = iota_tokens(4, 100),
                             shared_second = iota_tokens(4, 200);
  SeqBlocks v0;  // the victim's system prompt, cached
  ASSERT_TRUE(m.allocate_slots(v0, 4));
  m.cache_full_blocks(v0, victim_first, 4);

  std::vector<int32_t> attacker = attacker_first;
  attacker.insert(attacker.end(), shared_second.begin(), shared_second.end());
  SeqBlocks s;
  ASSERT_EQ(m.acquire_cached_prefix(attacker, 100, s), 0);
  ASSERT_TRUE(m.allocate_slots(s, 8));
  m.cache_full_blocks(s, attacker, 8);

  std::vector<int32_t> victim = victim_first;
  victim.insert(victim.end(), shared_second.begin(), shared_second.end());
  SeqBlocks v;
  EXPECT_EQ(m.acquire_cached_prefix(victim, 100, v), 4)
      << "the victim reused the attacker's second block";
  ASSERT_EQ(v.blocks.size(), 1u);
  EXPECT_EQ(v.blocks[0], v0.blocks[0]);
  m.free(v0);
  m.free(s);
  m.free(v);
}

// Two requests with one system prompt prefill at the same time: both compute its blocks, one
// copy gets cached and the other stays private. What the second request adds after it must still
// be found by a later request that shares the second request's whole prefix (multi-turn chat).
TEST(KVCacheManager, ADuplicatedPrefixStillChains) {
  KVCacheManager m(32, 4, true);
  const std::vector<int32_t> sys = iota_tokens(8, 0);
  std::vector<int32_t> p = sys, q = sys;
  for (int32_t t : iota_tokens(4, 50)) p.push_back(t);
  for (int32_t t : iota_tokens(4, 70)) q.push_back(t);
  SeqBlocks sp, sq;
  ASSERT_TRUE(m.allocate_slots(sp, 12));
  ASSERT_TRUE(m.allocate_slots(sq, 12));  // both allocated before either registered
  m.cache_full_blocks(sp, p, 12);
  m.cache_full_blocks(sq, q, 12);  // its system-prompt blocks are duplicates
  EXPECT_EQ(sq.n_hashed, 3);

  SeqBlocks r;
  EXPECT_EQ(m.acquire_cached_prefix(q, 100, r), 12);
  ASSERT_EQ(r.blocks.size(), 3u);
  EXPECT_EQ(r.blocks[0], sp.blocks[0]) << "the cached copy of the system prompt";
  EXPECT_EQ(r.blocks[1], sp.blocks[1]);
  EXPECT_EQ(r.blocks[2], sq.blocks[2]) << "the second request's own continuation";
  m.free(sp);
  m.free(sq);
  m.free(r);
  EXPECT_EQ(m.n_used(), 0);
}

}  // namespace
}  // namespace kvasir
