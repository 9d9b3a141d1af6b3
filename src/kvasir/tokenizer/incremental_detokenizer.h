// IncrementalDetokenizer: turns a stream of token ids into a stream of text that is always valid
// UTF-8 and never splits a character.
//
// push(id) appends the token's bytes (Tokenizer::token_to_piece) and returns the text completed
// by it: every well-formed UTF-8 character is released as soon as its last byte arrives; the
// bytes of a character still incomplete at the end are held back. A byte sequence that can never
// become well-formed (a stray continuation byte, an overlong form, a surrogate, a lead byte
// followed by a non-continuation) is released as one U+FFFD per maximal ill-formed subpart
// (Unicode's recommended practice). flush() releases what is held back, as U+FFFD, and resets the
// first-token state.
//
// Options: render_special shows control tokens' text (as Tokenizer::token_to_piece does);
// strip_leading_space removes one leading space of the first token pushed, as
// Tokenizer::decode does for SentencePiece vocabs (use it when the stream starts a text, not
// when it continues a prompt). Spaces are not "cleaned" (llama.cpp's streaming does not either).
//
// One instance per stream; not thread-safe. The Tokenizer must outlive it.
#pragma once

#include <string>

#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir {

class IncrementalDetokenizer {
 public:
  struct Options {
    bool render_special = false;
    bool strip_leading_space = false;
  };

  explicit IncrementalDetokenizer(const Tokenizer& tokenizer)
      : IncrementalDetokenizer(tokenizer, Options{}) {}
  IncrementalDetokenizer(const Tokenizer& tokenizer, Options options);

  std::string push(TokenId id);
  std::string flush();

  // Bytes held back waiting for the rest of a character (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  // Moves every complete or hopeless sequence of pending_ to `out`.
  void drain(std::string& out);

  const Tokenizer& tok_;
  Options opt_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace kvasir
