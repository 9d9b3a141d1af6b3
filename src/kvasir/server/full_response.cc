#include "kvasir/server/full_response.h"

#include <string>
#include <vector>

#include "kvasir/server/api_error.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace {

// Per-choice text and tokens gathered for a non-streamed response.
struct ChoiceResult {
  std::string text;
  std::vector<TokenInfo> tokens;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

}  // namespace

void add_log_fields(std::vector<LogField>& fields, const Job& job, const Generation& gen) {
  const Usage u = usage_of(job, gen);
  fields.push_back({"prompt_tokens", u.prompt_tokens});
  fields.push_back({"completion_tokens", u.completion_tokens});
  fields.push_back({"cached_tokens", u.cached_tokens});
  if (gen.n_choices() > 0 && gen.choice(0).first_token_time > 0)
    fields.push_back({"ttft_ms", (gen.choice(0).first_token_time - gen.start()) * 1000.0});
}

void full_response(RouteContext& ctx, const ClientState& client, HttpResponse& res, const Job& job,
                   Generation& gen) {
  std::vector<ChoiceResult> results(static_cast<size_t>(job.n_choices()));
  std::vector<Generation::Event> events;
  bool done = false;
  bool client_gone = false;
  while (!done) {
    events.clear();
    done = gen.wait(events, 0.1);
    if (!done && !client_gone && client.client_gone()) {
      client_gone = true;  // a client that hung up aborts its generation
      gen.abort(job.model->engine);
    }
    for (auto& e : events) {
      ChoiceResult& r = results[static_cast<size_t>(e.choice)];
      r.text += e.output.text;
      r.tokens.insert(r.tokens.end(), e.output.tokens.begin(), e.output.tokens.end());
      if (e.output.finished) {
        r.reason = e.output.finish_reason;
        r.error = e.output.error;
      }
    }
  }
  add_log_fields(res.log_fields, job, gen);
  if (client_gone)  // 499: nginx's "client closed request"; a half-closed client still reads it
    throw ApiError(499, "The client closed the connection; the request was aborted.", {},
                   "client_closed_request");
  for (const ChoiceResult& r : results)
    if (!r.error.empty()) throw ApiError(500, "generation failed: " + r.error);
  if (ctx.shutting_down) {
    for (const ChoiceResult& r : results)
      if (r.reason == FinishReason::kAbort)
        throw ApiError(503, "The server is shutting down; the request was aborted.", {},
                       "server_shutting_down");
  }
  Json body;
  body["id"] = job.id;
  body["object"] = job.chat ? "chat.completion" : "text_completion";
  body["created"] = job.created;
  body["model"] = job.model->name;
  body["choices"] = Json::array();
  for (int c = 0; c < job.n_choices(); ++c) {
    const ChoiceResult& r = results[static_cast<size_t>(c)];
    Json choice;
    choice["index"] = c;
    Json finish = finish_reason_json(r.reason, r.error);
    if (job.chat && job.parse_tool_calls) {
      // The model's tool calls out of its text (tool_calls.h); text that does not form a call
      // stays content.
      ParsedOutput p = parse_tool_calls(job.tool_family, r.text);
      // parallel_tool_calls false: one call (the grammar enforces it when a call is forced; with
      // "auto" the model may still write more, and only the first is the answer).
      if (!job.parallel_tool_calls && p.calls.size() > 1) p.calls.resize(1);
      Json msg{
          {"role", "assistant"},
          {"content", p.calls.empty() || !p.content.empty() ? Json(p.content) : Json(nullptr)}};
      if (!p.calls.empty()) {
        Json calls = Json::array();
        for (const ToolCall& tc : p.calls)
          calls.push_back(Json{{"id", tc.id},
                               {"type", "function"},
                               {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
        msg["tool_calls"] = std::move(calls);
        if (r.reason == FinishReason::kStop) finish = "tool_calls";
      }
      choice["message"] = std::move(msg);
      choice["logprobs"] = job.chat_logprobs
                               ? Json{{"content", chat_logprobs_content(r.tokens, job.model->tok,
                                                                        job.chat_top_logprobs)},
                                      {"refusal", nullptr}}
                               : Json(nullptr);
    } else if (job.chat) {
      choice["message"] = Json{{"role", "assistant"}, {"content", r.text}};
      choice["logprobs"] = job.chat_logprobs
                               ? Json{{"content", chat_logprobs_content(r.tokens, job.model->tok,
                                                                        job.chat_top_logprobs)},
                                      {"refusal", nullptr}}
                               : Json(nullptr);
    } else {
      const std::string echo =
          job.echo.empty() ? std::string() : job.echo[static_cast<size_t>(job.prompt_of(c))];
      choice["text"] = echo + r.text;
      int64_t offset = static_cast<int64_t>(echo.size());
      choice["logprobs"] = job.completion_logprobs >= 0
                               ? completion_logprobs(r.tokens, job.model->tok, offset)
                               : Json(nullptr);
    }
    choice["finish_reason"] = std::move(finish);
    body["choices"].push_back(std::move(choice));
  }
  body["usage"] = usage_json(job, gen);
  ctx.send_json(res, 200, body);
}

}  // namespace kvasir::server
