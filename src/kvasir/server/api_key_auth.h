// The HTTP side of API-key auth (ApiKeys, api_keys.h, holds the keys and compares them).
//
// authorize() is the first thing every /v1 request goes through (routes.cc). With no keys
// configured it returns "none" without looking at the request. Otherwise it returns the label
// of the key in the Authorization header ("key<N>"), or throws ApiError 401 (type
// invalid_request_error, code invalid_api_key) when the header is missing or holds no known key;
// send_error() adds "WWW-Authenticate: Bearer" to the answer. /health and /metrics are not
// authorized.
#pragma once

#include <httplib.h>

#include <string>

#include "kvasir/server/api_keys.h"

namespace kvasir::server {

std::string authorize(const ApiKeys& keys, const httplib::Request& req);

}  // namespace kvasir::server
