#include "kvasir/engine/model_runner.h"

#include <algorithm>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {

const ModelRunnerOptions& validated(const ModelRunnerOptions& o) {
  if (o.kv_blocks <= 0) fail("model runner: kv_blocks must be positive, got {}", o.kv_blocks);
  if (o.block_size <= 0) fail("model runner: block_size must be positive, got {}", o.block_size);
  if (o.max_tokens <= 0) fail("model runner: max_tokens must be positive, got {}", o.max_tokens);
  if (o.max_logit_rows <= 0)
    fail("model runner: max_logit_rows must be positive, got {}", o.max_logit_rows);
  if (o.max_hidden_rows < 0)
    fail("model runner: max_hidden_rows must not be negative, got {}", o.max_hidden_rows);
  if (o.static_padding && (o.max_seqs <= 0 || o.max_positions <= 0))
    fail("model runner: static padding needs max_seqs and max_positions (got {} and {})",
         o.max_seqs, o.max_positions);
  return o;
}

int64_t padding_rows(const ModelRunnerOptions& o) {
  return o.static_padding ? o.max_seqs : 0;
}

int64_t logit_rows_of(const SeqWork& w) {
  switch (w.logits) {
    case Logits::kAll:
      return static_cast<int64_t>(w.tokens.size());
    case Logits::kLast:
      return 1;
    case Logits::kNone:
      return 0;
  }
  return 0;
}

std::shared_ptr<const KeyTransform> key_transform_of(const ModelRunnerOptions& o) {
  if (key_transform_kind(o.kv_type.k) == KeyTransformKind::kNone) return nullptr;
  return o.key_transform;
}

}  // namespace

ModelRunner::ModelRunner(const Model& model, ThreadPool& pool, const ModelRunnerOptions& options)
    : model_(model),
      opt_(validated(options)),
      backend_(make_backend(model.backend_kind(), pool)),
      // Static padding writes one block of its own, after the caller's.
      kv_(model.kv_shape(opt_.kv_type, opt_.block_size),
          opt_.kv_blocks + (opt_.static_padding ? 1 : 0), *backend_, key_transform_of(opt_)),
      state_(model, *backend_, opt_.max_tokens + padding_rows(opt_), opt_.max_logit_rows,
             opt_.max_hidden_rows) {
  logits_.resize(static_cast<size_t>(opt_.max_logit_rows) * static_cast<size_t>(n_vocab()));
  hidden_.resize(static_cast<size_t>(opt_.max_hidden_rows) *
                 static_cast<size_t>(model.config().dim));
  batch_.hidden_rows.reserve(static_cast<size_t>(opt_.max_hidden_rows));
  const auto cap = static_cast<size_t>(opt_.max_tokens + padding_rows(opt_));
  batch_.tokens.reserve(cap);
  batch_.positions.reserve(cap);
  batch_.seq_index.reserve(cap);
  batch_.slots.reserve(cap);
  batch_.logit_rows.reserve(static_cast<size_t>(opt_.max_logit_rows));
  if (opt_.static_padding) {
    const int n_entries = (opt_.max_positions + opt_.block_size - 1) / opt_.block_size;
    pad_table_.assign(static_cast<size_t>(n_entries), static_cast<int32_t>(opt_.kv_blocks));
    members_.reserve(static_cast<size_t>(opt_.max_seqs));
  }
}

