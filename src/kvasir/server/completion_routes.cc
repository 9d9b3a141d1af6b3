#include "kvasir/server/completion_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/server/api_error.h"
#include "kvasir/server/full_response.h"
#include "kvasir/server/job.h"
#include "kvasir/server/model_router.h"
#include "kvasir/server/openai_request.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/request_validation.h"
#include "kvasir/server/sse_stream.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace {

void run_job(RouteContext& ctx, const ClientState& client, HttpResponse& res,
             std::shared_ptr<Job> job, double start) {
  job->created = unix_time_now();
  res.set_header("X-Kvasir-Model", job->model->name);
  if (job->route) {
    res.set_header("X-Kvasir-Route", job->route->route + "; reason=" + job->route->reason);
    res.log_fields.push_back({"route", job->route->route});
    res.log_fields.push_back({"routed_to", job->model->name});
    res.log_fields.push_back({"route_reason", job->route->reason});
  }
  std::shared_ptr<const Job> cjob = job;
  std::shared_ptr<Generation> gen = submit(ctx, cjob, start);
  if (job->stream) {
    stream_response(ctx, res, cjob, gen);
  } else {
    full_response(ctx, client, res, *cjob, *gen);
  }
}

// A job for one request's options on model m, with m's sampling defaults for the fields the
// request left unset (the default max_tokens cut to what the context leaves after the longest of
// `prompts`), its sampling parameters checked.
std::shared_ptr<Job> new_job(ModelSlot& m, const char* id_prefix, const std::string& key,
                             GenerationOptions o,
                             const std::vector<std::vector<int32_t>>& prompts) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  apply_sampling_defaults(o, m.info.sampling_defaults,
                          m.engine.max_model_len() - static_cast<int>(longest));
  auto job = std::make_shared<Job>();
  job->model = &m;
  job->id = make_response_id(id_prefix);
  job->key = key;
  job->n = o.n;
  job->sp = o.sampling;
  job->stream = o.stream;
  job->include_usage = o.include_usage;
  job->speculative = o.speculative;
  job->grammar = o.grammar;
  check_sampling(m, job->sp);
  return job;
}

// The model a request runs on: the one it names, or the one its route picks. `prompts_for(m,
// checked)` gives the request's prompts as m's tokens (checked: against m's context too).
template <class PromptsFor>
ModelSlot& choose_model(RouteContext& ctx, const ModelTarget& t, const std::string& key,
                        const GenerationOptions& o, int n_prompts, PromptsFor&& prompts_for,
                        std::vector<std::vector<int32_t>>& prompts,
                        std::optional<RouteDecision>& decision) {
  if (!t.route) {
    prompts = prompts_for(*t.model, true);
    return *t.model;
  }
  ModelSlot& small = *t.model;
  std::vector<std::vector<int32_t>> small_prompts = prompts_for(small, false);
  const int max_tokens = o.sampling.max_tokens > 0 ? o.sampling.max_tokens : 0;
  decision = decide_route(ctx, *t.route, key, small_prompts, n_prompts * o.n, max_tokens);
  ModelSlot& m = *decision->model;
  if (&m == &small) {
    prompts = std::move(small_prompts);
    for (const auto& ids : prompts) check_prompt(m, ids, o.sampling, "prompt");
  } else {
    prompts = prompts_for(m, true);
  }
  return m;
}

// The largest context a request may need to fit: its model's, or the largest of a route's.
int max_context(RouteContext& ctx, const ModelTarget& t) {
  if (!t.route) return t.model->engine.max_model_len();
  return std::max(ctx.find_model(t.route->small)->engine.max_model_len(),
                  ctx.find_model(t.route->large)->engine.max_model_len());
}

}  // namespace

