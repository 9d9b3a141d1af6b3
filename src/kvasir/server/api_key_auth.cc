#include "kvasir/server/api_key_auth.h"

#include "kvasir/server/api_error.h"

namespace kvasir::server {

std::string authorize(const ApiKeys& keys, const HttpRequest& req) {
  if (!keys.enabled()) return "none";
  const auto header = req.header("Authorization");
  if (!header)
    throw ApiError(401,
                   "You didn't provide an API key. Pass it in the Authorization header as "
                   "'Authorization: Bearer KEY'.",
                   {}, "invalid_api_key", "invalid_request_error");
  auto label = keys.check(*header);
  if (!label)
    throw ApiError(401, "Incorrect API key provided.", {}, "invalid_api_key",
                   "invalid_request_error");
  return *label;
}

}  // namespace kvasir::server
