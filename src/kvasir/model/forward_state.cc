#include "kvasir/model/forward_state.h"

#include "kvasir/model/model.h"
#include "kvasir/util/error.h"

namespace kvasir {

ForwardState::ForwardState(const Model& model, Backend& backend, int64_t max_tokens,
                           int64_t max_logit_rows, int64_t max_hidden_rows)
    : model_(model),
      backend_(backend),
      max_tokens_(max_tokens),
      max_logit_rows_(max_logit_rows),
      max_hidden_rows_(max_hidden_rows) {
  if (backend.kind() != model.backend_kind())
    fail("forward state: the model's weights are in {} memory, not {}",
         backend_kind_name(model.backend_kind()), backend_kind_name(backend.kind()));
  if (max_tokens <= 0 || max_logit_rows <= 0)
    fail("forward state: sizes must be positive (max_tokens {}, max_logit_rows {})", max_tokens,
         max_logit_rows);
  if (max_hidden_rows < 0)
    fail("forward state: max_hidden_rows must not be negative, got {}", max_hidden_rows);
  const ModelConfig& c = model.config();
  x = buffer(max_tokens, c.dim, "the residual stream");
  h = buffer(max_tokens, c.dim, "the block inputs");
  q = buffer(max_tokens, c.q_dim(), "the queries");
  k = buffer(max_tokens, c.kv_dim(), "the keys");
  v = buffer(max_tokens, c.kv_dim(), "the values");
  att = buffer(max_tokens, c.q_dim(), "the attention output");
  gate = buffer(max_tokens, c.ffn_dim, "the FFN gate");
  up = buffer(max_tokens, c.ffn_dim, "the FFN up projection");
  hl = buffer(max_logit_rows, c.dim, "the output rows");
  logits = backend.shares_host_memory() ? nullptr : buffer(max_logit_rows, c.n_vocab, "logits");
  hidden = backend.shares_host_memory() || max_hidden_rows == 0
               ? nullptr
               : buffer(max_hidden_rows, c.dim, "the hidden rows");
  scratch_ = backend.new_scratch();
}

float* ForwardState::buffer(int64_t rows, int64_t width, const char* what) {
  buffers_.push_back(
      backend_.alloc(static_cast<size_t>(rows) * static_cast<size_t>(width) * sizeof(float), what));
  return buffers_.back()->f32();
}

size_t ForwardState::bytes() const {
  size_t total = 0;
  for (const auto& b : buffers_) total += b->bytes();
  return total;
}

}  // namespace kvasir
