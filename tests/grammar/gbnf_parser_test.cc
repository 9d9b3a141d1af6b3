// parse_gbnf / to_gbnf: every construct of the dialect (checked by what the grammar accepts and
// how it prints back), and every error with its line, column and what was expected.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kvasir/grammar/grammar.h"
#include "kvasir/grammar/grammar_impl.h"
#include "kvasir/util/error.h"

namespace kvasir::grammar {
namespace {

bool accepts(const std::string& gbnf, const std::string& text) {
  return grammar_accepts(*parse_gbnf(gbnf), text);
}

// Expects parse_gbnf(gbnf) to throw "grammar: line L, column C: ..." containing `what`.
void expect_error(const std::string& gbnf, int line, int column, const std::string& what) {
  SCOPED_TRACE(gbnf);
  try {
    parse_gbnf(gbnf);
    ADD_FAILURE() << "no error, expected: " << what;
  } catch (const Error& e) {
    const std::string msg = e.what();
    const std::string prefix =
        "grammar: line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
    EXPECT_EQ(msg.substr(0, prefix.size()), prefix) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(GbnfParser, LiteralsAndSequences) {
  const std::string g = R"(root ::= "ab" "c" x
x ::= "d")";
  EXPECT_TRUE(accepts(g, "abcd"));
  EXPECT_FALSE(accepts(g, "abc"));
  EXPECT_FALSE(accepts(g, "abcdd"));
  EXPECT_FALSE(accepts(g, ""));
  EXPECT_EQ(to_gbnf(*parse_gbnf(g)), "root ::= \"abc\" x\nx ::= \"d\"\n");
}

TEST(GbnfParser, Escapes) {
  const std::string g = R"(root ::= "\n\r\t\\\"\[\]\-" "\x41\u00e9\U0001F600" [\x30-\x39\]\-])";
  EXPECT_TRUE(accepts(g,
                      "\n\r\t\\\"[]-A\xC3\xA9\xF0\x9F\x98\x80"
                      "5"));
  EXPECT_TRUE(accepts(g, "\n\r\t\\\"[]-A\xC3\xA9\xF0\x9F\x98\x80]"));
  EXPECT_TRUE(accepts(g, "\n\r\t\\\"[]-A\xC3\xA9\xF0\x9F\x98\x80-"));
  EXPECT_FALSE(accepts(g, "\n\r\t\\\"[]-A\xC3\xA9\xF0\x9F\x98\x80x"));
  // Raw UTF-8 in the grammar is read as code points.
  EXPECT_TRUE(accepts("root ::= \"\xC3\xA9\" [\xCE\xB1-\xCF\x89]", "\xC3\xA9\xCE\xB2"));
  EXPECT_FALSE(accepts("root ::= \"\xC3\xA9\" [\xCE\xB1-\xCF\x89]", "\xC3\xA9z"));
}

TEST(GbnfParser, CharacterClasses) {
  const std::string g = R"(root ::= [a-cx] [^a-z0-9] [-] [a-])";
  EXPECT_TRUE(accepts(g, "b!-a"));
  EXPECT_TRUE(accepts(g, "x\xE2\x82\xAC--"));  // negated class admits non-ASCII
  EXPECT_FALSE(accepts(g, "d!-a"));
  EXPECT_FALSE(accepts(g, "bq-a"));
  EXPECT_FALSE(accepts(g, "b5-a"));
  EXPECT_FALSE(accepts(g, "b!-b"));
  EXPECT_EQ(to_gbnf(*parse_gbnf(g)), "root ::= [a-cx] [^a-z0-9] \"-\" [a\\-]\n");
}

TEST(GbnfParser, AnyCharacter) {
  const std::string g = R"(root ::= . "x" .)";
  EXPECT_TRUE(accepts(g, "axb"));
  EXPECT_TRUE(accepts(g, "\xF0\x9F\x98\x80x\n"));
  EXPECT_FALSE(accepts(g, "ax"));
  EXPECT_FALSE(accepts(g, "abxb"));
  EXPECT_FALSE(accepts(g, "\xFFxb"));  // invalid UTF-8 matches nothing
}

TEST(GbnfParser, GroupsAndAlternatives) {
  const std::string g = R"(root ::= ("a" | "b" "c") "d" | "e" | )";
  EXPECT_TRUE(accepts(g, "ad"));
  EXPECT_TRUE(accepts(g, "bcd"));
  EXPECT_TRUE(accepts(g, "e"));
  EXPECT_TRUE(accepts(g, ""));
  EXPECT_FALSE(accepts(g, "bd"));
  EXPECT_FALSE(accepts(g, "ed"));
  EXPECT_EQ(to_gbnf(*parse_gbnf(g)),
            "root ::= root-1 \"d\" | \"e\" | \"\"\nroot-1 ::= \"a\" | \"bc\"\n");
}

TEST(GbnfParser, Repetitions) {
  auto check = [](const std::string& op, int lo, int hi) {
    const std::string g = "root ::= \"x\" \"ab\"" + op + " \"y\"";
    for (int n = 0; n <= 7; ++n) {
      std::string s = "x";
      for (int i = 0; i < n; ++i) s += "ab";
      s += "y";
      EXPECT_EQ(accepts(g, s), n >= lo && (hi < 0 || n <= hi)) << g << " on " << s;
    }
    EXPECT_FALSE(accepts(g, "xay"));
  };
  check("*", 0, -1);
  check("+", 1, -1);
  check("?", 0, 1);
  check("{3}", 3, 3);
  check("{2,}", 2, -1);
  check("{2,4}", 2, 4);
  check("{,2}", 0, 2);
  check("{0}", 0, 0);
  check("{ 1 , 3 }", 1, 3);
  // A repetition applies to the last term only, and to a group as a whole.
  EXPECT_TRUE(accepts(R"(root ::= "a" "b"*)", "abbb"));
  EXPECT_FALSE(accepts(R"(root ::= "a" "b"*)", "abab"));
  EXPECT_TRUE(accepts(R"(root ::= ("a" "b")*)", "abab"));
  // Operators stack: ("a"{2})? .
  EXPECT_TRUE(accepts(R"(root ::= "a"{2}?)", ""));
  EXPECT_TRUE(accepts(R"(root ::= "a"{2}?)", "aa"));
  EXPECT_FALSE(accepts(R"(root ::= "a"{2}?)", "a"));
  // llama.cpp's expansion: S{1,3} = S, then nested optional helpers.
  EXPECT_EQ(to_gbnf(*parse_gbnf(R"(root ::= [a]{1,3})")),
            "root ::= \"a\" root-2\nroot-2 ::= \"a\" root-1 | \"\"\nroot-1 ::= \"a\" | \"\"\n");
  EXPECT_EQ(to_gbnf(*parse_gbnf(R"(root ::= "a"*)")),
            "root ::= root-1\nroot-1 ::= \"a\" root-1 | \"\"\n");
}

TEST(GbnfParser, LargeRepetitionWithinLimits) {
  const auto g = parse_gbnf("root ::= [0-9]{0,5000} \"x\"");
  EXPECT_TRUE(grammar_accepts(*g, std::string(5000, '7') + "x"));
  EXPECT_FALSE(grammar_accepts(*g, std::string(5001, '7') + "x"));
  EXPECT_TRUE(grammar_accepts(*g, "x"));
}

TEST(GbnfParser, CommentsWhiteSpaceAndMultiLineRules) {
  const std::string g =
      "# leading comment\n"
      "\n"
      "root ::=   # the start\n"
      "  item (\n"
      "    \",\" # a separator\n"
      "    item\n"
      "  )*\n"
      "item ::= \"a\"\r\n"
      "       | \"b\"   # a continuation line starting with '|'\n"
      "\n"
      "       | \"c\"\n"
      "\t# trailing comment";
  EXPECT_TRUE(accepts(g, "a,b,c"));
  EXPECT_TRUE(accepts(g, "c"));
  EXPECT_FALSE(accepts(g, "a,"));
  EXPECT_FALSE(accepts(g, "d"));
}

TEST(GbnfParser, ForwardReferencesAndOtherStartRule) {
  const std::string g = "root ::= a\nb ::= \"b\"\na ::= b b\n";
  EXPECT_TRUE(accepts(g, "bb"));
  const auto other = parse_gbnf("x ::= \"1\"\ny ::= x x", "y");
  EXPECT_TRUE(grammar_accepts(*other, "11"));
  EXPECT_FALSE(grammar_accepts(*other, "1"));
}

TEST(GbnfParser, ToGbnfRoundTrips) {
  const std::string g = R"(root ::= (obj | "[" [^\]"\\\n\x01]* "]"){1,3} . "\u00e9"
obj ::= "{" ("k" [0-9]+)? "}" | "^" [\x5Ea] [^^] "\U0001F600")";
  const auto a = parse_gbnf(g);
  const std::string printed = to_gbnf(*a);
  const auto b = parse_gbnf(printed);
  EXPECT_EQ(to_gbnf(*b), printed);
  for (const char* s :
       {"{}x\xC3\xA9", "{k12}[ab]{}z\xC3\xA9", "[\xC3\xA9]\x01\xC3\xA9", "^^b\xF0\x9F\x98\x80",
        "{}{}{}{}x\xC3\xA9", "[\\]x\xC3\xA9", "^aa\xF0\x9F\x98\x80q\xC3\xA9"}) {
    EXPECT_EQ(grammar_accepts(*a, s), grammar_accepts(*b, s)) << s;
  }
  EXPECT_TRUE(grammar_accepts(*b, "{k12}[ab]{}z\xC3\xA9"));
}

