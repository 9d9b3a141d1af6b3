#include "kvasir/engine/draft_proposer.h"

#include <algorithm>

#include "kvasir/spec/rejection_sampler.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir {

namespace {

ModelRunnerOptions runner_options(const DraftProposerOptions& o) {
  if (o.k_max < 1) fail("draft proposer: k_max must be at least 1, got {}", o.k_max);
  if (o.max_seqs < 1) fail("draft proposer: max_seqs must be at least 1, got {}", o.max_seqs);
  ModelRunnerOptions r;
  r.kv_blocks = o.kv_blocks;
  r.block_size = o.block_size;
  r.kv_type = o.kv_type;
  r.max_tokens = std::max(o.max_tokens, o.max_seqs);
  r.max_logit_rows = o.max_seqs;
  return r;
}

// The draft's seed for a request: a fixed mix of the target's, so a seeded request replays, and
// the draft's draws are a different stream from the target's (whose uniforms decide acceptance).
uint64_t draft_seed(uint64_t target_seed) {
  uint64_t z = target_seed + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

DraftProposer::DraftProposer(const Model& draft, ThreadPool& pool,
                             const DraftProposerOptions& options)
    : opt_(options),
      kv_(static_cast<int32_t>(options.kv_blocks), options.block_size, /*prefix_caching=*/false),
      runner_(draft, pool, runner_options(options)) {
  active_.reserve(static_cast<size_t>(opt_.max_seqs));
  work_.reserve(static_cast<size_t>(opt_.max_seqs));
  work_owner_.reserve(static_cast<size_t>(opt_.max_seqs));
  feed_.reserve(static_cast<size_t>(opt_.max_seqs));
}

void DraftProposer::commit(Seq& s, std::span<const int32_t> tokens) {
  if (!s.proposed) return;
  s.proposed = false;
  // Draft K/V exist for the proposal's first k - 1 tokens; those the sequence kept stay valid.
  const int fed = static_cast<int>(s.drafted.size()) - 1;
  int m = 0;
  while (m < fed && s.base + m < static_cast<int>(tokens.size()) &&
         tokens[static_cast<size_t>(s.base + m)] == s.drafted[static_cast<size_t>(m)])
    ++m;
  s.n_computed = std::min(s.n_computed, s.base + m);
  kv_.truncate(s.kv, s.n_computed);
}

void DraftProposer::accepted(uint64_t id, std::span<const int32_t> tokens) {
  auto it = seqs_.find(id);
  if (it != seqs_.end()) commit(it->second, tokens);
}

void DraftProposer::release(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  kv_.free(it->second.kv);
  seqs_.erase(it);
}

void DraftProposer::draw(Active& a, const float* row) {
  Seq& s = *a.seq;
  Sampler& sm = *s.sampler;
  const int j = static_cast<int>(s.drafted.size());
  const int32_t V = sm.n_vocab();
  int32_t t;
  if (a.q == nullptr) {
    t = sm.sample(row, V);  // greedy: the draft's argmax after bias and penalties
  } else {
    float* q = a.q + static_cast<size_t>(j) * static_cast<size_t>(V);
    sm.probabilities(row, V, q);
    double total = 0;
    for (int32_t i = 0; i < V; ++i) total += q[i];
    t = draw_from_weights(q, V, total, sm.rng().uniform());
    if (t < 0) t = sm.sample(row, V);  // no mass at all (every logit -inf): as sample() does
  }
  sm.accept(t);
  s.drafted.push_back(t);
  a.slot->draft->push_back(t);
}

void DraftProposer::propose(std::span<ProposalSlot> slots) {
  const double t0 = now_seconds();
  if (static_cast<int>(slots.size()) > opt_.max_seqs)
    fail("draft proposer: {} slots, at most {}", slots.size(), opt_.max_seqs);
  const int32_t V = runner_.n_vocab();
  // q rows for sampled slots.
  size_t n_q = 0;
  for (const ProposalSlot& sl : slots)
    if (sl.sampler != nullptr && !sl.sampler->params().is_greedy())
      n_q += static_cast<size_t>(std::min(sl.k, opt_.k_max));
  if (q_.size() < n_q * static_cast<size_t>(V)) q_.resize(n_q * static_cast<size_t>(V));
  size_t q_used = 0;

  active_.clear();
  for (ProposalSlot& sl : slots) {
    sl.draft->clear();
    sl.q = nullptr;
    const int len = static_cast<int>(sl.tokens.size());
    const int k = std::min(sl.k, opt_.k_max);
    if (k <= 0 || len == 0 || sl.sampler == nullptr) continue;
    Seq& s = seqs_[sl.id];
    commit(s, sl.tokens);
    if (s.n_computed >= len) {  // cannot happen for a growing sequence; start over if it does
      kv_.free(s.kv);
      s.n_computed = 0;
    }
    if (!s.sampler) {
      SamplingParams p = sl.sampler->params();
      p.seed = draft_seed(sl.sampler->seed());
      p.logprobs = false;
      p.top_logprobs = 0;
      s.sampler = std::make_unique<Sampler>(p, V);
    }
    s.sampler->copy_history_from(*sl.sampler);
    // K/V for the sequence's tokens and the first k - 1 draft tokens.
    if (!kv_.allocate_slots(s.kv, len + k - 1)) continue;
    s.base = len;
    s.drafted.clear();
    s.proposed = true;
    float* q = nullptr;
    if (!sl.sampler->params().is_greedy()) {
      q = q_.data() + q_used * static_cast<size_t>(V);
      q_used += static_cast<size_t>(k);
      sl.q = q;
    }
    active_.push_back({&sl, &s, k, s.n_computed, q});
  }

  // Catch-up: each draft cache reaches the sequence's last token; its logits give draft token 0.
  for (;;) {
    work_.clear();
    work_owner_.clear();
    int budget = runner_.options().max_tokens;
    for (size_t i = 0; i < active_.size() && budget > 0; ++i) {
      Active& a = active_[i];
      const int len = static_cast<int>(a.slot->tokens.size());
      if (a.next >= len) continue;
      const int n = std::min(len - a.next, budget);
      SeqWork w;
      w.id = a.slot->id;
      w.tokens = a.slot->tokens.subspan(static_cast<size_t>(a.next), static_cast<size_t>(n));
      w.start = a.next;
      w.blocks = &a.seq->kv.blocks;
      w.logits = a.next + n == len ? Logits::kLast : Logits::kNone;
      work_.push_back(w);
      work_owner_.push_back(i);
      budget -= n;
    }
    if (work_.empty()) break;
    const StepOutput& out = runner_.run(work_);
    for (size_t w = 0; w < work_.size(); ++w) {
      Active& a = active_[work_owner_[w]];
      a.next += static_cast<int>(work_[w].tokens.size());
      if (out.first_row[w] >= 0)
        draw(a, out.logits.data() + static_cast<size_t>(out.first_row[w]) * static_cast<size_t>(V));
    }
  }
  // Decode steps: draft token j from the draft's pass over token j - 1.
  for (int j = 1; j < opt_.k_max; ++j) {
    work_.clear();
    work_owner_.clear();
    feed_.clear();
    for (size_t i = 0; i < active_.size(); ++i)
      if (active_[i].k > j) feed_.push_back(active_[i].seq->drafted.back());
    size_t f = 0;
    for (size_t i = 0; i < active_.size(); ++i) {
      Active& a = active_[i];
      if (a.k <= j) continue;
      SeqWork w;
      w.id = a.slot->id;
      w.tokens = std::span<const int32_t>(&feed_[f++], 1);
      w.start = static_cast<int>(a.slot->tokens.size()) - 1 + j;
      w.blocks = &a.seq->kv.blocks;
      w.logits = Logits::kLast;
      work_.push_back(w);
      work_owner_.push_back(i);
    }
    if (work_.empty()) break;
    const StepOutput& out = runner_.run(work_);
    for (size_t w = 0; w < work_.size(); ++w)
      draw(active_[work_owner_[w]],
           out.logits.data() + static_cast<size_t>(out.first_row[w]) * static_cast<size_t>(V));
  }
  for (Active& a : active_) a.seq->n_computed = a.seq->base + a.k - 1;
  busy_seconds_ += now_seconds() - t0;
}

}  // namespace kvasir
