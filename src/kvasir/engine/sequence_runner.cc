#include "kvasir/engine/sequence_runner.h"

#include <algorithm>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {
int resolve_ctx(const Model& m, int max_ctx) {
  int c = max_ctx > 0 ? max_ctx : m.config().ctx_train;
  return std::max(c, 1);
}
int64_t blocks_for(int ctx, int block_size) { return (ctx + block_size - 1) / block_size; }
}  // namespace

SequenceRunner::SequenceRunner(Model& model, ThreadPool& pool, const SequenceRunnerOptions& opt)
    : model_(model),
      threads_(pool),
      opt_(opt),
      max_ctx_(resolve_ctx(model, opt.max_ctx)),
      kv_(model.kv_shape(opt.kv_type, opt.block_size), blocks_for(max_ctx_, opt.block_size)),
      blocks_(static_cast<int32_t>(blocks_for(max_ctx_, opt.block_size))) {
  if (opt_.max_batch <= 0) fail("max batch must be positive, got {}", opt_.max_batch);
}

void SequenceRunner::reset() {
  blocks_.release_all(table_);
  n_past_ = 0;
}

std::span<const float> SequenceRunner::feed(std::span<const int32_t> tokens, bool all_logits) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) fail("feed: no tokens");
  if (n_past_ + n > max_ctx_)
    fail("context overflow: {} tokens already in the sequence + {} new > context size {}",
         n_past_, n, max_ctx_);
  const int64_t V = n_vocab();
  logits_.resize(static_cast<size_t>((all_logits ? n : 1) * V));
  const int bs = opt_.block_size;
  for (int start = 0; start < n; start += opt_.max_batch) {
    const int len = std::min(opt_.max_batch, n - start);
    const int need_blocks = (n_past_ + len + bs - 1) / bs - static_cast<int>(table_.size());
    if (need_blocks > 0 && !blocks_.allocate(need_blocks, table_))
      fail("KV cache exhausted");  // cannot happen: the pool holds max_ctx tokens
    batch_.clear();
    int32_t s = batch_.add_seq(table_);
    for (int i = 0; i < len; ++i) {
      bool last = start + i == n - 1;
      batch_.add_token(tokens[static_cast<size_t>(start + i)], n_past_ + i, s, bs,
                       all_logits || last);
    }
    float* out = all_logits ? &logits_[static_cast<size_t>(start) * V] : logits_.data();
    model_.forward(batch_, kv_, out, threads_);
    n_past_ += len;
  }
  return logits_;
}

}  // namespace kvasir
