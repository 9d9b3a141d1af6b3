// generation_config.json of a Hugging Face model folder: the model's default sampling and its
// end-of-generation ids, and the GGUF keys the folder's view (hf_checkpoint.h) carries them in.
//
// Fields read (transformers' names; any other field is ignored, as transformers ignores it;
// null = absent): do_sample (bool), temperature (number >= 0), top_k (integer >= 0, 0 = off),
// top_p (number in (0, 1]), min_p (number in [0, 1]), repetition_penalty (number > 0),
// max_new_tokens (integer >= 1), max_length (integer >= 1), eos_token_id (a token id or a list of
// them), bos_token_id and pad_token_id (token ids). Token ids must lie in [0, vocab_size) of
// config.json; pad_token_id may also be negative (-1 = none, as older Llama configs write).
// Errors read "<folder>/generation_config.json: field 'top_p' = 2: expected a number in (0, 1]".
//
// The keys (generation_metadata):
//   general.sampling.temp (f32)           temperature; 0 when do_sample is false (transformers
//                                         then decodes greedily and ignores the sampling fields)
//   general.sampling.top_k (i32), .top_p (f32), .min_p (f32)
//                                         (written only when do_sample is not false)
//   general.sampling.penalty_repeat (f32) repetition_penalty (greedy or not), with
//   general.sampling.penalty_last_n (i32) -1 (transformers penalizes the whole sequence)
//                                         (the llama.cpp names, as its converter writes them from
//                                         the same file)
//   general.sampling.kvasir.max_tokens (u32)  max_new_tokens (Kvasir's key: GGUF has none)
//   tokenizer.ggml.kvasir.eog_token_ids (array[u32])  every eos_token_id: each ends generation
//                                         (tokenizer.h adds them to the vocabulary's own
//                                         end-of-generation tokens)
// max_length (prompt + output) is checked but not applied: Kvasir's defaults are per-output
// lengths (max_new_tokens); bos_token_id and pad_token_id are checked only.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvasir/format/gguf.h"

namespace kvasir::hf {

struct GenerationConfig {
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_new_tokens, max_length;
  std::vector<int32_t> eos_token_ids;  // in the file's order, duplicates removed
  std::optional<int32_t> bos_token_id, pad_token_id;
};

// Parses the JSON object `j` read from `file` (named in errors); ids must be < n_vocab.
GenerationConfig parse_generation_config(const nlohmann::json& j, const std::string& file,
                                         int n_vocab);

// Reads folder/generation_config.json; nullopt when the folder has none.
std::optional<GenerationConfig> read_generation_config(const std::string& folder, int n_vocab);

// The GGUF keys above for `g`.
std::vector<std::pair<std::string, gguf::Value>> generation_metadata(const GenerationConfig& g);

}  // namespace kvasir::hf
