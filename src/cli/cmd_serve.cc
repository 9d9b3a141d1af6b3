// kvasir serve -m FILE [--host H] [--port P] [--memory SIZE] [engine and pricing options]: serves
// the model over an OpenAI-compatible HTTP API until SIGINT/SIGTERM, then stops taking requests
// (503), lets those in flight finish for up to --shutdown-grace seconds, and exits.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "kvasir/engine.h"
#include "kvasir/engine/memory_plan.h"
#include "kvasir/model/model.h"
#include "kvasir/server/http_server.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/error.h"

namespace kvasir::cli {

namespace {
std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

Runner add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  struct Opts {
    std::string model, host = "127.0.0.1", memory, kv_dtype = "f16", api_key_file, model_name,
                       chat_template;
    int port = 8080, max_seqs = 64, max_batched_tokens = 512, ctx = 0, max_queue = 256, threads = 0,
        http_threads = 0;
    bool static_batching = false, static_no_padding = false, no_prefix_caching = false,
         log_requests = false;
    double price_input = 0, price_output = 0, price_cached = -1, shutdown_grace = 10;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--host", o->host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "Port (default 8080; 0: any free port)");
  cmd->add_option("--memory", o->memory,
                  "Memory budget for weights + KV cache (e.g. 8GiB; default: 90% of the "
                  "available memory)");
  cmd->add_option("--max-seqs", o->max_seqs, "Sequences running at once (default 64)");
  cmd->add_option("--max-batched-tokens", o->max_batched_tokens, "Tokens per step (default 512)");
  cmd->add_option("-c,--ctx", o->ctx, "Max tokens per sequence (default: the model's context)");
  cmd->add_option("--kv-dtype,--kv-type", o->kv_dtype, "KV cache dtype: f16 (default) or f32");
  cmd->add_option("--api-key-file", o->api_key_file,
                  "File of accepted API keys, one per line (enables bearer auth on /v1)");
  cmd->add_option("--price-input", o->price_input, "USD per 1M prompt tokens");
  cmd->add_option("--price-output", o->price_output, "USD per 1M generated tokens");
  cmd->add_option("--price-cached", o->price_cached,
                  "USD per 1M prompt tokens from the prefix cache (default: --price-input)");
  cmd->add_option("--model-name", o->model_name, "Model id clients use (default: the file stem)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Jinja chat template file (default: the GGUF's tokenizer.chat_template)");
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
  cmd->add_option("--http-threads", o->http_threads,
                  "HTTP worker threads (default: max-seqs + max-queue + 16)");
  cmd->add_option("--shutdown-grace", o->shutdown_grace,
                  "Seconds to let requests finish on SIGINT/SIGTERM (default 10)");
  cmd->add_flag("--log-requests", o->log_requests, "Log every HTTP request on stderr");
  return [o]() {
    auto kvt = dtype_from_name(o->kv_dtype);
    if (!kvt || (*kvt != DType::F16 && *kvt != DType::F32))
      fail("--kv-dtype: expected f16 or f32, got '{}'", o->kv_dtype);
    if (o->port < 0 || o->port > 65535) fail("--port: expected 0..65535, got {}", o->port);

    // SIGINT/SIGTERM are taken by sigwait() below: block them before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    auto model = Model::load(o->model);
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    const ModelConfig& mc = model->config();
    if (tok.n_vocab() != mc.n_vocab)
      fail("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", o->model,
           tok.n_vocab(), mc.n_vocab);

    EngineConfig ec;
    ec.max_seqs = o->max_seqs;
    ec.max_batched_tokens = o->max_batched_tokens;
    ec.max_model_len = o->ctx > 0 ? o->ctx : mc.ctx_train;
    ec.kv_type = *kvt;
    ec.static_batching = o->static_batching;
    ec.static_padding = !o->static_no_padding;
    if (o->static_no_padding && !o->static_batching)
      fail("--static-no-padding only applies with --static-batching");
    ec.prefix_caching = !o->no_prefix_caching;
    ec.threads = o->threads;
    warn_if_past_trained_context(ec.max_model_len, mc.ctx_train);
    {
      PlanOptions po;
      if (!o->memory.empty()) {
        po.memory_bytes = parse_size(o->memory, "--memory");
      } else if (auto avail = default_memory_budget()) {
        po.memory_bytes = *avail;
      } else {
        fail("--memory: cannot read the available memory from /proc/meminfo; pass --memory");
      }
      po.ctx = ec.max_model_len;
      po.max_seqs = ec.max_seqs;
      po.max_batched_tokens = ec.max_batched_tokens;
      po.kv_type = ec.kv_type;
      po.block_size = ec.block_size;
      Plan plan = plan_memory(mc, static_cast<int64_t>(model->weight_bytes()), po);
      fmt::print(stderr, "{}", describe_plan(plan));
      ec.kv_blocks = plan.kv_blocks;
    }

    server::ServerConfig sc;
    sc.model_name =
        o->model_name.empty() ? std::filesystem::path(o->model).stem().string() : o->model_name;
    if (!o->chat_template.empty()) {
      sc.chat_template = read_file_text(o->chat_template);
    } else {
      sc.chat_template = model->file().get_string("tokenizer.chat_template", "");
    }
    if (!o->api_key_file.empty()) sc.api_keys = server::ApiKeys::load(o->api_key_file);
    sc.prices.input = o->price_input;
    sc.prices.output = o->price_output;
    sc.prices.cached_input = o->price_cached;
    sc.max_queue = o->max_queue;
    sc.http_threads = o->http_threads;
    sc.log_requests = o->log_requests;

    Engine engine(*model, tok, ec);
    server::HttpServer http(engine, tok, sc);
    const int port = http.bind(o->host, o->port);
    http.start();
    fmt::print(stderr,
               "[kvasir] serving '{}' on http://{}:{} (ctx {}, max {} sequences, {} API keys, "
               "chat template: {})\n",
               sc.model_name, o->host, port, engine.max_model_len(), ec.max_seqs,
               sc.api_keys.size(), sc.chat_template.empty() ? "none" : "yes");
    std::fflush(stderr);

    int sig = 0;
    sigwait(&sigs, &sig);
    fmt::print(stderr, "[kvasir] signal {}: shutting down (grace {} s)\n", sig, o->shutdown_grace);
    http.begin_shutdown();
    if (!http.wait_idle(o->shutdown_grace))
      fmt::print(stderr, "[kvasir] {} requests still running: aborting them\n", http.in_flight());
    http.stop();
    return 0;
  };
}

}  // namespace kvasir::cli
