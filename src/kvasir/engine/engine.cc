// Engine implementation: the step loop (schedule → run the model → update from its output).
#include "kvasir/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "kvasir/engine/draft_proposer.h"
#include "kvasir/engine/model_runner.h"
#include "kvasir/engine/pooling.h"
#include "kvasir/engine/prompt_scorer.h"
#include "kvasir/engine/scheduler.h"
#include "kvasir/engine/sequence.h"
#include "kvasir/grammar/grammar.h"
#include "kvasir/grammar/token_matcher.h"
#include "kvasir/model/model.h"
#include "kvasir/spec/acceptance_monitor.h"
#include "kvasir/spec/k_controller.h"
#include "kvasir/spec/ngram_proposer.h"
#include "kvasir/spec/rejection_sampler.h"
#include "kvasir/spec/vocab_match.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "kvasir/util/log.h"
#include "kvasir/util/thread_pool.h"
#include "kvasir/util/timer.h"

namespace kvasir {

namespace {

// The KV pressure warning (update_stats): logged when usage crosses cfg.kv_warn_ratio, repeated
// at most once per kKvWarnIntervalS while usage stays above it, and followed by one info line
// when usage falls back below kKvWarnHysteresis * kv_warn_ratio. Under load usage swings across
// the threshold many times a second as sequences finish and new ones start, so crossings within
// the interval of the last warning are counted and reported with the next one, not logged each.
constexpr double kKvWarnIntervalS = 30.0;
constexpr double kKvWarnHysteresis = 0.9;

// Compiled grammars kept for reuse (with their token-mask caches) by requests with the same text,
// and the memory each one's mask cache may hold (a mask is n_vocab / 8 bytes: 2048 masks at a 32k
// vocabulary, 512 at 128k). With each grammar's matching memo (at most 32 MiB, token_matcher.h),
// the cached grammars hold at most 8 x 40 MiB however hostile the grammars; typical JSON schemas
// need a few hundred masks.
constexpr size_t kGrammarCacheEntries = 8;
constexpr size_t kMaskCacheBytes = size_t{8} << 20;

// The vocabulary as constrained decoding sees it: each token's bytes as the detokenizer gives
// them. Unknown tokens (and tokens with no bytes) are never admitted inside a grammar; control
// tokens neither, unless the request renders them (render_special: tool-call markers such as
// [TOOL_CALLS] are control tokens, and the model should write the token, not spell its text);
// end-of-generation tokens are admitted where the grammar is complete.
std::shared_ptr<const grammar::GrammarVocab> grammar_vocab_of(const Tokenizer& tok,
                                                              bool render_special) {
  const int32_t n = tok.n_vocab();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<bool> never(static_cast<size_t>(n));
  const uint32_t excluded =
      token_attr::kUnknown | (render_special ? 0u : uint32_t{token_attr::kControl});
  for (int32_t t = 0; t < n; ++t) {
    pieces[static_cast<size_t>(t)] = tok.token_to_piece(t, render_special);
    never[static_cast<size_t>(t)] =
        (tok.token_attr(t) & excluded) != 0 || pieces[static_cast<size_t>(t)].empty();
  }
  return std::make_shared<const grammar::GrammarVocab>(std::move(pieces), std::move(never),
                                                       tok.eog_ids());
}

}  // namespace

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kDraft:
      return "draft";
    case SpecMethod::kNgram:
      return "ngram";
    default:
      return "none";
  }
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    default:
      return "none";
  }
}

struct Engine::Impl {
  const Model& model;
  const Tokenizer& tok;
  EngineConfig cfg;
  int max_len;
  ThreadPool pool;
  KVCacheManager kv;
  Scheduler sched;
  ModelRunner runner;

  std::thread thread;
  mutable std::mutex mu;
  std::condition_variable cv;       // wakes the loop
  std::condition_variable idle_cv;  // wakes wait_idle()
  bool stop = false;
  uint64_t next_id = 1;
  std::vector<std::unique_ptr<Sequence>> incoming;
  std::vector<uint64_t> aborts;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> live;  // engine thread only
  bool busy = false;
  EngineStats stats;  // guarded by mu
  std::function<void(const EngineStats&)> observer;
  // KV pressure warning state (engine thread only; see kKvWarnIntervalS).
  bool kv_pressure = false;            // above kv_warn_ratio and not yet back below the hysteresis
  bool kv_pressure_logged = false;     // a warning was logged during the current pressure episode
  double kv_last_warn = 0;             // now_seconds() of the last warning (0: never)
  uint64_t kv_unlogged_crossings = 0;  // crossings since the last warning that were not logged

  // Per-step scratch (reused: no allocation in steady state once sized).
  std::vector<ScheduledSeq> scheduled;
  std::vector<Sequence*> preempted;
  std::vector<SeqWork> work;
  std::vector<uint64_t> finished_ids;  // finished since the last step (the runner's padding)
  std::vector<uint64_t> done;          // finished in this step's update
  std::vector<FinishReason> reasons;   // per scheduled sequence: how this step ended it

