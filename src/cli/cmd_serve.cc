// kvasir serve [-m] FILE [--host H] [--port P] [--memory SIZE] [engine and pricing options]:
// serves the model over an OpenAI-compatible HTTP API until SIGINT/SIGTERM, then stops taking
// requests (503), lets those in flight finish for up to --shutdown-grace seconds, and exits.
// vLLM's and llama-server's spellings work too (`serve MODEL`, --max-model-len, --ctx-size,
// --max-num-seqs, --served-model-name, --api-key, --threads-http). Every input file (model, key
// file, chat template) is checked before anything loads.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/engine.h"
#include "kvasir/engine/memory_plan.h"
#include "kvasir/engine/pooling.h"
#include "kvasir/model/model.h"
#include "kvasir/server/http_server.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/build_info.h"
#include "kvasir/util/error.h"
#include "kvasir/util/log.h"

namespace kvasir::cli {

Runner add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  struct Opts {
    KVTypeOptions kvt;
    SpecOptions spec;
    std::string model, host = "127.0.0.1", memory, api_key_file, model_name, chat_template,
                       tool_call_parser, max_body = "32MiB", ssl_cert_file, ssl_key_file,
                       log_format = "text", log_level = "info", pooling;
    int port = 8080, max_seqs = 64, max_batched_tokens = 512, ctx = 0, max_queue = 256, threads = 0,
        http_threads = 0;
    bool static_batching = false, static_no_padding = false, no_prefix_caching = false,
         log_requests = true, reuse_port = false, metrics_require_key = false;
    std::vector<std::string> api_keys, cors;
    double price_input = 0, price_output = 0, price_cached = -1, shutdown_grace = 10,
           header_timeout = 10, body_timeout = 60, write_timeout = 30, idle_timeout = 30;
    int max_connections = 4096, max_connections_per_client = 1024;
  };
  auto o = std::make_shared<Opts>();
  add_model_option(cmd, o->model, /*positional=*/true);
  cmd->add_option("--host", o->host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "Port (default 8080; 0: any free port)");
  cmd->add_option("--memory", o->memory,
                  "Memory budget for weights + KV cache (e.g. 8GiB; default: 90% of the "
                  "available memory)");
  cmd->add_option("--max-seqs,--max-num-seqs", o->max_seqs,
                  "Sequences running at once (default 64)");
  cmd->add_option("--max-batched-tokens,--max-num-batched-tokens", o->max_batched_tokens,
                  "Tokens per step (default 512)");
  cmd->add_option("-c,--ctx,--ctx-size,--max-model-len", o->ctx,
                  "Max tokens per sequence (default: the model's context)");
  add_kv_type_options(cmd, o->kvt);
  add_spec_options(cmd, o->spec);
  cmd->add_option("--api-key-file", o->api_key_file,
                  "File of accepted API keys, one per line (enables bearer auth on /v1)");
  cmd->add_option("--api-key", o->api_keys,
                  "An accepted API key (repeatable; adds to --api-key-file's keys). A command "
                  "line is visible to other local users: prefer KVASIR_API_KEY or a key file")
      ->allow_extra_args(false);
  cmd->add_option("--price-input", o->price_input, "USD per 1M prompt tokens");
  cmd->add_option("--price-output", o->price_output, "USD per 1M generated tokens");
  cmd->add_option("--price-cached", o->price_cached,
                  "USD per 1M prompt tokens from the prefix cache (default: --price-input)");
  cmd->add_option("--model-name,--served-model-name,--alias", o->model_name,
                  "Model id clients use (default: the file stem)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Jinja chat template: a file, or a built-in name (" +
                      chat::builtin_template_names() +
                      "); a file of that name wins (default: the GGUF's tokenizer.chat_template)");
  cmd->add_option("--tool-call-parser", o->tool_call_parser,
                  "How the model writes tool calls: hermes, llama3, mistral, mistral-v11, granite, "
                  "deepseek or none (refuses tool calls) (default: detected from the chat "
                  "template)");
  cmd->add_option("--pooling", o->pooling,
                  "How /v1/embeddings pools an input's final hidden states into its vector: mean, "
                  "cls (the first token's), last (the last token's) or none (refuses the endpoint) "
                  "(default: the GGUF's <arch>.pooling_type, else mean)");
  cmd->add_option("--max-queue", o->max_queue,
                  "Waiting requests before answering 429 (default 256; 0: no limit)");
  cmd->add_flag("--static-batching", o->static_batching,
                "For comparison: request-level static batching, as a padded batch runs it (a new "
                "batch is admitted only when the running one finished; finished rows stay in the "
                "batch as padding until then)");
  cmd->add_flag("--static-no-padding", o->static_no_padding,
                "With --static-batching: drop finished rows (the batch shrinks as they finish)");
  cmd->add_flag("--no-prefix-caching", o->no_prefix_caching, "Disable automatic prefix caching");
  cmd->add_option("-t,--threads", o->threads, "Compute threads (default: all cores)");
  cmd->add_option("--http-threads,--threads-http", o->http_threads,
                  "HTTP worker threads (default: max-seqs + max-queue + 16)");
  cmd->add_option("--shutdown-grace", o->shutdown_grace,
                  "Seconds to let requests finish on SIGINT/SIGTERM (default 10)");
  cmd->add_flag("--log-requests,!--no-log-requests", o->log_requests,
                "One access-log line per request: method, route, status, tokens, TTFT, duration, "
                "API key label (never the key) (default on)");
  cmd->add_option("--log-format", o->log_format, "Log lines: text (default) or json");
  cmd->add_option("--log-level", o->log_level, "debug, info (default), warn, error or off");
  cmd->add_flag("--reuse-port", o->reuse_port,
                "Let other processes listen on the same port (SO_REUSEPORT; they then share its "
                "connections). Off by default: a second server on a taken port fails");
  cmd->add_option("--cors", o->cors,
                  "Origins allowed to call the API from a browser (comma-separated or repeated; "
                  "'*': any). Default: none (no CORS headers)")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--ssl-cert-file,--ssl-certfile", o->ssl_cert_file,
                  "PEM certificate (chain): serve HTTPS (with --ssl-key-file)");
  cmd->add_option("--ssl-key-file,--ssl-keyfile", o->ssl_key_file, "PEM private key for HTTPS");
  cmd->add_option("--max-body", o->max_body, "Largest request body (default 32MiB)");
  cmd->add_option("--header-timeout", o->header_timeout,
                  "Seconds a client has to send a request's head (default 10)");
  cmd->add_option("--body-timeout", o->body_timeout,
                  "Seconds a client has to send a request's body (default 60)");
  cmd->add_option("--write-timeout,--timeout", o->write_timeout,
                  "Seconds a client may take to accept a response write before it is cut off "
                  "and its request aborted (default 30)");
  cmd->add_option("--idle-timeout", o->idle_timeout,
                  "Seconds a kept-alive connection may idle between requests (default 30)");
  cmd->add_option("--max-connections", o->max_connections,
                  "Open connections in all (default 4096)");
  cmd->add_option("--max-connections-per-client", o->max_connections_per_client,
                  "Open connections from one client address (default 1024)");
  cmd->add_flag("--metrics-require-key", o->metrics_require_key,
                "/metrics asks for an API key too (it shows spend per key label, never keys)");
  return [o]() {
    log::configure(log::parse_level(o->log_level), log::parse_format(o->log_format));
    const KVCacheType kvt = resolve_kv_type(o->kvt);
    SpecConfig spec = resolve_spec(o->spec);
    if (o->port < 0 || o->port > 65535) fail("--port: expected 0..65535, got {}", o->port);
    std::optional<Pooling> pooling;
    if (!o->pooling.empty() && !(pooling = parse_pooling(o->pooling)))
      fail("--pooling: expected mean, cls, last or none, got '{}'", o->pooling);
    if (o->static_no_padding && !o->static_batching)
      fail("--static-no-padding only applies with --static-batching");
    if (o->ssl_cert_file.empty() != o->ssl_key_file.empty())
      fail("--ssl-cert-file and --ssl-key-file go together: give both or neither");
    for (auto [v, name] : {std::pair{o->header_timeout, "--header-timeout"},
                           {o->body_timeout, "--body-timeout"},
                           {o->write_timeout, "--write-timeout"},
                           {o->idle_timeout, "--idle-timeout"},
                           {o->shutdown_grace, "--shutdown-grace"}})
      if (!(v > 0) || v > 86400) fail("{}: expected seconds in (0, 86400], got {}", name, v);
    if (o->max_connections < 1 || o->max_connections_per_client < 1)
      fail("--max-connections and --max-connections-per-client must be at least 1");
    const int64_t max_body = parse_size(o->max_body, "--max-body");
    if (max_body < 1) fail("--max-body: expected a positive size, got '{}'", o->max_body);
    if (!o->ssl_cert_file.empty()) {
      check_input_file(o->ssl_cert_file, "TLS certificate");
      check_input_file(o->ssl_key_file, "TLS private key");
    }
    // Every input file before any work (loading, planning): a typo fails at once.
    check_model_path(o->model, "model");
    server::ApiKeys api_keys = collect_api_keys(o->api_keys, o->api_key_file);
    ChatTemplateChoice tmpl = choose_chat_template(o->chat_template, "--chat-template");
    PlanOptions po;
    if (!o->memory.empty()) {
      po.memory_bytes = parse_size(o->memory, "--memory");
    } else if (auto avail = default_memory_budget()) {
      po.memory_bytes = *avail;
    } else {
      fail("--memory: cannot read the available memory from /proc/meminfo; pass --memory");
    }

    // A taken port fails now, not after the model loaded (seconds to minutes for a big one).
    server::HttpServer::check_bindable(o->host, o->port, o->reuse_port);

    // SIGINT/SIGTERM are taken by sigwait() below: block them before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    auto model = Model::load(o->model);
    std::unique_ptr<Model> draft;
    load_draft(o->spec, spec, draft);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    const ModelConfig& mc = model->config();
    if (tok.n_vocab() != mc.n_vocab)
      fail("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", o->model,
           tok.n_vocab(), mc.n_vocab);

    EngineConfig ec;
    ec.max_seqs = o->max_seqs;
    ec.max_batched_tokens = o->max_batched_tokens;
    ec.max_model_len = o->ctx > 0 ? o->ctx : mc.ctx_train;
    ec.kv_type = kvt;
    ec.static_batching = o->static_batching;
    ec.static_padding = !o->static_no_padding;
    ec.prefix_caching = !o->no_prefix_caching;
    ec.threads = o->threads;
    ec.spec = spec;
    warn_if_past_trained_context(ec.max_model_len, mc.ctx_train);
    {
      po.ctx = ec.max_model_len;
      po.max_seqs = ec.max_seqs;
      po.max_batched_tokens = ec.max_batched_tokens;
      po.kv_type = ec.kv_type;
      po.block_size = ec.block_size;
      // A draft's weights come out of the budget, and its KV cache (as many blocks as the
      // target's) out of the KV share, in proportion to their bytes per token.
      const int64_t draft_weights = draft ? static_cast<int64_t>(draft->weight_bytes()) : 0;
      Plan plan = plan_memory(mc, static_cast<int64_t>(model->weight_bytes()) + draft_weights, po);
      const std::string text = describe_plan(plan);
      for (size_t a = 0, b; a < text.size(); a = b + 1) {
        b = text.find('\n', a);
        if (b == std::string::npos) b = text.size();
        if (b > a) log::info("{}", std::string_view(text).substr(a, b - a));
      }
      ec.kv_blocks = plan.kv_blocks;
      if (draft) {
        const int64_t t = kv_bytes_per_token(mc, kvt), d = kv_bytes_per_token(draft->config(), kvt);
        const int64_t fit = plan.kv_blocks_fit * t / (t + d);
        if (fit < plan.blocks_per_seq)
          fail(
              "--memory: with the draft model's KV cache the budget no longer holds one "
              "{}-token sequence; give more memory or a shorter context",
              plan.ctx);
        ec.kv_blocks = std::min(plan.kv_blocks, fit);
        log::info("draft model {}: {} of weights, KV {} B per token ({} blocks, as the target)",
                  o->spec.draft, format_size(draft_weights), d, ec.kv_blocks);
      }
      if (spec.enabled())
        log::info("speculative decoding: {}, K {}", spec_method_name(spec.method),
                  spec.k > 0 ? std::to_string(spec.k) : std::string("auto"));
    }

    server::ServerConfig sc;
    if (o->model_name.empty()) {
      // A GGUF file's stem, a Hugging Face folder's name (a trailing '/' allowed).
      std::filesystem::path p = std::filesystem::path(o->model).lexically_normal();
      if (p.filename().empty()) p = p.parent_path();
      sc.model_name = std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
    } else {
      sc.model_name = o->model_name;
    }
    std::string template_label = "none";
    if (!tmpl.empty()) {
      // A built-in writes BOS where llama.cpp's tokenizer would add it (builtin_templates.h).
      sc.chat_template = tmpl.source(tok.add_bos());
      template_label = tmpl.label();
    } else {
      sc.chat_template = model->file().get_string("tokenizer.chat_template", "");
      if (!sc.chat_template.empty()) template_label = "the GGUF's";
    }
    sc.tool_call_parser = o->tool_call_parser;
    if (!pooling) {
      if (mc.pooling_type < 0) {
        pooling = Pooling::kMean;
      } else if (!(pooling = pooling_from_gguf(mc.pooling_type))) {
        log::warn(
            "{}: {}.pooling_type = {} ({}) is not supported: /v1/embeddings pools with mean; "
            "choose with --pooling",
            o->model, mc.arch, mc.pooling_type, mc.pooling_type == 4 ? "rank" : "unknown");
        pooling = Pooling::kMean;
      }
    }
    sc.embedding_pooling = *pooling;
    sc.api_keys = std::move(api_keys);
    sc.prices.input = o->price_input;
    sc.prices.output = o->price_output;
    sc.prices.cached_input = o->price_cached;
    sc.max_queue = o->max_queue;
    sc.http_threads = o->http_threads;
    sc.log_requests = o->log_requests;
    sc.metrics_require_key = o->metrics_require_key;
    sc.cors_origins = o->cors;
    sc.transport.reuse_port = o->reuse_port;
    sc.transport.max_body_bytes = static_cast<size_t>(max_body);
    sc.transport.header_timeout_s = o->header_timeout;
    sc.transport.body_timeout_s = o->body_timeout;
    sc.transport.write_timeout_s = o->write_timeout;
    sc.transport.idle_timeout_s = o->idle_timeout;
    sc.transport.max_connections = o->max_connections;
    sc.transport.max_connections_per_client = o->max_connections_per_client;
    sc.transport.tls_cert_file = o->ssl_cert_file;
    sc.transport.tls_key_file = o->ssl_key_file;
    server::ModelInfo& mi = sc.model_info;
    mi.n_ctx_train = mc.ctx_train;
    mi.n_vocab = mc.n_vocab;
    for (const auto& t : model->file().tensors()) mi.n_params += t.n_elements();
    mi.size_bytes = static_cast<int64_t>(model->weight_bytes());
    mi.weight_type = std::string(dtype_name(model->weight_type()));
    mi.kv_type = ec.kv_type.name();
    {
      const BuildInfo& b = build_info();
      mi.version = fmt::format("{} ({}, {}, {})", b.version, b.commit, b.build_type, b.compiler);
    }

    Engine engine(*model, tok, ec);
    mi.backend = engine.backend_description();
    server::HttpServer http(engine, tok, sc);
    const int port = http.bind(o->host, o->port);
    http.start();
    log::write(log::Level::kInfo, "",
               fmt::format("serving '{}' on {}://{}:{}", sc.model_name,
                           sc.transport.tls_cert_file.empty() ? "http" : "https", o->host, port),
               {{"ctx", engine.max_model_len()},
                {"max_seqs", ec.max_seqs},
                {"api_keys", static_cast<int64_t>(sc.api_keys.size())},
                {"chat_template", template_label},
                {"pooling", pooling_name(sc.embedding_pooling)},
                {"backend", mi.backend},
                {"version", mi.version}});

    int sig = 0;
    sigwait(&sigs, &sig);
    log::info("signal {}: shutting down (grace {} s)", sig, o->shutdown_grace);
    http.begin_shutdown();
    if (!http.wait_idle(o->shutdown_grace))
      log::warn("{} requests still running after the grace period: aborting them",
                http.in_flight());
    // What is left gets its final events within a short drain, then every connection closes.
    http.stop(/*drain_s=*/0.5);
    log::info("stopped");
    return 0;
  };
}

}  // namespace kvasir::cli
