#include "kvasir/server/sse_stream.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "kvasir/server/api_error.h"
#include "kvasir/server/openai_response.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace {

Json chunk_base(const RouteContext& ctx, const Job& job) {
  Json j;
  j["id"] = job.id;
  j["object"] = job.chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = job.created;
  j["model"] = ctx.cfg.model_name;
  return j;
}

// One streamed chunk for an event of choice c (or an empty string when it carries nothing).
std::string event_chunk(const RouteContext& ctx, const Job& job, const Generation::Event& e,
                        std::vector<int64_t>& offsets) {
  const RequestOutput& o = e.output;
  std::string out;
  const bool has_lp = job.chat ? job.chat_logprobs : job.completion_logprobs >= 0;
  if (o.text.empty() && !o.finished && !(has_lp && !o.tokens.empty())) return out;
  Json choice;
  choice["index"] = e.choice;
  if (job.chat) {
    Json delta = Json::object();
    if (!o.text.empty() || !o.finished) delta["content"] = o.text;
    choice["delta"] = std::move(delta);
    choice["logprobs"] =
        has_lp && !o.tokens.empty()
            ? Json{{"content", chat_logprobs_content(o.tokens, ctx.tok, job.chat_top_logprobs)},
                   {"refusal", nullptr}}
            : Json(nullptr);
  } else {
    choice["text"] = o.text;
    choice["logprobs"] = has_lp && !o.tokens.empty()
                             ? completion_logprobs(o.tokens, ctx.tok, offsets[e.choice])
                             : Json(nullptr);
  }
  choice["finish_reason"] = o.finished ? finish_reason_json(o.finish_reason, o.error) : nullptr;
  Json chunk = chunk_base(ctx, job);
  chunk["choices"] = Json::array({std::move(choice)});
  if (job.include_usage) chunk["usage"] = nullptr;
  out += sse_event(chunk);
  if (!o.error.empty()) {
    ApiError err(500, "generation failed: " + o.error);
    out += sse_event(err.to_json());
  }
  return out;
}

// The chunks sent before any output: chat role deltas, completions echo.
std::string opening_chunks(const RouteContext& ctx, const Job& job, std::vector<int64_t>& offsets) {
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
    Json chunk = chunk_base(ctx, job);
    chunk["choices"] = Json::array({std::move(choice)});
    if (job.include_usage) chunk["usage"] = nullptr;
    out += sse_event(chunk);
  }
  return out;
}

}  // namespace

void stream_response(RouteContext& ctx, httplib::Response& res, std::shared_ptr<const Job> job,
                     std::shared_ptr<Generation> gen) {
  struct State {
    bool started = false;
    double last_write = 0;
    std::vector<int64_t> offsets;
  };
  auto st = std::make_shared<State>();
  st->offsets.assign(static_cast<size_t>(job->n_choices()), 0);
  st->last_write = now_seconds();
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, job, gen, st](size_t, httplib::DataSink& sink) -> bool {
        try {
          std::string out;
          if (!st->started) {
            st->started = true;
            out = opening_chunks(ctx, *job, st->offsets);
          }
          std::vector<Generation::Event> events;
          const bool done = gen->wait(events, out.empty() ? ctx.cfg.heartbeat_s : 0.0);
          for (const auto& e : events) out += event_chunk(ctx, *job, e, st->offsets);
          if (done) {
            if (job->include_usage) {
              Json chunk = chunk_base(ctx, *job);
              chunk["choices"] = Json::array();
              chunk["usage"] = usage_of(*job, *gen).to_json(ctx.cfg.prices);
              out += sse_event(chunk);
            }
            out += kSseDone;
          }
          const double now = now_seconds();
          if (out.empty() && now - st->last_write >= ctx.cfg.heartbeat_s)
            out = ": keep-alive\n\n";  // an SSE comment: notices a client that went away
          if (!out.empty()) {
            if (!sink.write(out.data(), out.size())) return false;
            st->last_write = now;
          }
          if (done) sink.done();
          return true;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "kvasir serve: stream failed: %s\n", e.what());
          return false;
        }
      },
      [&ctx, gen](bool success) {
        if (!success) gen->abort(ctx.engine);  // client gone or server stopping
      });
}

}  // namespace kvasir::server
