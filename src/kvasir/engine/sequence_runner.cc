#include "kvasir/engine/sequence_runner.h"

#include <algorithm>
#include <cstring>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {
int resolve_ctx(const Model& m, int max_ctx) {
  int c = max_ctx > 0 ? max_ctx : m.config().ctx_train;
  return std::max(c, 1);
}
int64_t blocks_for(int ctx, int block_size) {
  return (ctx + block_size - 1) / block_size;
}

ModelRunnerOptions runner_options(const SequenceRunnerOptions& o, int max_ctx) {
  if (o.max_batch <= 0) fail("max batch must be positive, got {}", o.max_batch);
  if (o.block_size <= 0) fail("block size must be positive, got {}", o.block_size);
  ModelRunnerOptions r;
  r.kv_blocks = blocks_for(max_ctx, o.block_size);
  r.block_size = o.block_size;
  r.kv_type = o.kv_type;
  r.max_tokens = o.max_batch;
  r.max_logit_rows = o.all_logits ? o.max_batch : 1;
  r.key_transform = o.key_transform;
  return r;
}
}  // namespace

SequenceRunner::SequenceRunner(const Model& model, ThreadPool& pool,
                               const SequenceRunnerOptions& opt)
    : opt_(opt),
      max_ctx_(resolve_ctx(model, opt.max_ctx)),
      blocks_(static_cast<int32_t>(blocks_for(max_ctx_, opt.block_size > 0 ? opt.block_size : 1))),
      runner_(model, pool, runner_options(opt, max_ctx_)) {}

void SequenceRunner::reset() {
  blocks_.release_all(table_);
  n_past_ = 0;
}

std::span<const float> SequenceRunner::feed(std::span<const int32_t> tokens, bool all_logits) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) fail("feed: no tokens");
  if (all_logits && !opt_.all_logits)
    fail("feed: every token's logits were asked for, but the runner was made without all_logits");
  if (n_past_ + n > max_ctx_)
    fail("context overflow: {} tokens already in the sequence + {} new > context size {}", n_past_,
         n, max_ctx_);
  const size_t V = static_cast<size_t>(n_vocab());
  const int bs = opt_.block_size;
  const bool one_chunk = n <= opt_.max_batch;
  if (all_logits && !one_chunk) logits_.resize(static_cast<size_t>(n) * V);
  std::span<const float> result;
  for (int start = 0; start < n; start += opt_.max_batch) {
    const int len = std::min(opt_.max_batch, n - start);
    const int need_blocks = (n_past_ + len + bs - 1) / bs - static_cast<int>(table_.size());
    if (need_blocks > 0 && !blocks_.allocate(need_blocks, table_))
      fail("KV cache exhausted");  // cannot happen: the pool holds max_ctx tokens
    SeqWork w;
    w.tokens = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(len));
    w.start = n_past_;
    w.blocks = &table_;
    const bool last = start + len == n;
    w.logits = all_logits ? Logits::kAll : last ? Logits::kLast : Logits::kNone;
    const StepOutput& out = runner_.run(std::span<const SeqWork>(&w, 1));
    n_past_ += len;
    if (all_logits && !one_chunk) {
      std::memcpy(&logits_[static_cast<size_t>(start) * V], out.logits.data(),
                  out.logits.size_bytes());
    } else if (last) {
      result = out.logits;
    }
  }
  return all_logits && !one_chunk ? std::span<const float>(logits_) : result;
}

}  // namespace kvasir
