#include "kvasir/sampling/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kvasir/util/error.h"

namespace kvasir {
namespace {

// Pushes each piece and returns everything emitted (plus the flush if no stop matched).
struct Streamed {
  std::string emitted;
  int32_t stop_index = -1;
};
Streamed stream(StopMatcher& m, const std::vector<std::string>& pieces) {
  Streamed r;
  for (const auto& p : pieces) {
    const auto res = m.push(p);
    r.emitted += res.text;
    if (res.stopped()) r.stop_index = res.stop_index;
  }
  r.emitted += m.flush();
  return r;
}

TEST(StopMatcher, NoStopStringsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("hello ").text, "hello ");
  EXPECT_EQ(m.push("world").text, "world");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopStringSpanningTokensIsHeldBackThenDropped) {
  StopMatcher m({"</s>"});
  auto r = m.push("Hello <");
  EXPECT_EQ(r.text, "Hello ");
  EXPECT_FALSE(r.stopped());
  EXPECT_EQ(m.held_back(), 1u);
  r = m.push("/");
  EXPECT_EQ(r.text, "");
  r = m.push("s> trailing");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.stop_index, 0);
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more").text, "");  // finished: nothing after the stop
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FalseAlarmReleasesHeldText) {
  StopMatcher m({"</s>"});
  EXPECT_EQ(m.push("a <").text, "a ");
  EXPECT_EQ(m.push("/b").text, "</b");
  EXPECT_EQ(m.held_back(), 0u);
}

TEST(StopMatcher, TextBeforeStopInSamePieceIsEmitted) {
  StopMatcher m({"STOP"});
  const auto r = m.push("abc STOP def");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.text, "abc ");
}

TEST(StopMatcher, OverlappingPrefixKeepsLongestCandidate) {
  // "aab" over pieces a|a|a|b: after "aaa" only "aa" can still start the stop string.
  StopMatcher m({"aab"});
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "a");
  const auto r = m.push("b");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.text, "");
}

TEST(StopMatcher, SelfOverlappingStopString) {
  // "abac" over ab|ab|ac: after "abab" the first candidate failed, but its overlap "ab" is still
  // a candidate and must stay held back; then "ac" completes the match at offset 2.
  StopMatcher m({"abac"});
  EXPECT_EQ(m.push("ab").text, "");
  EXPECT_EQ(m.push("ab").text, "ab");
  EXPECT_EQ(m.held_back(), 2u);
  const Streamed r = stream(m, {"ac", "x"});
  EXPECT_EQ(r.emitted, "");
  EXPECT_EQ(r.stop_index, 0);
}

TEST(StopMatcher, EarliestOfSeveralStopStringsWins) {
  StopMatcher a({"bar", "foobar"});
  Streamed r = stream(a, {"foo", "bar"});
  EXPECT_EQ(r.emitted, "");
  EXPECT_EQ(r.stop_index, 1);  // "foobar" starts first, although "bar" is listed first

  StopMatcher b({"\n\n", "END"});
  r = stream(b, {"one", "\n", "two E", "ND\n\n"});
  EXPECT_EQ(r.emitted, "one\ntwo ");
  EXPECT_EQ(r.stop_index, 1);

  StopMatcher c({"xy", "x"});  // same start: the one listed first
  r = stream(c, {"axy"});
  EXPECT_EQ(r.emitted, "a");
  EXPECT_EQ(r.stop_index, 0);
}

TEST(StopMatcher, FlushReleasesHeldBackTextWhenNoStopMatched) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.push("x##").text, "x");
  EXPECT_EQ(m.flush(), "##");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, Utf8StopStringSplitInsideACharacter) {
  StopMatcher m({"\xE3\x80\x82"});  // U+3002 IDEOGRAPHIC FULL STOP
  EXPECT_EQ(m.push("ok\xE3\x80").text, "ok");
  const auto r = m.push("\x82rest");
  EXPECT_TRUE(r.stopped());
  EXPECT_EQ(r.text, "");
}

TEST(StopMatcher, EmptyStopStringIsAnError) {
  EXPECT_THROW(StopMatcher({"a", ""}), Error);
}

// Property: over random text and random split points, the concatenated output equals the text cut
// at the earliest occurrence of any stop string, and no stop string's first byte ever leaks.
TEST(StopMatcher, RandomSplitsMatchWholeTextReference) {
  std::mt19937 gen(11);
  const std::vector<std::string> stops = {"abb", "ba", "cac", "aaaa"};
  std::uniform_int_distribution<int> ch(0, 2), len(1, 40), piece(0, 4);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = len(gen);
    for (int i = 0; i < n; ++i) text += static_cast<char>('a' + ch(gen));
    size_t cut = std::string::npos;
    int32_t which = -1;
    for (size_t s = 0; s < stops.size(); ++s) {
      const size_t pos = text.find(stops[s]);
      if (pos < cut) cut = pos, which = static_cast<int32_t>(s);
    }
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t l = std::min<size_t>(piece(gen), text.size() - i);  // 0 = empty piece
      pieces.push_back(text.substr(i, l));
      i += l;
    }
    StopMatcher m(stops);
    const Streamed r = stream(m, pieces);
    ASSERT_EQ(r.emitted, text.substr(0, cut)) << text;
    ASSERT_EQ(r.stop_index, which) << text;
  }
}

}  // namespace
}  // namespace kvasir