TEST(GbnfParser, HelperNamesAvoidUserNames) {
  const auto g = parse_gbnf("root ::= (\"a\") root-1\nroot-1 ::= \"b\"");
  // Rules print in the order they were first seen: the group's helper before the rule root-1.
  EXPECT_EQ(to_gbnf(*g), "root ::= root-2 root-1\nroot-2 ::= \"a\"\nroot-1 ::= \"b\"\n");
}

TEST(GbnfParser, SyntaxErrors) {
  expect_error("root ::= \"a\"\nx = \"b\"", 2, 3,
               "expected '::=' after the rule name 'x', found '='");
  expect_error("root ::= \"a\"\n  \"b\"", 2, 3,
               "expected a rule name ([a-zA-Z0-9-]+) to start a rule, found '\"'");
  expect_error("root ::= \"a\n", 1, 10, "unterminated string literal: expected a closing '\"'");
  expect_error("root ::= [a-z", 1, 10, "unterminated character class: expected a closing ']'");
  expect_error("root ::= []", 1, 10,
               "empty character class: expected at least one character before ']'");
  expect_error("root ::= [^]", 1, 10, "empty character class");
  expect_error("root ::= [z-a]", 1, 11, "character range U+007A-U+0061 ends below its start");
  expect_error("root ::= \"\\q\"", 1, 11, "unknown escape 'q' after '\\': expected one of");
  expect_error("root ::= \"\\\xFF\"", 1, 11, "unknown escape byte 0xFF after '\\'");
  expect_error("root ::= \"a\" \xFF", 1, 14, "found byte 0xFF");
  expect_error("root ::= \"a\" \x01", 1, 14, "found byte 0x01");
  expect_error("root ::= \"\\x4g\"", 1, 14, "expected 2 hex digits after '\\x', found 'g'");
  expect_error("root ::= \"\\u12\"", 1, 15, "expected 4 hex digits after '\\u', found '\"'");
  expect_error("root ::= \"\\U00110000\"", 1, 11, "code point 0x110000 is beyond U+10FFFF");
  expect_error("root ::= (\"a\" | \"b\"\n", 2, 1,
               "expected ')' to close the '(' at line 1, column 10, found the end of the input");
  expect_error("root ::= \"a\" )", 1, 14,
               "expected a term, '|' or the end of the line in rule 'root', found ')'");
  expect_error("root ::= * \"a\"", 1, 10,
               "expected a string, class, rule name, group or '.' before '*'");
  expect_error("root ::= \"a\" | +", 1, 16, "before '+'");
  expect_error("root ::= \"\"*", 1, 12, "before '*'");
  expect_error("root ::= \"a\"{", 1, 14,
               "expected a number or ',' after '{', found the end of the input");
  expect_error("root ::= \"a\"{x}", 1, 14, "expected a number or ',' after '{', found 'x'");
  expect_error("root ::= \"a\"{1 2}", 1, 16,
               "expected ',' or '}' in the repetition opened at line 1, column 13");
  expect_error("root ::= \"a\"{1,2", 1, 17,
               "expected '}' to close the repetition opened at line 1, column 13");
  expect_error("root ::= \"a\"{,}", 1, 15, "expected a number after '{,', found '}'");
  expect_error("root ::= \"a\"{3,1}", 1, 13,
               "repetition {3,1}: expected the maximum to be at least the minimum");
  expect_error("root ::= \"\xC3\"", 1, 11, "invalid UTF-8 in the grammar text");
  expect_error("root ::= \"a\"\n\n  \xE2\x82\xAC", 3, 3,
               "expected a rule name ([a-zA-Z0-9-]+) to start a rule, found '\xE2\x82\xAC'");
}

