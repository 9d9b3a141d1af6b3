// RouteContext: what the HTTP handlers share with the HttpServer that owns them (internal to
// server/, not part of the public API).
//
// It holds the served models (ModelSlot: engine and tokenizer, borrowed, they outlive the server;
// the chat prompter, set exactly when the model has a chat template; the tool-call family, prices
// and model card), the routes between them, the configuration, the serving metrics, the
// shutting-down flag, and the generations in flight: `live`, guarded by live_mu, with live_cv
// notified whenever one leaves it (each with the engine it runs on, so shutdown can abort it).
// HttpServer owns one RouteContext, built before any route is installed and destroyed only after
// the listener stopped, so a handler (or a streaming content producer) may hold a reference to it
// (and to its slots) for as long as it runs.
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
#include <vector>

#include "kvasir/engine.h"
#include "kvasir/server/api_error.h"
#include "kvasir/server/chat_prompt.h"
#include "kvasir/server/generation.h"
#include "kvasir/server/http_server.h"
#include "kvasir/server/http_types.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/route_policy.h"
#include "kvasir/server/serving_metrics.h"
#include "kvasir/server/tool_calls.h"
#include "kvasir/tokenizer/tokenizer.h"

namespace kvasir::server {

// One served model as the handlers use it.
struct ModelSlot {
  // Throws kvasir::Error if the chat template does not parse or the tool-call parser is unknown.
  explicit ModelSlot(const ServedModel& m);

  std::string name;
  Engine& engine;
  const Tokenizer& tok;
  std::optional<ChatPrompter> prompter;
  ToolFamily tool_family = ToolFamily::kNone;  // how the chat template's model writes tool calls
  Prices prices;
  ModelInfo info;
  Pooling embedding_pooling;
};

// What a request's "model" names: a served model, or a route between two of them.
struct ModelTarget {
  ModelSlot* model = nullptr;
  const RoutePolicy* route = nullptr;
};

struct RouteContext {
  // Throws kvasir::Error for a chat template that does not parse, a duplicate name, or a route
  // naming a model that is not served.
  RouteContext(std::vector<ServedModel> models, ServerConfig c);

  void send_json(HttpResponse& res, int status, const Json& body) const;
  void send_error(HttpResponse& res, const ApiError& e) const;
  // The /metrics text (every engine's gauges refreshed).
  std::string expose();

  // The model or route `name` names; absent: the first route, else the first model. Throws
  // ApiError 404 model_not_found naming what is served.
  ModelTarget target(const std::optional<std::string>& name);
  // A served model by name (routes do not count): for endpoints that need one model (embeddings,
  // tokenize). Absent: the first model. Throws ApiError 404 model_not_found.
  ModelSlot& model(const std::optional<std::string>& name);
  ModelSlot* find_model(const std::string& name);
  // "'a', 'b' and route 'auto'": what a 404 lists.
  std::string served_names() const;

  std::vector<std::unique_ptr<ModelSlot>> models;
  std::vector<RoutePolicy> routes;
  ServerConfig cfg;
  ServingMetrics metrics;
  std::atomic<bool> shutting_down{false};
  int64_t created = unix_time_now();  // the model cards' "created"

  struct Live {
    std::shared_ptr<Generation> gen;
    Engine* engine = nullptr;
  };
  mutable std::mutex live_mu;
  std::condition_variable live_cv;
  std::map<const Generation*, Live> live;
};

}  // namespace kvasir::server
