// Golden sets: fixed prompts with the greedy continuation a reference model gave (or a substring
// the output must hold), to check that a quantized model or KV cache still answers the same.
//
// File: JSON Lines, one case an object:
//   {"id": "lily", "prompt": "Once upon a time", "expected": ", there was a little girl"}
//   {"prompt": "The cat sat on the", "contains": "mat", "max_tokens": 16}
// "prompt" (string) is required; "expected" (the greedy continuation, as text) or "contains" (a
// substring of it); "id" (string, default "line N") and "max_tokens" (default: enough for
// "expected" plus 16, 64 for "contains") are optional. Another field is refused by name. Blank
// lines and lines starting with '#' are skipped.
//
// A case runs alone from an empty cache: the prompt is tokenized as `kvasir run` does (BOS when
// the vocabulary adds it), then greedy decoding until an end-of-generation token, max_tokens, or
// (for "expected") the output holds all of it or 16 characters past where it diverged. "expected"
// passes when the output starts with it; otherwise the case reports where it diverged (character
// offset, and the index of the generated token that holds it). "contains" passes when the output
// holds the substring.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/kv/key_transform.h"
#include "kvasir/model/model.h"
#include "kvasir/tensor/kv_quant.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct GoldenCase {
  std::string id;
  std::string prompt;
  std::optional<std::string> expected;
  std::optional<std::string> contains;
  int max_tokens = 0;  // 0: the default above
  int line = 0;        // in the file, from 1
};

// Throws kvasir::Error "PATH:LINE: ..." naming the field and what was expected. With
// `need_answer` false (recording), cases may have neither "expected" nor "contains".
std::vector<GoldenCase> read_golden_set(const std::string& path, bool need_answer = true);

struct GoldenResult {
  std::string id;
  bool pass = false;
  std::string output;           // the generated text
  int tokens = 0;               // generated tokens
  int diverged_char = -1;       // "expected": first differing character (-1: none)
  int diverged_token = -1;      // ... and the generated token it falls in (-1: none)
  std::string want_at, got_at;  // "expected": a few characters from the divergence on
};

struct GoldenOptions {
  KVCacheType kv_type{};
  std::shared_ptr<const KeyTransform> key_transform;  // of quantized keys (kv/key_transform.h)
};

std::vector<GoldenResult> run_golden_set(const Model& model, const Tokenizer& tok, ThreadPool& pool,
                                         const std::vector<GoldenCase>& cases,
                                         const GoldenOptions& opt);

// One JSON object a line: the cases with "expected" set to each result's output (for --record).
std::string golden_set_jsonl(const std::vector<GoldenCase>& cases,
                             const std::vector<GoldenResult>& results);

}  // namespace kvasir
