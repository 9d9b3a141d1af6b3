// A tokenizer vocabulary read from GGUF metadata (the tokenizer.ggml.* keys).
//
// load_vocab() applies exactly the defaults and fix-ups llama.cpp applies when it loads a vocab,
// so that our token ids match llama.cpp's for the same file:
//  - tokenizer.ggml.model selects the algorithm: "llama" (SentencePiece-style BPE by scores),
//    "gpt2" (byte-level BPE by merge ranks, with the pre-tokenizer named by tokenizer.ggml.pre)
//    or "bert" (WordPiece). Any other model, and any unknown pre-tokenizer name, is refused with
//    a kvasir::Error that names it.
//  - special token ids default per model (llama: BOS 1, EOS 2, UNK 0; gpt2: BOS = EOS = 11;
//    bert: CLS 101 as BOS, UNK 100, SEP 102, PAD 0, MASK 103), a default id outside the vocab
//    is dropped, and a tokenizer.ggml.*_token_id key outside the vocab is ignored;
//  - add_bos / add_eos / add_space_prefix defaults per model and pre-tokenizer, then the
//    tokenizer.ggml.add_bos_token / add_eos_token / add_sep_token / add_space_prefix keys;
//  - EOT / EOM / FIM tokens found by their text when no key names them, and the set of
//    end-of-generation tokens (EOS, EOT, EOM, FIM pad/repo/sep and the usual end-of-turn texts);
//    tokens found that way are made control tokens;
//  - control tokens whose text contains "unused" are marked unused;
//  - the per-model strip attributes (phi-3, jina-v2 <mask>, modern-bert [MASK]).
// Extensions beyond llama.cpp, for vocabularies converted from Hugging Face tokenizer.json
// (hf_tokenizer.h); GGUF files without these keys load exactly as llama.cpp loads them:
//  - tokenizer.ggml.kvasir.spm_merge_by_rank (bool, SPM only; needs tokenizer.ggml.merges): the
//    vocab is tokenized as Hugging Face's BPE model does (subword.h) instead of by score. Without
//    the key an SPM vocab's merges are ignored, as llama.cpp ignores them (its own conversions of
//    tokenizer.json-only Llama tokenizers carry merges and merge by score).
//  - tokenizer.ggml.kvasir.special_eats_space (bool, SPM only): special tokens match only where
//    a space (or the start of the text) precedes them and take that space with them, and text
//    runs get no space prefix of their own beyond the one at the start of the text. This is
//    Hugging Face's rule for added tokens marked "normalized" under a Prepend("\u2581") +
//    Replace(" ", "\u2581") normalizer: they match their normalized form "\u2581<text>".
//  - tokenizer.ggml.kvasir.normalizer (string): a Hugging Face tokenizer.json normalizer, as JSON
//    text, restricted to what normalizer.h implements (NFC, NFD, NFKC, NFKD, Lowercase, Strip,
//    Replace with a String pattern, Prepend, Sequence). Each text run between special tokens is
//    normalized before anything else happens to it (SPM: before the space prefix and the
//    U+2581 escape; BPE: before the pre-tokenizer; WordPiece: before its own normalization).
//  - tokenizer.ggml.kvasir.special_normalized (bool): the whole text is normalized first and
//    special tokens are matched in the normalized text (Hugging Face's rule for added tokens
//    marked "normalized"), instead of being split out of the raw text before each run is
//    normalized (its rule for the others). special_eats_space implies it.
//  - tokenizer.ggml.kvasir.metaspace (string "always" | "first" | "never", SPM only): Hugging
//    Face's Metaspace pre-tokenizer replaces the add_space_prefix rule when encoding: each text
//    run has its spaces escaped as U+2581 and then gets a U+2581 prefix unless it already starts
//    with U+2581 (so " a" and "a" both give "\u2581a") and unless it is empty: every run
//    ("always"), only a run that starts the text ("first"), or none ("never").
//    add_space_prefix still governs decode().
//  - tokenizer.ggml.kvasir.metaspace_split (bool, with metaspace): the escaped run is cut before
//    every U+2581 into words ("a\u2581\u2581b" -> "a", "\u2581", "\u2581b") and each word is
//    tokenized on its own, so no token spans a word boundary.
//  - tokenizer.ggml.kvasir.pre_regexes (array of strings, BPE only): the pre-tokenizer regexes
//    (pre_tokenizer.h) used instead of the list tokenizer.ggml.pre's preset has; the preset still
//    gives its flags. Written for tokenizer.json pre-tokenizer sequences no preset has (e.g. a
//    Digits pre-tokenizer before a Split).
// Where llama.cpp walks a hash map (so its choice among several candidates is unspecified) we
// walk ids in increasing order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/tokenizer/normalizer.h"

