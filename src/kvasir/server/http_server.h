// HttpServer: Kvasir's OpenAI-compatible HTTP API over an Engine.
//
// Routes (routes.h has the table):
//   POST /v1/completions        prompt (string, token ids, or a batch of either) -> text
//   POST /v1/chat/completions   messages rendered with the chat template -> assistant message
//   POST /v1/embeddings         input (string, token ids, or a batch of either) -> one vector each
//                               (embedding_routes.h)
//   GET  /v1/models, /v1/models/{id}   the model cards (context, vocabulary, dtypes, sha256), and
//                               one card per route
//   POST /tokenize, /detokenize        llama-server's shapes ("model" picks the tokenizer)
//   GET  /health                200 {"status":"ok", version, commit, compiler, build flags,
//                               backend (kernel ISA), models: name, sha256, quantization}; 503
//                               while shutting down
//
// Several models (multi-model serving): each ServedModel has its own engine, tokenizer, chat
// template, prices and metrics (the `model` label); a request's "model" names one of them or a
// route (ServerConfig::routes, route_policy.h), which picks the small or the large model per
// request (model_router.h) and reports the decision in usage.route, the access log and
// kvasir_route_* metrics. A request without "model" goes to the first route, else the first
// model.
//   GET  /metrics               Prometheus text format 0.0.4 (see serving_metrics.h); behind the
//                               API keys when metrics_require_key
// Both generation routes accept the OpenAI parameters listed in openai_request.h, n choices
// (each an independent engine request; with a seed, choice j uses seed + j), logprobs in each
// endpoint's shape, and stream=true: server-sent events "data: {chunk}\n\n" ending with
// "data: [DONE]\n\n" (chat: the first delta of each choice carries role "assistant";
// stream_options.include_usage adds a last chunk with empty choices and the usage). Every
// response carries usage with prompt_tokens_details.cached_tokens and usage.cost_usd (prices in
// ServerConfig). With n > 1 the prompt is counted once per prompt; cached tokens are those of
// each prompt's first choice.
//
// Errors are OpenAI error objects (api_error.h): malformed JSON, wrong types, bad UTF-8, invalid
// ranges, prompt or prompt + max_tokens beyond the context -> 400; missing/wrong bearer key when
// keys are configured -> 401 (answered before the body is read); unknown model or route -> 404;
// wrong method -> 405; body over max_body_bytes -> 413; head over the limit -> 431; more than
// max_queue requests waiting -> 429 + Retry-After; shutting down -> 503 + Retry-After. No input
// can crash the server: handlers catch everything. The transport (http_listener.h) bounds what
// slow or hostile clients can hold: header and body deadlines, connection caps, write timeouts.
// Every response carries X-Request-Id (the client's, when well-formed, else a new one); with
// log_requests every request gets one access-log line with it (util/log.h).
//
// A streaming client that disconnects or stops reading is noticed at the next write (outputs, or
// an SSE comment sent after heartbeat_s of silence; a write that the client does not take within
// write_timeout_s fails) and its engine requests are aborted, which frees their KV blocks; while
// such a write waits, at most max_unread_outputs outputs queue up before the request is aborted. A
// non-streaming request's socket is watched while it waits: a client that closed it aborts the
// generation too. When the server stops, streams end with an error event (code
// server_shutting_down) and [DONE]; whole answers are 503.
//
// Lifetime: the Engine and Tokenizer must outlive the server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/sampling/sampling_params.h"
#include "kvasir/server/api_keys.h"
#include "kvasir/server/http_listener.h"
#include "kvasir/server/route_policy.h"
#include "kvasir/server/serving_metrics.h"
#include "kvasir/server/usage.h"
#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::server {

// What /v1/models and /health say about the model and the build (filled by the caller).
struct ModelInfo {
  int n_ctx_train = 0;
  int n_vocab = 0;
  int64_t n_params = 0;
  int64_t size_bytes = 0;
  std::string weight_type;  // e.g. "q4_0"
  std::string kv_type;      // e.g. "f16"
  std::string backend;      // e.g. "cpu (AVX3, 2 threads)"
  std::string version;      // the server's version and build, e.g. "0.1.0 (abc1234, Release)"
  std::string path;         // the model file or folder as given
  // The model's sha256 (util/sha256.h): "" while it is still being computed; unset: not known.
  std::function<std::string()> sha256;
  // The model's own sampling defaults (its generation_config.json or general.sampling.* keys):
  // a generation request that leaves one of these fields unset gets the model's value instead of
  // the built-in default (openai_request.h apply_sampling_defaults); a field the request sets is
  // its own, as OpenAI's API has it. Empty: the built-in defaults (`--generation-config none`).
  SamplingDefaults sampling_defaults;
};