  // Constrained decoding: the vocabulary trie (built on the first constrained request) and the
  // most recently used compiled grammars, most recent first (both guarded by grammar_mu).
  std::mutex grammar_mu;
  std::shared_ptr<const grammar::GrammarVocab> grammar_vocab[2];  // [render_special]
  struct CachedGrammar {
    std::string text;
    bool render_special;
    std::shared_ptr<grammar::ConstrainedGrammar> grammar;
  };
  std::list<CachedGrammar> grammars;
  // This step's mask work (engine thread), counted into stats under the step's one lock.
  uint64_t step_masks_computed = 0, step_mask_hits = 0;
  double step_grammar_seconds = 0;

  // Speculative decoding (proposer null: off).
  std::shared_ptr<Proposer> proposer;
  AcceptanceMonitor monitor;
  KController kctl;
  int spec_k = 0;                    // K of the last proposing step
  std::vector<ProposalSlot> slots;   // this step's proposals
  std::vector<Sequence*> spec_seqs;  // their sequences
  std::vector<float> p_scratch;
  SampleResult spec_sample;

  Impl(const Model& m, const Tokenizer& t, const EngineConfig& c, int max_len_, int64_t n_blocks)
      : model(m),
        tok(t),
        cfg(c),
        max_len(max_len_),
        pool(c.threads),
        kv(static_cast<int32_t>(n_blocks), c.block_size, c.prefix_caching),
        sched(SchedulerConfig{c.max_seqs, c.max_batched_tokens, c.static_batching, 0.01,
                              score_rows_per_step(m.config().n_vocab, c.max_batched_tokens)},
              kv),
        runner(m, pool, runner_options(c, max_len_, n_blocks, m.config().n_vocab)),
        monitor(AcceptanceMonitorConfig{c.spec.warn_acceptance, c.spec.window, c.spec.reprobe_steps,
                                        c.spec.probe}),
        kctl(std::min(4, spec_k_max(c.spec)), spec_k_max(c.spec)) {
    const SpecConfig& sc = c.spec;
    if (sc.proposer) {
      proposer = sc.proposer;
    } else if (sc.method == SpecMethod::kNgram) {
      proposer = std::make_shared<NgramProposer>(sc.ngram_min, sc.ngram_max);
    } else if (sc.method == SpecMethod::kDraft) {
      DraftProposerOptions o;
      o.kv_blocks = sc.draft_kv_blocks > 0 ? sc.draft_kv_blocks : n_blocks;
      o.block_size = c.block_size;
      o.kv_type = c.kv_type;
      o.max_tokens = c.max_batched_tokens;
      o.max_seqs = c.max_seqs;
      o.k_max = spec_k_max(c.spec);
      proposer = std::make_shared<DraftProposer>(*sc.draft, pool, o);
    }
  }

  static int spec_k_max(const SpecConfig& sc) { return std::max(1, sc.k > 0 ? sc.k : sc.k_max); }

  static ModelRunnerOptions runner_options(const EngineConfig& c, int max_len, int64_t n_blocks,
                                           int n_vocab) {
    ModelRunnerOptions o;
    o.kv_blocks = n_blocks;
    o.block_size = c.block_size;
    o.kv_type = c.kv_type;
    o.key_transform = c.key_transform;
    o.max_tokens = c.max_batched_tokens;
    o.max_logit_rows = c.max_seqs;  // one row per scheduled sequence ...
    // ... or, verifying, one per computed token of a speculating sequence (at most every token).
    if (c.spec.enabled())
      o.max_logit_rows = static_cast<int>(
          std::min<int64_t>(c.max_batched_tokens, int64_t{c.max_seqs} * (spec_k_max(c.spec) + 1)));
    o.max_logit_rows = std::max(o.max_logit_rows, c.max_seqs);
    // Prompt scoring: a row per token of the scoring sequences, which the scheduler caps at
    // score_rows_per_step() a step (prompt_scorer.h), on top of the other sequences' rows (at
    // most the bound above: scoring sequences only take slots from them).
    o.max_logit_rows += score_rows_per_step(n_vocab, c.max_batched_tokens);
    o.max_hidden_rows = c.max_batched_tokens;  // embeddings: at most every token of a step
    o.static_padding = c.static_batching && c.static_padding;
    o.max_seqs = c.max_seqs;
    o.max_positions = max_len;
    return o;
  }

