// kvasir bench -m FILE [-t N] [--json] [--reps 3] [--pp 512] [--tg 128] [--batches 8,16,64]
//              [--ctx-prefill 0|2048] [--bandwidth]: the throughput figures of BENCH.md
// (see bench/model_bench.h). `--bandwidth` without -m runs only the memory-bandwidth probe.
// Human table on stdout (progress notes on stderr); with --json one JSON object per figure.
//
// kvasir bench serve [--host H] [--port P] [--requests N] [--rate R | --concurrency C] ...:
// drives a running `kvasir serve` (or any OpenAI-compatible server) over HTTP with streaming
// completions and prints TTFT/TPOT/ITL/e2e percentiles and throughput (bench/serve_bench.h).
//
// kvasir bench spec -m TARGET [--draft FILE] [--spec-k 4] [--replay-corrupt 0.2 | --no-replay]:
// the verification pass's cost against a decode pass, and plain against speculative greedy decode
// (bench/spec_bench.h).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "common.h"
#include "kvasir/bench/grammar_bench.h"
#include "kvasir/bench/model_bench.h"
#include "kvasir/bench/serve_bench.h"
#include "kvasir/bench/spec_bench.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {
namespace {

std::vector<int> parse_batches(const std::string& s) {
  std::vector<int> out;
  if (s.empty() || s == "0" || s == "none") return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      int b = std::stoi(item, &used);
      if (used != item.size() || b < 1) throw std::invalid_argument(item);
      out.push_back(b);
    } catch (const std::exception&) {
      fail("--batches: expected a comma-separated list of positive integers, got '{}'", s);
    }
  }
  return out;
}

struct Labels {
  std::string model, dtype;
  int threads = 0;
};

nlohmann::json to_json(const bench::BenchResult& r, const Labels& l) {
  nlohmann::json j = {{"name", r.name},       {"model", l.model},   {"dtype", l.dtype},
                      {"threads", l.threads}, {"n", r.stats.n},     {"median", r.stats.median},
                      {"min", r.stats.min},   {"max", r.stats.max}, {"unit", r.unit}};
  if (r.seqs > 0) j["seqs"] = r.seqs;
  if (r.bytes_per_step > 0) j["bytes_per_step"] = r.bytes_per_step;
  if (r.roofline_pct) j["roofline_pct"] = *r.roofline_pct;
  return j;
}

void print_row(const bench::BenchResult& r) {
  std::string roof = r.roofline_pct ? fmt::format("{:.1f}%", *r.roofline_pct) : "";
  fmt::print("{:<12} {:>3} {:>10.2f} {:>10.2f} {:>10.2f}  {:<6} {:>8}\n", r.name, r.stats.n,
             r.stats.median, r.stats.min, r.stats.max, r.unit, roof);
  std::fflush(stdout);
}

