// kvasir run [-m] FILE -p PROMPT [-n N] [sampling options]: generates text from a prompt,
// streaming the generated text (only) to stdout as tokens arrive; load and speed figures go to
// stderr. llama-cli's spellings work too (--ctx-size, --temperature, -s/--seed, --predict,
// --batch-size). With speculative decoding (--draft FILE, or --spec ngram) the request runs
// through the serving engine (one sequence), which verifies the proposals; the closing stderr line
// then reports the acceptance rate and tokens per target pass. --generation-config auto (the
// default) takes the model's own defaults (common.h: a folder's generation_config.json, a GGUF's
// general.sampling.* keys) for every sampling flag not given (and -n from max_new_tokens);
// stderr says which.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/engine.h"
#include "kvasir/engine/sequence_runner.h"
#include "kvasir/sampling/sampler.h"
#include "kvasir/sampling/stop_matcher.h"
#include "kvasir/tokenizer/incremental_detokenizer.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::cli {

namespace {
void emit(std::string_view s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// The request through an engine of one sequence that speculates.
int run_speculative(const Model& model, const Tokenizer& tok, const SpecConfig& spec,
                    KVCacheType kvt, std::shared_ptr<const KeyTransform> key_transform, int threads,
                    int batch, int ctx, const std::vector<int32_t>& ids, SamplingParams sp,
                    bool strip_leading_space, int limit, bool quiet, const std::string& path,
                    double t_load, uint64_t seed) {
  EngineConfig ec;
  ec.max_seqs = 1;
  ec.max_batched_tokens = std::max(batch, spec.k_max + 1);
  ec.max_model_len = ctx;
  ec.kv_type = kvt;
  ec.key_transform = std::move(key_transform);
  ec.threads = threads;
  ec.spec = spec;
  ec.kv_warn_ratio =
      2;  // one sequence sized to its context: a full cache is the plan, not pressure
  Engine engine(model, tok, ec);
  GenerateRequest r;
  r.prompt = ids;
  sp.seed = seed;  // the seed `kvasir run` reports
  sp.max_tokens = limit;
  r.params = sp;
  r.strip_leading_space = strip_leading_space;
  std::mutex mu;
  std::condition_variable cv;
  RequestOutput last;
  bool done = false;
  double t_first = 0;
  const double t0 = now_seconds();
  engine.submit(std::move(r), [&](const RequestOutput& out) {
    emit(out.text);
    if (t_first == 0 && !out.tokens.empty()) t_first = now_seconds();
    if (out.finished) {
      std::lock_guard lk(mu);
      last = out;
      done = true;
      cv.notify_all();
    }
  });
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return done; });
  }
  const double t_end = now_seconds();
  if (!last.error.empty()) fail("{}", last.error);
  if (isatty(STDOUT_FILENO)) emit("\n");
  if (!quiet) {
    const EngineStats st = engine.stats();
    const int generated = last.completion_tokens;
    const double t_prefill = t_first > 0 ? t_first - t0 : t_end - t0;
    const double t_decode = t_end - (t_first > 0 ? t_first : t_end);
    fmt::print(
        stderr,
        "\n[kvasir] {} ({}, {:.1f} MiB) loaded in {:.2f} s; {}, KV {}, seed {}\n"
        "[kvasir] prefill: {} tokens in {:.3f} s; decode: {} tokens in {:.3f} s ({:.1f} "
        "tok/s); stop: {}\n"
        "[kvasir] speculative ({}{}): {} of {} draft tokens accepted ({:.1f}%), {:.2f} "
        "tokens per target pass over {} passes{}\n",
        path, dtype_name(model.weight_type()), model.weight_bytes() / 1048576.0, t_load,
        engine.backend_description(), kvt.name(), seed, ids.size(), t_prefill, generated, t_decode,
        generated > 1 ? (generated - 1) / std::max(t_decode, 1e-9) : 0.0,
        finish_reason_name(last.finish_reason), spec_method_name(spec.method),
        spec.k > 0 ? fmt::format(", K {}", spec.k) : fmt::format(", K auto, last {}", st.spec_k),
        last.spec_accepted, last.spec_proposed,
        last.spec_proposed > 0 ? 100.0 * last.spec_accepted / last.spec_proposed : 0.0,
        last.spec_passes > 0 ? double(last.spec_accepted + last.spec_passes) / last.spec_passes
                             : 0.0,
        last.spec_passes,
        st.spec_fallback ? " (fell back to plain decoding: acceptance below the threshold)" : "");
  }
  return 0;
}
}  // namespace

