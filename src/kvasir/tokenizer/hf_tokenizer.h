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
//  a. SentencePiece-style BPE: model.type "BPE" with byte_fallback and fuse_unk, and either
//     - no pre-tokenizer and normalizer Sequence [Prepend "\u2581" (optional), Replace " " ->
//       "\u2581"] (older Llama 2 / Gemma files; without the Prepend there is no space prefix), or
//     - pre_tokenizer Metaspace (replacement "\u2581", prepend_scheme always / first / never,
//       split true / false; how recent transformers write Llama 2 / Mistral) and normalizer null.
//       Hugging Face prepends "\u2581" only to a text run that does not already start with one
//       (" x" gives "\u2581x", unlike SentencePiece's "\u2581\u2581x"), "first" only to the run
//       at the start of the text, and split cuts the run before every "\u2581" so no token spans
//       two words (e.g. "\u2581\u2581" never forms). Written as tokenizer.ggml.kvasir.metaspace
//       and .metaspace_split (vocab.h; llama.cpp ignores them and uses add_space_prefix).
//     NFC / NFD / NFKC / NFKD / Lowercase normalizer steps may join either (in the Sequence; for
//     Metaspace alone or in a Sequence), NFKC / NFKD only before the Replace (they make spaces).
//     Written as tokenizer.ggml.model "llama" with tokenizer.ggml.merges and
//     tokenizer.ggml.kvasir.spm_merge_by_rank: Kvasir then merges by rank, as Hugging Face does
//     (see vocab.h); llama.cpp ignores the merges and merges by score, and the
//     scores written (-(rank of the merge that makes the token), 0 for single characters and
//     added tokens, below every merge for other tokens no merge makes) make that as close as
//     a score order can. Added tokens marked "normalized" under the Prepend match only where
//     their normalized form ("\u2581" + text) occurs in the normalized text (Hugging Face's
//     rule); this is written as tokenizer.ggml.kvasir.special_eats_space (see vocab.h), a key
//     llama.cpp ignores.
//  b. Byte-level BPE: model.type "BPE" (no byte_fallback, no unk) with pre_tokenizer ByteLevel
//     (add_prefix_space false; use_regex true: the GPT-2 regex) or a Sequence of Split (Regex,
//     Isolated; one of the published regexes: GPT-2, Llama 3, Qwen 2, compared as text; at most
//     one) and Digits (individual_digits true: each \p{N} alone; false: each run of \p{N}), in
//     any order, ending with ByteLevel (use_regex true adds the GPT-2 regex split). Written as
//     tokenizer.ggml.model "gpt2" with tokenizer.ggml.pre the Split's preset (else "gpt-2"), plus
//     tokenizer.ggml.kvasir.pre_regexes when the split differs from that preset's;
//     model.ignore_merges must agree with the preset. The normalizer may be null or any of NFC,
//     NFD, NFKC, NFKD, Lowercase, Strip, Replace (String pattern), Prepend, or a Sequence of them
//     (Qwen 2's is NFC).
//  c. WordPiece (BERT): model.type "WordPiece" with BertNormalizer and BertPreTokenizer, written as
//     tokenizer.ggml.model "bert" (tokens "##x" become "x", others "\u2581x", as llama.cpp's
//     converter writes them).
// Normalizer steps beyond shape a.'s Prepend / Replace are written as
// tokenizer.ggml.kvasir.normalizer (vocab.h). Hugging Face normalizes each text run between added
// tokens not marked "normalized", and matches "normalized" added tokens in the normalized text;
// Kvasir does the same (tokenizer.ggml.kvasir.special_normalized when the tokens are
// "normalized"). A mix of both kinds under a normalizer, and a "normalized" token the normalizer
// would change, are refused.
#pragma once

#include <string>

#include "kvasir/tokenizer/vocab.h"

namespace kvasir {

Metadata hf_tokenizer_metadata(const std::string& folder);

}  // namespace kvasir
