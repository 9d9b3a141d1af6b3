// Builds small in-memory vocabularies (GGUF metadata) for tokenizer tests.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::testing {

struct VocabBuilder {
  std::string model = "llama";
  std::string pre;  // empty: key not written
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  Metadata extra;

  TokenId add(const std::string& text, TokenType type = TokenType::kNormal, float score = 0) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(type));
    scores.push_back(score);
    return static_cast<TokenId>(tokens.size() - 1);
  }
  // <unk>, <s>, </s>, then the 256 byte tokens <0x00>..<0xFF> (ids 3..258).
  void add_spm_basics() {
    add("<unk>", TokenType::kUnknown);
    add("<s>", TokenType::kControl);
    add("</s>", TokenType::kControl);
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), TokenType::kByte);
  }
  Metadata metadata() const {
    Metadata kv;
    kv.emplace_back("tokenizer.ggml.model", gguf::Value::str(model));
    if (!pre.empty()) kv.emplace_back("tokenizer.ggml.pre", gguf::Value::str(pre));
    kv.emplace_back("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
    kv.emplace_back("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
    kv.emplace_back("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
    if (!merges.empty())
      kv.emplace_back("tokenizer.ggml.merges", gguf::Value::string_array(merges));
    for (const auto& e : extra) kv.push_back(e);
    return kv;
  }
  Tokenizer build() const { return Tokenizer::from_metadata(metadata(), "test-vocab"); }
};

}  // namespace kvasir::testing
