// Engine implementation: the step loop (schedule → build the Batch → forward → sample → stream).
#include "kvasir/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "kvasir/engine/scheduler.h"
#include "kvasir/engine/sequence.h"
#include "kvasir/kv/kv_storage.h"
#include "kvasir/model/model.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"
#include "kvasir/util/timer.h"

namespace kvasir {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    default: return "none";
  }
}

struct Engine::Impl {
  Model& model;
  const Tokenizer& tok;
  EngineConfig cfg;
  int max_len;
  ThreadPool pool;
  KVStorage storage;
  KVCacheManager kv;
  Scheduler sched;

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
  bool warned_pressure = false;

  // Padded static batching (comparison mode, static_batching && static_padding): a finished
  // sequence keeps its row in the batch until the batch's longest member finishes, as a padded
  // static batch computes it: one padding token per step, attending over a context that grows
  // like the sequence's would. Padding rows read and write only pad_kv's block (their results
  // are never used), so they cannot disturb anyone's cache; batch invariance keeps every real
  // row's result unchanged.
  SeqBlocks pad_kv;
  std::vector<int32_t> pad_table;  // max_len positions' worth of entries, all pad_kv's block
  std::vector<int32_t> pad_pos;    // per padding row: its next position

  // Per-step scratch (reused: no allocation in steady state once sized).
  std::vector<ScheduledSeq> scheduled;
  std::vector<Sequence*> preempted;
  Batch batch;
  std::vector<float> logits;
  std::vector<Sequence*> sample_seqs;
  SampleResult sample_result;

  Impl(Model& m, const Tokenizer& t, const EngineConfig& c, int max_len_, int64_t n_blocks)
      : model(m),
        tok(t),
        cfg(c),
        max_len(max_len_),
        pool(c.threads),
        storage(m.kv_shape(c.kv_type, c.block_size), n_blocks),
        kv(static_cast<int32_t>(n_blocks), c.block_size, c.prefix_caching),
        sched(SchedulerConfig{c.max_seqs, c.max_batched_tokens, c.static_batching, 0.01}, kv) {
    if (c.static_batching && c.static_padding) {
      if (!kv.allocate_slots(pad_kv, 1)) fail("engine: no KV block left for static padding");
      pad_table.assign(static_cast<size_t>((max_len + c.block_size - 1) / c.block_size),
                       pad_kv.blocks[0]);
    }
  }

  void loop();
  void step();
  void finish(Sequence* s, FinishReason r, const std::string& error = {});
  void emit(Sequence* s);
  void append_token(Sequence* s, int32_t token, const SampleResult& sr, double now);
  void update_stats();
};

