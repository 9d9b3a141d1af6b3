// ApiError: a request the server refuses, with the HTTP status and OpenAI's error object.
//
// Every refusal the server makes is thrown (or built) as an ApiError and answered as
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
// with `status` as the HTTP status. Types follow OpenAI's: "invalid_request_error" (400, 404,
// 405), "authentication_error" (401), "rate_limit_error" (429), "server_error" (500, 503).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kvasir/util/error.h"

namespace kvasir::server {

class ApiError : public kvasir::Error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {},
           std::string type = {});

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }
  // The response body: {"error": {...}}.
  nlohmann::ordered_json to_json() const;

  // 400 invalid_request_error naming `param`.
  static ApiError bad_request(std::string message, std::string param = {}, std::string code = {});

 private:
  int status_;
  std::string param_, code_, type_;
};

// The OpenAI error type for an HTTP status ("invalid_request_error", "server_error", ...).
const char* error_type_for_status(int status);

}  // namespace kvasir::server
