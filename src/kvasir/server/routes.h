// The route table and the Router that serves it (the HttpHandler of http_listener.h).
//
//   POST /v1/completions, /v1/chat/completions   completion_routes.h
//   POST /v1/embeddings                          embedding_routes.h
//   GET  /v1/models, /v1/models/{id}             here: the one model card; another id is 404
//   POST /tokenize, /detokenize                  tokenize_routes.h
//   GET  /health                                 here: 200 {"status":"ok", ...}; 503 +
//                                                Retry-After {"status":"shutting_down"} while
//                                                shutting down
//   GET  /metrics                                here: ctx.expose(), Prometheus text 0.0.4
// GET routes answer HEAD too. Screening, on the request's head before its body is read: an
// unknown path is 404, a known one with another method 405 with Allow, OPTIONS 204 with Allow
// (and the CORS preflight answer when the origin is allowed); then auth (api_key_auth.h: 401) for
// the /v1 routes, /tokenize, /detokenize and, with metrics_require_key, /metrics; then 503 for the
// /v1 routes while shutting down. A handler's ApiError is answered as its OpenAI error object, any
// other exception as 500 "internal error: ...". With cors_origins, every answer to an allowed
// Origin carries Access-Control-Allow-Origin (and exposes X-Request-Id). With log_requests every
// request gets one access-log line: method, path, status, duration, client, key label, and what
// the handler added (tokens, time to first token).
#pragma once

#include <optional>
#include <string>

#include "kvasir/server/http_listener.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

class Router final : public HttpHandler {
 public:
  // `ctx` must outlive the router.
  explicit Router(RouteContext& ctx) : ctx_(ctx) {}

  std::optional<HttpResponse> screen(const HttpRequest& head) override;
  void handle(const HttpRequest& req, HttpResponse& res, const ClientState& client) override;
  void on_complete(const HttpRequest& req, const HttpResponse& res, double duration_s,
                   bool completed) override;
  HttpResponse transport_error(int status, std::string message) override;

 private:
  void add_cors(const HttpRequest& req, HttpResponse& res) const;
  RouteContext& ctx_;
};

}  // namespace kvasir::server
