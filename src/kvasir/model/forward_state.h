// The scratch of a forward pass (as llama2.c's RunState), owned by whoever runs the model: a
// Model is only weights, so each runner (an engine, a draft model's runner, `kvasir run`) keeps
// its own ForwardState and two runners can share one Model.
//
// Every buffer is allocated once, at construction, in the backend's memory, for at most
// max_tokens batch tokens, max_logit_rows rows of logits and max_hidden_rows final hidden rows
// (embeddings; 0: a batch may ask for none): a step never allocates. Row t of a per-token buffer
// belongs to batch token t.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvasir/kernels/backend.h"

namespace kvasir {

class Model;
class MatmulObserver;

class ForwardState {
 public:
  // Throws kvasir::Error if `backend` is not the kind the model's weights are in, or for sizes
  // that are not positive (max_hidden_rows: negative).
  ForwardState(const Model& model, Backend& backend, int64_t max_tokens, int64_t max_logit_rows,
               int64_t max_hidden_rows = 0);
  ForwardState(const ForwardState&) = delete;
  ForwardState& operator=(const ForwardState&) = delete;

  const Model& model() const { return model_; }
  Backend& backend() const { return backend_; }
  BackendScratch& scratch() const { return *scratch_; }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t max_logit_rows() const { return max_logit_rows_; }
  int64_t max_hidden_rows() const { return max_hidden_rows_; }
  // Bytes of the named buffers.
  size_t bytes() const;

  float* x;       // max_tokens x dim: the residual stream
  float* h;       // max_tokens x dim: a block's normed input, then its output
  float* q;       // max_tokens x q_dim: queries (RoPE applied in place)
  float* k;       // max_tokens x kv_dim: keys of the batch's tokens
  float* v;       // max_tokens x kv_dim: values of the batch's tokens
  float* att;     // max_tokens x q_dim: attention output
  float* gate;    // max_tokens x ffn_dim: FFN gate projection, then silu(gate) * up
  float* up;      // max_tokens x ffn_dim: FFN up projection
  float* hl;      // max_logit_rows x dim: final hidden rows of the tokens that want logits
  float* logits;  // max_logit_rows x n_vocab; only where the backend's memory is not the host's
                  // (null otherwise: the CPU writes logits straight to the caller's rows)
  float* hidden;  // max_hidden_rows x dim: final-norm hidden rows, likewise only where the
                  // backend's memory is not the host's (and max_hidden_rows > 0)

  // When set, forward() shows it every weight matmul's input (model/matmul_observer.h).
  MatmulObserver* matmul_observer = nullptr;

 private:
  float* buffer(int64_t rows, int64_t width, const char* what);

  const Model& model_;
  Backend& backend_;
  int64_t max_tokens_;
  int64_t max_logit_rows_;
  int64_t max_hidden_rows_;
  std::unique_ptr<BackendScratch> scratch_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
};

}  // namespace kvasir
