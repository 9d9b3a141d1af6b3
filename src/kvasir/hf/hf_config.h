// config.json (and generation_config.json) of a Hugging Face model folder, read into the GGUF
// metadata llama.cpp's convert_hf_to_gguf.py writes for it, plus what the tensor mapping needs.
//
// Supported architectures ("architectures"[0]): LlamaForCausalLM and MistralForCausalLM (GGUF
// arch "llama"), Qwen2ForCausalLM ("qwen2"), Qwen3ForCausalLM ("qwen3", with its per-head Q/K
// RMSNorm). Any other is refused by name, and so is any field
// whose value the model code cannot honour (never ignored): hidden_act other than silu,
// attention_bias on llama or qwen3, mlp_bias, a sliding window that is in use, rope_scaling types
// other than linear and llama3 (yarn, dynamic, longrope: refused by name), a quantization_config
// (AWQ, GPTQ, FP8 layouts: refused naming their quant_method). Errors read
// "<folder>/config.json: field 'num_attention_heads' = -1: expected an integer >= 1".
//
// Keys written (prefix = the GGUF arch): general.architecture, general.name (the folder's
// name), <arch>.context_length (max_position_embeddings), .embedding_length, .block_count,
// .feed_forward_length, .attention.head_count, .attention.head_count_kv,
// .attention.layer_norm_rms_epsilon, .rope.freq_base, .rope.dimension_count, .vocab_size,
// .attention.key_length/.value_length when head_dim is not hidden_size / heads, and for linear
// RoPE scaling .rope.scaling.type/.factor. Llama-3 RoPE scaling becomes a rope_freqs.weight
// tensor, computed as llama.cpp's converter computes it (rope_freqs below). From
// generation_config.json (generation_config.h): the general.sampling.* keys, every eos_token_id
// as tokenizer.ggml.kvasir.eog_token_ids, and the first one as eos_id.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvasir/format/gguf.h"

namespace kvasir::hf {

struct HfConfig {
  std::string hf_arch;    // "LlamaForCausalLM", ...
  std::string gguf_arch;  // "llama" | "qwen2"
  int hidden = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, ffn = 0, vocab = 0;
  int head_dim = 0;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  bool qk_norm = false;  // Qwen3: self_attn.q_norm / k_norm over each head
  // Llama stores Q and K rows for rotate-half RoPE; llama.cpp's llama graph pairs adjacent
  // dimensions, so its converter permutes them back (hf_checkpoint.cc). Qwen2 runs NeoX RoPE on
  // the rows as stored.
  bool permute_qk = false;
  std::vector<float> rope_freqs;  // llama3 scaling: the rope_freqs.weight tensor (head_dim / 2)
  std::optional<int> eos_id;      // generation_config.json: its first eos_token_id
  std::vector<std::pair<std::string, gguf::Value>> metadata;
};

// Reads folder/config.json (required) and folder/generation_config.json (optional).
HfConfig read_hf_config(const std::string& folder);

}  // namespace kvasir::hf
