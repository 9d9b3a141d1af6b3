// An independent, deliberately simple (and slow) re-implementation of Hugging Face `tokenizers`
// encoding for the tokenizer.json shapes hf_tokenizer.h supports. Test code: the oracle that
// Tokenizer::from_metadata(hf_tokenizer_metadata(folder)) is compared with. It shares no code
// with src/kvasir/tokenizer (it uses PCRE2 and ICU directly).
//
// What it follows (huggingface/tokenizers, tokenizers/src/):
//  - tokenizer/mod.rs encode_single_sequence: added-token extraction and normalization, then
//    pre-tokenization, then the model on every word, then the post-processor.
//  - tokenizer/added_vocabulary.rs extract_and_normalize / find_matches: added tokens that are
//    not "normalized" are split out of the raw text first (leftmost-longest); every other piece
//    is normalized, then the "normalized" added tokens are split out of it, matched by their
//    normalized form (the content passed through the normalizer: with Prepend("▁") that is
//    "▁<content>").
//  - normalizers/prepend.rs (prepend only to a non-empty string), normalizers/replace.rs
//    (String pattern: every occurrence), normalizers/unicode.rs (NFC, NFKC, NFD, NFKD),
//    normalizers/utils.rs
//    (Sequence: in order).
//  - pre_tokenizers/byte_level.rs (optional prefix space; the GPT-2 regex with Isolated
//    behaviour when use_regex; then every byte mapped to the GPT-2 alphabet),
//    pre_tokenizers/split.rs (Isolated: matches and the text between them are words),
//    pre_tokenizers/metaspace.rs (replace ' ', prepend_scheme always/first/never, split
//    MergedWithNext), pre_tokenizers/digits.rs (Isolated / Contiguous on \p{N}),
//    pre_tokenizers/sequence.rs.
//  - models/bpe/model.rs tokenize / merge_word: ignore_merges returns a word that is a token
//    whole; each character is its token, else (byte_fallback) its "<0xXX>" tokens when all
//    exist, else unk, fused with a preceding unk when fuse_unk. models/bpe/word.rs merge_all:
//    repeatedly the listed pair (by token ids) with the lowest rank, ties leftmost.
//  - processors/template.rs: the "single" template's SpecialTokens around the sequence.
// Regexes run in PCRE2 with UTF + UCP (Hugging Face uses Oniguruma); Oniguruma's \s is Unicode
// White_Space (U+0085 included, U+180E not), so the text the regex sees maps those two as the
// documented difference requires.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvasir::hf_ref {

using nlohmann::json;

inline std::vector<uint32_t> utf8_decode(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = cp << 6 | (s[i + k] & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

inline std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | cp >> 12);
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | cp >> 18);
    s += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    s += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The GPT-2 bytes_to_unicode table (pre_tokenizers/byte_level.rs bytes_char).
inline const std::vector<std::string>& byte_chars() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = utf8_encode(keep ? b : 256 + n++);
    }
    return t;
  }();
  return table;
}

inline void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// Splits `s` with `pattern` (Isolated): the matches and the text between them, in order.
inline std::vector<std::string> regex_split(const std::string& s, const std::string& pattern) {
  const std::vector<uint32_t> pat = utf8_decode(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!re) throw std::runtime_error("hf_ref: regex does not compile: " + pattern);
  const std::vector<uint32_t> cps = utf8_decode(s);
  std::vector<uint32_t> view = cps;
  for (uint32_t& c : view) {
    if (c == 0x85) c = 0x0B;      // Oniguruma: White_Space
    if (c == 0x180E) c = 0x200B;  // Oniguruma: not White_Space (a format character)
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  std::vector<std::pair<size_t, size_t>> spans;
  size_t pos = 0, last = 0;
  while (pos <= view.size()) {
    const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(view.data()), view.size(), pos, 0,
                               md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // empty match: nothing to split off
      pos = ov[0] + 1;
      continue;
    }
    if (ov[0] > last) spans.emplace_back(last, ov[0]);
    spans.emplace_back(ov[0], ov[1]);
    last = pos = ov[1];
  }
  if (last < view.size()) spans.emplace_back(last, view.size());
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  std::vector<std::string> out;
  for (auto [b, e] : spans) {
    std::string w;
    for (size_t i = b; i < e; ++i) w += utf8_encode(cps[i]);
    out.push_back(std::move(w));
  }
  return out;
}

