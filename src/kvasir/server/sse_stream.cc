#include "kvasir/server/sse_stream.h"

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "kvasir/server/api_error.h"
#include "kvasir/server/full_response.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/server/tool_calls.h"
#include "kvasir/util/log.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace {

Json chunk_base(const Job& job) {
  Json j;
  j["id"] = job.id;
  j["object"] = job.chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = job.created;
  j["model"] = job.model->name;
  return j;
}

// Per choice: the tool-call parser of a chat with tools (null otherwise).
using ToolParsers = std::vector<std::unique_ptr<ToolCallStreamParser>>;

// One streamed chunk for an event of choice c (or an empty string when it carries nothing).
std::string event_chunk(const Job& job, const Generation::Event& e, std::vector<int64_t>& offsets,
                        ToolParsers& tools) {
  const RequestOutput& o = e.output;
  std::string out;
  const bool has_lp = job.chat ? job.chat_logprobs : job.completion_logprobs >= 0;
  if (o.text.empty() && !o.finished && !(has_lp && !o.tokens.empty())) return out;
  ToolCallStreamParser* parser = job.chat ? tools[static_cast<size_t>(e.choice)].get() : nullptr;
  StreamEvents ev;
  if (parser) {
    ev = parser->push(o.text);
    if (o.finished) {
      StreamEvents last = parser->finish();
      ev.content += last.content;
      ev.tool_calls.insert(ev.tool_calls.end(), last.tool_calls.begin(), last.tool_calls.end());
    }
    if (!job.parallel_tool_calls)  // one call only, as the whole response (full_response.cc)
      std::erase_if(ev.tool_calls, [](const ToolCallDelta& d) { return d.index > 0; });
    if (ev.content.empty() && ev.tool_calls.empty() && !o.finished &&
        !(has_lp && !o.tokens.empty()))
      return out;
  }
  Json choice;
  choice["index"] = e.choice;
  if (job.chat) {
    Json delta = Json::object();
    const std::string& text = parser ? ev.content : o.text;
    if (!text.empty() || (!o.finished && ev.tool_calls.empty())) delta["content"] = text;
    if (!ev.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCallDelta& d : ev.tool_calls) {
        Json c{{"index", d.index}};
        Json fn = Json::object();
        if (d.id) {
          c["id"] = *d.id;
          c["type"] = "function";
        }
        if (d.name) fn["name"] = *d.name;
        fn["arguments"] = d.arguments;
        c["function"] = std::move(fn);
        calls.push_back(std::move(c));
      }
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
    choice["logprobs"] = has_lp && !o.tokens.empty()
                             ? Json{{"content", chat_logprobs_content(o.tokens, job.model->tok,
                                                                      job.chat_top_logprobs)},
                                    {"refusal", nullptr}}
                             : Json(nullptr);
  } else {
    choice["text"] = o.text;
    choice["logprobs"] = has_lp && !o.tokens.empty()
                             ? completion_logprobs(o.tokens, job.model->tok, offsets[e.choice])
                             : Json(nullptr);
  }
  // Aborted without an error: the server is stopping (a client that left reads nothing). There
  // is no OpenAI finish reason for it: the choice ends with an error event instead.
  const bool stopped = o.finished && o.finish_reason == FinishReason::kAbort && o.error.empty();
  choice["finish_reason"] =
      o.finished && !stopped ? finish_reason_json(o.finish_reason, o.error) : nullptr;
  if (o.finished && !stopped && parser && parser->calls() > 0 &&
      o.finish_reason == FinishReason::kStop)
    choice["finish_reason"] = "tool_calls";
  Json chunk = chunk_base(job);
  chunk["choices"] = Json::array({std::move(choice)});
  if (job.include_usage) chunk["usage"] = nullptr;
  if (!stopped || !o.text.empty() || !ev.content.empty()) out += sse_event(chunk);
  if (!o.error.empty()) {
    ApiError err(500, "generation failed: " + o.error);
    out += sse_event(err.to_json());
  }
  if (stopped) {
    ApiError err(503, "The server is shutting down; the request was aborted.", {},
                 "server_shutting_down");
    out += sse_event(err.to_json());
  }
  return out;
}

// The chunks sent before any output: chat role deltas, completions echo.
std::string opening_chunks(const Job& job, std::vector<int64_t>& offsets) {
  std::string out;
  for (int c = 0; c < job.n_choices(); ++c) {
    Json choice;
    choice["index"] = c;
    if (job.chat) {
      choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
    } else if (job.echo.empty()) {
      continue;
    } else {
      const std::string& text = job.echo[static_cast<size_t>(job.prompt_of(c))];
      choice["text"] = text;
      offsets[static_cast<size_t>(c)] = static_cast<int64_t>(text.size());
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    Json chunk = chunk_base(job);
    chunk["choices"] = Json::array({std::move(choice)});
    if (job.include_usage) chunk["usage"] = nullptr;
    out += sse_event(chunk);
  }
  return out;
}

}  // namespace

void stream_response(RouteContext& ctx, HttpResponse& res, std::shared_ptr<const Job> job,
                     std::shared_ptr<Generation> gen) {
  res.status = 200;
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.stream = [&ctx, job, gen](ResponseStream& out, std::vector<LogField>& log_fields) {
    std::vector<int64_t> offsets(static_cast<size_t>(job->n_choices()), 0);
    ToolParsers tools(static_cast<size_t>(job->n_choices()));
    if (job->parse_tool_calls)
      for (auto& p : tools) p = std::make_unique<ToolCallStreamParser>(job->tool_family);
    std::vector<Generation::Event> events;
    double last_write = now_seconds();
    std::string chunk = opening_chunks(*job, offsets);
    bool done = false;
    try {
      while (!done) {
        events.clear();
        done = gen->wait(events, chunk.empty() ? ctx.cfg.heartbeat_s : 0.0);
        for (const auto& e : events) chunk += event_chunk(*job, e, offsets, tools);
        if (done) {
          if (job->include_usage) {
            Json c = chunk_base(*job);
            c["choices"] = Json::array();
            c["usage"] = usage_json(*job, *gen);
            chunk += sse_event(c);
          }
          chunk += kSseDone;
        }
        const double now = now_seconds();
        if (chunk.empty() && now - last_write >= ctx.cfg.heartbeat_s)
          chunk = ": keep-alive\n\n";  // an SSE comment: notices a client that went away
        if (!chunk.empty()) {
          if (!out.write(chunk)) break;  // client gone, too slow, or the server is closing
          last_write = now;
          chunk.clear();
        }
      }
    } catch (const std::exception& e) {
      log::error("stream of {} failed: {}", job->id, e.what());
      done = false;
    }
    if (!done) gen->abort(job->model->engine);
    if (done) add_log_fields(log_fields, *job, *gen);
  };
}

}  // namespace kvasir::server