namespace kvasir {

using TokenId = int32_t;
constexpr TokenId kNoToken = -1;

enum class VocabType { kSpm, kBpe, kWpm };
std::string_view vocab_type_name(VocabType t);

// Token attributes: bit flags (same values as llama.cpp's llama_token_attr).
namespace token_attr {
constexpr uint32_t kUndefined = 0;
constexpr uint32_t kUnknown = 1u << 0;
constexpr uint32_t kUnused = 1u << 1;
constexpr uint32_t kNormal = 1u << 2;
constexpr uint32_t kControl = 1u << 3;
constexpr uint32_t kUserDefined = 1u << 4;
constexpr uint32_t kByte = 1u << 5;
constexpr uint32_t kNormalized = 1u << 6;
constexpr uint32_t kLStrip = 1u << 7;  // eat white space left of the token when splitting it out
constexpr uint32_t kRStrip = 1u << 8;  // ... right of it
constexpr uint32_t kSingleWord = 1u << 9;
}  // namespace token_attr

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = token_attr::kNormal;
};

// Hash map from token text with string_view lookups (no temporary strings).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

struct Vocab {
  std::string source;  // file path or name, used in error messages
  std::string model;   // tokenizer.ggml.model
  std::string pre;     // tokenizer.ggml.pre as written ("" when absent)
  std::string general_name;
  VocabType type = VocabType::kSpm;

  std::vector<TokenData> tokens;
  StringMap<TokenId> token_to_id;
  StringMap<int32_t> merge_ranks;  // key "left right" (BPE; SPM when spm_merge_by_rank)
  size_t max_token_len = 0;        // in bytes

  // Control, user-defined and unknown tokens, longest text first: the order in which they are
  // split out of the input text.
  std::vector<TokenId> special_tokens;
  std::vector<TokenId> eog_tokens;  // sorted
  std::vector<std::string> pieces;  // token_to_piece(id, render special) of every token

  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken;
  TokenId sep = kNoToken, pad = kNoToken, mask = kNoToken;
  TokenId fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  TokenId fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;

  bool add_space_prefix = false;
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;
  bool ignore_merges = false;
  bool spm_merge_by_rank = false;   // tokenizer.ggml.kvasir.spm_merge_by_rank (see above)
  bool special_eats_space = false;  // tokenizer.ggml.kvasir.special_eats_space (see above)
  Normalizer normalizer;            // tokenizer.ggml.kvasir.normalizer (see above)
  bool special_normalized = false;  // tokenizer.ggml.kvasir.special_normalized (see above)
  enum class Metaspace { kNone, kAlways, kFirst, kNever };
  Metaspace metaspace = Metaspace::kNone;  // tokenizer.ggml.kvasir.metaspace (see above)
  bool metaspace_split = false;            // tokenizer.ggml.kvasir.metaspace_split (see above)
  bool clean_spaces = false;
  bool remove_extra_whitespaces = false;  // read for completeness; llama.cpp does not act on it
  bool lowercase = true;                  // WordPiece normalizer
  bool strip_accents = true;              // WordPiece normalizer
  std::vector<std::string> pre_regexes;   // BPE pre-tokenizer

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  bool valid(TokenId id) const { return id >= 0 && id < n_tokens(); }
  uint32_t attr(TokenId id) const { return tokens[id].attr; }
  TokenId find(std::string_view text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? kNoToken : it->second;
  }
  // Rank of the merge (left, right), -1 when there is none. `buf` is scratch space.
  int32_t merge_rank(std::string_view left, std::string_view right, std::string& buf) const;
  // SPM byte fallback: "<0xXX>", else the single byte as text; kNoToken if neither exists.
  TokenId byte_token(uint8_t byte) const;
  // The byte a byte token ("<0xXX>") stands for.
  uint8_t token_byte(TokenId id) const;
  bool is_eog(TokenId id) const;
};

using Metadata = std::vector<std::pair<std::string, gguf::Value>>;

// Reads the vocab from GGUF metadata (`source` names it in errors). Throws kvasir::Error on a
// missing or mistyped key, an unsupported tokenizer model or pre-tokenizer, or a duplicate token.
Vocab load_vocab(const Metadata& kv, const std::string& source);

}  // namespace kvasir
