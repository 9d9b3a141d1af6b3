#include "kvasir/server/route_context.h"

#include <fmt/format.h>

#include "kvasir/util/error.h"

namespace kvasir::server {

RouteContext::RouteContext(Engine& e, const Tokenizer& t, ServerConfig c)
    : engine(e), tok(t), cfg(std::move(c)) {
  if (!cfg.chat_template.empty()) {
    const std::string bos = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id(), true) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id(), true) : "";
    prompter.emplace(cfg.chat_template, bos, eos);
    tool_family = detect_tool_family(cfg.chat_template);
    // A template that never mentions tools cannot show them to the model (DeepSeek-R1's renders
    // earlier calls but not the tool list): no calls can be asked of it.
    if (cfg.chat_template.find("tools") == std::string::npos) tool_family = ToolFamily::kNone;
  }
  if (!cfg.tool_call_parser.empty()) {
    auto f = tool_family_from_name(cfg.tool_call_parser);
    if (!f)
      fail(
          "--tool-call-parser: unknown family '{}' (expected hermes, llama3, mistral, "
          "mistral-v11, granite, deepseek or none)",
          cfg.tool_call_parser);
    tool_family = *f;
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
