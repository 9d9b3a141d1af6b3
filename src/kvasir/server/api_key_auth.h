// The HTTP side of API-key auth (ApiKeys, api_keys.h, holds the keys and compares them).
//
// authorize() is the first thing every protected request goes through (routes.cc: the /v1 routes,
// /tokenize and /detokenize, and /metrics when metrics_require_key), on the request's head,
// before its body is read. With no keys
// configured it returns "none" without looking at the request. Otherwise it returns the label
// of the key in the Authorization header ("key<N>"), or throws ApiError 401 (type
// invalid_request_error, code invalid_api_key) when the header is missing or holds no known key;
// send_error() adds "WWW-Authenticate: Bearer" to the answer. /health is never authorized.
#pragma once

#include <string>

#include "kvasir/server/api_keys.h"
#include "kvasir/server/http_types.h"

namespace kvasir::server {

std::string authorize(const ApiKeys& keys, const HttpRequest& req);

}  // namespace kvasir::server
