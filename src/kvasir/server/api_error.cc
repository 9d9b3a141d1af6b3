#include "kvasir/server/api_error.h"

namespace kvasir::server {

const char* error_type_for_status(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

ApiError::ApiError(int status, std::string message, std::string param, std::string code,
                   std::string type)
    : kvasir::Error(std::move(message)),
      status_(status),
      param_(std::move(param)),
      code_(std::move(code)),
      type_(type.empty() ? error_type_for_status(status) : std::move(type)) {}

ApiError ApiError::bad_request(std::string message, std::string param, std::string code) {
  return ApiError(400, std::move(message), std::move(param), std::move(code));
}

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json e;
  e["message"] = what();
  e["type"] = type_;
  e["param"] = param_.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param_);
  e["code"] = code_.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code_);
  nlohmann::ordered_json body;
  body["error"] = std::move(e);
  return body;
}

}  // namespace kvasir::server