Engine::Engine(Model& model, const Tokenizer& tokenizer, const EngineConfig& config) {
  const ModelConfig& mc = model.config();
  if (config.block_size <= 0) fail("engine: block size must be positive");
  if (config.max_seqs <= 0) fail("engine: max_seqs must be positive, got {}", config.max_seqs);
  if (config.max_batched_tokens <= 0)
    fail("engine: max_batched_tokens must be positive, got {}", config.max_batched_tokens);
  const int max_len = config.max_model_len > 0 ? config.max_model_len : mc.ctx_train;
  const int64_t blocks_per_seq = (max_len + config.block_size - 1) / config.block_size;
  int64_t n_blocks = config.kv_blocks > 0 ? config.kv_blocks : blocks_per_seq * config.max_seqs;
  if (n_blocks < blocks_per_seq)
    fail("engine: the KV cache ({} blocks of {} tokens) cannot hold one full-length sequence of "
         "{} tokens ({} blocks): give it more memory or a shorter context",
         n_blocks, config.block_size, max_len, blocks_per_seq);
  if (tokenizer.n_vocab() != mc.n_vocab)
    fail("engine: the vocabulary has {} tokens but the model has {} embedding rows",
         tokenizer.n_vocab(), mc.n_vocab);
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

const EngineConfig& Engine::config() const { return impl_->cfg; }
int Engine::max_model_len() const { return impl_->max_len; }

uint64_t Engine::submit(GenerateRequest req, OutputSink sink) {
  Impl& I = *impl_;
  const int n_prompt = static_cast<int>(req.prompt.size());
  const int n_vocab = I.model.config().n_vocab;
  if (n_prompt == 0) fail("the prompt is empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= n_vocab) fail("prompt token id {} is outside the vocabulary [0, {})", t, n_vocab);
  if (n_prompt >= I.max_len)
    fail("the prompt has {} tokens, but the context is {} tokens (at least one must remain for "
         "the completion)",
         n_prompt, I.max_len);
  if (auto err = req.params.validate(n_vocab)) fail("{}", *err);
  int max_tokens = req.params.max_tokens;
  if (max_tokens < 0) {
    max_tokens = I.max_len - n_prompt;
  } else if (n_prompt + max_tokens > I.max_len) {
    fail("the prompt ({} tokens) plus max_tokens ({}) exceeds the context of {} tokens",
         n_prompt, max_tokens, I.max_len);
  }
  auto s = std::make_unique<Sequence>();
  s->sink = std::move(sink);
  s->tokens = req.prompt;
  s->tokens.reserve(static_cast<size_t>(n_prompt + max_tokens));
  s->n_prompt = n_prompt;
  s->max_tokens = max_tokens;
  s->sampler = std::make_unique<Sampler>(req.params, n_vocab);
  s->sampler->accept_prompt(req.prompt);
  if (req.detokenize) {
    IncrementalDetokenizer::Options o;
    o.strip_leading_space = req.strip_leading_space;
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
  impl_->idle_cv.wait(lk, [&] {
    return impl_->incoming.empty() && impl_->aborts.empty() && !impl_->busy;
  });
}

void Engine::Impl::emit(Sequence* s) {
  RequestOutput& o = s->pending;
  if (o.tokens.empty() && o.text.empty() && !o.finished) return;
  o.prompt_tokens = s->n_prompt;
  o.cached_tokens = s->cached_tokens;
  o.completion_tokens = s->n_generated();
  o.ttft = s->first_token > 0 ? s->first_token - s->arrival : 0;
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
  s->pending.error = error;
  sched.remove(s);
  if (!pad_table.empty()) {
    if (sched.n_running() == 0) {
      pad_pos.clear();  // the static batch is over
    } else if (r != FinishReason::kAbort) {
      pad_pos.push_back(static_cast<int32_t>(s->tokens.size()));
    }
  }
  emit(s);
}

void Engine::Impl::append_token(Sequence* s, int32_t t, const SampleResult& sr, double now) {
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
  const bool eos = s->req.params.stops_on_token(t, tok.eog_ids());
  if (s->detok && !eos) {
    auto res = s->stop->push(s->detok->push(t));
    s->pending.text.append(res.text);
    if (res.stopped()) return finish(s, FinishReason::kStop);
  }
  if (eos) return finish(s, FinishReason::kStop);
  if (s->n_generated() >= s->max_tokens || static_cast<int>(s->tokens.size()) >= max_len)
    return finish(s, FinishReason::kLength);
  emit(s);
}

void Engine::Impl::update_stats() {
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
    obs = observer;
    copy = stats;
  }
  if (copy.kv_usage >= cfg.kv_warn_ratio && !warned_pressure) {
    warned_pressure = true;
    std::fprintf(stderr,
                 "kvasir: warning: KV cache usage %.0f%% (>= %.0f%%): new requests wait and "
                 "running ones may be preempted\n",
                 copy.kv_usage * 100, cfg.kv_warn_ratio * 100);
  } else if (copy.kv_usage < cfg.kv_warn_ratio * 0.9) {
    warned_pressure = false;
  }
  if (obs) obs(copy);
}

void Engine::Impl::step() {
  sched.schedule(scheduled, preempted);
  if (!preempted.empty()) {
    std::lock_guard lk(mu);
    stats.preemptions += preempted.size();
  }
  preempted.clear();
  if (scheduled.empty()) return;

  const double t_sched = now_seconds();
  batch.clear();
  sample_seqs.clear();
  for (const ScheduledSeq& ss : scheduled) {
    Sequence* s = ss.seq;
    if (s->first_scheduled == 0) s->first_scheduled = t_sched;
    const int32_t si = batch.add_seq(s->kv.blocks);
    const int end = s->num_computed + ss.n_new;
    const bool wants = end == static_cast<int>(s->tokens.size());
    for (int p = s->num_computed; p < end; ++p)
      batch.add_token(s->tokens[static_cast<size_t>(p)], p, si, cfg.block_size,
                      wants && p == end - 1);
    if (wants) sample_seqs.push_back(s);
  }
  const size_t n_padding = pad_pos.size();
  if (!pad_pos.empty()) {
    const int32_t si = batch.add_seq(pad_table);
    for (int32_t& pos : pad_pos) {
      batch.add_token(0, std::min(pos, max_len - 1), si, cfg.block_size, false);
      ++pos;
    }
  }
  const size_t V = static_cast<size_t>(model.config().n_vocab);
  if (logits.size() < sample_seqs.size() * V) logits.resize(sample_seqs.size() * V);
  try {
    model.forward(batch, storage, logits.data(), pool);
  } catch (const std::exception& e) {
    // Should not happen (inputs are validated at submit); fail this step's requests, not the
    // process.
    std::vector<Sequence*> victims;
    for (const ScheduledSeq& ss : scheduled) victims.push_back(ss.seq);
    for (Sequence* s : victims) finish(s, FinishReason::kAbort, e.what());
    for (Sequence* s : victims) live.erase(s->id);
    return;
  }
  uint64_t prompt_done = 0;
  for (const ScheduledSeq& ss : scheduled) {
    Sequence* s = ss.seq;
    const int before = s->num_computed;
    s->num_computed += ss.n_new;
    kv.cache_full_blocks(s->kv, s->tokens, s->num_computed);
    if (before < s->n_prompt)
      prompt_done += static_cast<uint64_t>(std::min(s->num_computed, s->n_prompt) - before);
  }
  // Counted before the tokens are handed out: a client that has its last token and then reads
  // the metrics must find it counted.
  {
    std::lock_guard lk(mu);
    stats.steps++;
    stats.prompt_tokens += prompt_done;
    stats.generation_tokens += sample_seqs.size();
    stats.padding_tokens += n_padding;
  }
  const double now = now_seconds();
  std::vector<uint64_t> finished;
  for (size_t i = 0; i < sample_seqs.size(); ++i) {
    Sequence* s = sample_seqs[i];
    SampleResult* sr = s->req.params.logprobs ? &sample_result : nullptr;
    const int32_t t = s->sampler->sample(&logits[i * V], static_cast<int32_t>(V), sr);
    append_token(s, t, sr ? *sr : sample_result, now);
    if (s->status == SeqStatus::kFinished) finished.push_back(s->id);
  }
  for (uint64_t id : finished) live.erase(id);
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
    for (auto& s : fresh) {
      Sequence* p = s.get();
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