  void loop();
  void step();
  double step_forward_seconds = 0;  // this loop iteration's time in runner.run
  void propose();
  void update_from_output(const StepOutput& out);
  // Verifies a speculating sequence's proposal against its logits rows, appending the tokens it
  // keeps. Returns how the sequence ended (kNone: it goes on).
  // `appended`, `judged_total` and `accepted_total` are added to (the step's update counts them
  // into the stats under its one lock).
  FinishReason verify(Sequence* s, const float* rows, double now, uint64_t& appended,
                      uint64_t& judged_total, uint64_t& accepted_total);
  void finish(Sequence* s, FinishReason r, const std::string& error = {});
  // The compiled grammar for `text` over the vocabulary as a request that does (not) render
  // control tokens sees it (from the cache, or parsed now: throws kvasir::Error).
  std::shared_ptr<grammar::ConstrainedGrammar> compiled_grammar(const std::string& text,
                                                                bool render_special);
  // The allowed-token mask of a constrained sequence about to sample (engine thread).
  const uint64_t* grammar_mask(Sequence* s);
  void emit(Sequence* s);
  // Appends a chosen token (penalty history, stop strings, limits); returns how the sequence
  // ended, kNone if it goes on. Emits nothing: the step's update does, once per sequence.
  FinishReason append_token(Sequence* s, const SampleResult& sr, double now);
  void update_stats();
};

