// The non-streamed answer to a Job (stream=false): one JSON body once every choice finished.
//
// full_response() drains the Generation, gathering each choice's text and tokens, and aborts it
// if the client closed its connection meanwhile (ClientState); the answer is then 499
// client_closed_request (nginx's "client closed request": a half-closed client can still read
// it, anyone else is only in the log). Otherwise it throws ApiError 500 if a
// choice failed, 503 if the server is shutting down and a choice was aborted, and else answers
// 200 with the chat.completion or text_completion object: one choice per Job choice (chat: the
// assistant message; completions: the echo, if any, before the text, with text_offsets after
// it), logprobs in the endpoint's shape when asked, finish_reason, and usage with cost_usd.
#pragma once

#include <vector>

#include "kvasir/server/generation.h"
#include "kvasir/server/http_types.h"
#include "kvasir/server/job.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

void full_response(RouteContext& ctx, const ClientState& client, HttpResponse& res, const Job& job,
                   Generation& gen);

// The access log's fields for a finished generation (tokens, time to first token).
void add_log_fields(std::vector<LogField>& fields, const Job& job, const Generation& gen);

}  // namespace kvasir::server