TEST(GbnfParser, SemanticErrors) {
  expect_error("root ::= a b\na ::= \"x\"\n", 1, 12,
               "undefined rule 'b' (expected a rule 'b ::= ...')");
  expect_error("start ::= \"x\"", 1, 1, "no rule named 'root' (the start rule)");
  expect_error("", 1, 1, "no rule named 'root'");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", 2, 1,
               "rule 'root' is defined twice (first at line 1, column 1)");
  expect_error("root ::= root \"a\" | \"b\"", 1, 1,
               "left recursion: rule 'root' can reach itself before consuming any input");
  expect_error("root ::= root \"a\" | \"b\"", 1, 1, "('root' -> 'root')");
  expect_error("root ::= x\nx ::= y \"a\"\ny ::= \"\" | x", 2, 1,
               "left recursion: rule 'x' can reach itself");
  expect_error("root ::= x\nx ::= y x \"a\" | \"b\"\ny ::= \"c\"?", 2, 1, "'x' -> 'x'");
  expect_error("root ::= (\"a\"?)* \"b\"", 1, 16,
               "left recursion: the repeated item can match the empty string");
  expect_error("root ::= \"a\" root", 1, 1, "the start rule 'root' can never finish");
}

TEST(GbnfParser, Limits) {
  expect_error("root ::= \"a\"{10001}", 1, 14, "repetition count above the limit of 10000");
  expect_error("root ::= \"a\"{1,99999999999999999999}", 1, 16, "repetition count above the limit");
  std::string deep = "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')');
  expect_error(deep, 1, 10 + kGbnfMaxNesting, "parentheses nested more than 256 deep");
  std::string nested_ok = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')');
  EXPECT_TRUE(accepts(nested_ok, "a"));
  const std::string word(100, 'w');
  expect_error("root ::= \"" + word + "\"{10000} \"" + word + "\"{10000}", 1, 222,
               "makes the grammar larger than 1048576 elements");
  std::string many = "root ::= ";
  for (int i = 0; i < 14; ++i) many += "\"a\"{0,10000} ";
  expect_error(many, 1, 10 + 13 * 13 + 3, "more than 131072 rules");
  expect_error("root ::= \"a\"\n" + std::string(kGbnfMaxTextBytes, ' '), 1, 1,
               "more than the limit of 1048576");
}

TEST(GbnfParser, ErrorsAreNotCrashesOnGarbage) {
  // Random byte strings never crash the parser (ASan/UBSan run this too) and give well-formed
  // errors.
  uint64_t x = 12345;
  const std::string alphabet = "root::=\"[]()|*+?{},.-^\\x\n #ab0123456789\xC3\xA9\xFF";
  for (int i = 0; i < 3000; ++i) {
    std::string s = "root ::= ";
    const int n = static_cast<int>(x % 24);
    for (int k = 0; k < n; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      s += alphabet[(x >> 33) % alphabet.size()];
    }
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    try {
      const auto g = parse_gbnf(s);
      (void)grammar_accepts(*g, "ab0");
      (void)to_gbnf(*g);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("grammar: line ", 0), 0u) << e.what();
      // The server returns the message in JSON: it must be valid UTF-8 (dump() throws if not).
      EXPECT_NO_THROW((void)nlohmann::json(e.what()).dump()) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvasir::grammar
