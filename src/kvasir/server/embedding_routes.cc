#include "kvasir/server/embedding_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "kvasir/server/api_error.h"
#include "kvasir/server/embedding_request.h"
#include "kvasir/server/generation.h"
#include "kvasir/server/openai_request.h"
#include "kvasir/server/request_validation.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace {

// The input's name in messages: "input" for a lone input, "input[i]" in a batch.
std::string input_name(const EmbeddingRequest& er, size_t i) {
  return er.batch ? fmt::format("input[{}]", i) : std::string("input");
}

// Token ids of every input, checked against the vocabulary and the context.
std::vector<std::vector<int32_t>> tokenize_inputs(const ModelSlot& m, const EmbeddingRequest& er) {
  const Tokenizer& tok = m.tok;
  const int64_t ctx_len = m.engine.max_model_len();
  // A text token covers at most the vocabulary's longest token text (at least 4 bytes: one UTF-8
  // character as an unknown token), so a text of B bytes has at least B / that many tokens: a
  // text too long for the context is refused before it is tokenized (check_text_size's bound;
  // here the input may fill the whole context).
  const size_t per_token = std::max<size_t>(tok.vocab().max_token_len, 4);
  std::vector<std::vector<int32_t>> out;
  out.reserve(er.inputs.size());
  for (size_t i = 0; i < er.inputs.size(); ++i) {
    const PromptInput& in = er.inputs[i];
    const std::string name = input_name(er, i);
    auto too_long = [&](int64_t n_tokens, bool at_least) {
      throw ApiError::bad_request(
          fmt::format("This model's maximum context length is {} tokens, but '{}' has {}{} "
                      "tokens. Please shorten it.",
                      ctx_len, name, at_least ? "at least " : "", n_tokens),
          "input", "context_length_exceeded");
    };
    if (!in.is_tokens) {
      const auto min_tokens = static_cast<int64_t>((in.text.size() + per_token - 1) / per_token);
      if (min_tokens > ctx_len) too_long(min_tokens, true);
    }
    std::vector<int32_t> ids =
        in.is_tokens ? in.tokens
                     : tok.encode(in.text, /*add_special=*/true, /*parse_special=*/true);
    if (ids.empty()) throw ApiError::bad_request(fmt::format("'{}' has no tokens", name), "input");
    for (size_t p = 0; p < ids.size(); ++p)
      if (ids[p] < 0 || ids[p] >= tok.n_vocab())
        throw ApiError::bad_request(
            fmt::format("'{}': token id {} at position {} is outside the vocabulary [0, {})", name,
                        ids[p], p, tok.n_vocab()),
            "input");
    if (static_cast<int64_t>(ids.size()) > ctx_len)
      too_long(static_cast<int64_t>(ids.size()), false);
    out.push_back(std::move(ids));
  }
  return out;
}

int64_t total_tokens(const std::vector<std::vector<int32_t>>& inputs) {
  int64_t n = 0;
  for (const auto& ids : inputs) n += static_cast<int64_t>(ids.size());
  return n;
}

// Registers the generation in ctx.live and submits one engine request per input; on a refusal
// aborts what was submitted and throws 400.
std::shared_ptr<Generation> submit_inputs(RouteContext& ctx, ModelSlot& m,
                                          std::vector<std::vector<int32_t>> inputs,
                                          const EmbeddingParams& params, const std::string& key,
                                          double start) {
  const int n = static_cast<int>(inputs.size());
  check_capacity(ctx, m, n);
  Usage usage;
  usage.prompt_tokens = total_tokens(inputs);
  auto on_done = [&ctx, &m, usage, key](Generation& g) {
    ctx.metrics.record(g, usage, usage.cost_usd(m.prices), m.name, key);
    {
      std::lock_guard<std::mutex> lock(ctx.live_mu);
      ctx.live.erase(&g);
    }
    ctx.live_cv.notify_all();
  };
  auto gen = std::make_shared<Generation>(n, start, on_done);
  {
    std::lock_guard<std::mutex> lock(ctx.live_mu);
    ctx.live[gen.get()] = {gen, &m.engine};
  }
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.prompt = std::move(inputs[static_cast<size_t>(i)]);
    r.api_key = key;
    r.embedding = params;
    try {
      const uint64_t id = m.engine.submit(std::move(r), gen->sink(i));
      gen->set_submitted(i, id);
    } catch (const std::exception& e) {
      for (int k = i; k < n; ++k) gen->mark_not_submitted(k, FinishReason::kAbort);
      gen->abort(m.engine);
      const std::string msg = e.what();
      throw ApiError::bad_request(msg, msg.rfind("dimensions", 0) == 0 ? "dimensions" : "input");
    }
  }
  return gen;
}

}  // namespace

