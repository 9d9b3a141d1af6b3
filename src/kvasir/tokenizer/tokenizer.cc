#include "kvasir/tokenizer/tokenizer.h"

#include <algorithm>
#include <string>

#include "kvasir/tokenizer/subword.h"
#include "kvasir/util/error.h"

namespace kvasir {

namespace {

namespace ta = token_attr;

// isspace() in the C locale, for bytes.
bool is_ascii_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

void escape_spaces(std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (char c : s) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  s.swap(out);
}

// llama.cpp's clean-up of tokenization spaces, in its three passes.
void clean_spaces(std::string& t) {
  // " ?", " !", " .", " ," -> no space
  std::string a;
  a.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    const char x = t[i];
    if (i > 0 && t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a.push_back(x);
  }
  // " ' " -> "'". llama.cpp works in place and overwrites the dropped space with NUL, which the
  // next step then sees as its left neighbour ("a ' ' b" -> "a'' b"); reproduced here.
  std::string b;
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b.push_back(x);
      a[i + 1] = '\0';
      ++i;  // drop the space after it
      continue;
    }
    b.push_back(x);
  }
  // " 's", " 'm", " 're", " 've" -> no space
  std::string c;
  c.reserve(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      if (x1 == 's' || x1 == 'm') {
        c.pop_back();
      } else if (i + 2 < b.size()) {
        const char x2 = b[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) c.pop_back();
      }
    }
    c.push_back(x);
  }
  t.swap(c);
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  if (vocab_.type == VocabType::kBpe) pre_ = std::make_unique<PreTokenizer>(vocab_.pre_regexes);
}

Tokenizer Tokenizer::from_metadata(const Metadata& kv, const std::string& source) {
  return Tokenizer(load_vocab(kv, source));
}

Tokenizer Tokenizer::from_gguf(const gguf::GGUFFile& file) {
  return from_metadata(file.metadata(), file.path());
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  const gguf::GGUFFile file(path);
  return from_gguf(file);
}

