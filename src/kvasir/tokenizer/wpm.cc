// WordPiece (see subword.h).
#include <algorithm>

#include "kvasir/tokenizer/subword.h"
#include "kvasir/tokenizer/unicode.h"

namespace kvasir {

namespace {

// CJK ideograph blocks BERT isolates as single-character words (the upper bound of the
// extension C..E block follows the Hugging Face implementation, 0x2B920 rather than 0x2B820).
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

std::vector<std::string> wpm_words(std::string_view text, bool lowercase, bool strip_accents) {
  using unicode::CharClass;
  std::vector<std::string> words(1);
  for (uint32_t cp : unicode::decode_lenient(text)) {
    if (strip_accents) cp = unicode::nfd_first(cp);
    if (unicode::is_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const CharClass cls = unicode::char_class(cp);
    if (cp == 0 || cp == unicode::kReplacementChar || cls == CharClass::kControl) continue;
    if (strip_accents && cls == CharClass::kMark) continue;
    const std::string s = unicode::to_utf8(lowercase ? unicode::to_lower(cp) : cp);
    if (cls == CharClass::kPunctuation || (cp < 0x7F && cls == CharClass::kSymbol) || is_cjk(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  const int max_len = static_cast<int>(vocab.max_token_len);
  for (const std::string& word : wpm_words(text, vocab.lowercase, vocab.strip_accents)) {
    if (word.empty()) continue;
    const std::string marked = "\xE2\x96\x81" + word;  // word start
    const int n = static_cast<int>(marked.size());
    const size_t before = out.size();
    for (int i = 0; i < n; ++i) {
      bool matched = false;
      for (int j = std::min(n, i + max_len + 1); j > i; --j) {
        const TokenId id = vocab.find(std::string_view(marked).substr(i, j - i));
        if (id != kNoToken) {
          out.push_back(id);
          matched = true;
          i = j - 1;
          break;
        }
      }
      if (!matched) {  // the word cannot be covered: drop what was matched of it
        out.resize(before);
        break;
      }
    }
    if (out.size() == before && vocab.unk != kNoToken) out.push_back(vocab.unk);
  }
}

}  // namespace kvasir
