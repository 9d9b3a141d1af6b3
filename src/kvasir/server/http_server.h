// HttpServer: Kvasir's OpenAI-compatible HTTP API over an Engine (cpp-httplib).
//
// Routes:
//   POST /v1/completions        prompt (string, token ids, or a batch of either) -> text
//   POST /v1/chat/completions   messages rendered with the chat template -> assistant message
//   GET  /v1/models, /v1/models/{id}
//   GET  /health                200 {"status":"ok"}; 503 while shutting down
//   GET  /metrics               Prometheus text format 0.0.4 (see serving_metrics.h)
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
// keys are configured -> 401 (/v1 routes only); unknown model or route -> 404; wrong method ->
// 405; more than max_queue requests waiting -> 429 + Retry-After; shutting down -> 503 +
// Retry-After. No input can crash the server: handlers catch everything.
//
// A streaming client that disconnects is noticed at the next write (outputs, or an SSE comment
// sent after heartbeat_s of silence) and its engine requests are aborted, which frees their KV
// blocks. A non-streaming request's socket is watched while it waits (peer_socket.h): a client
// that hung up aborts it too (logged as 499).
//
// Lifetime: the Engine and Tokenizer must outlive the server. The server ignores SIGPIPE for the
// whole process (writes to closed sockets must fail, not kill it).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kvasir/engine.h"
#include "kvasir/server/api_keys.h"
#include "kvasir/server/serving_metrics.h"
#include "kvasir/server/usage.h"
#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::server {

struct ServerConfig {
  std::string model_name = "model";  // the id of /v1/models; requests naming another get 404
  std::string chat_template;         // template source; empty: /v1/chat/completions answers 400
  ApiKeys api_keys;                  // empty: no auth
  Prices prices;
  int max_queue = 0;     // waiting requests before 429; 0: no limit
  int http_threads = 0;  // 0: engine max_seqs + max_queue (or max_seqs) + 16
  int retry_after_s = 1;
  size_t max_body_bytes = size_t{32} << 20;
  double heartbeat_s = 1.0;   // SSE comment after this much silence
  bool log_requests = false;  // one line per request on stderr
};

class HttpServer {
 public:
  // Throws kvasir::Error if the chat template does not parse.
  HttpServer(Engine& engine, const Tokenizer& tokenizer, ServerConfig config);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; port 0 picks a free one. Returns the port. Throws kvasir::Error.
  int bind(const std::string& host, int port);
  // Serves on a background thread (returns once it accepts connections) ...
  void start();
  // ... or on the calling thread, until stop() is called from another thread.
  void run();

  // New /v1 requests get 503 from now on; requests in flight continue.
  void begin_shutdown();
  // Waits until no generation is in flight; false on timeout.
  bool wait_idle(double timeout_s);
  // Aborts generations in flight, stops listening, joins the serving thread. Idempotent.
  void stop();

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
