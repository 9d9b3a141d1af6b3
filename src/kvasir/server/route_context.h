// RouteContext: what the HTTP handlers share with the HttpServer that owns them (internal to
// server/, not part of the public API).
//
// It holds the engine and tokenizer (borrowed: they outlive the server), the configuration, the
// chat prompter (set exactly when a chat template is configured), the serving metrics, the
// shutting-down flag, and the generations in flight: `live`, guarded by live_mu, with live_cv
// notified whenever one leaves it. HttpServer owns one RouteContext, built before any route is
// installed and destroyed only after the listener stopped, so a handler (or a streaming content
// producer) may hold a reference to it for as long as it runs.
//
// send_json() and send_error() are how every handler answers: send_error() writes the ApiError's
// object with its status and adds Retry-After (retry_after_s) to 429 and 503 and
// "WWW-Authenticate: Bearer" to 401.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kvasir/engine.h"
#include "kvasir/server/api_error.h"
#include "kvasir/server/chat_prompt.h"
#include "kvasir/server/generation.h"
#include "kvasir/server/http_server.h"
#include "kvasir/server/http_types.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/serving_metrics.h"
#include "kvasir/server/tool_calls.h"
#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::server {

struct RouteContext {
  // Throws kvasir::Error if the chat template does not parse.
  RouteContext(Engine& e, const Tokenizer& t, ServerConfig c);

  void send_json(HttpResponse& res, int status, const Json& body) const;
  void send_error(HttpResponse& res, const ApiError& e) const;
  // The /metrics text (engine gauges refreshed).
  std::string expose();

  Engine& engine;
  const Tokenizer& tok;
  ServerConfig cfg;
  std::optional<ChatPrompter> prompter;
  ToolFamily tool_family = ToolFamily::kNone;  // how the chat template's model writes tool calls
  ServingMetrics metrics;
  std::atomic<bool> shutting_down{false};
  int64_t created = unix_time_now();  // the model card's "created"

  mutable std::mutex live_mu;
  std::condition_variable live_cv;
  std::map<const Generation*, std::shared_ptr<Generation>> live;
};

}  // namespace kvasir::server
