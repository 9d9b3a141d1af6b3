#include "kvasir/server/openai_response.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

namespace kvasir::server {

std::string make_response_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const Json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

namespace {

std::string piece(const Tokenizer& tok, int32_t id) {
  return tok.token_to_piece(id, true);
}

// JSON numbers cannot be -inf: a logprob of -inf (a banned token) is reported as -9999.0, as
// vLLM does.
double finite_logprob(float lp) {
  return std::isfinite(lp) ? lp : -9999.0;
}

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

Json completion_logprobs(const std::vector<TokenInfo>& tokens, const Tokenizer& tok,
                         int64_t& offset) {
  Json lp;
  lp["tokens"] = Json::array();
  lp["token_logprobs"] = Json::array();
  lp["top_logprobs"] = Json::array();
  lp["text_offset"] = Json::array();
  for (const TokenInfo& t : tokens) {
    const std::string p = piece(tok, t.token);
    lp["tokens"].push_back(p);
    lp["token_logprobs"].push_back(finite_logprob(t.logprob));
    Json top = Json::object();
    for (const auto& [id, l] : t.top_logprobs) {
      const std::string s = piece(tok, id);
      if (!top.contains(s)) top[s] = finite_logprob(l);
    }
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(p.size());
  }
  return lp;
}

void append_completion_logprobs(Json& into, const Json& more) {
  if (into.is_null()) {
    into = more;
    return;
  }
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const Json& v : more[key]) into[key].push_back(v);
}

Json chat_logprobs_content(const std::vector<TokenInfo>& tokens, const Tokenizer& tok, int top_n) {
  Json content = Json::array();
  for (const TokenInfo& t : tokens) {
    const std::string p = piece(tok, t.token);
    Json e;
    e["token"] = p;
    e["logprob"] = finite_logprob(t.logprob);
    e["bytes"] = bytes_of(p);
    Json top = Json::array();
    int k = 0;
    for (const auto& [id, l] : t.top_logprobs) {
      if (k++ >= top_n) break;
      const std::string s = piece(tok, id);
      top.push_back(Json{{"token", s}, {"logprob", finite_logprob(l)}, {"bytes", bytes_of(s)}});
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return content;
}

Json finish_reason_json(FinishReason r, const std::string& error) {
  if (!error.empty()) return "error";
  if (r == FinishReason::kNone) return nullptr;
  return finish_reason_name(r);
}

}  // namespace kvasir::server
