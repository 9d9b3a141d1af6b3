// Pre-tokenizer regex splits. The expected splits are written by hand from the published
// regexes (Llama 3: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"; Qwen 2: the same with \p{N} for single
// digits; GPT-2: "'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
// and were double-checked with Python's `regex` module, whose \s is Unicode White_Space like
// llama.cpp's.
#include "kvasir/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "kvasir/tokenizer/unicode.h"
#include "kvasir/util/error.h"

namespace kvasir {
namespace {

using Words = std::vector<std::string>;

Words split(std::string_view pre, std::string_view text) {
  const BpePreset* p = find_bpe_preset(pre);
  EXPECT_NE(p, nullptr) << pre;
  if (!p) return {};
  return PreTokenizer(p->regexes).split(text, /*byte_encode=*/false);
}

struct Case {
  const char* text;
  Words llama3;
  Words qwen2;
};

const Case kCases[] = {
    {"Hello world", {"Hello", " world"}, {"Hello", " world"}},
    // contractions, case-insensitive; punctuation on its own
    {"I'm fine, you're OK? They'LL go",
     {"I", "'m", " fine", ",", " you", "'re", " OK", "?", " They", "'LL", " go"},
     {"I", "'m", " fine", ",", " you", "'re", " OK", "?", " They", "'LL", " go"}},
    {"don't DON'T", {"don", "'t", " DON", "'T"}, {"don", "'t", " DON", "'T"}},
    // digits: groups of up to three (llama3) / one by one (qwen2), never with a space
    {"1234567 apples",
     {"123", "456", "7", " apples"},
     {"1", "2", "3", "4", "5", "6", "7", " apples"}},
    {"a 12345", {"a", " ", "123", "45"}, {"a", " ", "1", "2", "3", "4", "5"}},
    {"$100", {"$", "100"}, {"$", "1", "0", "0"}},
    {"3.14 is \xCF\x80",
     {"3", ".", "14", " is", " \xCF\x80"},
     {"3", ".", "1", "4", " is", " \xCF\x80"}},
    // punctuation takes the newlines after it; white space before a newline goes with it
    {"Hi!!\n\nBye", {"Hi", "!!\n\n", "Bye"}, {"Hi", "!!\n\n", "Bye"}},
    {"a  \n  b", {"a", "  \n", " ", " b"}, {"a", "  \n", " ", " b"}},
    {"x   ", {"x", "   "}, {"x", "   "}},
    {"hello\r\nworld", {"hello", "\r\n", "world"}, {"hello", "\r\n", "world"}},
    {"\tfoo", {"\tfoo"}, {"\tfoo"}},
    // CJK letters are letters
    {"你好世界 こんにちは", {"你好世界", " こんにちは"}, {"你好世界", " こんにちは"}},
    // emoji (and the variation selector, a mark) are "other": they group like punctuation
    {"I ❤️ 🦙s", {"I", " ❤️", " 🦙", "s"}, {"I", " ❤️", " 🦙", "s"}},
    // U+0085 NEL is White_Space; U+180E is not (PCRE2 10.42's \s alone says it is)
    {"a\xC2\x85\xC2\x85"
     "b",
     {"a", "\xC2\x85",
      "\xC2\x85"
      "b"},
     {"a", "\xC2\x85",
      "\xC2\x85"
      "b"}},
    {"a\xE1\xA0\x8E\xE1\xA0\x8E"
     "b",
     {"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"},
     {"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"}},
    {"a\xE3\x80\x80"
     "b",
     {"a",
      "\xE3\x80\x80"
      "b"},
     {"a",
      "\xE3\x80\x80"
      "b"}},
    {"x = f(y);\n    return 42;",
     {"x", " =", " f", "(y", ");\n", "   ", " return", " ", "42", ";"},
     {"x", " =", " f", "(y", ");\n", "   ", " return", " ", "4", "2", ";"}},
};

TEST(PreTokenizer, Llama3Splits) {
  for (const Case& c : kCases) EXPECT_EQ(split("llama-bpe", c.text), c.llama3) << c.text;
}

TEST(PreTokenizer, Qwen2Splits) {
  for (const Case& c : kCases) EXPECT_EQ(split("qwen2", c.text), c.qwen2) << c.text;
}

TEST(PreTokenizer, Gpt2Splits) {
  EXPECT_EQ(split("gpt-2", "I'm fine, They'LL go 12345!!\n\nok"),
            (Words{"I", "'m", " fine", ",", " They", "'", "LL", " go", " 12345", "!!", "\n", "\n",
                   "ok"}));
  EXPECT_EQ(split("gpt-2", "a  \n  b\tc"), (Words{"a", "  \n ", " b", "\t", "c"}));
}

TEST(PreTokenizer, LaterRegexesSplitInsideEarlierPieces) {
  // Default preset: punctuation runs first, then GPT-2, then digit runs, then triples of ASCII
  // digits; nothing is lost between matches.
  EXPECT_EQ(split("default", "ab, 12345!"), (Words{"ab", ",", " ", "123", "45", "!"}));
}

TEST(PreTokenizer, ByteEncodingUsesGpt2Alphabet) {
  const PreTokenizer pt(find_bpe_preset("gpt-2")->regexes);
  // ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ', 'é' (C3 A9) -> U+00C3 U+00A9
  EXPECT_EQ(pt.split(" a\n", true), (Words{"\xC4\xA0"
                                           "a",
                                           "\xC4\x8A"}));
  EXPECT_EQ(pt.split("\xC3\xA9", true), (Words{"\xC3\x83\xC2\xA9"}));
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(split("gpt-2",
                  "a\xFF"
                  "b"),
            (Words{"a", "\xEF\xBF\xBD", "b"}));
}

TEST(PreTokenizer, EveryPresetCompilesAndSplitsLosslessly) {
  const std::string text =
      "Hello, World! It's 2024-06-01; x+=3.14 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\xA6\x99\n\n\t end "
      " ";
  for (std::string_view name : bpe_preset_names()) {
    const BpePreset* p = find_bpe_preset(name);
    ASSERT_NE(p, nullptr) << name;
    const Words words = PreTokenizer(p->regexes).split(text, false);
    std::string joined;
    for (const auto& w : words) {
      EXPECT_FALSE(w.empty()) << name;
      joined += w;
    }
    EXPECT_EQ(joined, text) << name;
    EXPECT_GT(words.size(), 5u) << name;
  }
}

TEST(PreTokenizer, UnknownNamesAreNotFound) {
  EXPECT_EQ(find_bpe_preset("no-such-pre"), nullptr);
  EXPECT_EQ(find_bpe_preset("kimi-k2"), nullptr);  // needs a custom splitter: not supported
  EXPECT_NE(find_bpe_preset(""), nullptr);         // key absent -> default
}

TEST(PreTokenizer, BadRegexIsAnError) {
  EXPECT_THROW(PreTokenizer({"(unclosed"}), Error);
}

TEST(PreTokenizer, LongInputDoesNotExhaustTheRegexEngine) {
  // A 200k-letter word through the nested-group GPT-4o pattern.
  const std::string word(200000, 'a');
  const Words w = split("gpt-4o", word);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].size(), word.size());
}

}  // namespace
}  // namespace kvasir
