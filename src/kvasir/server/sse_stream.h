// Streaming a Job's outputs as OpenAI server-sent events (stream=true): the chunk objects, their
// SSE framing, the heartbeat, and what happens when the client goes away.
//
// stream_response() answers 200 text/event-stream (chunked; Cache-Control: no-cache,
// X-Accel-Buffering: no) and returns; httplib then pulls the stream from the content provider.
// In order, each event framed as "data: {chunk}\n\n" (sse_event, openai_response.h):
//   - the opening chunks: chat, a delta {"role": "assistant", "content": ""} per choice;
//     completions with echo, each choice's prompt text (later text_offsets start after it);
//   - one chunk per engine output of a choice that carries text, logprobs (when asked) or its
//     end: chat a delta, completions the text; finish_reason set on the choice's last; a choice
//     that failed is followed by an error object event (500 "generation failed: ...");
//   - with include_usage ("usage": null in every chunk before) a last chunk with empty choices
//     and the usage;
//   - "data: [DONE]\n\n" (kSseDone).
// After heartbeat_s without output an SSE comment (": keep-alive") is written, so a client that
// went away is noticed at the next write either way; the stream then ends and the Generation is
// aborted (freeing its KV blocks), as it is when the server stops.
#pragma once

#include <httplib.h>

#include <memory>

#include "kvasir/server/generation.h"
#include "kvasir/server/job.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

void stream_response(RouteContext& ctx, httplib::Response& res, std::shared_ptr<const Job> job,
                     std::shared_ptr<Generation> gen);

}  // namespace kvasir::server