// One model a server answers for (several: multi-model serving). The engine and tokenizer are
// borrowed and must outlive the server.
struct ServedModel {
  std::string name;  // the id clients send as "model"
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::string chat_template;     // template source; empty: /v1/chat/completions answers 400
  std::string tool_call_parser;  // as ServerConfig::tool_call_parser
  Prices prices;
  ModelInfo info;
  Pooling embedding_pooling = Pooling::kMean;
};

// The model_name .. embedding_pooling fields describe the one model of the single-model
// constructor; the multi-model constructor takes them from each ServedModel instead.
struct ServerConfig {
  std::string model_name = "model";  // the id of /v1/models; requests naming another get 404
  std::string chat_template;         // template source; empty: /v1/chat/completions answers 400
  // How the model writes tool calls (tool_calls.h family names); empty: detected from the chat
  // template. "none": requests asking for tool calls are refused.
  std::string tool_call_parser;
  ApiKeys api_keys;  // empty: no auth
  Prices prices;
  ModelInfo model_info;
  // /v1/embeddings: how an input's hidden states are pooled into its vector (kNone: the route
  // answers 400, as such a model gives one vector per token).
  Pooling embedding_pooling = Pooling::kMean;
  int max_queue = 0;     // waiting requests before 429; 0: no limit
  int http_threads = 0;  // 0: engine max_seqs + max_queue (or max_seqs) + 16
  int retry_after_s = 1;
  double heartbeat_s = 1.0;  // SSE comment after this much silence
  // Outputs (about one per token) queued for a client that stopped reading its stream before
  // the request is aborted and its KV freed (Generation::limit_backlog); 0: no bound.
  size_t max_unread_outputs = 1024;
  bool log_requests = false;         // one access-log line per request
  bool metrics_require_key = false;  // /metrics behind the API keys (when there are keys)
  // CORS: origins allowed to call the API from a browser ("*": any); empty: no CORS headers.
  std::vector<std::string> cors_origins;
  // Transport limits: port sharing, header/body sizes and deadlines, connection caps, TLS
  // (http_listener.h).
  TransportLimits transport;
  // Routes between served models (multi-model constructor only): names must differ from the
  // models', small and large must name served models.
  std::vector<RoutePolicy> routes;
};

class HttpServer {
 public:
  // One model, described by config.model_name .. embedding_pooling. Throws kvasir::Error if the
  // chat template does not parse.
  HttpServer(Engine& engine, const Tokenizer& tokenizer, ServerConfig config);
  // Several models (at least one; distinct names) and config.routes between them. Throws
  // kvasir::Error for a chat template that does not parse, duplicate names or a bad route.
  HttpServer(std::vector<ServedModel> models, ServerConfig config);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; port 0 picks a free one. Returns the port. Throws kvasir::Error
  // naming host:port when it cannot (e.g. "Address already in use").
  int bind(const std::string& host, int port);
  // Throws what bind() would for host:port now (e.g. the port is taken), binding nothing: lets
  // the caller fail before loading a model.
  static void check_bindable(const std::string& host, int port, bool reuse_port);
  // Serves on background threads; returns once it accepts connections.
  void start();

  // New /v1 requests get 503 from now on; requests in flight continue.
  void begin_shutdown();
  // Waits until no generation is in flight; false on timeout.
  bool wait_idle(double timeout_s);
  // Aborts generations in flight, gives their streams up to `drain_s` to send their final
  // events, then closes every connection and joins the threads. Idempotent.
  void stop(double drain_s = 0.5);

  int in_flight() const;
  const ServerConfig& config() const;
  ServingMetrics& metrics();
  // The /metrics text (engine gauges refreshed).
  std::string metrics_text();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir::server
