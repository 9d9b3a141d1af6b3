// Unicode helpers for the tokenizers.
//
// UTF-8 decoding here is deliberately lenient and byte-for-byte compatible with llama.cpp's
// tokenizer input handling: a byte that does not start a well-formed sequence (bad lead byte,
// missing continuation bytes, truncated at the end) decodes to U+FFFD and consumes one byte;
// overlong forms and surrogates are not rejected. Encoding writes surrogates as three bytes
// (as they were read) and anything above U+10FFFF as U+FFFD.
//
// Character properties (general category, White_Space, simple lowercase, canonical
// decomposition) come from ICU, a well-kept library shipped by Debian (libicu-dev).
//
// The GPT-2 byte-level mapping sends each of the 256 byte values to a printable code point:
// bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to themselves, the others to U+0100 onward in
// byte order. Byte-level BPE vocabularies are written in that alphabet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::unicode {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence a byte starts, from its top four bits only (1 for continuation
// bytes); the bytes that follow are not checked.
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Lenient decoding (see the header comment).
std::vector<uint32_t> decode_lenient(std::string_view s);

// Appends the UTF-8 form of `cp` (see the header comment for out-of-range values).
void append_utf8(std::string& out, uint32_t cp);
std::string to_utf8(uint32_t cp);

// Strict UTF-8 scanning for output text. Returns the length of the well-formed sequence at
// s[0..], 0 when the bytes so far are a valid but incomplete prefix of a sequence (more bytes
// needed), or -k when the first k >= 1 bytes are an ill-formed "maximal subpart" that must be
// replaced by one U+FFFD (Unicode's recommended practice).
int utf8_scan(std::string_view s);

// General category, collapsed to the classes the pre-tokenizers use.
enum class CharClass : uint8_t {
  kUndefined,    // Cn, and anything beyond U+10FFFF
  kNumber,       // N*
  kLetter,       // L*
  kSeparator,    // Z*
  kMark,         // M*
  kPunctuation,  // P*
  kSymbol,       // S*
  kControl,      // Cc, Cf, Co, Cs
};
CharClass char_class(uint32_t cp);

bool is_whitespace(uint32_t cp);  // Unicode White_Space property
uint32_t to_lower(uint32_t cp);   // simple (1:1) lowercase mapping
// First code point of the canonical decomposition (NFD) of `cp`, or `cp` itself: "é" -> "e".
uint32_t nfd_first(uint32_t cp);

// GPT-2 byte-level alphabet.
const std::string& byte_to_unicode(uint8_t b);  // UTF-8 of the code point byte `b` maps to
int unicode_to_byte(uint32_t cp);               // the byte, or -1 if `cp` is not in the map

}  // namespace kvasir::unicode