nlohmann::json latency_json(const bench::LatencyStats& l) {
  return {{"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}, {"mean", l.mean}};
}

// `kvasir bench serve`: returns the runner of the nested subcommand.
Runner add_bench_serve(CLI::App& bench_cmd) {
  auto* cmd = bench_cmd.add_subcommand(
      "serve", "Load-test an OpenAI-compatible server: TTFT/TPOT/ITL percentiles, throughput");
  struct Opts {
    bench::ServeBenchOptions s;
    bool json = false;
    std::string label, output_dist = "uniform";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--host", o->s.host, "Server address (default 127.0.0.1)");
  cmd->add_option("--port", o->s.port, "Server port (default 8080)");
  cmd->add_option("--model", o->s.model, "Model id to request (default: the first of /v1/models)");
  cmd->add_option("--api-key", o->s.api_key, "Bearer key");
  cmd->add_option("--requests", o->s.requests, "Requests to send (default 64)");
  cmd->add_option("--rate", o->s.rate, "Poisson arrivals at this many requests/s (default: off)");
  cmd->add_option("--concurrency", o->s.concurrency,
                  "Clients each sending its next request when the last ends (default 8)");
  cmd->add_option("--prompt-min", o->s.prompt_min, "Shortest random prompt, tokens (default 32)");
  cmd->add_option("--prompt-max", o->s.prompt_max, "Longest random prompt, tokens (default 256)");
  cmd->add_option("--output-min", o->s.output_min, "Shortest output, tokens (default 16)");
  cmd->add_option("--output-max", o->s.output_max, "Longest output, tokens (default 128)");
  cmd->add_option("--output-dist", o->output_dist,
                  "Output lengths: uniform (default) or exp (heavy-tailed: min + exponential of "
                  "mean (max - min) / 4, cut at max)")
      ->check(CLI::IsMember({"uniform", "exp"}));
  cmd->add_option("--shared-prefix", o->s.shared_prefix,
                  "Tokens of a prefix common to every prompt (default 0)");
  cmd->add_option("--vocab-hi", o->s.vocab_hi,
                  "Random token ids are drawn below this (default 500)");
  cmd->add_option_function<std::string>(
      "--ban-tokens",
      [o](const std::string& v) {
        int lo = 0, hi = 0;
        char dash = 0;
        std::istringstream in(v);
        if (!(in >> lo >> dash >> hi) || dash != '-' || lo < 0 || hi < lo || !in.eof())
          throw CLI::ValidationError("--ban-tokens", "expected LO-HI token ids, got '" + v + "'");
        o->s.ban_lo = lo;
        o->s.ban_hi = hi;
      },
      "Token ids LO-HI the server must not generate (logit_bias -100), e.g. 3-258: the byte "
      "tokens of a llama SPM vocabulary (random byte sequences are not valid UTF-8, which "
      "llama-server aborts a stream on)");
  cmd->add_option("--seed", o->s.seed, "Workload seed (default 1): same seed, same requests");
  cmd->add_option("--timeout", o->s.timeout_s, "Per-request timeout, s (default 600)");
  cmd->add_option("--label", o->label, "A name for this run in the output (e.g. continuous)");
  cmd->add_flag("--json", o->json, "One JSON object with every figure");
  return [o]() {
    o->s.output_dist =
        o->output_dist == "exp" ? bench::OutputDist::kExponential : bench::OutputDist::kUniform;
    bench::ServeBenchResult r = bench::run_serve_bench(o->s);
    if (o->json) {
      nlohmann::json j = {{"name", "serve"},
                          {"label", o->label},
                          {"requests", o->s.requests},
                          {"rate", o->s.rate},
                          {"concurrency", o->s.rate > 0 ? 0 : o->s.concurrency},
                          {"output_dist", o->output_dist},
                          {"completed", r.completed},
                          {"failed", r.failed},
                          {"duration_s", r.duration_s},
                          {"req_per_s", r.req_per_s},
                          {"output_tok_per_s", r.output_tok_per_s},
                          {"output_tokens", r.output_tokens},
                          {"prompt_tokens", r.prompt_tokens},
                          {"cached_tokens", r.cached_tokens},
                          {"ttft_s", latency_json(r.ttft)},
                          {"tpot_s", latency_json(r.tpot)},
                          {"itl_s", latency_json(r.itl)},
                          {"e2e_s", latency_json(r.e2e)}};
      j["ttft_each_s"] = r.ttft_each;  // per request, in submission order (null: failed)
      if (!r.first_error.empty()) j["first_error"] = r.first_error;
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("kvasir bench serve{}: {}:{}, {} requests, {}\n",
                 o->label.empty() ? "" : " [" + o->label + "]", o->s.host, o->s.port, o->s.requests,
                 o->s.rate > 0 ? fmt::format("Poisson {:.2f} req/s", o->s.rate)
                               : fmt::format("concurrency {}", o->s.concurrency));
      fmt::print("completed {} failed {} in {:.2f} s: {:.2f} req/s, {:.1f} output tok/s\n",
                 r.completed, r.failed, r.duration_s, r.req_per_s, r.output_tok_per_s);
      fmt::print("tokens: prompt {} (cached {}), output {}\n", r.prompt_tokens, r.cached_tokens,
                 r.output_tokens);
      fmt::print("{:<6} {:>10} {:>10} {:>10} {:>10}   (ms)\n", "", "p50", "p90", "p99", "mean");
      auto row = [](const char* n, const bench::LatencyStats& l) {
        fmt::print("{:<6} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", n, l.p50 * 1e3, l.p90 * 1e3,
                   l.p99 * 1e3, l.mean * 1e3);
      };
      row("TTFT", r.ttft);
      row("TPOT", r.tpot);
      row("ITL", r.itl);
      row("e2e", r.e2e);
      if (r.ttft_each.size() <= 8) {  // a few requests (e.g. a prefix-cache check): each TTFT
        std::string each;
        for (double t : r.ttft_each) each += fmt::format(" {:.2f}", t * 1e3);
        fmt::print("TTFT of each request (ms):{}\n", each);
      }
      if (!r.first_error.empty()) fmt::print(stderr, "first error: {}\n", r.first_error);
    }
    return r.failed == 0 ? 0 : 1;
  };
}

Runner add_bench_spec(CLI::App& bench_cmd) {
  auto* cmd = bench_cmd.add_subcommand(
      "spec", "Speculative decoding: verify-pass cost and speedup over plain greedy decode");
  struct Opts {
    KVTypeOptions kvt;
    KVCalibOptions kv_calib;
    std::string model, draft;
    bool json = false, no_replay = false;
    bench::SpecBenchOptions b;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "Target GGUF model")->required();
  cmd->add_option("--draft", o->draft,
                  "Draft model: its cost is paid every step (with replay) or its proposals used");
  cmd->add_option("--spec-k", o->b.k, "Draft tokens per step (default 4)");
  cmd->add_option("-n", o->b.n, "Tokens generated per run (default 128)");
  cmd->add_option("--prompt", o->b.prompt, "Prompt tokens (default 32)");
  cmd->add_option("--reps", o->b.reps, "Repetitions (default 3)");
  cmd->add_option("--passes", o->b.passes, "Verify figure: passes per repetition (default 16)");
  cmd->add_option("--replay-corrupt", o->b.corrupt,
                  "Replay the target's own output with each proposed token wrong at this rate "
                  "(default 0.2: per-token acceptance 0.8)");
  cmd->add_option("--spec-warn-acceptance", o->b.warn_acceptance,
                  "Fall back to plain decoding below this acceptance, as the engine does when "
                  "serving (default 0: never, to measure speculation itself; 0.6 measures the "
                  "fallback)");
  cmd->add_flag("--no-replay", o->no_replay, "Use the draft model's own proposals");
  cmd->add_option("-t,--threads", o->b.threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "One JSON object with every figure");
  add_kv_type_options(cmd, o->kvt);
  add_kv_calib_options(cmd, o->kv_calib);
  return [o]() {
    o->b.kv_type = resolve_kv_type(o->kvt);
    check_kv_calib(o->kv_calib);
    o->b.replay = !o->no_replay;
    if (!(o->b.corrupt >= 0 && o->b.corrupt <= 1))
      fail("--replay-corrupt: expected a rate in [0, 1], got {}", o->b.corrupt);
    if (!(o->b.warn_acceptance >= 0 && o->b.warn_acceptance <= 1))
      fail("--spec-warn-acceptance: expected a rate in [0, 1], got {}", o->b.warn_acceptance);
    check_model_path(o->model, "model");
    if (!o->draft.empty()) check_model_path(o->draft, "draft model");
    auto model = Model::load(o->model);
    std::unique_ptr<Model> draft;
    if (!o->draft.empty()) draft = Model::load(o->draft);
    o->b.draft = draft.get();
    o->b.key_transform = resolve_key_transform(o->kv_calib, *model, o->b.threads, o->b.kv_type.k);
    const bench::SpecBenchResult r = bench::run_spec_bench(*model, o->b);
    ThreadPool probe(o->b.threads);
    auto sum = [](const bench::Summary& x) {
      return nlohmann::json{{"median", x.median}, {"min", x.min}, {"max", x.max}};
    };
    if (o->json) {
      nlohmann::json j = {{"name", "spec"},
                          {"model", o->model},
                          {"draft", o->draft},
                          {"dtype", std::string(dtype_name(model->weight_type()))},
                          {"threads", probe.size()},
                          {"k", o->b.k},
                          {"n", o->b.n},
                          {"replay", o->b.replay},
                          {"corrupt", o->b.corrupt},
                          {"decode_pass_s", sum(r.decode_pass_s)},
                          {"verify_pass_s", sum(r.verify_pass_s)},
                          {"verify_ratio", r.verify_ratio},
                          {"plain_tok_s", sum(r.plain_tok_s)},
                          {"spec_tok_s", sum(r.spec_tok_s)},
                          {"speedup", sum(r.speedup)},
                          {"acceptance", r.acceptance},
                          {"tokens_per_pass", r.tokens_per_pass},
                          {"warn_acceptance", o->b.warn_acceptance},
                          {"judged_per_token", r.judged_per_token}};
      fmt::print("{}\n", j.dump());
      return 0;
    }
    fmt::print("kvasir bench spec: {} ({}), draft {}, K {}, {} threads, {} reps, {}\n", o->model,
               dtype_name(model->weight_type()), o->draft.empty() ? "none" : o->draft, o->b.k,
               probe.size(), o->b.reps,
               o->b.replay ? fmt::format("replay with {:.0f}% of proposed tokens corrupted",
                                         o->b.corrupt * 100)
                           : std::string("the draft's own proposals"));
    auto row = [](const char* name, const bench::Summary& x, const char* unit, double scale) {
      fmt::print("{:<22} {:>10.3f} {:>10.3f} {:>10.3f}  {}\n", name, x.median * scale,
                 x.min * scale, x.max * scale, unit);
    };
    fmt::print("{:<22} {:>10} {:>10} {:>10}\n", "figure", "median", "min", "max");
    row("decode pass (1 tok)", r.decode_pass_s, "ms", 1e3);
    row(fmt::format("verify pass ({} tok)", o->b.k + 1).c_str(), r.verify_pass_s, "ms", 1e3);
    fmt::print("{:<22} {:>10.3f}  (verify / decode, medians)\n", "verify cost", r.verify_ratio);
    row("plain decode", r.plain_tok_s, "tok/s", 1);
    row("speculative decode", r.spec_tok_s, "tok/s", 1);
    row("speedup", r.speedup, "x", 1);
    fmt::print("{:<22} {:>10.3f}  (accepted / proposed)\n", "acceptance", r.acceptance);
    fmt::print("{:<22} {:>10.3f}\n", "tokens per pass", r.tokens_per_pass);
    fmt::print("{:<22} {:>10.3f}  ({})\n", "judged per token", r.judged_per_token,
               o->b.warn_acceptance > 0
                   ? fmt::format("fallback below acceptance {}", o->b.warn_acceptance)
                   : std::string("fallback off"));
    return 0;
  };
}

Runner add_bench_grammar(CLI::App& bench_cmd) {
  auto* cmd = bench_cmd.add_subcommand(
      "grammar", "Constrained decoding: decode-step time with and without a grammar");
  struct Opts {
    std::string model, grammar_file;
    bool json = false;
    bench::GrammarBenchOptions b;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--grammar-file", o->grammar_file,
                  "GBNF grammar (default: a JSON object with unbounded strings)");
  cmd->add_option("--batch", o->b.batch, "Concurrent requests (default 16)");
  cmd->add_option("-n", o->b.n, "Tokens per request (default 64)");
  cmd->add_option("--prompt", o->b.prompt, "Prompt tokens per request (default 16)");
  cmd->add_option("--reps", o->b.reps, "Repetitions, plain and constrained alternated (default 3)");
  cmd->add_option("-t,--threads", o->b.threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "One JSON object with every figure");
  return [o]() {
    check_model_path(o->model, "model");
    if (!o->grammar_file.empty()) o->b.grammar = read_input_file(o->grammar_file, "--grammar-file");
    auto model = Model::load(o->model);
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    const bench::GrammarBenchResult r = bench::run_grammar_bench(*model, tok, o->b);
    ThreadPool probe(o->b.threads);
    auto sum = [](const bench::Summary& x) {
      return nlohmann::json{{"median", x.median}, {"min", x.min}, {"max", x.max}};
    };
    if (o->json) {
      nlohmann::json j = {{"name", "grammar"},
                          {"model", o->model},
                          {"dtype", std::string(dtype_name(model->weight_type()))},
                          {"n_vocab", tok.n_vocab()},
                          {"threads", probe.size()},
                          {"batch", o->b.batch},
                          {"n", o->b.n},
                          {"plain_step_s", sum(r.plain_step_s)},
                          {"constrained_step_s", sum(r.constrained_step_s)},
                          {"overhead", sum(r.overhead)},
                          {"mask_share", sum(r.mask_share)},
                          {"masks_computed", r.masks_computed},
                          {"mask_cache_hits", r.mask_cache_hits},
                          {"mean_batch", r.mean_batch},
                          {"counted_steps", r.counted_steps}};
      fmt::print("{}\n", j.dump());
      return 0;
    }
    fmt::print(
        "kvasir bench grammar: {} ({}, vocabulary {}), batch {}, {} tokens, {} threads, "
        "{} reps\n",
        o->model, dtype_name(model->weight_type()), tok.n_vocab(), o->b.batch, o->b.n, probe.size(),
        o->b.reps);
    auto row = [](const char* name, const bench::Summary& x, const char* unit, double scale) {
      fmt::print("{:<24} {:>10.3f} {:>10.3f} {:>10.3f}  {}\n", name, x.median * scale,
                 x.min * scale, x.max * scale, unit);
    };
    fmt::print("{:<24} {:>10} {:>10} {:>10}\n", "figure", "median", "min", "max");
    row("plain decode step", r.plain_step_s, "ms", 1e3);
    row("constrained decode step", r.constrained_step_s, "ms", 1e3);
    row("overhead", r.overhead, "% of a plain step", 1e2);
    row("engine mask time", r.mask_share, "% of a plain step", 1e2);
    fmt::print(
        "{:<24} {:>10} computed, {} from the cache ({:.1f}% hits)\n", "masks", r.masks_computed,
        r.mask_cache_hits,
        100.0 * static_cast<double>(r.mask_cache_hits) /
            static_cast<double>(std::max<uint64_t>(1, r.masks_computed + r.mask_cache_hits)));
    fmt::print("{:<24} {:>10.1f}  ({} constrained steps counted)\n", "mean batch", r.mean_batch,
               r.counted_steps);
    return 0;
  };
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Throughput benchmark: pp, tg, batched tg, bandwidth");
  struct Opts {
    KVTypeOptions kvt;
    KVCalibOptions kv_calib;
    std::string model, batches = "8,16,64";
    int threads = 0;
    bool json = false, bandwidth_only = false;
    double bandwidth_mib = 0;
    bench::BenchOptions b;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model");
  cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  cmd->add_flag("--json", o->json, "One JSON object per result line");
  cmd->add_option("--reps", o->b.reps, "Timed repetitions after the warm-up (default 3)");
  cmd->add_option("--pp", o->b.pp, "Prompt length of the prefill figure; 0 skips (default 512)");
  cmd->add_option("--tg", o->b.tg, "Decode steps per sequence; 0 skips decode (default 128)");
  cmd->add_option("--batches", o->batches,
                  "Batched decode sizes, comma-separated; '' or 0 skips (default 8,16,64)");
  cmd->add_option("--ctx-prefill", o->b.ctx_prefill,
                  "Also measure tg with this many tokens already cached (e.g. 2048)");
  cmd->add_option("--tg-prompt", o->b.tg_prompt, "Prompt tokens before tg (default 16)");
  cmd->add_option("--batch-prompt", o->b.batch_prompt,
                  "Prompt tokens per sequence before batched decode (default 128)");
  add_kv_type_options(cmd, o->kvt);
  add_kv_calib_options(cmd, o->kv_calib);
  cmd->add_flag("--bandwidth", o->bandwidth_only,
                "Run only the memory-bandwidth probe (no model needed)");
  cmd->add_option("--bandwidth-mib", o->bandwidth_mib,
                  "Probe buffer size in MiB (default: max(1 GiB, 8 x last-level cache))");
  Runner serve = add_bench_serve(*cmd);
  auto* serve_cmd = cmd->get_subcommand("serve");
  Runner spec = add_bench_spec(*cmd);
  auto* spec_cmd = cmd->get_subcommand("spec");
  Runner grammar = add_bench_grammar(*cmd);
  auto* grammar_cmd = cmd->get_subcommand("grammar");
  return [o, serve, serve_cmd, spec, spec_cmd, grammar, grammar_cmd]() {
    if (serve_cmd->parsed()) return serve();
    if (spec_cmd->parsed()) return spec();
    if (grammar_cmd->parsed()) return grammar();
    o->b.batches = parse_batches(o->batches);
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    o->b.kv_type = kvt;
    check_kv_calib(o->kv_calib);
    if (o->bandwidth_mib < 0) fail("--bandwidth-mib must be >= 0, got {}", o->bandwidth_mib);
    o->b.bandwidth_bytes = static_cast<size_t>(o->bandwidth_mib * 1024 * 1024);
    if (o->model.empty() && !o->bandwidth_only)
      fail("bench: -m/--model is required (or --bandwidth alone for the bandwidth probe)");
    if (o->threads < 0) fail("--threads must be >= 0, got {}", o->threads);
    bench::validate(o->b, nullptr);

    ThreadPool pool(o->threads);
    Labels labels;
    labels.threads = pool.size();
    auto on_result = [&](const bench::BenchResult& r) {
      if (o->json) {
        fmt::print("{}\n", to_json(r, labels).dump());
        std::fflush(stdout);
      } else {
        print_row(r);
      }
    };
    auto header = [&]() {
      if (!o->json)
        fmt::print("{:<12} {:>3} {:>10} {:>10} {:>10}  {:<6} {:>8}\n", "name", "n", "median", "min",
                   "max", "unit", "roofline");
    };

    if (o->bandwidth_only) {
      if (!o->json)
        fmt::print("kvasir bench --bandwidth: {} threads, {} reps\n", labels.threads, o->b.reps);
      header();
      on_result(bench::run_bandwidth(pool, o->b));
      return 0;
    }

    auto model = Model::load(o->model);
    bench::validate(o->b, model.get());
    o->b.key_transform = resolve_key_transform(o->kv_calib, *model, o->threads, kvt.k);
    labels.model = model->config().name.empty() ? std::filesystem::path(o->model).stem().string()
                                                : model->config().name;
    labels.dtype = std::string(dtype_name(model->weight_type()));
    if (!o->json) {
      fmt::print(
          "kvasir bench: {} ({}, {}), {} threads, {} reps after a warm-up, KV {}{}\n", labels.model,
          labels.dtype, o->model, labels.threads, o->b.reps, o->b.kv_type.name(),
          o->b.key_transform ? ", keys through a key transform (" + o->b.key_transform->source + ")"
                             : "");
      fmt::print(
          "weights streamed per decode step: {:.1f} MB; roofline = tok/s x bytes per "
          "step / (seqs x bandwidth)\n",
          static_cast<double>(bench::streamed_weight_bytes(*model)) / 1e6);
    }
    header();
    bench::run_model_bench(*model, pool, o->b, on_result);
    return 0;
  };
}

}  // namespace kvasir::cli