class HfReference {
 public:
  explicit HfReference(const json& tj) {
    const json& model = tj.at("model");
    if (model.at("type") != "BPE") throw std::runtime_error("hf_ref: only BPE");
    for (const auto& [text, id] : model.at("vocab").items()) set_token(id.get<int>(), text);
    for (const json& a : tj.value("added_tokens", json::array())) {
      set_token(a.at("id").get<int>(), a.at("content").get<std::string>());
      added_.push_back({a.at("content").get<std::string>(), a.at("id").get<int>(),
                        a.value("normalized", true), a.value("special", false), ""});
    }
    byte_fallback_ = model.value("byte_fallback", false);
    fuse_unk_ = model.value("fuse_unk", false);
    ignore_merges_ = model.value("ignore_merges", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      unk_ = vocab_.at(model["unk_token"].get<std::string>());
    }
    const json& merges = model.at("merges");
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      std::string a, b;
      if (merges[rank].is_string()) {
        const std::string m = merges[rank];
        const size_t sp = m.find(' ', 1);
        a = m.substr(0, sp);
        b = m.substr(sp + 1);
      } else {
        a = merges[rank][0];
        b = merges[rank][1];
      }
      merges_[{vocab_.at(a), vocab_.at(b)}] = {static_cast<int>(rank), vocab_.at(a + b)};
    }
    if (tj.contains("normalizer") && !tj["normalizer"].is_null()) normalizer_ = tj["normalizer"];
    if (tj.contains("pre_tokenizer") && !tj["pre_tokenizer"].is_null()) {
      pre_tokenizer_ = tj["pre_tokenizer"];
    }
    if (tj.contains("post_processor") && !tj["post_processor"].is_null()) {
      post_processor_ = tj["post_processor"];
    }
    // Normalized added tokens match by their normalized form.
    for (AddedToken& a : added_) a.pattern = a.normalized ? normalize(a.content) : a.content;
  }

  std::vector<int> encode(const std::string& text, bool add_special) const {
    // Added tokens not normalized, on the raw text; then normalize each other piece and split
    // out the normalized added tokens.
    std::vector<std::pair<std::string, int>> pieces;  // (text, -1) or ("", id)
    for (auto& [t, id] : split_added(text, false)) {
      if (id >= 0) {
        pieces.emplace_back("", id);
        continue;
      }
      for (auto& p : split_added(normalize(t), true)) pieces.push_back(p);
    }
    std::vector<int> ids;
    size_t offset_original = 0;  // Metaspace "first": only the piece at the start of the input
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].second >= 0) {
        ids.push_back(pieces[i].second);
        ++offset_original;
        continue;
      }
      for (const std::string& w : pre_tokenize(pieces[i].first, offset_original == 0)) {
        for (int id : bpe(w)) ids.push_back(id);
      }
      ++offset_original;
    }
    if (add_special && post_processor_.is_object()) {
      std::vector<int> out;
      for (const json& e : post_processor_.at("single")) {
        if (e.contains("Sequence")) {
          out.insert(out.end(), ids.begin(), ids.end());
        } else {
          out.push_back(vocab_.at(e.at("SpecialToken").at("id").get<std::string>()));
        }
      }
      return out;
    }
    return ids;
  }

  std::string normalize(const std::string& s) const { return normalize_with(normalizer_, s); }

 private:
  struct AddedToken {
    std::string content;
    int id;
    bool normalized;
    bool special;
    std::string pattern;
  };

  void set_token(int id, const std::string& text) {
    vocab_[text] = id;
    if (static_cast<int>(id_to_token_.size()) <= id) id_to_token_.resize(id + 1);
    id_to_token_[id] = text;
  }

  static std::string normalize_with(const json& n, std::string s) {
    if (!n.is_object()) return s;
    const std::string type = n.at("type");
    if (type == "Sequence") {
      for (const json& x : n.at("normalizers")) s = normalize_with(x, s);
    } else if (type == "Prepend") {
      if (!s.empty()) s.insert(0, n.at("prepend").get<std::string>());
    } else if (type == "Replace") {
      replace_all(s, n.at("pattern").at("String").get<std::string>(),
                  n.at("content").get<std::string>());
    } else if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD") {
      UErrorCode status = U_ZERO_ERROR;
      const icu::Normalizer2* nfc = type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                    : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                    : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                                     : icu::Normalizer2::getNFKDInstance(status);
      icu::UnicodeString u = nfc->normalize(icu::UnicodeString::fromUTF8(s), status);
      s.clear();
      u.toUTF8String(s);
    } else {
      throw std::runtime_error("hf_ref: normalizer " + type);
    }
    return s;
  }

  // Leftmost-longest split on the added tokens with `normalized` equal to the flag.
  std::vector<std::pair<std::string, int>> split_added(const std::string& s,
                                                       bool normalized) const {
    std::vector<std::pair<std::string, int>> out;
    size_t start = 0;
    for (size_t pos = 0; pos < s.size();) {
      const AddedToken* best = nullptr;
      for (const AddedToken& a : added_) {
        if (a.normalized != normalized || a.pattern.empty()) continue;
        if (s.compare(pos, a.pattern.size(), a.pattern) != 0) continue;
        if (!best || a.pattern.size() > best->pattern.size()) best = &a;
      }
      if (!best) {
        ++pos;
        continue;
      }
      if (pos > start) out.emplace_back(s.substr(start, pos - start), -1);
      out.emplace_back("", best->id);
      pos += best->pattern.size();
      start = pos;
    }
    if (start < s.size()) out.emplace_back(s.substr(start), -1);
    return out;
  }

  std::vector<std::string> pre_tokenize(const std::string& s, bool first) const {
    return pre_tokenize_with(pre_tokenizer_, {s}, first);
  }

  static std::vector<std::string> pre_tokenize_with(const json& p, std::vector<std::string> words,
                                                    bool first) {
    if (!p.is_object()) return words;
    const std::string type = p.at("type");
    std::vector<std::string> out;
    if (type == "Sequence") {
      for (const json& x : p.at("pretokenizers")) words = pre_tokenize_with(x, words, first);
      return words;
    }
    for (std::string w : words) {
      if (type == "ByteLevel") {
        if (p.value("add_prefix_space", false) && (w.empty() || w[0] != ' ')) w.insert(0, 1, ' ');
        std::vector<std::string> parts;
        if (p.value("use_regex", true)) {
          parts = regex_split(
              w, R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
        } else {
          parts = {w};
        }
        for (const std::string& part : parts) {
          std::string enc;
          for (char c : part) enc += byte_chars()[static_cast<uint8_t>(c)];
          if (!enc.empty()) out.push_back(enc);
        }
      } else if (type == "Split") {
        if (p.at("behavior") != "Isolated" || p.value("invert", false)) {
          throw std::runtime_error("hf_ref: Split behaviour");
        }
        for (std::string& part : regex_split(w, p.at("pattern").at("Regex").get<std::string>())) {
          out.push_back(std::move(part));
        }
      } else if (type == "Digits") {
        // char::is_numeric (general category N): Isolated, or Contiguous runs.
        const std::string re = p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)";
        for (std::string& part : regex_split(w, re)) out.push_back(std::move(part));
      } else if (type == "Metaspace") {
        const std::string rep = p.value("replacement", std::string("\xE2\x96\x81"));
        replace_all(w, " ", rep);
        const std::string scheme = p.value("prepend_scheme", std::string("always"));
        const bool starts = w.compare(0, rep.size(), rep) == 0;
        if (!starts && (scheme == "always" || (scheme == "first" && first))) w.insert(0, rep);
        if (!p.value("split", true)) {
          out.push_back(w);
          continue;
        }
        // MergedWithNext: each replacement character starts a new word.
        std::string cur;
        for (size_t i = 0; i < w.size();) {
          if (w.compare(i, rep.size(), rep) == 0 && !cur.empty()) {
            out.push_back(cur);
            cur.clear();
          }
          const size_t n = w.compare(i, rep.size(), rep) == 0 ? rep.size() : 1;
          cur.append(w, i, n);
          i += n;
        }
        if (!cur.empty()) out.push_back(cur);
      } else {
        throw std::runtime_error("hf_ref: pre_tokenizer " + type);
      }
    }
    return out;
  }

  std::vector<int> bpe(const std::string& word) const {
    if (word.empty()) return {};
    if (ignore_merges_) {
      if (auto it = vocab_.find(word); it != vocab_.end()) return {it->second};
    }
    // merge_word: characters to ids.
    std::vector<int> sym;
    bool last_unk = false;
    for (size_t i = 0; i < word.size();) {
      const auto c = static_cast<uint8_t>(word[i]);
      const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      const std::string ch = word.substr(i, n);
      i += n;
      if (auto it = vocab_.find(ch); it != vocab_.end()) {
        sym.push_back(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback_) {
        std::vector<int> bytes;
        for (char b : ch) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "<0x%02X>", static_cast<uint8_t>(b));
          if (auto it = vocab_.find(buf); it != vocab_.end()) bytes.push_back(it->second);
        }
        if (bytes.size() == ch.size()) {
          sym.insert(sym.end(), bytes.begin(), bytes.end());
          last_unk = false;
          continue;
        }
      }
      if (!unk_) continue;
      if (!(last_unk && fuse_unk_)) sym.push_back(*unk_);
      last_unk = true;
    }
    // merge_all: the current adjacent pairs ordered by (rank, position of the left symbol).
    std::vector<int> next(sym.size()), prev(sym.size());
    for (size_t i = 0; i < sym.size(); ++i) {
      next[i] = i + 1 < sym.size() ? static_cast<int>(i + 1) : -1;
      prev[i] = static_cast<int>(i) - 1;
    }
    std::set<std::pair<int, int>> pairs;  // (rank, left)
    auto rank_at = [&](int left) {
      if (left < 0 || next[left] < 0) return -1;
      auto it = merges_.find({sym[left], sym[next[left]]});
      return it == merges_.end() ? -1 : it->second.first;
    };
    auto add = [&](int left) {
      if (int r = rank_at(left); r >= 0) pairs.insert({r, left});
    };
    auto remove = [&](int left) {
      if (int r = rank_at(left); r >= 0) pairs.erase({r, left});
    };
    for (int i = 0; i < static_cast<int>(sym.size()); ++i) add(i);
    while (!pairs.empty()) {
      const int left = pairs.begin()->second;
      const int right = next[left];
      remove(prev[left]);
      remove(left);
      remove(right);
      sym[left] = merges_.at({sym[left], sym[right]}).second;
      next[left] = next[right];
      if (next[right] >= 0) prev[next[right]] = left;
      add(prev[left]);
      add(left);
    }
    std::vector<int> out;
    for (int i = sym.empty() ? -1 : 0; i >= 0; i = next[i]) out.push_back(sym[i]);
    return out;
  }

  std::unordered_map<std::string, int> vocab_;
  std::vector<std::string> id_to_token_;
  std::map<std::pair<int, int>, std::pair<int, int>> merges_;  // ids -> (rank, merged id)
  std::vector<AddedToken> added_;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  std::optional<int> unk_;
  json normalizer_, pre_tokenizer_, post_processor_;
};

}  // namespace kvasir::hf_ref
