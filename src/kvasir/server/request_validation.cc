#include "kvasir/server/request_validation.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvasir/server/api_error.h"

namespace kvasir::server {

std::string param_of(const std::string& message) {
  size_t end = message.find_first_of(":[ ");
  return end == std::string::npos ? std::string() : message.substr(0, end);
}

void check_sampling(const ModelSlot& m, const SamplingParams& sp) {
  if (auto err = sp.validate(m.tok.n_vocab())) throw ApiError::bad_request(*err, param_of(*err));
}

void check_prompt(const ModelSlot& m, const std::vector<int32_t>& ids, const SamplingParams& sp,
                  const char* field) {
  const Tokenizer& tok = m.tok;
  const int ctx_len = m.engine.max_model_len();
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0) throw ApiError::bad_request(fmt::format("'{}' is empty (no tokens)", field), field);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= tok.n_vocab())
      throw ApiError::bad_request(fmt::format("'{}': token id {} at position {} is outside the "
                                              "vocabulary [0, {})",
                                              field, ids[i], i, tok.n_vocab()),
                                  field);
  if (n >= ctx_len)
    throw ApiError::bad_request(
        fmt::format("This model's maximum context length is {} tokens, but the {} has {} "
                    "tokens, which leaves no room to generate. Please shorten the {}.",
                    ctx_len, field, n, field),
        field, "context_length_exceeded");
  if (sp.max_tokens > 0 && n + sp.max_tokens > ctx_len)
    throw ApiError::bad_request(
        fmt::format("This model's maximum context length is {} tokens. However, you requested "
                    "{} tokens ({} in the {}, {} for the completion). Please reduce the length "
                    "of the {} or max_tokens.",
                    ctx_len, n + sp.max_tokens, n, field, sp.max_tokens, field),
        "max_tokens", "context_length_exceeded");
}

void check_text_size(const ModelSlot& m, int context, std::string_view text, const char* field) {
  const size_t per_token = std::max<size_t>(m.tok.vocab().max_token_len, 4);
  const size_t ctx_len = static_cast<size_t>(context);
  const size_t min_tokens = (text.size() + per_token - 1) / per_token;
  if (min_tokens >= ctx_len)
    throw ApiError::bad_request(
        fmt::format("This model's maximum context length is {} tokens, but the {} is {} bytes: "
                    "at least {} tokens. Please shorten the {}.",
                    ctx_len, field, text.size(), min_tokens, field),
        field, "context_length_exceeded");
}

void check_capacity(const RouteContext& ctx, const ModelSlot& m, int n_new) {
  if (ctx.shutting_down)
    throw ApiError(503, "The server is shutting down; retry on another replica.", {},
                   "server_shutting_down");
  if (ctx.cfg.max_queue <= 0) return;
  const EngineStats s = m.engine.stats();
  if (s.waiting + n_new > ctx.cfg.max_queue && s.waiting > 0)
    throw ApiError(429,
                   fmt::format("The server is overloaded: {} requests are waiting (limit {}). "
                               "Retry after {} s.",
                               s.waiting, ctx.cfg.max_queue, ctx.cfg.retry_after_s),
                   {}, "server_overloaded");
}

}  // namespace kvasir::server
