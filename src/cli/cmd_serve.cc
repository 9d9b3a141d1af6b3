// kvasir serve [-m] FILE [--host H] [--port P] [--memory SIZE] [engine and pricing options]:
// serves the model over an OpenAI-compatible HTTP API until SIGINT/SIGTERM, then stops taking
// requests (503), lets those in flight finish for up to --shutdown-grace seconds, and exits.
// vLLM's and llama-server's spellings work too (`serve MODEL`, --max-model-len, --ctx-size,
// --max-num-seqs, --served-model-name, --api-key, --threads-http). Every input file (model, key
// file, chat template) is checked before anything loads.
//
// Several models: -m repeated (PATH or NAME=PATH; the name defaults to the file stem), or
// [[model]] tables in the --config file (server/serve_config.h: per-model engine options,
// prices, sha256 and quantization pins). Each model gets its own engine and KV pool; one memory
// plan covers them all (plan_memory_shared) and a config that cannot fit is refused before
// anything loads beyond the weights' mmap. --route NAME (or [[route]] tables) adds a route
// between the smallest and the largest model (route_policy.h). Pins (the config's [require]
// engine range, a model's sha256 and quantization) are checked before the server starts; every
// model's sha256 is otherwise computed in the background and reported on /health, /v1/models and
// kvasir_model_info once known. --generation-config auto (the default) gives each model's
// requests that model's own sampling defaults (common.h) for the fields they leave unset.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kvasir/engine.h"
#include "kvasir/engine/memory_plan.h"
#include "kvasir/engine/pooling.h"
#include "kvasir/model/model.h"
#include "kvasir/server/http_server.h"
#include "kvasir/server/serve_config.h"
#include "kvasir/server/version_pin.h"
#include "kvasir/tokenizer/tokenizer.h"
#include "kvasir/util/build_info.h"
#include "kvasir/util/error.h"
#include "kvasir/util/log.h"
#include "kvasir/util/sha256.h"
#include "kvasir/util/timer.h"
#include "kvasir/util/version_range.h"

namespace kvasir::cli {

namespace {

struct ServeOpts {
  KVTypeOptions kvt;
  KVCalibOptions kv_calib;
  SpecOptions spec;
  std::vector<std::string> models, model_prices, route_keys;
  std::string route;
  int route_max_prompt_tokens = 0, route_fallover_waiting = 1;
  double route_max_difficulty = 0;
  std::string host = "127.0.0.1", memory, api_key_file, model_name, chat_template, tool_call_parser,
              max_body = "32MiB", ssl_cert_file, ssl_key_file, log_format = "text",
              log_level = "info", pooling, generation_config = "auto";
  int port = 8080, max_seqs = 64, max_batched_tokens = 512, ctx = 0, max_queue = 256, threads = 0,
      http_threads = 0;
  bool static_batching = false, static_no_padding = false, no_prefix_caching = false,
       log_requests = true, reuse_port = false, metrics_require_key = false, dry_run = false;
  std::vector<std::string> api_keys, cors;
  double price_input = 0, price_output = 0, price_cached = -1, shutdown_grace = 10,
         header_timeout = 10, body_timeout = 60, write_timeout = 30, idle_timeout = 30;
  int max_connections = 4096, max_connections_per_client = 1024;
};

// A model's sha256, computed in the background or before start (pinned).
class Digest {
 public:
  void set(std::string v) {
    std::lock_guard lk(mu_);
    value_ = std::move(v);
  }
  std::string get() const {
    std::lock_guard lk(mu_);
    return value_;
  }

