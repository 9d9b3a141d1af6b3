// grammar_accepts on the test set (arithmetic, JSON, CSV, identifiers) against independent
// recognizers: chosen positive and negative strings, then thousands of random mutations of them
// on which the grammar and the recognizer must agree. Also the matching semantics that are not
// language-level: UTF-8 handling, ambiguity pruning, deep nesting.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kvasir/grammar/grammar.h"
#include "kvasir/grammar/grammar_impl.h"
#include "test_grammars.h"

namespace kvasir::grammar {
namespace {

using test::TestGrammar;

struct Case {
  const char* grammar;
  std::vector<std::string> good, bad, alphabet;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"arith",
       {"1", "12+3", "1 + 2", "(1)", "( 1 )", "-1", "--1", "1--2", "1 * (2 - -3) / 4", " 7 ",
        "((((9))))", "1+2*3-4/5", "-(1)", "- 1"},
       {"", "+", "1+", "(1", "1)", "()", "1  + 2", "1 +  2", "a", "1 2", "1+*2", "( (1)", "1.5",
        "  1"},
       {"0", "1", "9", "+", "-", "*", "/", "(", ")", " "}},
      {"json",
       {"{}", "[]", "0", "-0", "1.5e+10", "-12.25E-3", "\"\"", "\"a\\n\\u00e9\\ud83d\\ude00\"",
        "true", " null ", "{\"a\": [1, 2, {\"b\": false}], \"c\": \"\xC3\xA9\"}", "[[[[[]]]]]",
        "{\"k\":{\"k\":{\"k\":[]}}}", "\n\t[ 1 ,2 ]\r\n", "\"\x7F\"", "9999999999999999",
        "1.0000000000000001", "1e99"},
       {"",           "{",        "[1,]",        "{\"a\" 1}",
        "{'a': 1}",   "01",       "1.",          ".5",
        "+1",         "\"\\x\"",  "\"\\ud83d\"", "\"\\ude00\"",
        "\"a\nb\"",   "[1 2]",    "tru",         "nul",
        "{\"a\":1,}", "\"\xC3\"", "[] []",       "99999999999999999",
        "1e100",      "\"\\u12\""},
       {"{", "}", "[", "]", ":", ",", "\"", "\\", " ",        "\n",   "0", "1", "9", ".", "e",
        "-", "+", "t", "r", "u", "n", "l",  "a",  "\xC3\xA9", "\x01", "d", "D", "8", "c"}},
      {"csv",
       {"a,b,c\n", ",,\n", "1,2,3\r\nx,y,z\n", "\"a,b\",\"c\"\"d\",\"\"\n", "\"multi\nline\",b,c\n",
        "\xC3\xA9,\xE2\x82\xAC,x\n"},
       {"", "a,b\n", "a,b,c", "a,b,c,d\n", "a\"b,c,d\n", "\"a,b,c\n", "\"a\"b,c,d\n", "a,b,c\r",
        "a,b,c\n\n", "\xFF,b,c\n"},
       {",", "\"", "\n", "\r", "a", "b", " ", "\xC3\xA9", "\xFF"}},
      {"idents",
       {"a", "_", "abc, d", "x1,y2, z3", "_private, __x, A_B_9",
        "abcdefghijklmnopqrstuvwxyz012345"},
       {"", "1a", "a,", "a,,b", "a , b", "a,  b", "a b", "a;b", "abcdefghijklmnopqrstuvwxyz0123456",
        ",a"},
       {"a", "Z", "_", "0", "9", ",", " ", ";"}},
  };
  return all;
}

const TestGrammar& find(const char* name) {
  for (const auto& g : test::test_grammars())
    if (std::string(g.name) == name) return g;
  throw std::runtime_error("no grammar");
}

TEST(GrammarMatch, ChosenStringsAgreeWithRecognizers) {
  for (const Case& c : cases()) {
    const TestGrammar& tg = find(c.grammar);
    const auto g = parse_gbnf(tg.gbnf);
    for (const std::string& s : c.good) {
      EXPECT_TRUE(tg.recognizer(s)) << c.grammar << " recognizer on: " << s;
      EXPECT_TRUE(grammar_accepts(*g, s)) << c.grammar << " grammar on: " << s;
    }
    for (const std::string& s : c.bad) {
      EXPECT_FALSE(tg.recognizer(s)) << c.grammar << " recognizer on: " << s;
      EXPECT_FALSE(grammar_accepts(*g, s)) << c.grammar << " grammar on: " << s;
    }
  }
}

