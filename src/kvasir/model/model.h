// A loaded llama-family model: configuration, weights and the forward pass over a Batch.
// Norms, biases and the token-embedding table are zero-copy views into the GGUF mapping; every
// matrix the forward pass multiplies by is repacked once at load (cpu::PackedMatrix), the layout
// the matmul kernels stream.
//
// forward() reads like llama2.c's: embed → for each layer (RMSNorm → Q/K/V → RoPE → write K/V to
// the paged cache → flash attention → output projection → residual → RMSNorm → SwiGLU FFN →
// residual) → final norm → logits for the rows that asked for them. Scratch buffers are sized
// once for `max_batch_tokens` and reused: the step does not allocate.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvasir/format/gguf.h"
#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/kv/kv_storage.h"
#include "kvasir/model/batch.h"
#include "kvasir/model/config.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {

struct LayerWeights {
  const float* attn_norm = nullptr;
  cpu::PackedMatrix wq, wk, wv, wo;
  const float* bq = nullptr;  // qwen2 only
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* ffn_norm = nullptr;
  cpu::PackedMatrix w_gate, w_up, w_down;
};

class Model {
 public:
  struct LoadOptions {
    // Repack the matrices for compute (on a pool of all cores). Off: only the configuration and
    // the checks (e.g. `kvasir plan`), forward() must not be called.
    bool pack = true;
  };
  // Loads `path` (mmap) and binds every tensor, checking names, shapes and dtypes. Throws
  // kvasir::Error naming the file and tensor.
  static std::unique_ptr<Model> load(const std::string& path);
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const gguf::GGUFFile& file() const { return *file_; }
  // The dtype most of the weights use (for reports): the type of blk.0.ffn_down.
  DType weight_type() const { return weight_type_; }
  // Bytes the weights occupy in memory: the file's tensors, plus a packed copy of the output
  // matrix when it is tied to the token embeddings (the table itself stays in the mapping).
  size_t weight_bytes() const;

  KVShape kv_shape(DType kv_type = DType::F16, int block_size = 16) const;

  // Runs one step. `logits` receives batch.logit_rows.size() rows of n_vocab floats.
  // max batch size grows the scratch on first use (outside the steady state).
  void forward(const Batch& batch, const KVStorage& kv, float* logits, ThreadPool& pool);

 private:
  Model() = default;
  void bind_weights(bool pack);
  void ensure_scratch(int64_t n_tokens, int64_t n_logits);
  void project(const float* in, int64_t n, int64_t cols, std::span<const cpu::MatmulOutput> outs,
               ThreadPool& pool);

  std::unique_ptr<gguf::GGUFFile> file_;
  ModelConfig config_;
  cpu::Matrix tok_embd_;
  cpu::PackedMatrix output_;
  bool tied_output_ = false;
  DType weight_type_ = DType::F32;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;

  // Scratch, sized for the largest batch seen so far.
  int64_t cap_tokens_ = 0;
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_, hl_;
  cpu::Activations act_;
};

}  // namespace kvasir
