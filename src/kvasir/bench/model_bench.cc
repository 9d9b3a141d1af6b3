#include "kvasir/bench/model_bench.h"

#include <algorithm>
#include <random>

#include "kvasir/bench/bandwidth.h"
#include "kvasir/bench/multi_seq_decoder.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::bench {
namespace {

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

int32_t argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

void emit(std::vector<BenchResult>& out, BenchResult r,
          const std::function<void(const BenchResult&)>& on_result) {
  if (on_result) on_result(r);
  out.push_back(std::move(r));
}

// One decode figure: n_seqs sequences with distinct random prompts of prompt_len tokens, then
// `steps` batched decode steps per repetition (greedy feedback).
BenchResult decode_figure(const std::string& name, const Model& model, ThreadPool& pool,
                          const BenchOptions& opt, int n_seqs, int prompt_len, int steps,
                          std::optional<double> bandwidth_gbs) {
  const int V = model.config().n_vocab;
  DecoderOptions dopt;
  dopt.n_seqs = n_seqs;
  dopt.max_ctx = prompt_len + std::max(steps, opt.warmup_steps);
  dopt.kv_type = opt.kv_type;
  dopt.key_transform = opt.key_transform;
  dopt.block_size = opt.block_size;
  MultiSeqDecoder dec(model, pool, dopt);

  // Setup (untimed): every sequence gets its own prompt and first greedy token.
  std::vector<int32_t> first(static_cast<size_t>(n_seqs));
  for (int s = 0; s < n_seqs; ++s) {
    auto prompt = random_tokens(prompt_len, V, opt.seed + 1000u * static_cast<uint32_t>(s + 1));
    first[static_cast<size_t>(s)] = argmax(dec.prefill(s, prompt).data(), V);
  }
  std::vector<int32_t> next = first;
  auto run_steps = [&](int n) {
    for (int i = 0; i < n; ++i) {
      std::span<const float> lg = dec.step(next);
      for (int s = 0; s < n_seqs; ++s)
        next[static_cast<size_t>(s)] = argmax(lg.data() + static_cast<size_t>(s) * V, V);
    }
  };
  auto rewind = [&]() {
    for (int s = 0; s < n_seqs; ++s) dec.truncate(s, prompt_len);
    next = first;
  };

  if (opt.warmup_steps > 0) {
    run_steps(opt.warmup_steps);
    rewind();
  }
  std::vector<double> tps;
  for (int r = 0; r < opt.reps; ++r) {
    const double t0 = now_seconds();
    run_steps(steps);
    const double dt = now_seconds() - t0;
    tps.push_back(static_cast<double>(n_seqs) * steps / dt);
    rewind();
  }

  // Bytes: every step streams the weights once; sequence s at step k (n_past = prompt_len + k)
  // reads prompt_len + k + 1 positions of K and V.
  const double kv_tok = static_cast<double>(dec.kv_shape().bytes_per_token());
  double kv_positions = 0;
  for (int k = 0; k < steps; ++k) kv_positions += static_cast<double>(prompt_len + k + 1);
  BenchResult r;
  r.name = name;
  r.unit = "tok/s";
  r.stats = summarize(tps);
  r.seqs = n_seqs;
  r.bytes_per_step =
      static_cast<double>(streamed_weight_bytes(model)) + kv_tok * kv_positions * n_seqs / steps;
  if (bandwidth_gbs && *bandwidth_gbs > 0)
    r.roofline_pct = r.stats.median / n_seqs * r.bytes_per_step / (*bandwidth_gbs * 1e9) * 100.0;
  return r;
}

BenchResult prefill_figure(const Model& model, ThreadPool& pool, const BenchOptions& opt) {
  DecoderOptions dopt;
  dopt.n_seqs = 1;
  dopt.max_ctx = opt.pp;
  dopt.max_batch = opt.pp;  // the whole prompt in one forward pass
  dopt.kv_type = opt.kv_type;
  dopt.key_transform = opt.key_transform;
  dopt.block_size = opt.block_size;
  MultiSeqDecoder dec(model, pool, dopt);
  auto prompt = random_tokens(opt.pp, model.config().n_vocab, opt.seed);
  dec.prefill(0, prompt);  // warm-up
  dec.truncate(0, 0);
  std::vector<double> tps;
  for (int r = 0; r < opt.reps; ++r) {
    const double t0 = now_seconds();
    dec.prefill(0, prompt);
    const double dt = now_seconds() - t0;
    tps.push_back(opt.pp / dt);
    dec.truncate(0, 0);
  }
  BenchResult r;
  r.name = "pp" + std::to_string(opt.pp);
  r.unit = "tok/s";
  r.stats = summarize(tps);
  r.seqs = 1;
  return r;
}

}  // namespace

