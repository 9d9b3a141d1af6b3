// POST /tokenize and POST /detokenize, in llama-server's shapes.
//
//   /tokenize    {"content": string, "add_special": bool = false, "parse_special": bool = true,
//                 "with_pieces": bool = false}
//             -> {"tokens": [id, ...]}, or with_pieces [{"id": id, "piece": string}, ...] (a
//                piece that is not valid UTF-8 on its own is given as an array of its bytes)
//   /detokenize  {"tokens": [id, ...]} -> {"content": string}
// Any other field is refused by name (400), as are wrong types, token ids outside the
// vocabulary and content longer than a context's worth of text (the most a prompt could use:
// check_text_size, request_validation.h).
#pragma once

#include <string>

#include "kvasir/server/http_types.h"
#include "kvasir/server/route_context.h"

namespace kvasir::server {

void tokenize(RouteContext& ctx, const HttpRequest& req, HttpResponse& res, const ClientState&,
              const std::string& key);
void detokenize(RouteContext& ctx, const HttpRequest& req, HttpResponse& res, const ClientState&,
                const std::string& key);

}  // namespace kvasir::server
