// The route table: install_routes() puts every route HttpServer serves on its httplib::Server,
// with the handlers for what httplib refuses itself.
//
//   POST /v1/completions, /v1/chat/completions   completion_routes.h
//   GET  /v1/models, /v1/models/{id}             here: the one model card; another id is 404
//   GET  /health                                 here: 200 {"status":"ok"}; 503 + Retry-After
//                                                {"status":"shutting_down"} while shutting down
//   GET  /metrics                                here: ctx.expose(), Prometheus text 0.0.4
// Every /v1 handler runs inside one wrapper: auth first (api_key_auth.h: 401), then 503 while
// shutting down, and whatever it throws is answered as an OpenAI error object (an ApiError as
// thrown, any other exception 500 "internal error: ..."). /health and /metrics take no auth.
// Responses httplib makes itself without a body at status >= 400 (no route, body over
// max_body_bytes, bad request line) get OpenAI error bodies too: a known path with another
// method is 405 with Allow, an unknown one 404. An exception escaping a handler is 500.
#pragma once

#include <httplib.h>

#include "kvasir/server/route_context.h"

namespace kvasir::server {

// `ctx` must outlive `svr`'s serving.
void install_routes(httplib::Server& svr, RouteContext& ctx);

}  // namespace kvasir::server