Engine::Engine(const Model& model, const Tokenizer& tokenizer, const EngineConfig& config) {
  const ModelConfig& mc = model.config();
  if (config.block_size <= 0) fail("engine: block size must be positive");
  if (config.max_seqs <= 0) fail("engine: max_seqs must be positive, got {}", config.max_seqs);
  if (config.max_batched_tokens <= 0)
    fail("engine: max_batched_tokens must be positive, got {}", config.max_batched_tokens);
  const int max_len = config.max_model_len > 0 ? config.max_model_len : mc.ctx_train;
  const int64_t blocks_per_seq = (max_len + config.block_size - 1) / config.block_size;
  int64_t n_blocks = config.kv_blocks > 0 ? config.kv_blocks : blocks_per_seq * config.max_seqs;
  if (n_blocks < blocks_per_seq)
    fail(
        "engine: the KV cache ({} blocks of {} tokens) cannot hold one full-length sequence of "
        "{} tokens ({} blocks): give it more memory or a shorter context",
        n_blocks, config.block_size, max_len, blocks_per_seq);
  if (tokenizer.n_vocab() != mc.n_vocab)
    fail("engine: the vocabulary has {} tokens but the model has {} embedding rows",
         tokenizer.n_vocab(), mc.n_vocab);
  const SpecConfig& sc = config.spec;
  if (sc.enabled()) {
    if (sc.k < 0) fail("speculation: K must be positive, or 0 for auto; got {}", sc.k);
    if (sc.k == 0 && sc.k_max < 1)
      fail("speculation: the largest K for auto must be at least 1, got {}", sc.k_max);
  }
  if (!sc.proposer && sc.method == SpecMethod::kDraft) {
    if (sc.draft == nullptr) fail("speculation: the draft method needs a draft model");
    const Tokenizer draft_tok = Tokenizer::from_gguf(sc.draft->file());
    if (auto err = vocabulary_mismatch(tokenizer, draft_tok)) fail("{}", *err);
    if (sc.draft->config().n_vocab != mc.n_vocab)
      fail("the draft model has {} embedding rows, the target {}: they must match",
           sc.draft->config().n_vocab, mc.n_vocab);
  }
  impl_ = std::make_unique<Impl>(model, tokenizer, config, max_len, n_blocks);
  impl_->stats.kv_blocks_total = n_blocks;
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

const EngineConfig& Engine::config() const {
  return impl_->cfg;
}
int Engine::max_model_len() const {
  return impl_->max_len;
}

std::string Engine::backend_description() const {
  return impl_->runner.backend().description();
}

uint64_t Engine::submit(GenerateRequest req, OutputSink sink) {
  Impl& I = *impl_;
  const int n_prompt = static_cast<int>(req.prompt.size());
  const int n_vocab = I.model.config().n_vocab;
  if (n_prompt == 0) fail("the prompt is empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= n_vocab)
      fail("prompt token id {} is outside the vocabulary [0, {})", t, n_vocab);
  if (req.score_prompt) {
    if (req.embedding) fail("score_prompt: a request cannot both score its prompt and embed it");
    if (!req.grammar.empty())
      fail("score_prompt: a grammar constrains generated tokens, and scoring generates none");
    if (!req.params.logit_bias.empty() || req.params.penalties_enabled())
      fail(
          "score_prompt: the score is of the model's raw logits; logit_bias and penalties "
          "(repetition, frequency, presence) cannot apply to it");
    if (req.params.logprobs || req.params.top_logprobs > 0)
      fail("score_prompt: logprobs are per generated token, and scoring generates none");
  }
  if (req.embedding || req.score_prompt) {
    // An embedding or a score computes its prompt only: the prompt may fill the context.
    if (n_prompt > I.max_len)
      fail("the input has {} tokens, but the context is {} tokens", n_prompt, I.max_len);
    req.params = SamplingParams{};
    req.grammar.clear();
    req.detokenize = false;
    req.speculative = false;
  } else if (n_prompt >= I.max_len) {
    fail(
        "the prompt has {} tokens, but the context is {} tokens (at least one must remain for "
        "the completion)",
        n_prompt, I.max_len);
  }
  if (auto err = req.params.validate(n_vocab)) fail("{}", *err);
  int max_tokens = req.params.max_tokens;
  if (max_tokens < 0) {
    max_tokens = I.max_len - n_prompt;
  } else if (n_prompt + max_tokens > I.max_len) {
    fail("the prompt ({} tokens) plus max_tokens ({}) exceeds the context of {} tokens", n_prompt,
         max_tokens, I.max_len);
  }
  if (req.embedding || req.score_prompt) max_tokens = 0;
  auto s = std::make_unique<Sequence>();
  s->sink = std::move(sink);
  s->tokens = req.prompt;
  s->tokens.reserve(static_cast<size_t>(n_prompt + max_tokens));
  s->n_prompt = n_prompt;
  s->max_tokens = max_tokens;
  s->sampler = std::make_unique<Sampler>(req.params, n_vocab);
  s->sampler->accept_prompt(req.prompt);
  if (req.embedding)
    s->pooler = std::make_unique<Pooler>(*req.embedding, I.model.config().dim, n_prompt);
  if (req.score_prompt) s->scorer = std::make_unique<PromptScorer>(n_prompt, n_vocab);
  if (!req.grammar.empty()) {
    s->grammar = I.compiled_grammar(req.grammar, req.render_special);
    req.speculative = false;
  }
  if (req.detokenize) {
    IncrementalDetokenizer::Options o;
    o.strip_leading_space = req.strip_leading_space;
    o.render_special = req.render_special;
    s->detok = std::make_unique<IncrementalDetokenizer>(I.tok, o);
    s->stop = std::make_unique<StopMatcher>(req.params.stop);
  }
  s->req = std::move(req);
  s->arrival = now_seconds();
  uint64_t id;
  {
    std::lock_guard lk(I.mu);
    if (I.stop) fail("the engine is shutting down");
    id = I.next_id++;
    s->id = id;
    s->pending.id = id;
    I.incoming.push_back(std::move(s));
    I.stats.waiting++;
  }
  I.cv.notify_all();
  return id;
}

void Engine::abort(uint64_t id) {
  {
    std::lock_guard lk(impl_->mu);
    impl_->aborts.push_back(id);
  }
  impl_->cv.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard lk(impl_->mu);
  return impl_->stats;
}

void Engine::set_step_observer(std::function<void(const EngineStats&)> fn) {
  std::lock_guard lk(impl_->mu);
  impl_->observer = std::move(fn);
}

void Engine::wait_idle() {
  std::unique_lock lk(impl_->mu);
  impl_->idle_cv.wait(
      lk, [&] { return impl_->incoming.empty() && impl_->aborts.empty() && !impl_->busy; });
}

std::shared_ptr<grammar::ConstrainedGrammar> Engine::Impl::compiled_grammar(const std::string& text,
                                                                            bool render_special) {
  {
    std::lock_guard lk(grammar_mu);
    for (auto it = grammars.begin(); it != grammars.end(); ++it) {
      if (it->text != text || it->render_special != render_special) continue;
      grammars.splice(grammars.begin(), grammars, it);
      return it->grammar;
    }
  }
  // Parsed outside the lock (a large grammar takes a while); a race only compiles twice.
  std::shared_ptr<const grammar::Grammar> g = grammar::parse_gbnf(text);
  std::lock_guard lk(grammar_mu);
  auto& vocab = grammar_vocab[render_special ? 1 : 0];
  if (!vocab) vocab = grammar_vocab_of(tok, render_special);
  const size_t mask_bytes = (static_cast<size_t>(vocab->n_vocab()) + 63) / 64 * 8;
  auto cg = std::make_shared<grammar::ConstrainedGrammar>(
      std::move(g), vocab, std::max<size_t>(64, kMaskCacheBytes / mask_bytes));
  grammars.push_front({text, render_special, cg});
  if (grammars.size() > kGrammarCacheEntries) grammars.pop_back();
  return cg;
}

const uint64_t* Engine::Impl::grammar_mask(Sequence* s) {
  const double t0 = now_seconds();
  const grammar::MaskCacheStats before = s->grammar->cache_stats();
  const grammar::TokenMask& m = s->matcher->allowed();
  const grammar::MaskCacheStats after = s->grammar->cache_stats();
  step_masks_computed += after.misses - before.misses;
  step_mask_hits += after.hits - before.hits;
  step_grammar_seconds += now_seconds() - t0;
  return m.bits.data();
}

void Engine::Impl::emit(Sequence* s) {
  RequestOutput& o = s->pending;
  if (o.tokens.empty() && o.text.empty() && !o.finished) return;
  o.prompt_tokens = s->n_prompt;
  o.cached_tokens = s->cached_tokens;
  o.completion_tokens = s->n_generated();
  o.ttft = s->first_token > 0 ? s->first_token - s->arrival : 0;
  o.spec_proposed = s->spec_proposed;
  o.spec_accepted = s->spec_accepted;
  o.spec_passes = s->spec_passes;
  o.queue_time = s->first_scheduled > 0 ? s->first_scheduled - s->arrival : 0;
  if (s->sink) {
    try {
      s->sink(o);
    } catch (...) {
      // A sink must not take the engine down; the request is dropped below if it finished.
    }
  }
  o.tokens.clear();
  o.text.clear();
}

void Engine::Impl::finish(Sequence* s, FinishReason r, const std::string& error) {
  if (s->detok && r != FinishReason::kAbort && !(s->stop && s->stop->stopped())) {
    auto res = s->stop->push(s->detok->flush());
    s->pending.text.append(res.text);
    if (!res.stopped()) s->pending.text.append(s->stop->flush());
  }
  s->pending.finished = true;
  s->pending.finish_reason = r;
  if (!error.empty()) s->pending.error = error;
  sched.remove(s);
  if (proposer) proposer->release(s->id);
  s->draft.clear();
  finished_ids.push_back(s->id);
  emit(s);
}

FinishReason Engine::Impl::append_token(Sequence* s, const SampleResult& sr, double now) {
  const int32_t t = sr.token;
  if (s->first_token == 0) s->first_token = now;
  s->tokens.push_back(t);
  s->sampler->accept(t);
  TokenInfo ti;
  ti.token = t;
  if (s->req.params.logprobs) {
    ti.logprob = sr.logprob;
    for (const auto& lp : sr.top_logprobs) ti.top_logprobs.emplace_back(lp.token, lp.logprob);
  }
  s->pending.tokens.push_back(std::move(ti));
  bool grammar_done = false;
  if (s->matcher) {
    // The mask let only admitted tokens through, so this cannot fail unless the sampler had no
    // admitted token to choose (every admitted logit NaN): end the request rather than go on
    // outside the grammar.
    if (!s->matcher->accept(t)) {
      s->pending.error =
          s->matcher->allowed().count() == 0
              ? std::string(
                    "the grammar cannot be continued here: no token of the vocabulary spells a "
                    "continuation it admits")
              : fmt::format("token {} is outside the request's grammar", t);
      return FinishReason::kAbort;
    }
    grammar_done =
        s->matcher->finished() || (s->matcher->is_complete() && !s->matcher->can_continue());
  }
  const bool eos =
      s->req.params.stops_on_token(t, tok.eog_ids()) || (s->matcher && s->matcher->finished());
  if (s->detok && !eos) {
    auto res = s->stop->push(s->detok->push(t));
    s->pending.text.append(res.text);
    if (res.stopped()) return FinishReason::kStop;
  }
  if (eos || grammar_done) return FinishReason::kStop;
  if (s->n_generated() >= s->max_tokens || static_cast<int>(s->tokens.size()) >= max_len)
    return FinishReason::kLength;
  return FinishReason::kNone;
}

void Engine::Impl::update_stats() {
  enum class KvLog { kNone, kCrossed, kStillAbove, kRecovered };
  KvLog kv_log = KvLog::kNone;
  uint64_t unlogged = 0;
  std::function<void(const EngineStats&)> obs;
  EngineStats copy;
  {
    std::lock_guard lk(mu);
    stats.running = sched.n_running();
    stats.waiting = sched.n_waiting() + static_cast<int>(incoming.size());
    stats.kv_blocks_used = kv.n_used();
    stats.kv_usage = kv.usage();
    stats.prefix_queries = sched.prefix_queries();
    stats.prefix_hits = sched.prefix_hits();
    if (proposer) {
      stats.spec_method = cfg.spec.proposer ? SpecMethod::kNone : cfg.spec.method;
      stats.spec_window_acceptance = monitor.window_rate();
      stats.spec_fallback = monitor.fallback();
      stats.spec_warnings = monitor.warnings();
      stats.spec_probes = monitor.probes();
      stats.spec_k = spec_k;
    }
    if (stats.kv_usage >= cfg.kv_warn_ratio) {
      const bool crossed = !kv_pressure;
      kv_pressure = true;
      const double now = now_seconds();
      if (kv_last_warn == 0 || now - kv_last_warn >= kKvWarnIntervalS) {
        kv_log = crossed ? KvLog::kCrossed : KvLog::kStillAbove;
        unlogged = kv_unlogged_crossings;
        kv_unlogged_crossings = 0;
        kv_last_warn = now;
        kv_pressure_logged = true;
        stats.kv_pressure_warnings++;
      } else if (crossed) {
        kv_unlogged_crossings++;
      }
    } else if (kv_pressure && stats.kv_usage < cfg.kv_warn_ratio * kKvWarnHysteresis) {
      kv_pressure = false;
      if (kv_pressure_logged) kv_log = KvLog::kRecovered;
      kv_pressure_logged = false;
    }
    obs = observer;
    copy = stats;
  }
  const double pct = copy.kv_usage * 100, warn_pct = cfg.kv_warn_ratio * 100;
  switch (kv_log) {
    case KvLog::kCrossed:
    case KvLog::kStillAbove:
      log::warn(
          "KV cache usage {}{:.0f}% (>= {:.0f}%): new requests wait and running ones may be "
          "preempted{}",
          kv_log == KvLog::kStillAbove ? "still " : "", pct, warn_pct,
          unlogged > 0 ? fmt::format(" (it crossed {:.0f}% {} more times since the last warning)",
                                     warn_pct, unlogged)
                       : std::string());
      break;
    case KvLog::kRecovered:
      log::info("KV cache usage back to {:.0f}% (below {:.0f}%)", pct,
                warn_pct * kKvWarnHysteresis);
      break;
    case KvLog::kNone:
      break;
  }
  if (obs) obs(copy);
}

// Speculation, before scheduling: proposals for the running sequences that decode.
void Engine::Impl::propose() {
  slots.clear();
  spec_seqs.clear();
  if (!proposer || !monitor.speculate()) return;
  const int k_step = cfg.spec.k > 0 ? cfg.spec.k : kctl.choose(monitor.token_acceptance());
  int64_t k_total = 0;
  for (Sequence* s : sched.running()) {
    // Decoding: only the last (sampled) token lacks K/V.
    if (!s->req.speculative || s->matcher || s->n_generated() == 0 || s->n_uncomputed() != 1)
      continue;
    // No draft past max_tokens (the verification adds one token of its own) or the context.
    const int k = std::min({k_step, s->max_tokens - s->n_generated() - 1,
                            max_len - static_cast<int>(s->tokens.size())});
    if (k <= 0) continue;
    ProposalSlot sl;
    sl.id = s->id;
    sl.tokens = s->tokens;
    sl.k = k;
    sl.sampler = s->sampler.get();
    sl.draft = &s->draft;
    slots.push_back(sl);
    spec_seqs.push_back(s);
    k_total += k;
  }
  if (slots.empty()) return;
  spec_k = k_step;
  const double busy0 = proposer->busy_seconds();
  try {
    proposer->propose(slots);
  } catch (const std::exception& e) {
    log::warn("speculative decoding: the {} proposer failed ({}); this step decodes plainly",
              proposer->name(), e.what());
    for (Sequence* s : spec_seqs) {
      s->draft.clear();
      proposer->release(s->id);
    }
    slots.clear();
    spec_seqs.clear();
    return;
  }
  for (size_t i = 0; i < slots.size(); ++i) spec_seqs[i]->draft_q = slots[i].q;
  kctl.record_proposer(static_cast<double>(k_total) / static_cast<double>(slots.size()),
                       proposer->busy_seconds() - busy0);
}

// One step: propose → schedule → run the model → update from its output (vLLM v1's schedule() /
// update_from_output()).
void Engine::Impl::step() {
  propose();
  sched.schedule(scheduled, preempted);
  if (!preempted.empty()) {
    std::lock_guard lk(mu);
    stats.preemptions += preempted.size();
  }
  if (proposer)
    for (Sequence* s : preempted) proposer->release(s->id);
  preempted.clear();
  if (scheduled.empty()) {
    finished_ids.clear();
    for (Sequence* s : spec_seqs) s->draft.clear();
    return;
  }

  const double t_sched = now_seconds();
  work.clear();
  bool all_decode = true;
  int64_t n_tokens = 0;
  for (const ScheduledSeq& ss : scheduled) {
    Sequence* s = ss.seq;
    if (s->first_scheduled == 0) s->first_scheduled = t_sched;
    SeqWork w;
    w.id = s->id;
    w.start = s->num_computed;
    w.blocks = &s->kv.blocks;
    w.logprobs = s->req.params.logprobs;
    if (ss.n_new > s->n_uncomputed()) {
      // Verification: the last token and the draft (cut to what was scheduled), every row's logits.
      s->verify.assign(1, s->tokens.back());
      s->verify.insert(s->verify.end(), s->draft.begin(), s->draft.end());
      w.tokens = s->verify;
      w.logits = Logits::kAll;
    } else {
      // The sequence samples when this step computes its last token.
      const bool samples = s->num_computed + ss.n_new == static_cast<int>(s->tokens.size());
      w.tokens = std::span<const int32_t>(s->tokens).subspan(static_cast<size_t>(s->num_computed),
                                                             static_cast<size_t>(ss.n_new));
      w.logits = samples ? Logits::kLast : Logits::kNone;
      w.sampler = samples ? s->sampler.get() : nullptr;
      if (samples && s->matcher) w.allowed = grammar_mask(s);
      if (s->pooler) {  // an embedding: hidden rows instead of logits
        w.logits = Logits::kNone;
        w.sampler = nullptr;
        const auto [begin, end] = s->pooler->rows_wanted(w.start, ss.n_new);
        w.hidden_begin = begin;
        w.hidden_end = end;
      }
      if (s->scorer) {  // a score: the chunk's rows that predict a prompt token, nothing sampled
        w.logits = s->scorer->rows_wanted(w.start, ss.n_new) > 0 ? Logits::kAll : Logits::kNone;
        w.sampler = nullptr;
        w.allowed = nullptr;
      }
    }
    all_decode = all_decode && s->n_uncomputed() == 1;
    n_tokens += static_cast<int64_t>(w.tokens.size());
    work.push_back(w);
  }
  const StepOutput* out = nullptr;
  const double t_run = now_seconds();
  try {
    out = &runner.run(work, finished_ids);
    step_forward_seconds += now_seconds() - t_run;
  } catch (const std::exception& e) {
    // Should not happen (inputs are validated at submit); fail this step's requests, not the
    // process.
    finished_ids.clear();
    std::vector<Sequence*> victims;
    for (const ScheduledSeq& ss : scheduled) victims.push_back(ss.seq);
    for (Sequence* s : victims) finish(s, FinishReason::kAbort, e.what());
    for (Sequence* s : victims) live.erase(s->id);
    return;
  }
  // The auto-K cost model learns the target's step time against tokens per decoding sequence.
  if (proposer && all_decode)
    kctl.record_target_step(static_cast<double>(n_tokens) / static_cast<double>(work.size()),
                            now_seconds() - t_run);
  finished_ids.clear();
  update_from_output(*out);
}

FinishReason Engine::Impl::verify(Sequence* s, const float* rows, double now, uint64_t& appended,
                                  uint64_t& judged_total, uint64_t& accepted_total) {
  const auto V = static_cast<size_t>(model.config().n_vocab);
  const int n_draft = static_cast<int>(s->draft.size());
  const RejectionRule rule = cfg.spec.broken_rejection_for_tests
                                 ? RejectionRule::kBrokenResampleFromTarget
                                 : RejectionRule::kExact;
  s->num_computed += 1;  // the last token's K/V
  int judged = 0, accepted = 0;
  FinishReason r = FinishReason::kNone;
  for (int j = 0; j <= n_draft; ++j) {
    const float* row = rows + static_cast<size_t>(j) * V;
    bool keep_going = false;
    if (j < n_draft) {
      const float* q = s->draft_q ? s->draft_q + static_cast<size_t>(j) * V : nullptr;
      const SpecDecision d = verify_draft_token(*s->sampler, row, s->draft[static_cast<size_t>(j)],
                                                q, p_scratch, &spec_sample, rule);
      ++judged;
      keep_going = d.accepted;
      if (d.accepted) ++accepted;
    } else {
      // Every draft token accepted: the target's own next token.
      s->sampler->sample(row, static_cast<int32_t>(V), &spec_sample);
    }
    r = append_token(s, spec_sample, now);
    ++appended;
    if (r != FinishReason::kNone || !keep_going) break;
    s->num_computed += 1;  // the accepted draft token's K/V stay
  }
  s->spec_proposed += judged;
  s->spec_accepted += accepted;
  s->spec_passes += 1;
  judged_total += static_cast<uint64_t>(judged);
  accepted_total += static_cast<uint64_t>(accepted);
  if (monitor.record(judged, accepted))
    log::warn(
        "speculative decoding: acceptance {:.0f}% over the last {} proposals is below {:.0f}%: "
        "decoding without speculation, re-probing every {} steps",
        monitor.window_rate() * 100, cfg.spec.window, cfg.spec.warn_acceptance * 100,
        cfg.spec.reprobe_steps);
  if (r == FinishReason::kNone) {
    // Roll back the rejected tail: keep the blocks of the computed tokens and of the next one.
    kv.truncate(s->kv, s->num_computed + 1);
    kv.cache_full_blocks(s->kv, s->tokens, s->num_computed);
  }
  return r;
}

void Engine::Impl::update_from_output(const StepOutput& out) {
  uint64_t prompt_done = 0;
  uint64_t sampled = 0;
  uint64_t spec_emitted = 0, spec_judged = 0, spec_accepted = 0, spec_passes = 0;
  const double now = now_seconds();
  const auto V = static_cast<size_t>(model.config().n_vocab);
  reasons.assign(scheduled.size(), FinishReason::kNone);
  // 1. Every sequence's new tokens are decided and appended; nothing is handed out yet.
  for (size_t i = 0; i < scheduled.size(); ++i) {
    Sequence* s = scheduled[i].seq;
    if (work[i].logits == Logits::kAll && !s->scorer) {
      uint64_t appended = 0;
      reasons[i] = verify(s, out.logits.data() + static_cast<size_t>(out.first_row[i]) * V, now,
                          appended, spec_judged, spec_accepted);
      ++spec_passes;
      sampled += appended;
      spec_emitted += appended;
      continue;
    }
    const int before = s->num_computed;
    s->num_computed += scheduled[i].n_new;
    if (!s->pooler) kv.cache_full_blocks(s->kv, s->tokens, s->num_computed);
    if (before < s->n_prompt)
      prompt_done += static_cast<uint64_t>(std::min(s->num_computed, s->n_prompt) - before);
    if (s->pooler) {
      // An embedding pools this chunk's hidden rows and finishes with its last token.
      try {
        const float* rows = out.first_hidden[i] >= 0
                                ? out.hidden.data() + static_cast<size_t>(out.first_hidden[i]) *
                                                          static_cast<size_t>(model.config().dim)
                                : nullptr;
        s->pooler->add(before, scheduled[i].n_new, rows);
        if (s->pooler->complete()) {
          s->pending.embedding = s->pooler->finish();
          reasons[i] = FinishReason::kStop;
        }
      } catch (const std::exception& e) {
        s->pending.error = e.what();
        reasons[i] = FinishReason::kAbort;
      }
      continue;
    }
    if (s->scorer) {
      // A score takes this chunk's rows and finishes with its last token.
      try {
        const float* rows = out.first_row[i] >= 0
                                ? out.logits.data() + static_cast<size_t>(out.first_row[i]) * V
                                : nullptr;
        s->scorer->add(before, scheduled[i].n_new, rows,
                       std::span<const int32_t>(s->tokens).first(static_cast<size_t>(s->n_prompt)));
        if (s->scorer->complete()) {
          s->pending.prompt_score = s->scorer->finish();
          reasons[i] = FinishReason::kStop;
        }
      } catch (const std::exception& e) {
        s->pending.error = e.what();
        reasons[i] = FinishReason::kAbort;
      }
      continue;
    }
    if (out.samples[i].token >= 0) {
      ++sampled;
      reasons[i] = append_token(s, out.samples[i], now);
    }
  }
  // 2. Counted before the tokens are handed out: a client that has its last token and then reads
  // the metrics must find it counted.
  {
    std::lock_guard lk(mu);
    stats.steps++;
    stats.prompt_tokens += prompt_done;
    stats.generation_tokens += sampled;
    stats.spec_emitted += spec_emitted;
    stats.spec_proposed += spec_judged;
    stats.spec_accepted += spec_accepted;
    stats.spec_passes += spec_passes;
    stats.padding_tokens += static_cast<uint64_t>(out.n_padding);
    stats.grammar_masks_computed += step_masks_computed;
    stats.grammar_mask_cache_hits += step_mask_hits;
    stats.grammar_seconds += step_grammar_seconds;
  }
  step_masks_computed = step_mask_hits = 0;
  step_grammar_seconds = 0;
  // 3. Outputs, and the proposer learns what was kept.
  done.clear();
  for (size_t i = 0; i < scheduled.size(); ++i) {
    Sequence* s = scheduled[i].seq;
    if (reasons[i] != FinishReason::kNone) {
      finish(s, reasons[i]);
      done.push_back(s->id);
    } else {
      emit(s);
    }
  }
  for (Sequence* s : spec_seqs) {
    if (s->status != SeqStatus::kFinished && s->num_computed > 0)
      proposer->accepted(s->id, s->tokens);
    s->draft.clear();
    s->draft_q = nullptr;
  }
  for (uint64_t id : done) live.erase(id);
}

void Engine::Impl::loop() {
  for (;;) {
    std::vector<std::unique_ptr<Sequence>> fresh;
    std::vector<uint64_t> to_abort;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return stop || !incoming.empty() || !aborts.empty() || !sched.idle(); });
      if (stop) break;
      fresh.swap(incoming);
      to_abort.swap(aborts);
      busy = true;
    }
    const double t_busy = now_seconds();
    step_forward_seconds = 0;
    for (auto& s : fresh) {
      Sequence* p = s.get();
      if (p->grammar) {
        p->matcher = std::make_unique<grammar::GrammarMatcher>(p->grammar);
        // A grammar's parse-stack nodes are never freed: once one has used half its allowance
        // it leaves the cache (sequences using it keep it) and later requests compile a fresh
        // one. Checked here, on the one thread that adds nodes.
        if (p->grammar->cache_stats().stack_nodes >
            grammar::ConstrainedGrammar::kMaxStackNodes / 2) {
          std::lock_guard lk(grammar_mu);
          grammars.remove_if([&](const CachedGrammar& e) { return e.grammar == p->grammar; });
        }
      }
      live.emplace(p->id, std::move(s));
      sched.add(p);
    }
    for (uint64_t id : to_abort) {
      auto it = live.find(id);
      if (it == live.end()) continue;
      finish(it->second.get(), FinishReason::kAbort);
      live.erase(it);
    }
    step();
    update_stats();
    {
      std::lock_guard lk(mu);
      stats.busy_seconds += now_seconds() - t_busy;
      stats.forward_seconds += step_forward_seconds;
      if (sched.idle() && incoming.empty() && aborts.empty()) {
        busy = false;
        idle_cv.notify_all();
      }
    }
  }
  // Shutting down: every unfinished request ends with kAbort.
  for (auto& [id, s] : live) finish(s.get(), FinishReason::kAbort, "the engine is shutting down");
  live.clear();
  std::lock_guard lk(mu);
  busy = false;
  idle_cv.notify_all();
}

}  // namespace kvasir
