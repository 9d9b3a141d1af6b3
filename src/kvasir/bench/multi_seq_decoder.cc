#include "kvasir/bench/multi_seq_decoder.h"

#include <algorithm>

#include "kvasir/util/error.h"

namespace kvasir::bench {
namespace {

int resolve_ctx(const Model& m, const DecoderOptions& o) {
  if (o.n_seqs < 1) fail("decoder: n_seqs must be >= 1, got {}", o.n_seqs);
  if (o.block_size < 1) fail("decoder: block_size must be >= 1, got {}", o.block_size);
  if (o.max_batch < 1) fail("decoder: max_batch must be >= 1, got {}", o.max_batch);
  const int ctx = o.max_ctx > 0 ? o.max_ctx : m.config().ctx_train;
  if (ctx < 1) fail("decoder: no context length (the model has none; set max_ctx)");
  return ctx;
}

int64_t blocks_per_seq(int64_t ctx, int block_size) {
  return (ctx + block_size - 1) / block_size;
}

ModelRunnerOptions runner_options(int max_ctx, const DecoderOptions& o) {
  ModelRunnerOptions r;
  r.kv_blocks = blocks_per_seq(max_ctx, o.block_size) * o.n_seqs;
  r.block_size = o.block_size;
  r.kv_type = o.kv_type;
  r.key_transform = o.key_transform;
  r.max_tokens = std::max(o.n_seqs, o.max_batch);
  r.max_logit_rows = o.n_seqs;
  return r;
}

}  // namespace

MultiSeqDecoder::MultiSeqDecoder(const Model& model, ThreadPool& pool, const DecoderOptions& opt)
    : opt_(opt),
      max_ctx_(resolve_ctx(model, opt)),
      blocks_(static_cast<int32_t>(blocks_per_seq(max_ctx_, opt.block_size) * opt.n_seqs)),
      runner_(model, pool, runner_options(max_ctx_, opt)),
      seqs_(static_cast<size_t>(opt.n_seqs)) {
  const size_t per_seq = static_cast<size_t>(blocks_per_seq(max_ctx_, opt.block_size));
  for (Seq& s : seqs_) s.table.reserve(per_seq);
  work_.reserve(static_cast<size_t>(opt.n_seqs));
}

MultiSeqDecoder::Seq& MultiSeqDecoder::seq_at(int seq) {
  if (seq < 0 || seq >= n_seqs()) fail("decoder: sequence {} out of range [0, {})", seq, n_seqs());
  return seqs_[static_cast<size_t>(seq)];
}

int MultiSeqDecoder::n_past(int seq) const {
  return const_cast<MultiSeqDecoder*>(this)->seq_at(seq).n_past;
}

const std::vector<int32_t>& MultiSeqDecoder::block_table(int seq) const {
  return const_cast<MultiSeqDecoder*>(this)->seq_at(seq).table;
}

void MultiSeqDecoder::reserve_positions(Seq& s, int n) {
  const int64_t need = blocks_per_seq(n, opt_.block_size);
  const int64_t have = static_cast<int64_t>(s.table.size());
  // Each sequence's share of the pool covers max_ctx_ and callers check n <= max_ctx_, so this
  // only fails if the pool accounting is broken.
  if (need > have && !blocks_.allocate(static_cast<int32_t>(need - have), s.table))
    fail("decoder: KV block pool exhausted");
}

std::span<const float> MultiSeqDecoder::prefill(int seq, std::span<const int32_t> tokens) {
  Seq& s = seq_at(seq);
  if (tokens.empty()) fail("decoder: prefill of sequence {} with no tokens", seq);
  if (s.n_past + static_cast<int64_t>(tokens.size()) > max_ctx_)
    fail("decoder: sequence {} would exceed its context of {} tokens ({} + {})", seq, max_ctx_,
         s.n_past, tokens.size());
  reserve_positions(s, s.n_past + static_cast<int>(tokens.size()));
  std::span<const float> last;
  size_t done = 0;
  while (done < tokens.size()) {
    const size_t len = std::min(tokens.size() - done, static_cast<size_t>(opt_.max_batch));
    SeqWork w;
    w.id = static_cast<uint64_t>(seq);
    w.tokens = tokens.subspan(done, len);
    w.start = s.n_past;
    w.blocks = &s.table;
    w.logits = done + len == tokens.size() ? Logits::kLast : Logits::kNone;
    last = runner_.run(std::span<const SeqWork>(&w, 1)).logits;
    s.n_past += static_cast<int>(len);
    done += len;
  }
  return last;
}

std::span<const float> MultiSeqDecoder::step(std::span<const int32_t> tokens) {
  if (static_cast<int64_t>(tokens.size()) != n_seqs())
    fail("decoder: step needs one token per sequence ({}), got {}", n_seqs(), tokens.size());
  for (int i = 0; i < n_seqs(); ++i) {
    Seq& s = seqs_[static_cast<size_t>(i)];
    if (s.n_past + 1 > max_ctx_)
      fail("decoder: sequence {} would exceed its context of {} tokens", i, max_ctx_);
    reserve_positions(s, s.n_past + 1);
  }
  work_.clear();
  for (int i = 0; i < n_seqs(); ++i) {
    Seq& s = seqs_[static_cast<size_t>(i)];
    SeqWork w;
    w.id = static_cast<uint64_t>(i);
    w.tokens = tokens.subspan(static_cast<size_t>(i), 1);
    w.start = s.n_past;
    w.blocks = &s.table;
    w.logits = Logits::kLast;
    work_.push_back(w);
  }
  const StepOutput& out = runner_.run(work_);
  for (Seq& s : seqs_) ++s.n_past;
  return out.logits;
}

void MultiSeqDecoder::truncate(int seq, int n) {
  Seq& s = seq_at(seq);
  if (n < 0 || n > s.n_past)
    fail("decoder: cannot truncate sequence {} to {} tokens (it has {})", seq, n, s.n_past);
  const size_t keep = static_cast<size_t>(blocks_per_seq(n, opt_.block_size));
  while (s.table.size() > keep) {
    blocks_.release(s.table.back());
    s.table.pop_back();
  }
  s.n_past = n;
}

}  // namespace kvasir::bench