const StepOutput& ModelRunner::run(std::span<const SeqWork> work,
                                   std::span<const uint64_t> finished) {
  const int bs = opt_.block_size;
  out_.first_row.assign(work.size(), -1);
  out_.first_hidden.assign(work.size(), -1);
  out_.samples.resize(work.size());
  out_.n_padding = 0;
  batch_.clear();
  int64_t n_rows = 0;
  int64_t n_hidden = 0;
  for (size_t i = 0; i < work.size(); ++i) {
    const SeqWork& w = work[i];
    const auto n = static_cast<int64_t>(w.tokens.size());
    out_.samples[i].token = -1;
    if (n == 0) fail("model runner: sequence {} has no tokens to compute", w.id);
    if (w.start < 0) fail("model runner: sequence {} starts at position {}", w.id, w.start);
    if (w.blocks == nullptr || static_cast<int64_t>(w.blocks->size()) * bs < int64_t{w.start} + n)
      fail("model runner: sequence {} computes positions {}..{} but its block table covers {}",
           w.id, w.start, w.start + n - 1, w.blocks ? w.blocks->size() * bs : 0);
    if (w.sampler && w.logits == Logits::kNone)
      fail("model runner: sequence {} has a sampler but asks for no logits", w.id);
    if (batch_.n_tokens() + n > opt_.max_tokens)
      fail("model runner: the step has more than {} tokens", opt_.max_tokens);
    const int64_t rows = logit_rows_of(w);
    if (n_rows + rows > opt_.max_logit_rows)
      fail("model runner: the step asks for more than {} rows of logits", opt_.max_logit_rows);
    if (rows > 0) out_.first_row[i] = static_cast<int32_t>(n_rows);
    n_rows += rows;
    const int32_t si = batch_.add_seq(*w.blocks);
    const auto first_token = static_cast<int32_t>(batch_.n_tokens());
    for (int64_t j = 0; j < n; ++j) {
      const bool want = w.logits == Logits::kAll || (w.logits == Logits::kLast && j == n - 1);
      batch_.add_token(w.tokens[static_cast<size_t>(j)], w.start + static_cast<int32_t>(j), si, bs,
                       want);
    }
    if (w.hidden_end != w.hidden_begin) {
      if (w.hidden_begin < 0 || w.hidden_end < w.hidden_begin || w.hidden_end > n)
        fail("model runner: sequence {} asks for the hidden rows of tokens {}..{} of {}", w.id,
             w.hidden_begin, w.hidden_end - 1, n);
      if (n_hidden + (w.hidden_end - w.hidden_begin) > opt_.max_hidden_rows)
        fail("model runner: the step asks for more than {} hidden rows", opt_.max_hidden_rows);
      out_.first_hidden[i] = static_cast<int32_t>(n_hidden);
      n_hidden += w.hidden_end - w.hidden_begin;
      for (int j = w.hidden_begin; j < w.hidden_end; ++j)
        batch_.hidden_rows.push_back(first_token + j);
    }
  }
  if (opt_.static_padding) {
    track_static_batch(work, finished);
    add_padding_rows();
  }
  model_.forward(batch_, kv_, state_, logits_.data(), hidden_.data());

  const auto V = static_cast<size_t>(n_vocab());
  out_.logits = std::span<const float>(logits_.data(), static_cast<size_t>(n_rows) * V);
  out_.hidden = std::span<const float>(
      hidden_.data(), static_cast<size_t>(n_hidden) * static_cast<size_t>(model_.config().dim));
  for (size_t i = 0; i < work.size(); ++i) {
    const SeqWork& w = work[i];
    if (!w.sampler) continue;
    const int64_t last = out_.first_row[i] + logit_rows_of(w) - 1;
    const float* row = logits_.data() + static_cast<size_t>(last) * V;
    SampleResult& sr = out_.samples[i];
    sr.token =
        w.sampler->sample(row, static_cast<int32_t>(V), w.logprobs ? &sr : nullptr, w.allowed);
  }
  return out_;
}

void ModelRunner::track_static_batch(std::span<const SeqWork> work,
                                     std::span<const uint64_t> finished) {
  auto find = [&](uint64_t id) {
    return std::find_if(members_.begin(), members_.end(),
                        [&](const Member& m) { return m.id == id; });
  };
  for (uint64_t id : finished) {
    auto m = find(id);
    if (m != members_.end()) m->finished = true;
  }
  // A sequence the batch has not seen: the scheduler started the next static batch.
  const bool new_batch = std::any_of(
      work.begin(), work.end(), [&](const SeqWork& w) { return find(w.id) == members_.end(); });
  if (new_batch) {
    members_.clear();
    if (static_cast<int64_t>(work.size()) > opt_.max_seqs)
      fail("model runner: a static batch of {} sequences exceeds max_seqs {}", work.size(),
           opt_.max_seqs);
    for (const SeqWork& w : work) members_.push_back({w.id, 0, false});
  }
  for (const SeqWork& w : work) find(w.id)->next_pos = w.start + static_cast<int>(w.tokens.size());
}

void ModelRunner::add_padding_rows() {
  int32_t si = -1;
  for (Member& m : members_) {
    if (!m.finished) continue;
    if (si < 0) si = batch_.add_seq(pad_table_);
    batch_.add_token(0, std::min(m.next_pos, opt_.max_positions - 1), si, opt_.block_size, false);
    ++m.next_pos;
    ++out_.n_padding;
  }
}

}  // namespace kvasir
