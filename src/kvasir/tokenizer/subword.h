// The three subword algorithms, each turning one run of plain text (special tokens already split
// out) into token ids appended to `out`. They follow llama.cpp step for step, so ties resolve the
// same way and the ids are identical.
//
// spm_tokenize: SentencePiece-style BPE by token score. `text` must already have its spaces
//   escaped as U+2581 (and the space prefix added). Start from single UTF-8 characters; repeatedly
//   merge the adjacent pair whose concatenation is a token with the highest score (ties: leftmost
//   pair first). Pieces that are not tokens fall back to byte tokens <0xXX>, or <unk> when the
//   vocab has no token for a byte.
//   With vocab.spm_merge_by_rank (tokenizer.ggml.kvasir.spm_merge_by_rank, see vocab.h) it
//   follows Hugging Face's BPE model instead (tokenizers/src/models/bpe/model.rs merge_word and
//   word.rs merge_all): each UTF-8 character becomes its token, else its bytes' <0xXX> tokens
//   when all of them exist, else <unk> (consecutive <unk> fused into one); then, repeatedly, the
//   adjacent pair of tokens listed in the merges with the lowest rank is replaced by the token
//   of their concatenated texts (ties: leftmost). Pairs that are not listed never merge, even
//   when their concatenation is a token.
// bpe_tokenize: byte-level BPE by merge rank over pre-tokenized, byte-encoded words. Within a
//   word repeatedly apply the adjacent merge with the lowest rank (ties: leftmost). With
//   ignore_merges a word that is itself a token is emitted whole. Pieces that are not tokens are
//   emitted byte by byte where a single-byte token exists (others are dropped, as llama.cpp does).
// wpm_tokenize: WordPiece. Normalize (drop control characters, optionally lowercase and strip
//   accents), split on white space and around punctuation and CJK characters, then match each
//   word greedily longest-first against tokens (word start marked with U+2581); a word that cannot
//   be covered entirely becomes <unk>.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvasir/tokenizer/vocab.h"

namespace kvasir {

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);
void bpe_tokenize(const Vocab& vocab, const std::vector<std::string>& words,
                  std::vector<TokenId>& out);
void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

// WordPiece normalization and word split (exposed for tests).
std::vector<std::string> wpm_words(std::string_view text, bool lowercase, bool strip_accents);

}  // namespace kvasir