void completions(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                 const ClientState& client, const std::string& key) {
  const double start = now_seconds();
  Json body = parse_json_body(req.body);
  CompletionRequest cr = parse_completion_request(body);
  const ModelTarget t = ctx.target(cr.options.model);
  if (t.route)
    for (const PromptInput& p : cr.prompts)
      if (p.is_tokens)
        throw ApiError::bad_request(
            fmt::format("'prompt': token ids cannot be routed ('{}' chooses between models "
                        "whose tokenizers may differ); send text, or name a model",
                        t.route->name),
            "prompt");
  const int context = max_context(ctx, t);
  auto prompts_for = [&](ModelSlot& m, bool checked) {
    std::vector<std::vector<int32_t>> out;
    for (const PromptInput& p : cr.prompts) {
      if (!p.is_tokens)
        check_text_size(m, checked ? m.engine.max_model_len() : context, p.text, "prompt");
      std::vector<int32_t> ids =
          p.is_tokens ? p.tokens
                      : m.tok.encode(p.text, /*add_special=*/true, /*parse_special=*/true);
      if (checked) check_prompt(m, ids, cr.options.sampling, "prompt");
      out.push_back(std::move(ids));
    }
    return out;
  };
  std::vector<std::vector<int32_t>> prompts;
  std::optional<RouteDecision> decision;
  ModelSlot& m = choose_model(ctx, t, key, cr.options, static_cast<int>(cr.prompts.size()),
                              prompts_for, prompts, decision);
  auto job = new_job(m, "cmpl-", key, cr.options, prompts);
  job->route = std::move(decision);
  if (job->route) job->route_large_prices = ctx.find_model(t.route->large)->prices;
  job->completion_logprobs = cr.logprobs;
  for (size_t i = 0; i < cr.prompts.size(); ++i) {
    const PromptInput& p = cr.prompts[i];
    if (cr.echo) job->echo.push_back(p.is_tokens ? m.tok.decode(prompts[i]) : p.text);
  }
  job->prompts = std::move(prompts);
  run_job(ctx, client, res, job, start);
}

void chat_completions(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                      const ClientState& client, const std::string& key) {
  const double start = now_seconds();
  Json body = parse_json_body(req.body);
  ChatRequest cr = parse_chat_request(body);
  const ModelTarget t = ctx.target(cr.options.model);
  const int context = max_context(ctx, t);
  auto prompts_for = [&](ModelSlot& m, bool checked) {
    if (!m.prompter)
      throw ApiError::bad_request(
          fmt::format("The model '{}' has no chat template (tokenizer.chat_template); start the "
                      "server with --chat-template FILE.jinja, or use /v1/completions.",
                      m.name),
          {}, "no_chat_template");
    const std::string prompt = m.prompter->render(cr);
    check_text_size(m, checked ? m.engine.max_model_len() : context, prompt, "messages");
    // The template writes BOS itself where the model wants it (as vLLM: no special tokens added).
    std::vector<int32_t> ids = m.tok.encode(prompt, /*add_special=*/false, /*parse_special=*/true);
    if (checked) check_prompt(m, ids, cr.options.sampling, "messages");
    return std::vector<std::vector<int32_t>>{std::move(ids)};
  };
  std::vector<std::vector<int32_t>> prompts;
  std::optional<RouteDecision> decision;
  ModelSlot& m = choose_model(ctx, t, key, cr.options, 1, prompts_for, prompts, decision);
  auto job = new_job(m, "chatcmpl-", key, cr.options, prompts);
  job->route = std::move(decision);
  if (job->route) job->route_large_prices = ctx.find_model(t.route->large)->prices;
  job->chat = true;
  job->chat_logprobs = cr.logprobs;
  job->chat_top_logprobs = cr.top_logprobs;
  if (!cr.tools.is_null() && cr.tool_choice != ToolChoice::kNone) {
    if (m.tool_family == ToolFamily::kNone)
      throw ApiError::bad_request(
          "'tools': this model's chat template does not write tool calls in a form this server "
          "parses (Hermes/Qwen <tool_call>, Llama 3.x JSON, Mistral [TOOL_CALLS], Granite, "
          "DeepSeek); start the server with --chat-template for one of them",
          "tools");
    job->tool_family = m.tool_family;
    job->parse_tool_calls = true;
    job->parallel_tool_calls = cr.parallel_tool_calls;
    if (cr.tool_choice == ToolChoice::kRequired || cr.tool_choice == ToolChoice::kFunction) {
      if (!job->grammar.empty())
        throw ApiError::bad_request(
            fmt::format("'tool_choice' \"required\" or a named function cannot be combined with "
                        "'{}'",
                        cr.options.grammar_field),
            "tool_choice");
      std::optional<std::string> only;
      if (cr.tool_choice == ToolChoice::kFunction) only = cr.tool_choice_function;
      try {
        job->grammar = tool_call_grammar(m.tool_family, cr.tools, only, cr.parallel_tool_calls);
      } catch (const Error& e) {
        throw ApiError::bad_request(e.what(), "tools");
      }
    }
  }
  job->prompts = std::move(prompts);
  run_job(ctx, client, res, job, start);
}

}  // namespace kvasir::server