// Random edits of the chosen strings (insert, delete, replace, duplicate a slice): the grammar
// must agree with the recognizer on every result. Both outcomes must occur often, so the check
// is not vacuous.
TEST(GrammarMatch, MutationsAgreeWithRecognizers) {
  std::mt19937_64 rng(20240611);
  for (const Case& c : cases()) {
    const TestGrammar& tg = find(c.grammar);
    const auto g = parse_gbnf(tg.gbnf);
    std::vector<std::string> seeds = c.good;
    seeds.insert(seeds.end(), c.bad.begin(), c.bad.end());
    int n_yes = 0, n_no = 0;
    for (int it = 0; it < 4000; ++it) {
      std::string s = seeds[rng() % seeds.size()];
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) {
        const std::string& a = c.alphabet[rng() % c.alphabet.size()];
        const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
        switch (rng() % 4) {
          case 0:
            s.insert(at, a);
            break;
          case 1:
            if (at < s.size()) s.erase(at, 1);
            break;
          case 2:
            if (at < s.size()) s.replace(at, 1, a);
            break;
          default:
            if (at < s.size()) s.insert(at, s.substr(at, 1 + rng() % 6));
            break;
        }
      }
      const bool expected = tg.recognizer(s);
      ASSERT_EQ(grammar_accepts(*g, s), expected) << c.grammar << " on: " << s;
      (expected ? n_yes : n_no)++;
    }
    EXPECT_GT(n_yes, 300) << c.grammar;
    EXPECT_GT(n_no, 300) << c.grammar;
  }
}

TEST(GrammarMatch, DeepNesting) {
  const auto json = parse_gbnf(test::kJsonGbnf);
  const std::string deep = std::string(2000, '[') + std::string(2000, ']');
  EXPECT_TRUE(grammar_accepts(*json, deep));
  EXPECT_FALSE(grammar_accepts(*json, deep.substr(1)));
  const auto arith = parse_gbnf(test::kArithGbnf);
  EXPECT_TRUE(grammar_accepts(*arith, std::string(1000, '(') + "1" + std::string(1000, ')')));
  EXPECT_TRUE(grammar_accepts(*arith, std::string(5000, '-') + "1"));
}

TEST(GrammarMatch, Utf8) {
  const auto g = parse_gbnf(R"(root ::= [^a]*)");
  EXPECT_TRUE(grammar_accepts(*g, "\xF4\x8F\xBF\xBF\xE2\x82\xAC\xC2\x80"));
  EXPECT_FALSE(grammar_accepts(*g, "\xE2\x82"));          // incomplete at the end
  EXPECT_FALSE(grammar_accepts(*g, "\xC0\xAF"));          // overlong
  EXPECT_FALSE(grammar_accepts(*g, "\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(grammar_accepts(*g, "\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(grammar_accepts(*g, "\xF4\x90\x80\x80"));  // beyond U+10FFFF
  EXPECT_FALSE(grammar_accepts(*g, "\x80"));              // stray continuation
  EXPECT_FALSE(grammar_accepts(*g, "a"));
}

// An ambiguous grammar whose number of live parse stacks grows with the input: after n a's,
// 3 (n + 1) stacks (n + 1 numbers of pending b's, each with 'a' x "b", 'a' x or 'c' next). Up to
// kGbnfMaxStacks stacks the language is exact; past it the matcher prunes, which may only reject,
// never accept, and is deterministic.
TEST(GrammarMatch, AmbiguityIsBoundedDeterministically) {
  const auto g = parse_gbnf(R"(root ::= x
x ::= "a" x "b" | "a" x | "c")");
  auto exact = [](const std::string& s) {  // a^n c b^m with m <= n
    size_t i = 0, n = 0, m = 0;
    while (i < s.size() && s[i] == 'a') ++i, ++n;
    if (i >= s.size() || s[i] != 'c') return false;
    ++i;
    while (i < s.size() && s[i] == 'b') ++i, ++m;
    return i == s.size() && m <= n;
  };
  for (size_t n : {0, 1, 5, 100, 300}) {
    for (size_t m : {size_t{0}, n / 2, n, n + 1}) {
      const std::string s = std::string(n, 'a') + "c" + std::string(m, 'b');
      EXPECT_EQ(grammar_accepts(*g, s), exact(s)) << n << " " << m;
    }
  }
  const std::string big = std::string(3000, 'a') + "c" + std::string(10, 'b');
  const bool first = grammar_accepts(*g, big);
  EXPECT_EQ(grammar_accepts(*g, big), first);
  EXPECT_FALSE(grammar_accepts(*g, std::string(3000, 'a') + "c" + std::string(3001, 'b')));
}

// The lazy DFA is an accelerator only: dropping it between every byte changes no result.
TEST(GrammarMatch, DfaFlushChangesNothing) {
  const auto g = parse_gbnf(test::kJsonGbnf);
  StackStore kept(*g), flushed(*g);
  const std::string doc = "{\"a\": [1, -2.5e3, \"\xC3\xA9\\u00e9\"], \"b\": {\"c\": null}} ";
  std::vector<uint32_t> a = kept.initial(), b = flushed.initial(), next;
  uint32_t pa = 0, pb = 0;
  for (const char ch : doc) {
    ASSERT_TRUE(kept.advance(a, pa, std::string_view(&ch, 1), next, &pa));
    a.swap(next);
    flushed.flush_if_large(0);
    ASSERT_TRUE(flushed.advance(b, pb, std::string_view(&ch, 1), next, &pb));
    flushed.flush_if_large(0);
    b.swap(next);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(pa, pb);
  }
  EXPECT_TRUE(a[0] == 0 && b[0] == 0);
  EXPECT_FALSE(flushed.advance(b, pb, "}", next, &pb));
}

}  // namespace
}  // namespace kvasir::grammar
