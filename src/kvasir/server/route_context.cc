#include "kvasir/server/route_context.h"

#include <fmt/format.h>

namespace kvasir::server {

RouteContext::RouteContext(Engine& e, const Tokenizer& t, ServerConfig c)
    : engine(e), tok(t), cfg(std::move(c)) {
  if (!cfg.chat_template.empty()) {
    const std::string bos = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id(), true) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id(), true) : "";
    prompter.emplace(cfg.chat_template, bos, eos);
  }
}

void RouteContext::send_json(HttpResponse& res, int status, const Json& body) const {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void RouteContext::send_error(HttpResponse& res, const ApiError& e) const {
  if (e.status() == 429 || e.status() == 503)
    res.set_header("Retry-After", fmt::format("{}", cfg.retry_after_s));
  if (e.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
  send_json(res, e.status(), e.to_json());
}

std::string RouteContext::expose() {
  return metrics.expose(engine.stats(), engine.config().kv_warn_ratio);
}

}  // namespace kvasir::server
