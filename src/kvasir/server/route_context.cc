#include "kvasir/server/route_context.h"

#include <fmt/format.h>

#include <set>

#include "kvasir/util/error.h"

namespace kvasir::server {

ModelSlot::ModelSlot(const ServedModel& m)
    : name(m.name),
      engine(*m.engine),
      tok(*m.tokenizer),
      prices(m.prices),
      info(m.info),
      embedding_pooling(m.embedding_pooling) {
  if (!m.chat_template.empty()) {
    const std::string bos = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id(), true) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id(), true) : "";
    prompter.emplace(m.chat_template, bos, eos);
    tool_family = detect_tool_family(m.chat_template);
    // A template that never mentions tools cannot show them to the model (DeepSeek-R1's renders
    // earlier calls but not the tool list): no calls can be asked of it.
    if (m.chat_template.find("tools") == std::string::npos) tool_family = ToolFamily::kNone;
  }
  if (!m.tool_call_parser.empty()) {
    auto f = tool_family_from_name(m.tool_call_parser);
    if (!f)
      fail(
          "--tool-call-parser: unknown family '{}' (expected hermes, llama3, mistral, "
          "mistral-v11, granite, deepseek or none)",
          m.tool_call_parser);
    tool_family = *f;
  }
}

RouteContext::RouteContext(std::vector<ServedModel> served, ServerConfig c)
    : routes(std::move(c.routes)), cfg(std::move(c)) {
  if (served.empty()) fail("server: no model to serve");
  std::set<std::string> names;
  for (const ServedModel& m : served) {
    if (!m.engine || !m.tokenizer) fail("server: model '{}' has no engine or tokenizer", m.name);
    if (m.name.empty()) fail("server: a served model needs a name");
    if (!names.insert(m.name).second) fail("server: two models are named '{}'", m.name);
    models.push_back(std::make_unique<ModelSlot>(m));
  }
  for (const RoutePolicy& r : routes) {
    if (r.name.empty()) fail("route: a route needs a name");
    if (!names.insert(r.name).second)
      fail("route '{}': the name is already a model's or another route's", r.name);
    for (const auto& [role, name] : {std::pair{"small", &r.small}, {"large", &r.large}})
      if (!find_model(*name))
        fail("route '{}': {} model '{}' is not served (served: {})", r.name, role, *name,
             served_names());
    if (r.small == r.large) fail("route '{}': small and large are the same model", r.name);
    for (const auto& [key, choice] : r.keys)
      if (choice != "small" && choice != "large" && choice != "auto")
        fail("route '{}': key '{}' maps to '{}'; expected small, large or auto", r.name, key,
             choice);
  }
  metrics.set_build_info(models.front()->info.backend);
}

ModelSlot* RouteContext::find_model(const std::string& name) {
  for (auto& m : models)
    if (m->name == name) return m.get();
  return nullptr;
}

std::string RouteContext::served_names() const {
  std::string out;
  const size_t n = models.size() + routes.size();
  size_t i = 0;
  auto add = [&](const std::string& s) {
    if (i > 0) out += i + 1 == n ? " and " : ", ";
    out += s;
    ++i;
  };
  for (const auto& m : models) add(fmt::format("'{}'", m->name));
  for (const auto& r : routes) add(fmt::format("route '{}'", r.name));
  return out;
}

ModelTarget RouteContext::target(const std::optional<std::string>& name) {
  if (!name) {
    if (!routes.empty()) return {find_model(routes.front().small), &routes.front()};
    return {models.front().get(), nullptr};
  }
  if (ModelSlot* m = find_model(*name)) return {m, nullptr};
  for (const RoutePolicy& r : routes)
    if (r.name == *name) return {find_model(r.small), &r};
  throw ApiError(
      404,
      fmt::format("The model '{}' does not exist; this server serves {}.", *name, served_names()),
      "model", "model_not_found");
}

ModelSlot& RouteContext::model(const std::optional<std::string>& name) {
  if (!name) return *models.front();
  if (ModelSlot* m = find_model(*name)) return *m;
  throw ApiError(404,
                 fmt::format("The model '{}' does not exist here; this endpoint takes a served "
                             "model: {}.",
                             *name, served_names()),
                 "model", "model_not_found");
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
  std::vector<ServingMetrics::EngineView> views;
  views.reserve(models.size());
  for (const auto& m : models) {
    ServingMetrics::EngineView v;
    v.model = m->name;
    v.stats = m->engine.stats();
    v.kv_warn_ratio = m->engine.config().kv_warn_ratio;
    v.quantization = m->info.weight_type;
    v.kv_dtype = m->info.kv_type;
    v.sha256 = m->info.sha256 ? m->info.sha256() : "";
    views.push_back(std::move(v));
  }
  return metrics.expose(views);
}

}  // namespace kvasir::server
