// The n-gram proposer: longest suffix first, most recent earlier occurrence, continuation cut to
// k and to the sequence's end.
#include "kvasir/spec/ngram_proposer.h"

#include <gtest/gtest.h>

#include "kvasir/util/error.h"

namespace kvasir {
namespace {

using V = std::vector<int32_t>;

TEST(NgramLookup, LongestSuffixWins) {
  // Suffix "7 8 9": a 3-gram occurs at 0 (followed by 1 2), the 1-gram "9" more recently at 6
  // (followed by 5); the 3-gram match is taken.
  const V t = {7, 8, 9, 1, 2, 3, 9, 5, 7, 8, 9};
  V out;
  EXPECT_EQ(ngram_lookup(t, 1, 4, 2, out), 3);
  EXPECT_EQ(out, (V{1, 2}));
}

TEST(NgramLookup, MostRecentOccurrenceOfTheSameLength) {
  const V t = {4, 5, 10, 11, 4, 5, 20, 21, 4, 5};
  V out;
  EXPECT_EQ(ngram_lookup(t, 1, 2, 3, out), 2);
  EXPECT_EQ(out, (V{20, 21, 4}));
}

TEST(NgramLookup, ContinuationStopsAtTheEnd) {
  const V t = {1, 2, 3, 1, 2};
  V out;
  EXPECT_EQ(ngram_lookup(t, 1, 4, 8, out), 2);
  EXPECT_EQ(out, (V{3, 1, 2}));  // the occurrence at 0 continues to the end of the sequence
}

TEST(NgramLookup, OverlappingRunsRepeat) {
  const V t = {6, 6, 6, 6};
  V out;
  EXPECT_EQ(ngram_lookup(t, 1, 4, 4, out), 3);  // "6 6 6" at 0, followed by one 6
  EXPECT_EQ(out, (V{6}));
}

TEST(NgramLookup, NoMatchBelowNMin) {
  const V t = {1, 2, 3, 4, 2};
  V out = {99};
  EXPECT_EQ(ngram_lookup(t, 2, 4, 4, out), 0);  // only the 1-gram "2" recurs
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ngram_lookup(t, 1, 4, 4, out), 1);
  EXPECT_EQ(out, (V{3, 4, 2}));
  EXPECT_EQ(ngram_lookup(t, 1, 4, 0, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ngram_lookup(V{5}, 1, 4, 4, out), 0);
}

TEST(NgramProposer, FillsEverySlotAndRefusesBadN) {
  NgramProposer p(1, 3);
  const V a = {1, 2, 3, 1, 2}, b = {9, 8, 7};
  V da, db;
  ProposalSlot s[2];
  s[0].tokens = a;
  s[0].k = 2;
  s[0].draft = &da;
  s[1].tokens = b;
  s[1].k = 2;
  s[1].draft = &db;
  p.propose(s);
  EXPECT_EQ(da, (V{3, 1}));
  EXPECT_TRUE(db.empty());
  EXPECT_EQ(s[0].q, nullptr);
  EXPECT_THROW(NgramProposer(0, 2), Error);
  EXPECT_THROW(NgramProposer(3, 2), Error);
}

}  // namespace
}  // namespace kvasir
