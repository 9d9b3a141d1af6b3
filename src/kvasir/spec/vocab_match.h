// A draft model must speak the target's vocabulary token for token: draft proposals are token
// ids, verified by the target as they are.
#pragma once

#include <optional>
#include <string>

namespace kvasir {

class Tokenizer;

// Empty when every token id has the same text in both vocabularies (and their sizes agree); else
// a message naming the first token id that differs and its text on each side.
std::optional<std::string> vocabulary_mismatch(const Tokenizer& target, const Tokenizer& draft);

}  // namespace kvasir