Runner add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  struct Opts {
    KVTypeOptions kvt;
    KVCalibOptions kv_calib;
    SpecOptions spec;
    std::string model, prompt, prompt_file, generation_config = "auto";
    int n = 256, threads = 0, ctx = 0, batch = 512;
    bool parse_special = true, ignore_eos = false, quiet = false;
    std::optional<uint64_t> seed;
    SamplingParams sp;
  };
  auto o = std::make_shared<Opts>();
  // llama.cpp's defaults, so `kvasir run` and `llama-cli` sample alike out of the box.
  o->sp.temperature = 0.8f;
  o->sp.top_k = 40;
  o->sp.top_p = 0.95f;
  o->sp.min_p = 0.05f;
  o->sp.penalty_last_n = 64;
  add_model_option(cmd, o->model, /*positional=*/true);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  auto* n_opt =
      cmd->add_option("-n,--n-predict,--predict", o->n,
                      "Tokens to generate (default 256; -1: until EOS or the context is full)");
  auto* temp_opt = cmd->add_option("--temp,--temperature", o->sp.temperature,
                                   "Temperature (0 = greedy; default 0.8)");
  auto* top_k_opt = cmd->add_option("--top-k", o->sp.top_k, "Top-k (0 = off; default 40)");
  auto* top_p_opt = cmd->add_option("--top-p", o->sp.top_p, "Top-p (1 = off; default 0.95)");
  auto* min_p_opt = cmd->add_option("--min-p", o->sp.min_p, "Min-p (0 = off; default 0.05)");
  auto* rp_opt =
      cmd->add_option("--repeat-penalty", o->sp.repetition_penalty, "Repetition penalty (1 = off)");
  auto* last_n_opt = cmd->add_option("--repeat-last-n", o->sp.penalty_last_n,
                                     "Penalty window (-1 = all; default 64)");
  cmd->add_option("--presence-penalty", o->sp.presence_penalty, "Presence penalty (0 = off)");
  cmd->add_option("--frequency-penalty", o->sp.frequency_penalty, "Frequency penalty (0 = off)");
  cmd->add_option("-s,--seed", o->seed, "Random seed (default: random, printed on stderr)");
  cmd->add_option("--stop", o->sp.stop, "Stop string (repeatable)")->allow_extra_args(false);
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after an end-of-generation token");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx,
                  "Context size (default: prompt + n, at most the model's)");
  cmd->add_option("-b,--batch,--batch-size", o->batch,
                  "Prompt tokens per forward step (default 512)");
  add_kv_type_options(cmd, o->kvt);
  add_kv_calib_options(cmd, o->kv_calib);
  add_spec_options(cmd, o->spec);
  cmd->add_flag("!--no-parse-special", o->parse_special,
                "Treat special-token text in the prompt as plain text");
  cmd->add_flag("-q,--quiet", o->quiet, "No timings on stderr");
  add_generation_config_option(cmd, o->generation_config);
  return [o, n_opt, temp_opt, top_k_opt, top_p_opt, min_p_opt, rp_opt, last_n_opt]() {
    // Every input is checked before anything loads.
    check_model_path(o->model, "model");
    std::string prompt = o->prompt;
    if (!o->prompt_file.empty()) {
      check_text_file(o->prompt_file, "prompt file");
      prompt = read_input_file(o->prompt_file, "prompt file");
    }
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    check_kv_calib(o->kv_calib);
    SpecConfig spec = resolve_spec(o->spec);
    const double t_load0 = now_seconds();
    auto model = Model::load(o->model);
    std::unique_ptr<Model> draft;
    load_draft(o->spec, spec, draft);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    const ModelConfig& cfg = model->config();
    if (tok.n_vocab() != cfg.n_vocab)
      fail("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", o->model,
           tok.n_vocab(), cfg.n_vocab);
    const double t_load = now_seconds() - t_load0;

    // The model's defaults, for what the command line left unset.
    std::string defaults_from;
    const SamplingDefaults defaults =
        model_sampling_defaults(model->file(), o->model, o->generation_config, &defaults_from);
    if (!o->quiet) fmt::print(stderr, "[kvasir] {}\n", defaults_from);
    SamplingParams sp = o->sp;
    auto take = [](CLI::Option* given, auto& field, const auto& value) {
      if (value && given->count() == 0) field = *value;
    };
    take(temp_opt, sp.temperature, defaults.temperature);
    take(top_k_opt, sp.top_k, defaults.top_k);
    take(top_p_opt, sp.top_p, defaults.top_p);
    take(min_p_opt, sp.min_p, defaults.min_p);
    take(rp_opt, sp.repetition_penalty, defaults.repetition_penalty);
    take(last_n_opt, sp.penalty_last_n, defaults.penalty_last_n);
    int n_predict = o->n;
    take(n_opt, n_predict, defaults.max_tokens);

    std::vector<int32_t> ids = tok.encode(prompt, /*add_special=*/true, o->parse_special);
    if (ids.empty()) fail("the prompt is empty and the vocabulary adds no BOS token");
    const int n_prompt = static_cast<int>(ids.size());
    int ctx = o->ctx;
    if (ctx <= 0) {
      // Never silently past the trained context: positions beyond it give garbage on most models.
      if (cfg.ctx_train > 0 && n_prompt >= cfg.ctx_train)
        fail(
            "the prompt has {} tokens but the model's context is {} (GGUF {}.context_length); "
            "shorten it, or pass --ctx to run past the trained length",
            n_prompt, cfg.ctx_train, cfg.arch);
      ctx = n_predict < 0 ? cfg.ctx_train : std::min(cfg.ctx_train, n_prompt + n_predict);
      ctx = std::max(ctx, n_prompt + 1);
    } else {
      warn_if_past_trained_context(ctx, cfg.ctx_train);
    }
    if (n_prompt >= ctx)
      fail("the prompt has {} tokens, which does not leave room to generate in a context of {}",
           n_prompt, ctx);

    sp.seed = o->seed;
    sp.ignore_eos = o->ignore_eos;
    if (auto err = sp.validate(cfg.n_vocab)) fail("{}", *err);
    Sampler sampler(sp, cfg.n_vocab);
    sampler.accept_prompt(ids);

    // Only BOS in front: the text starts here, so drop SentencePiece's leading space as llama.cpp.
    const bool strip_leading_space = n_prompt == 1 && ids[0] == tok.bos_id();
    ThreadPool pool(o->threads);
    auto key_transform = resolve_key_transform(o->kv_calib, *model, tok, pool, kvt.k);
    if (spec.enabled())
      return run_speculative(*model, tok, spec, kvt, key_transform, o->threads, o->batch, ctx, ids,
                             sp, strip_leading_space, n_predict < 0 ? ctx - n_prompt : n_predict,
                             o->quiet, o->model, t_load, sampler.seed());

    SequenceRunnerOptions ro;
    ro.max_ctx = ctx;
    ro.max_batch = o->batch;
    ro.kv_type = kvt;
    ro.key_transform = key_transform;
    SequenceRunner runner(*model, pool, ro);

    IncrementalDetokenizer::Options dopt;
    dopt.strip_leading_space = strip_leading_space;
    IncrementalDetokenizer detok(tok, dopt);
    StopMatcher stopper(sp.stop);

    const double t0 = now_seconds();
    auto logits = runner.feed(ids);
    const double t_prefill = now_seconds() - t0;
    const double t1 = now_seconds();
    int generated = 0;
    std::string reason = "length";
    const int limit = n_predict < 0 ? ctx - n_prompt : n_predict;
    while (generated < limit) {
      int32_t t = sampler.sample(logits.data(), cfg.n_vocab);
      if (sp.stops_on_token(t, tok.eog_ids())) {
        reason = "eos";
        break;
      }
      sampler.accept(t);
      generated++;
      auto r = stopper.push(detok.push(t));
      emit(r.text);
      if (r.stopped()) {
        reason = "stop";
        break;
      }
      if (generated == limit) break;
      if (runner.n_past() >= ctx) {
        reason = "context full";
        break;
      }
      logits = runner.feed(std::span(&t, 1));
    }
    if (reason != "stop") {
      auto r = stopper.push(detok.flush());
      emit(r.text);
      if (!r.stopped()) emit(stopper.flush());
    }
    const double t_decode = now_seconds() - t1;
    if (isatty(STDOUT_FILENO)) emit("\n");
    if (!o->quiet) {
      fmt::print(stderr,
                 "\n[kvasir] {} ({}, {:.1f} MiB) loaded in {:.2f} s; {}, KV "
                 "{}, seed {}\n[kvasir] prefill: {} tokens in {:.3f} s ({:.1f} tok/s); decode: {} "
                 "tokens in {:.3f} s ({:.1f} tok/s); stop: {}\n",
                 o->model, dtype_name(model->weight_type()), model->weight_bytes() / 1048576.0,
                 t_load, runner.backend().description(), kvt.name(), sampler.seed(), n_prompt,
                 t_prefill, n_prompt / std::max(t_prefill, 1e-9), generated, t_decode,
                 generated > 1 ? (generated - 1) / std::max(t_decode, 1e-9) : 0.0, reason);
    }
    return 0;
  };
}

}  // namespace kvasir::cli
