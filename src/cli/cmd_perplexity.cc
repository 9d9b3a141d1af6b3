// kvasir perplexity -m FILE -f TEXT [--ctx N] [--chunks K] [--json] [--save-logits OUT]
// [--kl-base BASE]: llama.cpp-compatible perplexity (see eval/perplexity.h for the method);
// --save-logits keeps the model's distributions over the scored tokens and --kl-base compares
// another model with them (KL divergence, top-1 agreement: eval/kl_divergence.h), the text and
// chunking then coming from the saved file.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/eval/kl_divergence.h"
#include "kvasir/eval/perplexity.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

Runner add_perplexity(CLI::App& app) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model over a text file");
  struct Opts {
    KVTypeOptions kvt;
    std::string model, file, save_logits, kl_base;
    KVCalibOptions kv_calib;
    int ctx = 0, chunks = -1, threads = 0, batch = 512;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("-f,--file", o->file, "Text file (UTF-8; with --kl-base: the saved file's text)");
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx,
                  "Context length per chunk (default 512; with --kl-base: the saved file's)");
  cmd->add_option("--save-logits", o->save_logits,
                  "Save the distributions over the scored tokens to this file, a base for "
                  "--kl-base (4 bytes x vocab a token)");
  cmd->add_option("--kl-base", o->kl_base,
                  "Compare with the distributions saved by --save-logits: KL divergence "
                  "(mean, quantiles, max) and top-1 agreement, as llama-perplexity "
                  "--kl-divergence");
  cmd->add_option("--chunks", o->chunks, "Evaluate at most this many chunks");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_option("-b,--batch,--batch-size", o->batch, "Tokens per forward step");
  add_kv_type_options(cmd, o->kvt);
  add_kv_calib_options(cmd, o->kv_calib);
  cmd->add_flag("--json", o->json, "Print one JSON object");
  return [o]() {
    // Inputs first: a binary file (e.g. -f model.gguf) is refused, not scored as text.
    check_model_path(o->model, "model");
    if (o->file.empty() && o->kl_base.empty()) fail("--file: a text file is required");
    if (!o->file.empty()) check_text_file(o->file, "text file");
    check_kv_calib(o->kv_calib);
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    std::unique_ptr<LogitsReader> base;
    if (!o->kl_base.empty()) {
      check_input_file(o->kl_base, "--kl-base logits file");
      base = std::make_unique<LogitsReader>(o->kl_base);
      if (o->ctx != 0 && o->ctx != base->ctx())
        fail("--ctx {}: {} was saved with chunks of {} tokens", o->ctx, o->kl_base, base->ctx());
    }
    const int ctx = base ? base->ctx() : (o->ctx != 0 ? o->ctx : 512);
    auto model = Model::load(o->model);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    std::vector<int32_t> tokens;
    if (!o->file.empty()) {
      const std::string text = read_input_file(o->file, "text file");
      tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
    }
    if (base) {
      if (base->n_vocab() != model->config().n_vocab)
        fail("--kl-base {}: saved with a vocabulary of {} tokens, {} has {}", o->kl_base,
             base->n_vocab(), o->model, model->config().n_vocab);
      const auto saved = base->tokens();
      if (!o->file.empty() && !std::equal(tokens.begin(), tokens.end(), saved.begin(), saved.end()))
        fail(
            "--kl-base {}: {} tokenizes differently from the text saved there ({} vs {} tokens); "
            "drop -f to evaluate the saved text",
            o->kl_base, o->file, tokens.size(), saved.size());
      tokens.assign(saved.begin(), saved.end());
    }
    ThreadPool pool(o->threads);
    PerplexityOptions po;
    po.ctx = ctx;
    po.max_chunks =
        base ? (o->chunks >= 0 ? std::min(o->chunks, base->n_chunks()) : base->n_chunks())
             : o->chunks;
    po.max_batch = o->batch;
    po.kv_type = kvt;
    po.key_transform = resolve_key_transform(o->kv_calib, *model, tok, pool, kvt.k);
    po.bos_id = tok.add_bos() ? tok.bos_id() : -1;
    auto progress = [&](int c, double ppl) {
      if (!o->json) fmt::print(stderr, "[{}] {:.4f}\n", c + 1, ppl);
    };
    std::unique_ptr<LogitsWriter> writer;
    if (!o->save_logits.empty()) {
      int n_chunks = static_cast<int>(tokens.size() / static_cast<size_t>(ctx));
      if (po.max_chunks >= 0) n_chunks = std::min(n_chunks, po.max_chunks);
      writer = std::make_unique<LogitsWriter>(o->save_logits, model->config().n_vocab, ctx,
                                              std::max(n_chunks, 1), tokens);
    }
    std::unique_ptr<KLAccumulator> kl;
    if (base) kl = std::make_unique<KLAccumulator>(*base);
    ScoredRowFn on_row;
    if (writer || kl) {
      on_row = [&](int, int, std::span<const float> logits, int32_t next) {
        if (writer) writer->add(logits);
        if (kl) kl->add(logits, next);
      };
    }
    PerplexityResult r = perplexity(*model, pool, tokens, po, progress, on_row);
    if (writer) writer->finish();
    std::optional<KLStats> kls;
    if (kl) kls = kl->finish();
    if (o->json) {
      nlohmann::json j = {{"ppl", r.ppl},
                          {"tokens", r.scored},
                          {"chunks", r.chunks},
                          {"ctx", ctx},
                          {"nll", r.nll},
                          {"seconds", r.seconds},
                          {"text_tokens", tokens.size()},
                          {"model", o->model},
                          {"kv_type", kvt.name()},
                          {"key_transform", po.key_transform ? po.key_transform->source : "none"}};
      if (kls) {
        j["kl"] = {{"base", o->kl_base},
                   {"tokens", kls->n},
                   {"ppl_base", kls->ppl_base},
                   {"ppl_q", kls->ppl_q},
                   {"ln_ppl_ratio", kls->ln_ratio},
                   {"ln_ppl_ratio_err", kls->ln_ratio_err},
                   {"mean_kld", kls->kld},
                   {"mean_kld_err", kls->kld_err},
                   {"median_kld", kls->kld_median},
                   {"p90_kld", kls->kld_p90},
                   {"p95_kld", kls->kld_p95},
                   {"p99_kld", kls->kld_p99},
                   {"p999_kld", kls->kld_p999},
                   {"max_kld", kls->kld_max},
                   {"min_kld", kls->kld_min},
                   {"same_top", kls->same_top},
                   {"same_top_err", kls->same_top_err},
                   {"mean_dp", kls->dp_mean},
                   {"rms_dp", kls->dp_rms}};
      }
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print(
          "perplexity: {:.4f} over {} scored tokens ({} chunks of {}; {} text tokens) in "
          "{:.2f} s\n",
          r.ppl, r.scored, r.chunks, ctx, tokens.size(), r.seconds);
      if (kls) fmt::print("\n{}", describe_kl(*kls));
    }
    return 0;
  };
}

}  // namespace kvasir::cli
