#include "kvasir/tokenizer/unicode.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf16.h>

#include <array>

namespace kvasir::unicode {

namespace {

bool is_cont(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Decodes one code point at s[i]; on an ill-formed start returns U+FFFD and advances by one.
uint32_t decode_one(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const size_t n = s.size();
  if (b0 < 0x80) {
    i += 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0) {
    if (i + 1 < n && is_cont(s[i + 1])) {
      uint32_t cp = ((b0 & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
      i += 2;
      return cp;
    }
  } else if ((b0 & 0xF0) == 0xE0) {
    if (i + 2 < n && is_cont(s[i + 1]) && is_cont(s[i + 2])) {
      uint32_t cp = ((b0 & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
      i += 3;
      return cp;
    }
  } else if ((b0 & 0xF8) == 0xF0) {
    if (i + 3 < n && is_cont(s[i + 1]) && is_cont(s[i + 2]) && is_cont(s[i + 3])) {
      uint32_t cp = ((b0 & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                    (s[i + 3] & 0x3Fu);
      i += 4;
      return cp;
    }
  }
  i += 1;
  return kReplacementChar;
}

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> from_unicode;  // every mapped code point is below U+0200

  ByteMap() {
    from_unicode.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : next++;
      to_unicode[b] = to_utf8(static_cast<uint32_t>(cp));
      from_unicode[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

std::vector<uint32_t> decode_lenient(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(decode_one(s, i));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    append_utf8(out, kReplacementChar);
  }
}

std::string to_utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

int utf8_scan(std::string_view s) {
  if (s.empty()) return 0;
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;  // continuation byte, C0, C1 or F5..FF
  }
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= s.size()) return 0;  // valid so far, incomplete
    const auto b = static_cast<uint8_t>(s[k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : is_cont(b);
    if (!ok) return -k;
  }
  return need;
}

CharClass char_class(uint32_t cp) {
  if (cp > 0x10FFFF) return CharClass::kUndefined;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UNASSIGNED:
      return CharClass::kUndefined;
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::kLetter;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return CharClass::kMark;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::kNumber;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return CharClass::kSeparator;
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return CharClass::kControl;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return CharClass::kPunctuation;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      return CharClass::kSymbol;
    default:
      return CharClass::kUndefined;
  }
}

bool is_whitespace(uint32_t cp) {
  return cp <= 0x10FFFF && u_isUWhiteSpace(static_cast<UChar32>(cp));
}

uint32_t to_lower(uint32_t cp) {
  if (cp > 0x10FFFF) return cp;
  return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp)));
}

uint32_t nfd_first(uint32_t cp) {
  if (cp < 0xC0 || cp > 0x10FFFF) return cp;  // nothing below U+00C0 decomposes
  UErrorCode status = U_ZERO_ERROR;
  static const UNormalizer2* nfd = unorm2_getNFDInstance(&status);
  if (nfd == nullptr) return cp;
  UChar buf[32];
  status = U_ZERO_ERROR;
  const int32_t len = unorm2_getDecomposition(nfd, static_cast<UChar32>(cp), buf, 32, &status);
  if (U_FAILURE(status) || len <= 0) return cp;
  UChar32 first;
  int32_t i = 0;
  U16_NEXT(buf, i, len, first);
  return static_cast<uint32_t>(first);
}

const std::string& byte_to_unicode(uint8_t b) {
  return byte_map().to_unicode[b];
}

int unicode_to_byte(uint32_t cp) {
  if (cp >= 512) return -1;
  return byte_map().from_unicode[cp];
}

}  // namespace kvasir::unicode
