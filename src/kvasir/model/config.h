// Model hyperparameters read from GGUF metadata, through a table of supported architectures.
//
// Supported: "llama" (Llama 1/2/3, TinyLlama, Mistral — normal RoPE pairing), "mistral" (same
// graph), "qwen2" (NeoX RoPE, bias on Q/K/V), "qwen3" (NeoX RoPE, no biases, an RMSNorm over each
// head of Q and K before RoPE, as llama.cpp's qwen3 graph). Anything else is refused by name. RoPE
// scaling: none, "linear" (positions divided by the factor), llama3 frequency factors (the
// rope_freqs tensor, applied by the weights binder) and the llama3 scaling parameters in metadata.
#pragma once

#include <string>
#include <vector>

namespace kvasir {
namespace gguf {
class GGUFFile;
}

struct ModelConfig {
  std::string arch;  // "llama", "qwen2", ...
  std::string name;  // general.name, if any
  int n_vocab = 0;
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int rope_dim = 0;
  bool rope_neox = false;
  bool qkv_bias = false;
  bool qk_norm = false;
  // RoPE scaling.
  std::string rope_scaling = "none";  // none | linear | llama3
  float rope_scale_factor = 1.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_orig_ctx = 0;
  // `<arch>.pooling_type` (llama.cpp's llama_pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank)
  // for embeddings; -1 when the file has none (every plain llama-architecture GGUF).
  int pooling_type = -1;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and validates the hyperparameters. Throws kvasir::Error naming the file and key. Every
// integer is range-checked before it is narrowed to int (counts and lengths: 1 .. 2^31-1), e.g.
// "m.gguf: llama.context_length = 4294967295 is out of range (1 .. 2^31-1)"; every float (RMS
// epsilon, RoPE base, RoPE scaling factors) must be finite and > 0 as a float, and llama3
// scaling needs high_freq_factor > low_freq_factor.
ModelConfig read_model_config(const gguf::GGUFFile& file);

// Per-dimension-pair inverse frequencies θ_i (rope_dim/2 entries), scaling applied, without the
// optional rope_freqs tensor (which the weights binder folds in afterwards).
std::vector<float> rope_inv_freq(const ModelConfig& c);

}  // namespace kvasir
