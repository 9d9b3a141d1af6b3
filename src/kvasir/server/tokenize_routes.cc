#include "kvasir/server/tokenize_routes.h"

#include <fmt/format.h>

#include "kvasir/server/api_error.h"
#include "kvasir/server/openai_request.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/request_validation.h"
#include "kvasir/server/utf8.h"

namespace kvasir::server {

namespace {

void only_fields(const Json& body, std::initializer_list<const char*> known) {
  for (const auto& [k, v] : body.items()) {
    bool ok = false;
    for (const char* f : known) ok = ok || k == f;
    if (!ok) throw ApiError::bad_request(fmt::format("unsupported field '{}'", k), k);
  }
}

bool flag(const Json& body, const char* key, bool dflt) {
  auto it = body.find(key);
  if (it == body.end()) return dflt;
  if (!it->is_boolean())
    throw ApiError::bad_request(
        fmt::format("'{}' must be a boolean, got {}", key, json_type_name(*it)), key);
  return it->get<bool>();
}

// The optional "model": which served model's tokenizer.
std::optional<std::string> model_field(const Json& body) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    throw ApiError::bad_request(
        fmt::format("'model' must be a string, got {}", json_type_name(*it)), "model");
  return it->get<std::string>();
}

}  // namespace

void tokenize(RouteContext& ctx, const HttpRequest& req, HttpResponse& res, const ClientState&,
              const std::string&) {
  const Json body = parse_json_body(req.body);
  only_fields(body, {"model", "content", "add_special", "parse_special", "with_pieces"});
  const ModelSlot& m = ctx.model(model_field(body));
  auto it = body.find("content");
  if (it == body.end() || !it->is_string())
    throw ApiError::bad_request("'content' is required and must be a string", "content");
  const std::string& content = it->get_ref<const std::string&>();
  check_text_size(m, m.engine.max_model_len(), content, "content");
  const bool add_special = flag(body, "add_special", false);
  const bool parse_special = flag(body, "parse_special", true);
  const bool with_pieces = flag(body, "with_pieces", false);
  const auto ids = m.tok.encode(content, add_special, parse_special);
  Json tokens = Json::array();
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = m.tok.token_to_piece(id, /*render_special=*/true);
    Json p;
    if (!find_invalid_utf8(piece)) {
      p = piece;
    } else {
      p = Json::array();
      for (unsigned char c : piece) p.push_back(static_cast<int>(c));
    }
    tokens.push_back(Json{{"id", id}, {"piece", std::move(p)}});
  }
  ctx.send_json(res, 200, Json{{"tokens", std::move(tokens)}});
}

void detokenize(RouteContext& ctx, const HttpRequest& req, HttpResponse& res, const ClientState&,
                const std::string&) {
  const Json body = parse_json_body(req.body);
  only_fields(body, {"model", "tokens"});
  const ModelSlot& m = ctx.model(model_field(body));
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    throw ApiError::bad_request("'tokens' is required and must be an array of token ids", "tokens");
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m.tok.n_vocab())
      throw ApiError::bad_request(
          fmt::format("'tokens[{}]' must be a token id in [0, {})", i, m.tok.n_vocab()), "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  // As llama-server: special tokens rendered, SentencePiece's leading space kept.
  const std::string text = m.tok.decode(ids, /*remove_special=*/false, /*render_special=*/true);
  ctx.send_json(res, 200, Json{{"content", text}});  // dump_json replaces invalid UTF-8
}

}  // namespace kvasir::server
