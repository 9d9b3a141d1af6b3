#include "kvasir/tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace kvasir::unicode {
namespace {

using Cps = std::vector<uint32_t>;

TEST(Unicode, DecodeLenientMatchesLlamaCpp) {
  EXPECT_EQ(decode_lenient("a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\xA6\x99"),
            (Cps{'a', 0xE9, 0x4F60, 0x1F999}));
  // stray continuation byte, bad lead byte: one U+FFFD per byte
  EXPECT_EQ(decode_lenient("\x80\xFF"), (Cps{0xFFFD, 0xFFFD}));
  // truncated sequence: the lead byte becomes U+FFFD, the continuation bytes too
  EXPECT_EQ(decode_lenient("\xE4\xBD"), (Cps{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_lenient("\xE4\xBD"
                           "a"),
            (Cps{0xFFFD, 0xFFFD, 'a'}));
  // overlong forms and surrogates are not rejected (llama.cpp reads them as is)
  EXPECT_EQ(decode_lenient("\xC0\x80"), (Cps{0}));
  EXPECT_EQ(decode_lenient("\xED\xA0\x80"), (Cps{0xD800}));
}

TEST(Unicode, EncodeRoundTrips) {
  for (uint32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    EXPECT_EQ(decode_lenient(to_utf8(cp)), Cps{cp}) << cp;
  }
  EXPECT_EQ(to_utf8(0x110000), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8_len(0x41), 1u);
  EXPECT_EQ(utf8_len(0xC3), 2u);
  EXPECT_EQ(utf8_len(0xE4), 3u);
  EXPECT_EQ(utf8_len(0xF0), 4u);
  EXPECT_EQ(utf8_len(0x80), 1u);
}

TEST(Unicode, StrictScan) {
  EXPECT_EQ(utf8_scan("a"), 1);
  EXPECT_EQ(utf8_scan("\xC3\xA9"), 2);
  EXPECT_EQ(utf8_scan("\xF0\x9F\xA6\x99"), 4);
  EXPECT_EQ(utf8_scan("\xF0\x9F\xA6"), 0);  // incomplete, valid so far
  EXPECT_EQ(utf8_scan("\xC3"), 0);
  EXPECT_EQ(utf8_scan("\x80"), -1);              // stray continuation
  EXPECT_EQ(utf8_scan("\xC0\x80"), -1);          // overlong lead
  EXPECT_EQ(utf8_scan("\xE0\x80\x80"), -1);      // overlong 3-byte form
  EXPECT_EQ(utf8_scan("\xED\xA0\x80"), -1);      // surrogate
  EXPECT_EQ(utf8_scan("\xF4\x90\x80\x80"), -1);  // above U+10FFFF
  EXPECT_EQ(utf8_scan("\xE4\xBD"
                      "a"),
            -2);  // maximal subpart of two bytes
}

TEST(Unicode, Gpt2ByteAlphabet) {
  EXPECT_EQ(byte_to_unicode('a'), "a");
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // the last unprintable byte -> U+0143
  for (int b = 0; b < 256; ++b) {
    const Cps cps = decode_lenient(byte_to_unicode(static_cast<uint8_t>(b)));
    ASSERT_EQ(cps.size(), 1u);
    EXPECT_EQ(unicode_to_byte(cps[0]), b);
  }
  EXPECT_EQ(unicode_to_byte(0x4F60), -1);
  EXPECT_EQ(unicode_to_byte(0x20), -1);  // a raw space is not in the alphabet
}

TEST(Unicode, Properties) {
  EXPECT_EQ(char_class('a'), CharClass::kLetter);
  EXPECT_EQ(char_class(0x4F60), CharClass::kLetter);
  EXPECT_EQ(char_class('7'), CharClass::kNumber);
  EXPECT_EQ(char_class(0x00BD), CharClass::kNumber);  // ½
  EXPECT_EQ(char_class(','), CharClass::kPunctuation);
  EXPECT_EQ(char_class('$'), CharClass::kSymbol);
  EXPECT_EQ(char_class(0x1F999), CharClass::kSymbol);
  EXPECT_EQ(char_class(0x0301), CharClass::kMark);
  EXPECT_EQ(char_class(0x200D), CharClass::kControl);  // ZWJ is a format character
  EXPECT_EQ(char_class(0x0378), CharClass::kUndefined);
  EXPECT_TRUE(is_whitespace(0x85));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_FALSE(is_whitespace(0x200B));
  EXPECT_EQ(to_lower('A'), uint32_t{'a'});
  EXPECT_EQ(to_lower(0x0130), uint32_t{'i'});  // simple mapping of İ
  EXPECT_EQ(nfd_first(0xE9), uint32_t{'e'});   // é
  EXPECT_EQ(nfd_first(0xD55C), 0x1112u);       // 한 -> its leading jamo, as llama.cpp's table
  EXPECT_EQ(nfd_first('x'), uint32_t{'x'});
}

}  // namespace
}  // namespace kvasir::unicode