void validate(const BenchOptions& o, const Model* model) {
  if (o.reps < 1) fail("bench: --reps must be >= 1, got {}", o.reps);
  if (o.pp < 0) fail("bench: --pp must be >= 0, got {}", o.pp);
  if (o.tg < 0) fail("bench: --tg must be >= 0, got {}", o.tg);
  if (o.tg_prompt < 1) fail("bench: --tg-prompt must be >= 1, got {}", o.tg_prompt);
  if (o.batch_prompt < 1) fail("bench: --batch-prompt must be >= 1, got {}", o.batch_prompt);
  if (o.ctx_prefill < 0) fail("bench: --ctx-prefill must be >= 0, got {}", o.ctx_prefill);
  if (o.warmup_steps < 0) fail("bench: warm-up steps must be >= 0, got {}", o.warmup_steps);
  if (o.bandwidth_passes < 1) fail("bench: bandwidth passes must be >= 1");
  for (int b : o.batches)
    if (b < 1) fail("bench: --batches: batch size must be >= 1, got {}", b);
  if (!model) return;
  const int ctx = model->config().ctx_train;
  if (ctx <= 0) return;
  const int steps = std::max(o.tg, o.warmup_steps);
  auto check = [&](const char* what, int need) {
    if (need > ctx)
      fail("bench: {} needs {} positions but the model's context is {}", what, need, ctx);
  };
  check("--pp", o.pp);
  if (o.tg > 0) {
    check("--tg-prompt + --tg", o.tg_prompt + steps);
    if (!o.batches.empty()) check("--batch-prompt + --tg", o.batch_prompt + steps);
    if (o.ctx_prefill > 0) check("--ctx-prefill + --tg", o.ctx_prefill + steps);
  }
}

size_t streamed_weight_bytes(const Model& model) {
  const gguf::GGUFFile& f = model.file();
  const bool separate_output = f.find_tensor("output.weight") != nullptr;
  size_t total = 0;
  for (const auto& t : f.tensors()) {
    if (separate_output && t.name == "token_embd.weight") continue;
    total += t.nbytes;
  }
  return total;
}

BenchResult run_bandwidth(ThreadPool& pool, const BenchOptions& opt) {
  validate(opt, nullptr);
  BandwidthOptions bo;
  bo.bytes = opt.bandwidth_bytes;
  bo.passes = opt.bandwidth_passes;
  BandwidthProbe probe(pool, bo);
  probe.measure_gbs();  // warm-up
  std::vector<double> gbs;
  for (int r = 0; r < opt.reps; ++r) gbs.push_back(probe.measure_gbs());
  BenchResult r;
  r.name = "bandwidth";
  r.unit = "GB/s";
  r.stats = summarize(gbs);
  return r;
}

std::vector<BenchResult> run_model_bench(const Model& model, ThreadPool& pool,
                                         const BenchOptions& opt,
                                         const std::function<void(const BenchResult&)>& on_result) {
  validate(opt, &model);
  std::vector<BenchResult> out;
  std::optional<double> bw;
  if (opt.bandwidth) {
    BenchResult r = run_bandwidth(pool, opt);
    bw = r.stats.median;
    emit(out, std::move(r), on_result);
  }
  if (opt.pp > 0) emit(out, prefill_figure(model, pool, opt), on_result);
  if (opt.tg > 0) {
    const std::string tg = "tg" + std::to_string(opt.tg);
    emit(out, decode_figure(tg, model, pool, opt, 1, opt.tg_prompt, opt.tg, bw), on_result);
    if (opt.ctx_prefill > 0)
      emit(out,
           decode_figure(tg + "@" + std::to_string(opt.ctx_prefill), model, pool, opt, 1,
                         opt.ctx_prefill, opt.tg, bw),
           on_result);
    for (int b : opt.batches)
      emit(out,
           decode_figure("tg" + std::to_string(b), model, pool, opt, b, opt.batch_prompt, opt.tg,
                         bw),
           on_result);
  }
  return out;
}

}  // namespace kvasir::bench
