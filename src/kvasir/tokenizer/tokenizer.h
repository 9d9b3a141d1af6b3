// Tokenizer: text <-> token ids for a GGUF vocabulary, behaving exactly as llama.cpp's
// llama_tokenize / llama_token_to_piece / llama_detokenize do for the same file.
//
// Supported vocabularies (tokenizer.ggml.model): "llama" (SentencePiece-style), "gpt2"
// (byte-level BPE; tokenizer.ggml.pre selects the pre-tokenizer, see pre_tokenizer.h) and
// "bert" (WordPiece). Anything else is refused at load with a kvasir::Error naming it.
//
// encode(text, add_special, parse_special):
//  1. Special-token split: control, user-defined and unknown tokens, longest first, are cut out
//     of the text wherever their exact text occurs (tokens with the lstrip/rstrip attribute also
//     eat adjacent ASCII white space). With parse_special = false only user-defined tokens are
//     cut out; control and unknown token texts stay plain text.
//  2. Each remaining text run is tokenized on its own by the vocab's algorithm. SPM runs get a
//     leading space when add_space_prefix is set and the run starts the text or follows a
//     special token; spaces become U+2581. Vocabs converted from Hugging Face (vocab.h) may
//     instead say special_eats_space: the space prefix goes before the whole text, special
//     tokens match only with a space (or the text start) before them and take it, and runs get
//     no prefix of their own. Runs are first passed through the vocab's normalizer (vocab.h
//     tokenizer.ggml.kvasir.normalizer: NFC/NFKC/..., Lowercase, Replace, ...; the whole text
//     when special tokens are matched normalized). With tokenizer.ggml.kvasir.metaspace, SPM
//     runs get the "\u2581" prefix by Hugging Face's Metaspace rule instead of add_space_prefix.
//  3. add_special adds BOS first / EOS last as the vocab's add_bos / add_eos say (WordPiece:
//     always [CLS] first and [SEP] last). Throws kvasir::Error if the vocab asks for a BOS/EOS it
//     does not have.
// Invalid UTF-8 never fails: it is handled as llama.cpp does (bytes of SPM text fall back to
// byte tokens; BPE and WordPiece read invalid bytes as U+FFFD).
//
// token_to_piece(id, render_special, lstrip): the bytes of one token. Control and unknown tokens
// give "" unless render_special; user-defined tokens always give their text; SPM/WordPiece
// U+2581 becomes a space; byte tokens <0xXX> give the raw byte; byte-level BPE text is mapped
// back to bytes. lstrip removes up to that many leading spaces. A piece may be an incomplete
// UTF-8 character: use IncrementalDetokenizer to stream text. Out-of-range ids give "".
//
// decode(ids, remove_special, render_special): concatenated pieces, as llama_detokenize: the
// first piece loses one leading space when add_space_prefix is set (unless remove_special
// removed a leading BOS, which disables that), and for vocabs with clean_spaces the
// tokenization spaces before . , ! ? and 's 'm 're 've are removed.
//
// A Tokenizer is immutable after construction and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/tokenizer/pre_tokenizer.h"
#include "kvasir/tokenizer/vocab.h"

namespace kvasir {

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  static Tokenizer from_gguf(const gguf::GGUFFile& file);
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_metadata(const Metadata& kv, const std::string& source);

  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;
  std::string token_to_piece(TokenId id, bool render_special, int lstrip = 0) const;
  // The same bytes (lstrip = 0) as a view into the tokenizer's cache: no allocation.
  std::string_view piece_view(TokenId id, bool render_special) const;
  std::string decode(std::span<const TokenId> ids, bool remove_special = false,
                     bool render_special = false) const;

  int32_t n_vocab() const { return vocab_.n_tokens(); }
  VocabType type() const { return vocab_.type; }
  TokenId bos_id() const { return vocab_.bos; }
  TokenId eos_id() const { return vocab_.eos; }
  TokenId eot_id() const { return vocab_.eot; }
  TokenId eom_id() const { return vocab_.eom; }
  TokenId unk_id() const { return vocab_.unk; }
  TokenId sep_id() const { return vocab_.sep; }
  TokenId pad_id() const { return vocab_.pad; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  bool add_sep() const { return vocab_.add_sep; }
  bool add_space_prefix() const { return vocab_.add_space_prefix; }

  // End of generation: EOS, EOT, EOM and the other end-of-turn tokens of the vocab, plus every id
  // of the Kvasir key tokenizer.ggml.kvasir.eog_token_ids (vocab.cc)
  // (a Hugging Face folder's generation_config.json eos_token_id list, hf/generation_config.h);
  // an id there outside the vocab is an error naming the key.
  bool is_eog(TokenId id) const { return vocab_.is_eog(id); }
  const std::vector<TokenId>& eog_ids() const { return vocab_.eog_tokens; }
  bool is_valid(TokenId id) const { return vocab_.valid(id); }
  uint32_t token_attr(TokenId id) const { return vocab_.valid(id) ? vocab_.attr(id) : 0; }
  bool is_control(TokenId id) const { return token_attr(id) & token_attr::kControl; }
  // Throw kvasir::Error for an id outside the vocab.
  const std::string& token_text(TokenId id) const;
  float token_score(TokenId id) const;
  // The id of the token whose text is exactly `text`, or kNoToken.
  TokenId find_token(std::string_view text) const { return vocab_.find(text); }
  const Vocab& vocab() const { return vocab_; }

 private:
  struct Fragment {
    TokenId id;  // kNoToken for a text run
    size_t offset;
    size_t length;
  };
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;

  Vocab vocab_;
  std::unique_ptr<PreTokenizer> pre_;  // BPE only
};

}  // namespace kvasir
