// Streaming a Job's outputs as OpenAI server-sent events (stream=true): the chunk objects, their
// SSE framing, the heartbeat, and what happens when the client goes away or the server stops.
//
// stream_response() sets a 200 text/event-stream answer (chunked; Cache-Control: no-cache,
// X-Accel-Buffering: no) whose producer (HttpResponse::stream, run by the transport on the
// worker thread) writes, in order, each event framed as "data: {chunk}\n\n" (sse_event,
// openai_response.h):
//   - the opening chunks: chat, a delta {"role": "assistant", "content": ""} per choice;
//     completions with echo, each choice's prompt text (later text_offsets start after it);
//   - one chunk per engine output of a choice that carries text, logprobs (when asked) or its
//     end: chat a delta, completions the text; finish_reason set on the choice's last; a choice
//     that failed is followed by an error object event (500 "generation failed: ..."); a choice
//     aborted because the server is stopping by an error event (503 server_shutting_down)
//     instead of a finish reason;
//   - with include_usage ("usage": null in every chunk before) a last chunk with empty choices
//     and the usage;
//   - "data: [DONE]\n\n" (kSseDone).
// After heartbeat_s without output an SSE comment (": keep-alive") is written. A write that fails
// (the client went away, did not read within the write timeout, or the server closed the
// connection) ends the stream and aborts the Generation, freeing its KV blocks.
#pragma once

#include <memory>

#include "kvasir/server/generation.h"
#include "kvasir/server/http_types.h"
#include "kvasir/server/job.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

void stream_response(RouteContext& ctx, HttpResponse& res, std::shared_ptr<const Job> job,
                     std::shared_ptr<Generation> gen);

}  // namespace kvasir::server
