#include "kvasir/server/routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <string>

#include "kvasir/server/api_error.h"
#include "kvasir/server/api_key_auth.h"
#include "kvasir/server/completion_routes.h"
#include "kvasir/server/embedding_routes.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/request_validation.h"
#include "kvasir/server/tokenize_routes.h"
#include "kvasir/util/build_info.h"
#include "kvasir/util/log.h"

namespace kvasir::server {

namespace {

enum class Guard {
  kPublic,   // no key asked
  kKeyed,    // the API key, when keys are configured
  kApi,      // the key, and 503 while shutting down
  kMetrics,  // keyed when metrics_require_key
};

using RouteFn = void (*)(RouteContext&, const HttpRequest&, HttpResponse&, const ClientState&,
                         const std::string& key);

struct Route {
  const char* path;  // exact, or a prefix when it ends with '/'
  const char* methods;
  Guard guard;
  RouteFn fn;
};

Json model_card(const RouteContext& ctx, const ModelSlot& slot) {
  const ModelInfo& m = slot.info;
  Json meta{{"n_ctx", slot.engine.max_model_len()},
            {"n_ctx_train", m.n_ctx_train},
            {"n_vocab", m.n_vocab},
            {"n_params", m.n_params},
            {"size", m.size_bytes},
            {"quantization", m.weight_type},
            {"kv_cache_dtype", m.kv_type}};
  if (m.sha256) meta["sha256"] = m.sha256();  // "" while it is being computed
  return Json{{"id", slot.name},
              {"object", "model"},
              {"created", ctx.created},
              {"owned_by", "kvasir"},
              {"max_model_len", slot.engine.max_model_len()},
              {"meta", std::move(meta)}};
}

Json route_card(const RouteContext& ctx, const RoutePolicy& r) {
  Json rules{{"small", r.small}, {"large", r.large}};
  if (r.max_small_prompt_tokens > 0) rules["max_small_prompt_tokens"] = r.max_small_prompt_tokens;
  if (r.max_small_difficulty > 0) rules["max_small_difficulty"] = r.max_small_difficulty;
  rules["fallover_waiting"] = r.fallover_waiting;
  return Json{{"id", r.name},
              {"object", "model"},
              {"created", ctx.created},
              {"owned_by", "kvasir"},
              {"meta", Json{{"route", std::move(rules)}}}};
}

void models(RouteContext& ctx, const HttpRequest&, HttpResponse& res, const ClientState&,
            const std::string&) {
  Json data = Json::array();
  for (const auto& m : ctx.models) data.push_back(model_card(ctx, *m));
  for (const RoutePolicy& r : ctx.routes) data.push_back(route_card(ctx, r));
  ctx.send_json(res, 200, Json{{"object", "list"}, {"data", std::move(data)}});
}

void model_by_id(RouteContext& ctx, const HttpRequest& req, HttpResponse& res, const ClientState&,
                 const std::string&) {
  const ModelTarget t = ctx.target(req.path.substr(std::string_view("/v1/models/").size()));
  ctx.send_json(res, 200, t.route ? route_card(ctx, *t.route) : model_card(ctx, *t.model));
}

void health(RouteContext& ctx, const HttpRequest&, HttpResponse& res, const ClientState&,
            const std::string&) {
  const BuildInfo& b = build_info();
  Json models = Json::array();
  for (const auto& m : ctx.models) {
    Json j{{"name", m->name},
           {"path", m->info.path},
           {"quantization", m->info.weight_type},
           {"kv_cache_dtype", m->info.kv_type}};
    if (m->info.sha256) j["sha256"] = m->info.sha256();
    models.push_back(std::move(j));
  }
  const ModelInfo& first = ctx.models.front()->info;
  Json body{{"status", ctx.shutting_down ? "shutting_down" : "ok"},
            {"model", ctx.models.front()->name},
            {"version", first.version},
            {"build", Json{{"version", b.version},
                           {"commit", b.commit},
                           {"build_type", b.build_type},
                           {"compiler", b.compiler},
                  {"flags", b.build_flags}}},
            {"backend", first.backend},
            {"models", std::move(models)}};
  if (ctx.shutting_down) res.set_header("Retry-After", fmt::format("{}", ctx.cfg.retry_after_s));
  ctx.send_json(res, ctx.shutting_down ? 503 : 200, body);
}

void metrics(RouteContext& ctx, const HttpRequest&, HttpResponse& res, const ClientState&,
             const std::string&) {
  res.status = 200;
  res.set_content(ctx.expose(), "text/plain; version=0.0.4; charset=utf-8");
}

const Route kRoutes[] = {
    {"/v1/completions", "POST", Guard::kApi, &completions},
    {"/v1/chat/completions", "POST", Guard::kApi, &chat_completions},
    {"/v1/embeddings", "POST", Guard::kApi, &embeddings},
    {"/v1/models", "GET, HEAD", Guard::kApi, &models},
    {"/v1/models/", "GET, HEAD", Guard::kApi, &model_by_id},
    {"/tokenize", "POST", Guard::kKeyed, &tokenize},
    {"/detokenize", "POST", Guard::kKeyed, &detokenize},
    {"/health", "GET, HEAD", Guard::kPublic, &health},
    {"/metrics", "GET, HEAD", Guard::kMetrics, &metrics},
};

const Route* find_route(const std::string& path) {
  for (const Route& r : kRoutes) {
    const std::string_view p = r.path;
    if (p.back() == '/' ? path.size() > p.size() && path.compare(0, p.size(), p) == 0 : path == p)
      return &r;
  }
  return nullptr;
}

bool method_allowed(const Route& r, const std::string& method) {
  std::string_view m = r.methods;
  size_t pos = 0;
  while (pos < m.size()) {
    size_t end = m.find(", ", pos);
    if (end == std::string_view::npos) end = m.size();
    if (m.substr(pos, end - pos) == method) return true;
    pos = end + 2;
  }
  return false;
}

bool keyed(const RouteContext& ctx, Guard g) {
  return g == Guard::kKeyed || g == Guard::kApi ||
         (g == Guard::kMetrics && ctx.cfg.metrics_require_key);
}

}  // namespace

void Router::add_cors(const HttpRequest& req, HttpResponse& res) const {
  const auto& allowed = ctx_.cfg.cors_origins;
  if (allowed.empty()) return;
  const auto origin = req.header("Origin");
  if (!origin) return;
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  if (!any && std::find(allowed.begin(), allowed.end(), *origin) == allowed.end()) return;
  res.set_header("Access-Control-Allow-Origin", any ? "*" : std::string(*origin));
  if (!any) res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Expose-Headers", "X-Request-Id");
}

std::optional<HttpResponse> Router::screen(const HttpRequest& head) {
  HttpResponse res;
  const Route* r = find_route(head.path);
  try {
    if (!r)
      throw ApiError(404, fmt::format("Unknown route: {} {}", head.method, head.path), {},
                     "not_found");
    if (head.method == "OPTIONS") {
      res.status = 204;
      res.content_type.clear();
      res.set_header("Allow", std::string(r->methods) + ", OPTIONS");
      add_cors(head, res);
      if (!res.headers.empty() && head.header("Origin")) {
        res.set_header("Access-Control-Allow-Methods", std::string(r->methods) + ", OPTIONS");
        res.set_header("Access-Control-Allow-Headers",
                       std::string(head.header("Access-Control-Request-Headers")
                                       .value_or("Authorization, Content-Type, X-Request-Id")));
        res.set_header("Access-Control-Max-Age", "600");
      }
      return res;
    }
    if (!method_allowed(*r, head.method)) {
      res.set_header("Allow", r->methods);
      throw ApiError(405,
                     fmt::format("Method {} is not allowed for {}; use {}.", head.method, head.path,
                                 r->methods),
                     {}, "method_not_allowed");
    }
    if (keyed(ctx_, r->guard)) authorize(ctx_.cfg.api_keys, head);
    if (r->guard == Guard::kApi && ctx_.shutting_down)
      throw ApiError(503, "The server is shutting down; retry on another replica.", {},
                     "server_shutting_down");
  } catch (const ApiError& e) {
    ctx_.send_error(res, e);
    add_cors(head, res);
    return res;
  }
  return std::nullopt;
}

void Router::handle(const HttpRequest& req, HttpResponse& res, const ClientState& client) {
  std::string key = "none";
  try {
    const Route* r = find_route(req.path);
    if (!r) throw ApiError(404, fmt::format("Unknown route: {} {}", req.method, req.path));
    if (keyed(ctx_, r->guard)) key = authorize(ctx_.cfg.api_keys, req);
    r->fn(ctx_, req, res, client, key);
  } catch (const ApiError& e) {
    res = HttpResponse{};
    ctx_.send_error(res, e);
  } catch (const std::exception& e) {
    res = HttpResponse{};
    ctx_.send_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
  } catch (...) {
    res = HttpResponse{};
    ctx_.send_error(res, ApiError(500, "internal error"));
  }
  add_cors(req, res);
  if (key != "none") res.log_fields.push_back({"key", key});
}

void Router::on_complete(const HttpRequest& req, const HttpResponse& res, double duration_s,
                         bool completed) {
  ctx_.metrics.record_http(res.status);
  if (!ctx_.cfg.log_requests) return;
  std::vector<log::Field> fields;
  fields.reserve(res.log_fields.size() + 4);
  fields.emplace_back("status", res.status);
  fields.emplace_back("duration_ms", duration_s * 1000.0);
  fields.emplace_back("client", req.remote_addr);
  if (!completed) fields.emplace_back("completed", false);
  for (const auto& f : res.log_fields) {
    std::visit([&](const auto& v) { fields.emplace_back(f.name, v); }, f.value);
  }
  log::write(log::Level::kInfo, req.request_id, fmt::format("{} {}", req.method, req.path), fields);
}

HttpResponse Router::transport_error(int status, std::string message) {
  HttpResponse res;
  std::string code;
  if (status == 413) code = "request_too_large";
  if (status == 431) code = "request_header_fields_too_large";
  if (status == 503) code = "server_overloaded";
  ctx_.send_error(res, ApiError(status, std::move(message), {}, code));
  return res;
}

}  // namespace kvasir::server
