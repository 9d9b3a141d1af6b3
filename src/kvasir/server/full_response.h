// The non-streamed answer to a Job (stream=false): one JSON body once every choice finished.
//
// full_response() drains the Generation, gathering each choice's text and tokens. Once it has
// waited 0.2 s it looks up the client's socket (peer_socket.h; short requests never pay for the
// lookup) and aborts the generation if the client hung up; the response is then 499 with no body
// (nginx's "client closed request", seen only in the log). Otherwise it throws ApiError 500 if a
// choice failed, 503 if the server is shutting down and a choice was aborted, and else answers
// 200 with the chat.completion or text_completion object: one choice per Job choice (chat: the
// assistant message; completions: the echo, if any, before the text, with text_offsets after
// it), logprobs in the endpoint's shape when asked, finish_reason, and usage with cost_usd.
#pragma once

#include <httplib.h>

#include "kvasir/server/generation.h"
#include "kvasir/server/job.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

void full_response(RouteContext& ctx, const httplib::Request& req, httplib::Response& res,
                   const Job& job, Generation& gen);

}  // namespace kvasir::server
