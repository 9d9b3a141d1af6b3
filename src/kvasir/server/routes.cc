#include "kvasir/server/routes.h"

#include <fmt/format.h>

#include <exception>
#include <string>

#include "kvasir/server/api_error.h"
#include "kvasir/server/api_key_auth.h"
#include "kvasir/server/completion_routes.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/request_validation.h"

namespace kvasir::server {

namespace {

// The known routes and their methods (for 405 vs 404).
const char* allowed_methods(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions") return "POST";
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0 || path == "/health" ||
      path == "/metrics")
    return "GET, HEAD";
  return nullptr;
}

Json model_card(const RouteContext& ctx) {
  return Json{{"id", ctx.cfg.model_name},
              {"object", "model"},
              {"created", ctx.created},
              {"owned_by", "kvasir"},
              {"max_model_len", ctx.engine.max_model_len()}};
}

void models(RouteContext& ctx, const httplib::Request&, httplib::Response& res,
            const std::string&) {
  ctx.send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({model_card(ctx)})}});
}

void model_by_id(RouteContext& ctx, const httplib::Request& req, httplib::Response& res,
                 const std::string&) {
  const std::string id = req.matches.size() > 1 ? req.matches[1].str() : std::string();
  check_model(ctx, id);
  ctx.send_json(res, 200, model_card(ctx));
}

using ApiHandler = void (*)(RouteContext&, const httplib::Request&, httplib::Response&,
                            const std::string&);

// Wraps a /v1 handler: auth, shutdown, and every failure answered as an error object.
httplib::Server::Handler api(RouteContext& ctx, ApiHandler h) {
  return [&ctx, h](const httplib::Request& req, httplib::Response& res) {
    try {
      const std::string key = authorize(ctx.cfg.api_keys, req);
      if (ctx.shutting_down)
        throw ApiError(503, "The server is shutting down; retry on another replica.", {},
                       "server_shutting_down");
      h(ctx, req, res, key);
    } catch (const ApiError& e) {
      ctx.send_error(res, e);
    } catch (const std::exception& e) {
      ctx.send_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
    } catch (...) {
      ctx.send_error(res, ApiError(500, "internal error"));
    }
  };
}

}  // namespace

void install_routes(httplib::Server& svr, RouteContext& ctx) {
  svr.Post("/v1/completions", api(ctx, &completions));
  svr.Post("/v1/chat/completions", api(ctx, &chat_completions));
  svr.Get("/v1/models", api(ctx, &models));
  svr.Get(R"(/v1/models/(.+))", api(ctx, &model_by_id));
  svr.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (ctx.shutting_down) {
      res.set_header("Retry-After", fmt::format("{}", ctx.cfg.retry_after_s));
      ctx.send_json(res, 503, Json{{"status", "shutting_down"}});
    } else {
      ctx.send_json(res, 200, Json{{"status", "ok"}});
    }
  });
  svr.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(ctx.expose(), "text/plain; version=0.0.4; charset=utf-8");
  });

  // Responses without a body at status >= 400 come from httplib itself (no route, payload too
  // large, bad request line): give them OpenAI error bodies; a known path with another method
  // is 405.
  httplib::Server::HandlerWithResponse on_error = [&ctx](const httplib::Request& req,
                                                         httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    if (res.status == 404) {
      if (const char* allow = allowed_methods(req.path)) {
        res.status = 405;
        res.set_header("Allow", allow);
        message =
            fmt::format("Method {} is not allowed for {}; use {}.", req.method, req.path, allow);
      } else {
        message = fmt::format("Unknown route: {} {}", req.method, req.path);
      }
    } else if (res.status == 413) {
      message = fmt::format("The request body is larger than the {} bytes allowed.",
                            ctx.cfg.max_body_bytes);
    } else {
      message = fmt::format("HTTP error {}", res.status);
    }
    const std::string code = res.status == 404   ? "not_found"
                             : res.status == 405 ? "method_not_allowed"
                                                 : "";
    ApiError e(res.status, message, {}, code);
    res.set_content(dump_json(e.to_json()), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  };
  svr.set_error_handler(on_error);
  svr.set_exception_handler(
      [&ctx](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        ctx.send_error(res, ApiError(500, "internal error"));
      });
}

}  // namespace kvasir::server