std::string base64_floats(const float* v, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const auto u = std::bit_cast<uint32_t>(v[i]);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<uint8_t>(u >> (8 * b));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t left = bytes.size() - i;
    const uint32_t chunk = uint32_t{bytes[i]} << 16 | (left > 1 ? uint32_t{bytes[i + 1]} << 8 : 0) |
                           (left > 2 ? uint32_t{bytes[i + 2]} : 0);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += left > 1 ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += left > 2 ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

void embeddings(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                const ClientState& client, const std::string& key) {
  const double start = now_seconds();
  const Json body = parse_json_body(req.body);
  const EmbeddingRequest er = parse_embedding_request(body);
  ModelSlot& m = ctx.model(er.model);
  if (m.embedding_pooling == Pooling::kNone)
    throw ApiError::bad_request(
        "This server pools with 'none' (one vector per token), which cannot answer "
        "/v1/embeddings; start it with --pooling mean, cls or last.",
        {}, "pooling_none");
  std::vector<std::vector<int32_t>> inputs = tokenize_inputs(m, er);
  const int64_t prompt_tokens = total_tokens(inputs);
  EmbeddingParams params;
  params.pooling = m.embedding_pooling;
  params.normalize = true;
  params.dimensions = er.dimensions;
  const size_t n = inputs.size();
  std::shared_ptr<Generation> gen = submit_inputs(ctx, m, std::move(inputs), params, key, start);

  std::vector<std::vector<float>> vectors(n);
  std::vector<std::string> errors(n);
  std::vector<FinishReason> reasons(n, FinishReason::kNone);
  std::vector<Generation::Event> events;
  bool done = false, client_gone = false;
  while (!done) {
    events.clear();
    done = gen->wait(events, 0.1);
    if (!done && !client_gone && client.client_gone()) {
      client_gone = true;  // a client that hung up aborts its request
      gen->abort(m.engine);
    }
    for (Generation::Event& e : events) {
      if (!e.output.finished) continue;
      const auto c = static_cast<size_t>(e.choice);
      vectors[c] = std::move(e.output.embedding);
      errors[c] = e.output.error;
      reasons[c] = e.output.finish_reason;
    }
  }
  res.log_fields.push_back({"prompt_tokens", prompt_tokens});
  if (client_gone)
    throw ApiError(499, "The client closed the connection; the request was aborted.", {},
                   "client_closed_request");
  for (const std::string& e : errors)
    if (!e.empty()) throw ApiError(500, "embedding failed: " + e);
  for (FinishReason r : reasons) {
    if (r == FinishReason::kStop) continue;
    if (ctx.shutting_down)
      throw ApiError(503, "The server is shutting down; the request was aborted.", {},
                     "server_shutting_down");
    throw ApiError(500, "embedding failed: the request was aborted");
  }

  Json data = Json::array();
  for (size_t i = 0; i < n; ++i) {
    Json item;
    item["object"] = "embedding";
    item["index"] = i;
    if (er.base64) {
      item["embedding"] = base64_floats(vectors[i].data(), vectors[i].size());
    } else {
      Json values = Json::array();
      for (float x : vectors[i]) values.push_back(x);
      item["embedding"] = std::move(values);
    }
    data.push_back(std::move(item));
  }
  Usage u;
  u.prompt_tokens = prompt_tokens;
  Json out;
  out["object"] = "list";
  out["data"] = std::move(data);
  out["model"] = m.name;
  out["usage"] = Json{{"prompt_tokens", prompt_tokens},
                      {"total_tokens", prompt_tokens},
                      {"cost_usd", u.cost_usd(m.prices)}};
  ctx.send_json(res, 200, out);
}

}  // namespace kvasir::server
