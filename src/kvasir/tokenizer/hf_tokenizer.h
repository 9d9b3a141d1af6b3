// GGUF vocabulary metadata (the tokenizer.ggml.* keys) from a Hugging Face tokenizer folder, so
// that Tokenizer::from_metadata(hf_tokenizer_metadata(folder), ...) tokenizes exactly as the
// Hugging Face `tokenizers` library does with that folder's tokenizer.json.
//
// hf_tokenizer_metadata(folder) reads folder/tokenizer.json (required),
// folder/tokenizer_config.json and folder/special_tokens_map.json (optional; a chat_template.jinja
// beside them is used when tokenizer_config.json has no chat_template). It writes the keys
// llama.cpp's convert_hf_to_gguf.py writes (tokenizer.ggml.model, .pre, .tokens, .scores,
// .token_type, .merges, the special token ids, add_bos_token / add_eos_token, add_space_prefix,
// tokenizer.chat_template), with values chosen for exactness against Hugging Face rather than
// copied from the converter:
//  - add_bos_token / add_eos_token are always written: tokenizer_config.json's add_bos_token /
//    add_eos_token when present, else what the post_processor's TemplateProcessing "single"
//    template adds (a leading / trailing SpecialToken naming the BOS / EOS), else false.
//  - Added tokens (tokenizer.json added_tokens) are CONTROL when special, USER_DEFINED otherwise;
//    ids past the model vocab are appended in id order; a hole in the id range is refused.
//
// Supported tokenizer.json shapes; anything else is refused with a kvasir::Error that names the
// file and the JSON field (never approximated):
//  a. SentencePiece-style BPE: model.type "BPE" with byte_fallback and fuse_unk, normalizer
//     Sequence [Prepend "\u2581", Replace " " -> "\u2581"], no pre-tokenizer. Written as
//     tokenizer.ggml.model "llama" with tokenizer.ggml.merges and
//     tokenizer.ggml.kvasir.spm_merge_by_rank: Kvasir then merges by rank, as Hugging Face does
//     (see vocab.h); llama.cpp ignores the merges and merges by score, and the
//     scores written (-(rank of the merge that makes the token), 0 for single characters and
//     added tokens, below every merge for other tokens no merge makes) make that as close as
//     a score order can. Added tokens marked "normalized" match only where their normalized
//     form ("\u2581" + text) occurs in the normalized text (Hugging Face's rule); this is written
//     as tokenizer.ggml.kvasir.special_eats_space (see vocab.h), a key llama.cpp ignores.
//  b. Byte-level BPE: model.type "BPE" (no byte_fallback, no unk) with pre_tokenizer ByteLevel
//     (use_regex true, add_prefix_space false: the GPT-2 regex) or Sequence [Split(Regex,
//     Isolated), ByteLevel(use_regex false)] whose regex is one of the published ones (GPT-2,
//     Llama 3, Qwen 2; compared as text). Written as tokenizer.ggml.model "gpt2" with the matching
//     tokenizer.ggml.pre; model.ignore_merges must agree with that preset.
//  c. WordPiece (BERT): model.type "WordPiece" with BertNormalizer and BertPreTokenizer, written as
//     tokenizer.ggml.model "bert" (tokens "##x" become "x", others "\u2581x", as llama.cpp's
//     converter writes them).
#pragma once

#include <string>

#include "kvasir/tokenizer/vocab.h"

namespace kvasir {

Metadata hf_tokenizer_metadata(const std::string& folder);

}  // namespace kvasir
