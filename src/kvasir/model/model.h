// A loaded llama-family model: configuration and weights, immutable after load, and the forward
// pass over a Batch.
//
// Weights live in one backend's memory and compute layout (kernels/backend.h): every matrix the
// forward pass multiplies by is converted once at load (the CPU backend repacks it into panels);
// norms, biases and the token-embedding table are views into the GGUF mapping where the backend
// reads host memory. A Model holds no per-step state: forward() is const and writes only the
// ForwardState and the KV storage it is given, so several runners (a target and its draft, two
// engines) share one Model.
//
// forward() reads like llama2.c's: embed → for each layer (RMSNorm → Q/K/V → RoPE → write K/V to
// the paged cache → flash attention → output projection → residual → RMSNorm → SwiGLU FFN →
// residual) → final norm → logits for the rows that asked for them (and, for embeddings, the final
// norm's output itself for the rows that asked for it). Logits and hidden rows are a pure function
// of (weights, Batch, KV storage): see batch.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/kernels/backend.h"
#include "kvasir/kv/kv_storage.h"
#include "kvasir/model/batch.h"
#include "kvasir/model/config.h"

namespace kvasir {

class ForwardState;

struct LayerWeights {
  const float* attn_norm = nullptr;
  std::unique_ptr<DeviceMatrix> wq, wk, wv, wo;
  const float* bq = nullptr;  // qwen2 only
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;  // qwen3: RMSNorm weights over each head (head_dim floats)
  const float* k_norm = nullptr;
  const float* ffn_norm = nullptr;
  std::unique_ptr<DeviceMatrix> w_gate, w_up, w_down;
  // The matrices' GGUF names ("blk.N.attn_q.weight", ...), for a MatmulObserver.
  struct Names {
    std::string wq, wk, wv, wo, w_gate, w_up, w_down;
  } names;
};

class Model {
 public:
  struct LoadOptions {
    // Convert the matrices for compute (on a pool of all cores). Off: only the configuration and
    // the checks (e.g. `kvasir plan`), forward() must not be called.
    bool pack = true;
    BackendKind backend = BackendKind::kCpu;
  };
  // Loads `path` (mmap), a GGUF file or a Hugging Face folder (hf/hf_checkpoint.h), and binds
  // every tensor, checking names, shapes and dtypes. Throws kvasir::Error naming the file and
  // tensor.
  static std::unique_ptr<Model> load(const std::string& path);
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& options);
  ~Model();

  const ModelConfig& config() const { return config_; }
  const gguf::GGUFFile& file() const { return *file_; }
  // The backend whose memory and layout the weights are in; a ForwardState must use one of it.
  BackendKind backend_kind() const { return backend_kind_; }
  // The dtype most of the weights use (for reports): the type of blk.0.ffn_down.
  DType weight_type() const { return weight_type_; }
  // The dtype most matrix (2-D and up) weight elements are in: a mixture's main format (reports).
  DType predominant_weight_type() const;
  // Bytes the weights occupy in memory: the file's tensors, plus the backend's copy of the
  // output matrix when it is tied to the token embeddings (the table itself stays in the mapping).
  size_t weight_bytes() const;

  KVShape kv_shape(KVCacheType kv_type = {}, int block_size = 16) const;
  // RoPE's per-pair inverse frequencies as forward() applies them (rope_dim / 2 entries, scaling
  // and the rope_freqs tensor folded in): pair i of a head at position p turns by p * θ_i.
  const std::vector<float>& rope_inv_freqs() const { return inv_freq_host_; }

  // Runs one step. `logits` (host memory) receives batch.logit_rows.size() rows of n_vocab floats;
  // `hidden` (host memory; may be null when the batch asks for no hidden rows) receives
  // batch.hidden_rows.size() rows of dim floats: each such token's residual stream after the
  // last layer, through the final RMSNorm (the output matrix's input; llama.cpp's "result_norm",
  // its embeddings). A token may be in both lists; asking for hidden rows adds work only after the
  // last layer (a gather, a norm, a copy where the backend's memory is not the host's).
  // Throws kvasir::Error, before any work, for a token id outside the vocabulary, a batch larger
  // than the state was sized for, a row that is not a token of the batch, hidden rows without
  // `hidden`, or a state made for another model or backend.
  void forward(const Batch& batch, const KVStorage& kv, ForwardState& state, float* logits,
               float* hidden = nullptr) const;

 private:
  Model() = default;
  void bind_weights(bool pack);

  std::unique_ptr<gguf::GGUFFile> file_;
  ModelConfig config_;
  BackendKind backend_kind_ = BackendKind::kCpu;
  MatrixView tok_embd_;
  std::unique_ptr<DeviceMatrix> output_;
  std::string output_name_;       // "output.weight", or "token_embd.weight" when tied
  size_t tied_output_bytes_ = 0;  // the backend's copy of a tied output matrix
  DType weight_type_ = DType::F32;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_host_;
  const float* inv_freq_ = nullptr;
  std::vector<std::unique_ptr<DeviceBuffer>> vectors_;  // norms, biases, inv_freq_ (backend memory)
};

}  // namespace kvasir
