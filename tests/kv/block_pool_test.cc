// BlockPool (src/kvasir/kv/block_pool.h): reference counts, the one eviction-ordered free queue
// (empty blocks first, most recently freed first; cached ones behind them, least recently freed
// first) and the prefix-cache index with its verification.
#include "kvasir/kv/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "kvasir/util/error.h"

namespace kvasir {
namespace {

std::vector<int32_t> tokens(int32_t first, int n = 4) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(first + i);
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
  EXPECT_EQ(p.n_free(), 1);
  p.add_ref(a[0]);
  p.release_all(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(p.n_free(), 3);  // a[0] still referenced once
  EXPECT_EQ(p.ref_count(0), 1);
  EXPECT_EQ(p.n_used(), 1);
}

TEST(BlockPool, LowIdsFirstAndTheLastFreedIsReusedFirst) {
  BlockPool p(6);
  std::vector<int32_t> a;
  ASSERT_TRUE(p.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  p.release(1);
  p.release(2);
  std::vector<int32_t> b;
  ASSERT_TRUE(p.allocate(3, b));
  EXPECT_EQ(b, (std::vector<int32_t>{2, 1, 3}));  // a stack of freed blocks, then the untouched
}

TEST(BlockPool, CachedBlocksAreEvictedOnlyAfterEmptyOnesInLruOrder) {
  BlockPool p(5, 4);
  std::vector<int32_t> a;
  ASSERT_TRUE(p.allocate(5, a));
  for (int i = 0; i < 3; ++i) ASSERT_NE(p.cache_block(a[i], 100 + i, 0, tokens(10 * i)), 0u);
  EXPECT_EQ(p.n_cached(), 3);
  p.release(a[1]);
  p.release(a[3]);  // empty
  p.release(a[0]);
  p.release(a[2]);
  p.release(a[4]);  // empty
  EXPECT_EQ(p.n_free(), 5);
  EXPECT_EQ(p.n_cached_idle(), 3);
  p.add_ref(a[0]);  // a hit takes a[0] out of the queue
  EXPECT_EQ(p.n_cached_idle(), 2);
  EXPECT_EQ(p.n_free(), 4);

  std::vector<int32_t> b;
  ASSERT_TRUE(p.allocate(2, b));  // the empty blocks, last freed first: nothing evicted
  EXPECT_EQ(b, (std::vector<int32_t>{a[4], a[3]}));
  EXPECT_EQ(p.n_cached(), 3);
  ASSERT_TRUE(p.allocate(1, b));  // now the least recently freed cached block goes
  EXPECT_EQ(b.back(), a[1]);
  EXPECT_FALSE(p.is_cached(a[1]));
  EXPECT_EQ(p.find_cached(101, 0, tokens(10)), -1) << "an evicted block must stop hitting";
  EXPECT_EQ(p.find_cached(102, 0, tokens(20)), a[2]);
  EXPECT_EQ(p.find_cached(100, 0, tokens(0)), a[0]);
  EXPECT_EQ(p.n_cached(), 2);
}

TEST(BlockPool, AHitIsVerifiedAgainstTokensAndParent) {
  BlockPool p(4, 4);
  std::vector<int32_t> a;
  ASSERT_TRUE(p.allocate(2, a));
  const uint64_t id0 = p.cache_block(a[0], 7, 0, tokens(1));
  ASSERT_NE(id0, 0u);
  ASSERT_NE(p.cache_block(a[1], 8, id0, tokens(5)), 0u);
  EXPECT_EQ(p.find_cached(7, 0, tokens(1)), a[0]);
  EXPECT_EQ(p.find_cached(7, 0, tokens(2)), -1) << "same hash, other tokens";
  EXPECT_EQ(p.find_cached(8, id0, tokens(5)), a[1]);
  EXPECT_EQ(p.find_cached(8, id0 + 99, tokens(5)), -1) << "same hash and tokens, other parent";
  EXPECT_EQ(p.find_cached(8, 0, tokens(5)), -1);
  EXPECT_EQ(p.find_cached(9, id0, tokens(5)), -1);
}

TEST(BlockPool, ATakenHashLeavesTheBlockPrivate) {
  BlockPool p(3, 4);
  std::vector<int32_t> a;
  ASSERT_TRUE(p.allocate(2, a));
  ASSERT_NE(p.cache_block(a[0], 7, 0, tokens(1)), 0u);
  EXPECT_EQ(p.cache_block(a[1], 7, 0, tokens(1)), 0u) << "a duplicate is not cached twice";
  EXPECT_FALSE(p.is_cached(a[1]));
  EXPECT_EQ(p.n_cached(), 1);
  p.release(a[1]);  // private: an empty block, reused first
  std::vector<int32_t> b;
  ASSERT_TRUE(p.allocate(1, b));
  EXPECT_EQ(b[0], a[1]);
}

TEST(BlockPool, CacheIdsAreNeverReused) {
  BlockPool p(1, 4);
  std::vector<int32_t> a;
  ASSERT_TRUE(p.allocate(1, a));
  const uint64_t first = p.cache_block(a[0], 7, 0, tokens(1));
  p.release_all(a);
  ASSERT_TRUE(p.allocate(1, a));  // evicts it
  EXPECT_EQ(p.cache_id(a[0]), 0u);
  const uint64_t second = p.cache_block(a[0], 7, 0, tokens(1));
  EXPECT_NE(second, 0u);
  EXPECT_NE(first, second) << "a child cached after the old block must not match the new one";
}

TEST(BlockPool, BadUsesAreRefused) {
  EXPECT_THROW(BlockPool(0), Error);
  BlockPool no_cache(2);
  std::vector<int32_t> a;
  ASSERT_TRUE(no_cache.allocate(1, a));
  EXPECT_THROW(no_cache.cache_block(a[0], 1, 0, tokens(0)), Error);
  BlockPool p(2, 4);
  std::vector<int32_t> b;
  ASSERT_TRUE(p.allocate(1, b));
  EXPECT_THROW(p.cache_block(b[0], 1, 0, tokens(0, 3)), Error) << "a partial block";
  EXPECT_THROW(p.cache_block(1, 1, 0, tokens(0)), Error) << "a free block";
  ASSERT_NE(p.cache_block(b[0], 1, 0, tokens(0)), 0u);
  EXPECT_THROW(p.cache_block(b[0], 2, 0, tokens(0)), Error) << "cached twice";
}

}  // namespace
}  // namespace kvasir
