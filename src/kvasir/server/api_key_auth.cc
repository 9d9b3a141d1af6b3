#include "kvasir/server/api_key_auth.h"

#include "kvasir/server/api_error.h"

namespace kvasir::server {

std::string authorize(const ApiKeys& keys, const httplib::Request& req) {
  if (!keys.enabled()) return "none";
  if (!req.has_header("Authorization"))
    throw ApiError(401,
                   "You didn't provide an API key. Pass it in the Authorization header as "
                   "'Authorization: Bearer KEY'.",
                   {}, "invalid_api_key", "invalid_request_error");
  auto label = keys.check(req.get_header_value("Authorization"));
  if (!label)
    throw ApiError(401, "Incorrect API key provided.", {}, "invalid_api_key",
                   "invalid_request_error");
  return *label;
}

}  // namespace kvasir::server