std::vector<Tokenizer::Fragment> Tokenizer::split_special(std::string_view text,
                                                          bool parse_special) const {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({kNoToken, 0, text.size()});
  std::vector<Fragment> next;
  for (const TokenId special : vocab_.special_tokens) {
    const uint32_t attr = vocab_.attr(special);
    if (!parse_special && (attr & (ta::kControl | ta::kUnknown))) continue;
    // With special_eats_space the token matches with the space before it (see vocab.h).
    std::string tt;
    if (vocab_.special_eats_space) tt.push_back(' ');
    tt += vocab_.tokens[special].text;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t off = f.offset, len = f.length;
      while (len > 0) {
        const size_t match = text.substr(0, off + len).find(tt, off);
        if (match == std::string_view::npos) break;
        if (match > off) {
          size_t left = match - off;
          if (attr & ta::kLStrip) {
            while (left > 0 && is_ascii_space(text[off + left - 1])) --left;
          }
          if (left > 0) next.push_back({kNoToken, off, left});
        }
        next.push_back({special, match, tt.size()});
        size_t right_off = match + tt.size();
        size_t right_len = off + len - right_off;
        if (attr & ta::kRStrip) {
          while (right_len > 0 && is_ascii_space(text[right_off])) {
            ++right_off;
            --right_len;
          }
        }
        off = right_off;
        len = right_len;
      }
      if (len > 0) next.push_back({kNoToken, off, len});
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  // With special_normalized (or special_eats_space) the whole text is normalized first and the
  // special tokens are matched in it; otherwise each run is normalized on its own (vocab.h).
  const bool normalize_runs =
      !vocab_.normalizer.empty() && !vocab_.special_normalized && !vocab_.special_eats_space;
  std::string normalized_text;
  if (!vocab_.normalizer.empty() && !normalize_runs) {
    normalized_text = vocab_.normalizer.apply(text);
    text = normalized_text;
  }
  std::string run_buf;
  auto run_text = [&](const Fragment& f) -> std::string_view {
    const std::string_view raw = text.substr(f.offset, f.length);
    if (!normalize_runs) return raw;
    run_buf = vocab_.normalizer.apply(raw);
    return run_buf;
  };
  auto require = [&](TokenId id, const char* what) {
    if (id == kNoToken) {
      fail("{}: the vocab asks for a {} token but has none", vocab_.source, what);
    }
    return id;
  };

  switch (vocab_.type) {
    case VocabType::kSpm: {
      if (add_special && vocab_.add_bos) out.push_back(require(vocab_.bos, "BOS"));
      std::string run;
      if (vocab_.special_eats_space) {
        // The space prefix goes before the whole text, special tokens are matched with the
        // space before them, and runs get no prefix of their own (see vocab.h).
        std::string spaced;
        if (!text.empty() && vocab_.add_space_prefix) spaced.push_back(' ');
        spaced.append(text);
        for (const Fragment& f : split_special(spaced, parse_special)) {
          if (f.id != kNoToken) {
            out.push_back(f.id);
            continue;
          }
          run.assign(spaced, f.offset, f.length);
          escape_spaces(run);
          spm_tokenize(vocab_, run, out);
        }
        if (add_special && vocab_.add_eos) out.push_back(require(vocab_.eos, "EOS"));
        break;
      }
      const std::vector<Fragment> frags = split_special(text, parse_special);
      if (vocab_.metaspace != Vocab::Metaspace::kNone) {
        // Hugging Face's Metaspace pre-tokenizer (see vocab.h).
        const std::string_view sp = "\xE2\x96\x81";
        for (const Fragment& f : frags) {
          if (f.id != kNoToken) {
            out.push_back(f.id);
            continue;
          }
          run.assign(run_text(f));
          escape_spaces(run);
          const bool prefix = vocab_.metaspace == Vocab::Metaspace::kAlways ||
                              (vocab_.metaspace == Vocab::Metaspace::kFirst && f.offset == 0);
          if (prefix && !run.empty() && !run.starts_with(sp)) run.insert(0, sp);
          if (!vocab_.metaspace_split) {
            spm_tokenize(vocab_, run, out);
            continue;
          }
          const std::string_view r = run;
          size_t word = 0;
          for (size_t hit; (hit = r.find(sp, word + 1)) != std::string_view::npos; word = hit) {
            spm_tokenize(vocab_, r.substr(word, hit - word), out);
          }
          if (word < r.size()) spm_tokenize(vocab_, r.substr(word), out);
        }
        if (add_special && vocab_.add_eos) out.push_back(require(vocab_.eos, "EOS"));
        break;
      }
      bool prev_special = true;  // the first run gets the space prefix too
      for (const Fragment& f : frags) {
        if (f.id != kNoToken) {
          out.push_back(f.id);
          prev_special = true;
          continue;
        }
        const std::string_view t = run_text(f);
        run.clear();
        if (vocab_.add_space_prefix && prev_special && !t.empty()) run.push_back(' ');
        run.append(t);
        escape_spaces(run);
        spm_tokenize(vocab_, run, out);
        prev_special = false;
      }
      if (add_special && vocab_.add_eos) out.push_back(require(vocab_.eos, "EOS"));
      break;
    }
    case VocabType::kBpe: {
      if (add_special && vocab_.add_bos) out.push_back(require(vocab_.bos, "BOS"));
      for (const Fragment& f : split_special(text, parse_special)) {
        if (f.id != kNoToken) {
          out.push_back(f.id);
          continue;
        }
        bpe_tokenize(vocab_, pre_->split(run_text(f), true), out);
      }
      if (add_special && vocab_.add_eos) out.push_back(require(vocab_.eos, "EOS"));
      break;
    }
    case VocabType::kWpm: {
      if (add_special) out.push_back(require(vocab_.bos, "CLS (BOS)"));
      for (const Fragment& f : split_special(text, parse_special)) {
        if (f.id != kNoToken) {
          out.push_back(f.id);
          continue;
        }
        wpm_tokenize(vocab_, run_text(f), out);
      }
      if (add_special) out.push_back(require(vocab_.sep, "SEP"));
      break;
    }
  }
  return out;
}

std::string_view Tokenizer::piece_view(TokenId id, bool render_special) const {
  if (!vocab_.valid(id)) return {};
  if (!render_special && (vocab_.attr(id) & (ta::kUnknown | ta::kControl))) return {};
  return vocab_.pieces[id];
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special, int lstrip) const {
  std::string_view piece = piece_view(id, render_special);
  for (int i = 0; i < lstrip && !piece.empty() && piece.front() == ' '; ++i) {
    piece.remove_prefix(1);
  }
  return std::string(piece);
}

const std::string& Tokenizer::token_text(TokenId id) const {
  if (!vocab_.valid(id))
    fail("{}: token id {} is outside the vocab (0..{})", vocab_.source, id, n_vocab() - 1);
  return vocab_.tokens[id].text;
}

float Tokenizer::token_score(TokenId id) const {
  if (!vocab_.valid(id))
    fail("{}: token id {} is outside the vocab (0..{})", vocab_.source, id, n_vocab() - 1);
  return vocab_.tokens[id].score;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool remove_special,
                              bool render_special) const {
  bool remove_space = vocab_.add_space_prefix;
  if (remove_special && vocab_.add_bos && !ids.empty() && ids.front() == vocab_.bos) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && vocab_.add_eos && !ids.empty() && ids.back() == vocab_.eos) {
    ids = ids.first(ids.size() - 1);
  }
  std::string text;
  for (const TokenId id : ids) {
    text += token_to_piece(id, render_special, remove_space ? 1 : 0);
    remove_space = false;
  }
  if (vocab_.clean_spaces) clean_spaces(text);
  return text;
}

}  // namespace kvasir