 private:
  mutable std::mutex mu_;
  std::string value_;
};

// One model to serve, from -m or the config file, with its engine options and pins.
struct ServeModel {
  std::string name, path;
  server::Prices prices;
  int max_seqs = 64, max_batched_tokens = 512, ctx = 0;
  KVCacheType kv_type{};
  std::string chat_template, tool_call_parser, pooling;
  std::optional<std::string> pin_sha256, pin_quantization;
  double memory_share = 0;
};

struct ServeSetup {
  std::vector<ServeModel> models;
  std::vector<server::RoutePolicy> routes;
  std::optional<VersionRange> require_engine;
};

// The name of a model path: a GGUF file's stem, a Hugging Face folder's name (a trailing '/'
// allowed).
std::string default_model_name(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
}

int64_t n_params(const Model& m) {
  int64_t n = 0;
  for (const auto& t : m.file().tensors()) n += t.n_elements();
  return n;
}

void log_lines(const std::string& text) {
  for (size_t a = 0, b; a < text.size(); a = b + 1) {
    b = text.find('\n', a);
    if (b == std::string::npos) b = text.size();
    if (b > a) log::info("{}", std::string_view(text).substr(a, b - a));
  }
}

double parse_price(const std::string& v, const std::string& what) {
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size() && x >= 0 && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  fail("{}: expected a price in USD per 1M tokens (a number >= 0), got '{}'", what, v);
}

// The config file's [server] values for the flags the command line (or the environment) did not
// give.
void apply_server_section(const server::ServerSection& f, const CLI::App& cmd, ServeOpts& o) {
  auto unset = [&](const char* flag) { return cmd.get_option(flag)->count() == 0; };
  if (f.host && unset("--host")) o.host = *f.host;
  if (f.port && unset("--port")) o.port = *f.port;
  if (f.memory && unset("--memory")) o.memory = *f.memory;
  if (f.api_key_file && unset("--api-key-file")) o.api_key_file = *f.api_key_file;
  if (f.max_queue && unset("--max-queue")) o.max_queue = *f.max_queue;
  if (f.threads && unset("--threads")) o.threads = *f.threads;
}

ServeSetup serve_setup(ServeOpts& o, const CLI::App& cmd, const std::string& config_path) {
  ServeSetup s;
  std::optional<server::ServeConfigFile> file;
  if (!config_path.empty()) {
    std::vector<std::string> commands;
    for (const CLI::App* c : cmd.get_parent()->get_subcommands({}))
      commands.push_back(c->get_name());
    file = server::load_serve_config(config_path, commands);
    apply_server_section(file->server, cmd, o);
  }
  const KVCacheType kvt = resolve_kv_type(o.kvt);
  check_kv_calib(o.kv_calib);
  auto from_flags = [&](std::string name, std::string path) {
    ServeModel m;
    m.name = std::move(name);
    m.path = std::move(path);
    m.prices.input = o.price_input;
    m.prices.output = o.price_output;
    m.prices.cached_input = o.price_cached;
    m.max_seqs = o.max_seqs;
    m.max_batched_tokens = o.max_batched_tokens;
    m.ctx = o.ctx;
    m.kv_type = kvt;
    m.chat_template = o.chat_template;
    m.tool_call_parser = o.tool_call_parser;
    return m;
  };
  for (const std::string& v : o.models) {
    const size_t eq = v.find('=');
    // NAME=PATH, unless the whole value is an existing path (a file name may hold '=').
    if (eq != std::string::npos && eq > 0 && !std::filesystem::exists(v)) {
      s.models.push_back(from_flags(v.substr(0, eq), v.substr(eq + 1)));
    } else {
      s.models.push_back(from_flags(default_model_name(v), v));
    }
  }
  if (o.models.size() == 1 && !o.model_name.empty()) s.models.front().name = o.model_name;
  if (file) {
    s.require_engine = file->require_engine;
    for (const server::ModelEntry& e : file->models) {
      ServeModel m = from_flags(e.name, e.path);
      if (e.max_seqs) m.max_seqs = *e.max_seqs;
      if (e.max_batched_tokens) m.max_batched_tokens = *e.max_batched_tokens;
      if (e.ctx) m.ctx = *e.ctx;
      if (e.kv_dtype) {
        KVTypeOptions k;
        k.kv = *e.kv_dtype;
        m.kv_type = resolve_kv_type(k);
      }
      if (e.chat_template) m.chat_template = *e.chat_template;
      if (e.tool_call_parser) m.tool_call_parser = *e.tool_call_parser;
      if (e.pooling) m.pooling = *e.pooling;
      if (e.price_input) m.prices.input = *e.price_input;
      if (e.price_output) m.prices.output = *e.price_output;
      if (e.price_cached) m.prices.cached_input = *e.price_cached;
      m.pin_sha256 = e.sha256;
      m.pin_quantization = e.quantization;
      if (e.memory_share) m.memory_share = *e.memory_share;
      if (e.draft || e.spec_k) {
        if (file->models.size() + o.models.size() > 1)
          fail(
              "{}: draft / spec_k: speculative decoding with several models in one server is "
              "not supported yet; serve the speculating model alone",
              e.where);
        if (e.draft && cmd.get_option("--draft")->count() == 0) o.spec.draft = *e.draft;
        if (e.spec_k && cmd.get_option("--spec-k")->count() == 0) o.spec.k = *e.spec_k;
      }
      s.models.push_back(std::move(m));
    }
    s.routes = file->routes;
  }
  if (s.models.empty())
    fail("no model to serve: give one with -m (repeat for several) or [[model]] in --config");
  std::set<std::string> names;
  for (const ServeModel& m : s.models) {
    if (m.name.empty()) fail("-m: a model name is empty (NAME=PATH)");
    if (!names.insert(m.name).second)
      fail("-m: two models are named '{}'; name them apart as NAME=PATH", m.name);
  }
  for (const std::string& v : o.model_prices) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("--model-price: expected NAME=INPUT,OUTPUT[,CACHED], got '{}'", v);
    const std::string name = v.substr(0, eq);
    auto it = std::find_if(s.models.begin(), s.models.end(),
                           [&](const ServeModel& m) { return m.name == name; });
    if (it == s.models.end()) fail("--model-price {}: no model is named '{}'", v, name);
    std::vector<std::string> parts;
    for (size_t a = eq + 1, b;; a = b + 1) {
      b = v.find(',', a);
      parts.push_back(v.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
    }
    if (parts.size() < 2 || parts.size() > 3)
      fail("--model-price: expected NAME=INPUT,OUTPUT[,CACHED], got '{}'", v);
    it->prices.input = parse_price(parts[0], "--model-price " + name + " input");
    it->prices.output = parse_price(parts[1], "--model-price " + name + " output");
    it->prices.cached_input =
        parts.size() == 3 ? parse_price(parts[2], "--model-price " + name + " cached") : -1;
  }
  if (!o.route.empty()) {
    if (s.models.size() < 2) fail("--route {}: a route needs two models (-m twice)", o.route);
    // NAME=SMALL,LARGE, or NAME alone: small and large by parameter count, once loaded.
    server::RoutePolicy r;
    r.name = o.route;
    if (const size_t eq = o.route.find('='); eq != std::string::npos) {
      r.name = o.route.substr(0, eq);
      const std::string pair = o.route.substr(eq + 1);
      const size_t comma = pair.find(',');
      if (r.name.empty() || comma == std::string::npos || comma == 0 || comma + 1 == pair.size())
        fail("--route: expected NAME or NAME=SMALL,LARGE, got '{}'", o.route);
      r.small = pair.substr(0, comma);
      r.large = pair.substr(comma + 1);
    }
    r.max_small_prompt_tokens = o.route_max_prompt_tokens;
    r.max_small_difficulty = o.route_max_difficulty;
    r.fallover_waiting = o.route_fallover_waiting;
    if (r.max_small_prompt_tokens < 0)
      fail("--route-max-small-prompt-tokens: expected >= 0, got {}", r.max_small_prompt_tokens);
    if (!(r.max_small_difficulty >= 0))
      fail("--route-max-small-difficulty: expected >= 0, got {}", r.max_small_difficulty);
    if (r.fallover_waiting < 0)
      fail("--route-fallover-waiting: expected >= 0, got {}", r.fallover_waiting);
    for (const std::string& v : o.route_keys) {
      const size_t eq = v.find('=');
      const std::string choice = eq == std::string::npos ? "" : v.substr(eq + 1);
      if (eq == std::string::npos || eq == 0 ||
          (choice != "small" && choice != "large" && choice != "auto"))
        fail("--route-key: expected LABEL=small|large|auto, got '{}'", v);
      r.keys[v.substr(0, eq)] = choice;
    }
    s.routes.push_back(std::move(r));
  } else if (o.route_max_prompt_tokens != 0 || o.route_max_difficulty != 0 ||
             !o.route_keys.empty()) {
    fail("--route-max-small-*, --route-key: give the route a name with --route NAME");
  }
  return s;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");

  auto o = std::make_shared<ServeOpts>();
  cmd->add_option("model,-m,--model", o->models,
                  "GGUF model or Hugging Face folder (also as the first argument: kvasir serve "
                  "MODEL.gguf); repeat for several models, each as PATH or NAME=PATH")
      ->allow_extra_args(false);
  cmd->add_option(
         "--model-price", o->model_prices,
         "Prices of one model when several are served: NAME=INPUT,OUTPUT[,CACHED] (USD per "
         "1M tokens; repeatable; default: --price-input/--price-output/--price-cached)")
      ->allow_extra_args(false);
  cmd->add_option("--route", o->route,
                  "Add a route of this name (e.g. auto) between the smallest and the largest "
                  "model: requests naming it go to the small model unless a rule sends them to "
                  "the large one");
  cmd->add_option("--route-max-small-prompt-tokens", o->route_max_prompt_tokens,
                  "Route rule: longer prompts go to the large model (default 0: no length rule)");
  cmd->add_option("--route-max-small-difficulty", o->route_max_difficulty,
                  "Route rule: the small model scores each prompt (its mean next-token entropy, "
                  "nats); above this the large model answers (default 0: no scoring)");
  cmd->add_option("--route-fallover-waiting", o->route_fallover_waiting,
                  "Requests queued beyond a model's batch that make it saturated, so the route "
                  "falls over to the other model (default 1; 0: only KV pressure or max-queue)");
  cmd->add_option("--route-key", o->route_keys,
                  "Route rule per API key label: LABEL=small|large|auto (repeatable; labels are "
                  "key1, key2, ... in key order)")
      ->allow_extra_args(false);
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
  add_kv_calib_options(cmd, o->kv_calib);
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
  cmd->add_flag("--dry-run", o->dry_run,
                "Check everything a start checks (files, config, pins, the memory plan of every "
                "model, routes) and exit 0 without serving (for deployment CI)");
  cmd->add_flag("--metrics-require-key", o->metrics_require_key,
                "/metrics asks for an API key too (it shows spend per key label, never keys)");
  add_generation_config_option(cmd, o->generation_config);
  return [o, cmd]() {
    log::configure(log::parse_level(o->log_level), log::parse_format(o->log_format));
    // The models: -m values and the config file's [[model]] tables; routes likewise. The file's
    // [server] values fill the flags not given.
    std::string config_path;
    if (CLI::Option* c = cmd->get_config_ptr(); c && c->count() > 0)
      config_path = c->as<std::string>();
    ServeSetup setup = serve_setup(*o, *cmd, config_path);
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

    std::vector<ServeModel>& specs = setup.models;
    const bool multi = specs.size() > 1;
    if (multi && spec.enabled())
      fail(
          "--draft / --spec: speculative decoding with several models in one server is not "
          "supported yet; serve the speculating model alone");
    if (multi && !o->model_name.empty())
      fail("--model-name names the one model served; with several, name each as NAME=PATH");
    if (setup.require_engine) server::check_engine_requirement(*setup.require_engine, build_info());

    // Every input file before any work (loading, planning): a typo fails at once.
    for (const ServeModel& m : specs) check_model_path(m.path, "model");
    server::ApiKeys api_keys = collect_api_keys(o->api_keys, o->api_key_file);
    std::vector<ChatTemplateChoice> templates;
    for (const ServeModel& m : specs)
      templates.push_back(choose_chat_template(m.chat_template, "--chat-template"));
    PlanOptions po;
    if (!o->memory.empty()) {
      po.memory_bytes = parse_size(o->memory, "--memory");
    } else if (auto avail = default_memory_budget()) {
      po.memory_bytes = *avail;
    } else {
      fail("--memory: cannot read the available memory from /proc/meminfo; pass --memory");
    }
    // Pinned hashes are checked before anything loads (reading the file is the hash's cost).
    std::vector<std::shared_ptr<Digest>> digests;
    for (const ServeModel& m : specs) {
      auto d = std::make_shared<Digest>();
      if (m.pin_sha256) {
        const double t0 = now_seconds();
        d->set(sha256_model_path(m.path));
        log::info("model '{}': sha256 {} ({:.1f} s)", m.name, d->get(), now_seconds() - t0);
        server::check_sha256_pin(m.name, m.path, *m.pin_sha256, d->get());
      }
      digests.push_back(std::move(d));
    }

    // A taken port fails now, not after the model loaded (seconds to minutes for a big one).
    if (!o->dry_run) server::HttpServer::check_bindable(o->host, o->port, o->reuse_port);

    // SIGINT/SIGTERM are taken by sigwait() below: block them before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    // The rest of the hashes, in the background: /health says "" until each is known.
    for (size_t i = 0; i < specs.size() && !o->dry_run; ++i)
      if (!specs[i].pin_sha256) {
        std::thread([d = digests[i], path = specs[i].path, name = specs[i].name] {
          try {
            d->set(sha256_model_path(path));
          } catch (const std::exception& e) {
            log::warn("model '{}': cannot compute its sha256: {}", name, e.what());
            d->set("unavailable");
          }
        }).detach();
      }

    struct Loaded {
      std::unique_ptr<Model> model;
      std::unique_ptr<Tokenizer> tok;
      EngineConfig ec;
      SamplingDefaults defaults;  // --generation-config
    };
    std::vector<Loaded> loaded;
    for (const ServeModel& m : specs) {
      Loaded l;
      l.model = Model::load(m.path);
      l.tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(l.model->file()));
      const ModelConfig& mc = l.model->config();
      if (l.tok->n_vocab() != mc.n_vocab)
        fail("{}: the vocabulary has {} tokens but token_embd.weight has {} rows", m.path,
             l.tok->n_vocab(), mc.n_vocab);
      std::string defaults_from;
      l.defaults =
          model_sampling_defaults(l.model->file(), m.path, o->generation_config, &defaults_from);
      log::info("model '{}': {}", m.name, defaults_from);
      if (m.pin_quantization) {
        const std::string actual(dtype_name(l.model->predominant_weight_type()));
        server::check_quantization_pin(m.name, m.path, *m.pin_quantization, actual);
      }
      EngineConfig& ec = l.ec;
      ec.max_seqs = m.max_seqs;
      ec.max_batched_tokens = m.max_batched_tokens;
      ec.max_model_len = m.ctx > 0 ? m.ctx : mc.ctx_train;
      ec.kv_type = m.kv_type;
      ec.static_batching = o->static_batching;
      ec.static_padding = !o->static_no_padding;
      ec.prefix_caching = !o->no_prefix_caching;
      ec.threads = o->threads;
      warn_if_past_trained_context(ec.max_model_len, mc.ctx_train);
      loaded.push_back(std::move(l));
    }

    std::unique_ptr<Model> draft;
    if (!multi) {
      Loaded& l = loaded.front();
      EngineConfig& ec = l.ec;
      load_draft(o->spec, spec, draft);
      ec.spec = spec;
      const ModelConfig& mc = l.model->config();
      po.ctx = ec.max_model_len;
      po.max_seqs = ec.max_seqs;
      po.max_batched_tokens = ec.max_batched_tokens;
      po.kv_type = ec.kv_type;
      po.block_size = ec.block_size;
      // A draft's weights come out of the budget, and its KV cache (as many blocks as the
      // target's) out of the KV share, in proportion to their bytes per token.
      const int64_t draft_weights = draft ? static_cast<int64_t>(draft->weight_bytes()) : 0;
      Plan plan =
          plan_memory(mc, static_cast<int64_t>(l.model->weight_bytes()) + draft_weights, po);
      log_lines(describe_plan(plan));
      ec.kv_blocks = plan.kv_blocks;
      if (draft) {
        const int64_t t = kv_bytes_per_token(mc, ec.kv_type),
                      d = kv_bytes_per_token(draft->config(), ec.kv_type);
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
    } else {
      std::vector<SharedPlanInput> in;
      for (size_t i = 0; i < specs.size(); ++i) {
        SharedPlanInput p;
        p.name = specs[i].name;
        p.config = &loaded[i].model->config();
        p.weight_bytes = static_cast<int64_t>(loaded[i].model->weight_bytes());
        p.options.ctx = loaded[i].ec.max_model_len;
        p.options.max_seqs = loaded[i].ec.max_seqs;
        p.options.max_batched_tokens = loaded[i].ec.max_batched_tokens;
        p.options.kv_type = loaded[i].ec.kv_type;
        p.options.block_size = loaded[i].ec.block_size;
        p.share = specs[i].memory_share;
        in.push_back(p);
      }
      const std::vector<Plan> plans = plan_memory_shared(in, po.memory_bytes, po.margin_bytes);
      for (size_t i = 0; i < specs.size(); ++i) {
        log::info("model '{}' ({}):", specs[i].name, specs[i].path);
        log_lines(describe_plan(plans[i]));
        loaded[i].ec.kv_blocks = plans[i].kv_blocks;
      }
    }

    // --route NAME without SMALL,LARGE: the models with the fewest and the most parameters.
    for (server::RoutePolicy& r : setup.routes)
      if (r.small.empty()) {
        auto params = [&](size_t i) { return n_params(*loaded[i].model); };
        size_t lo = 0, hi = 0;
        for (size_t i = 1; i < specs.size(); ++i) {
          if (params(i) < params(lo)) lo = i;
          if (params(i) > params(hi)) hi = i;
        }
        if (lo == hi)
          fail("--route {}: the models have the same size; name them: --route {}=SMALL,LARGE",
               r.name, r.name);
        r.small = specs[lo].name;
        r.large = specs[hi].name;
      }

    server::ServerConfig sc;
    sc.api_keys = std::move(api_keys);
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
    sc.routes = setup.routes;

    std::string version;
    {
      const BuildInfo& b = build_info();
      version = fmt::format("{} ({}, {}, {})", b.version, b.commit, b.build_type, b.compiler);
    }
    if (o->dry_run) {
      for (const auto& r : setup.routes) {
        for (const std::string* n : {&r.small, &r.large})
          if (std::none_of(specs.begin(), specs.end(),
                           [&](const ServeModel& m) { return m.name == *n; }))
            fail("route '{}': model '{}' is not served", r.name, *n);
        log::info("route '{}': small '{}', large '{}'", r.name, r.small, r.large);
      }
      log::info("dry run: {} model(s) load and fit the memory budget; not serving", specs.size());
      return 0;
    }
    std::vector<std::unique_ptr<Engine>> engines;
    std::vector<server::ServedModel> served;
    std::vector<std::string> template_labels;
    for (size_t i = 0; i < specs.size(); ++i) {
      const ServeModel& m = specs[i];
      Loaded& l = loaded[i];
      const ModelConfig& mc = l.model->config();
      server::ServedModel sm;
      sm.name = m.name;
      std::string template_label = "none";
      if (!templates[i].empty()) {
        // A built-in writes BOS where llama.cpp's tokenizer would add it (builtin_templates.h).
        sm.chat_template = templates[i].source(l.tok->add_bos());
        template_label = templates[i].label();
      } else {
        sm.chat_template = l.model->file().get_string("tokenizer.chat_template", "");
        if (!sm.chat_template.empty()) template_label = "the GGUF's";
      }
      template_labels.push_back(template_label);
      sm.tool_call_parser = m.tool_call_parser;
      std::optional<Pooling> pool = pooling;
      if (!m.pooling.empty() && !(pool = parse_pooling(m.pooling)))
        fail("model '{}': pooling: expected mean, cls, last or none, got '{}'", m.name, m.pooling);
      if (!pool) {
        if (mc.pooling_type < 0) {
          pool = Pooling::kMean;
        } else if (!(pool = pooling_from_gguf(mc.pooling_type))) {
          log::warn(
              "{}: {}.pooling_type = {} ({}) is not supported: /v1/embeddings pools with mean; "
              "choose with --pooling",
              m.path, mc.arch, mc.pooling_type, mc.pooling_type == 4 ? "rank" : "unknown");
          pool = Pooling::kMean;
        }
      }
      sm.embedding_pooling = *pool;
      sm.prices = m.prices;
      server::ModelInfo& mi = sm.info;
      mi.n_ctx_train = mc.ctx_train;
      mi.n_vocab = mc.n_vocab;
      mi.n_params = n_params(*l.model);
      mi.size_bytes = static_cast<int64_t>(l.model->weight_bytes());
      mi.weight_type = std::string(dtype_name(l.model->predominant_weight_type()));
      mi.kv_type = l.ec.kv_type.name();
      mi.version = version;
      mi.path = m.path;
      mi.sha256 = [d = digests[i]] { return d->get(); };
      mi.sampling_defaults = l.defaults;
      {
        const double t0 = now_seconds();
        l.ec.key_transform =
            resolve_key_transform(o->kv_calib, *l.model, o->threads, l.ec.kv_type.k);
        if (l.ec.key_transform)
          log::info(
              "model '{}': {} keys stored through a key transform calibrated on {} ({:.1f} s)",
              m.name, kv_dtype_name(l.ec.kv_type.k), l.ec.key_transform->source,
              now_seconds() - t0);
      }
      engines.push_back(std::make_unique<Engine>(*l.model, *l.tok, l.ec));
      mi.backend = engines.back()->backend_description();
      sm.engine = engines.back().get();
      sm.tokenizer = l.tok.get();
      served.push_back(std::move(sm));
    }
    for (const auto& r : sc.routes)
      log::info("route '{}': small '{}', large '{}'{}{}, fall over at {} queued", r.name, r.small,
                r.large,
                r.max_small_prompt_tokens > 0
                    ? fmt::format(", prompts > {} tokens to large", r.max_small_prompt_tokens)
                    : std::string(),
                r.max_small_difficulty > 0
                    ? fmt::format(", difficulty > {} nats to large", r.max_small_difficulty)
                    : std::string(),
                r.fallover_waiting);

    server::HttpServer http(served, sc);
    const int port = http.bind(o->host, o->port);
    http.start();
    std::string names;
    for (const auto& m : served) names += (names.empty() ? "'" : ", '") + m.name + "'";
    log::write(log::Level::kInfo, "",
               fmt::format("serving {} on {}://{}:{}", names,
                           sc.transport.tls_cert_file.empty() ? "http" : "https", o->host, port),
               {{"ctx", engines.front()->max_model_len()},
                {"max_seqs", loaded.front().ec.max_seqs},
                {"api_keys", static_cast<int64_t>(sc.api_keys.size())},
                {"chat_template", template_labels.front()},
                {"pooling", pooling_name(served.front().embedding_pooling)},
                {"backend", served.front().info.backend},
                {"version", version}});

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
