#include "kvasir/server/completion_routes.h"

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvasir/server/api_error.h"
#include "kvasir/server/full_response.h"
#include "kvasir/server/job.h"
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
  std::shared_ptr<const Job> cjob = job;
  std::shared_ptr<Generation> gen = submit(ctx, cjob, start);
  if (job->stream) {
    stream_response(ctx, res, cjob, gen);
  } else {
    full_response(ctx, client, res, *cjob, *gen);
  }
}

// A job for one request's options, its sampling parameters checked.
std::shared_ptr<Job> new_job(RouteContext& ctx, const char* id_prefix, const std::string& key,
                             const GenerationOptions& o) {
  auto job = std::make_shared<Job>();
  job->id = make_response_id(id_prefix);
  job->key = key;
  job->n = o.n;
  job->sp = o.sampling;
  job->stream = o.stream;
  job->include_usage = o.include_usage;
  job->speculative = o.speculative;
  job->grammar = o.grammar;
  check_sampling(ctx, job->sp);
  return job;
}

}  // namespace

void completions(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                 const ClientState& client, const std::string& key) {
  const Tokenizer& tok = ctx.tok;
  const double start = now_seconds();
  Json body = parse_json_body(req.body);
  CompletionRequest cr = parse_completion_request(body);
  check_model(ctx, cr.options.model);
  auto job = new_job(ctx, "cmpl-", key, cr.options);
  job->completion_logprobs = cr.logprobs;
  for (size_t i = 0; i < cr.prompts.size(); ++i) {
    const PromptInput& p = cr.prompts[i];
    if (!p.is_tokens) check_text_size(ctx, p.text, "prompt");
    std::vector<int32_t> ids =
        p.is_tokens ? p.tokens : tok.encode(p.text, /*add_special=*/true, /*parse_special=*/true);
    check_prompt(ctx, ids, job->sp, "prompt");
    if (cr.echo) job->echo.push_back(p.is_tokens ? tok.decode(ids) : p.text);
    job->prompts.push_back(std::move(ids));
  }
  run_job(ctx, client, res, job, start);
}

void chat_completions(RouteContext& ctx, const HttpRequest& req, HttpResponse& res,
                      const ClientState& client, const std::string& key) {
  const double start = now_seconds();
  Json body = parse_json_body(req.body);
  ChatRequest cr = parse_chat_request(body);
  check_model(ctx, cr.options.model);
  if (!ctx.prompter)
    throw ApiError::bad_request(
        "This model has no chat template (tokenizer.chat_template); start the server with "
        "--chat-template FILE.jinja, or use /v1/completions.",
        {}, "no_chat_template");
  auto job = new_job(ctx, "chatcmpl-", key, cr.options);
  job->chat = true;
  job->chat_logprobs = cr.logprobs;
  job->chat_top_logprobs = cr.top_logprobs;
  if (!cr.tools.is_null() && cr.tool_choice != ToolChoice::kNone) {
    if (ctx.tool_family == ToolFamily::kNone)
      throw ApiError::bad_request(
          "'tools': this model's chat template does not write tool calls in a form this server "
          "parses (Hermes/Qwen <tool_call>, Llama 3.x JSON, Mistral [TOOL_CALLS], Granite, "
          "DeepSeek); start the server with --chat-template for one of them",
          "tools");
    job->tool_family = ctx.tool_family;
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
        job->grammar = tool_call_grammar(ctx.tool_family, cr.tools, only, cr.parallel_tool_calls);
      } catch (const Error& e) {
        throw ApiError::bad_request(e.what(), "tools");
      }
    }
  }
  const std::string prompt = ctx.prompter->render(cr);
  check_text_size(ctx, prompt, "messages");
  // The template writes BOS itself where the model wants it (as vLLM: no special tokens added).
  std::vector<int32_t> ids = ctx.tok.encode(prompt, /*add_special=*/false, /*parse_special=*/true);
  check_prompt(ctx, ids, job->sp, "messages");
  job->prompts.push_back(std::move(ids));
  run_job(ctx, client, res, job, start);
}

}  // namespace kvasir::server
