// The HTTP request and response the server's routes see (internal to server/), independent of
// the transport (http_listener.h).
//
// A request arrives in two steps: its head (method, target, headers, peer, request id) is shown
// to HttpHandler::screen() before any body byte is read, so auth, unknown routes and oversized
// bodies are answered without reading the body; then the whole request goes to handle() on a
// worker thread. A response is either whole (status, headers, body) or streamed: `stream` is then
// called on the worker thread after the status and headers went out, and writes the chunked body
// through a ResponseStream, whose writes block until the socket took the bytes (so what a slow
// client leaves unread is bounded by the socket buffers) and fail once the client is gone or too
// slow, which is the producer's cue to stop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kvasir::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Case-insensitive (ASCII) comparison of header names.
bool header_name_equal(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?'
  std::string query;   // after '?', not decoded
  HttpHeaders headers;
  std::string body;  // empty in screen()
  std::string remote_addr;
  int remote_port = 0;
  std::string request_id;  // the client's X-Request-Id when well-formed, else generated
  bool tls = false;

  // The first header of that name (case-insensitive), or nullopt.
  std::optional<std::string_view> header(std::string_view name) const;
};

// What a streaming producer writes through.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Sends `data` as one chunk of the body. Blocks until the socket took it; false when the
  // client is gone, did not read within the write timeout, or the server is closing: stop.
  virtual bool write(std::string_view data) = 0;
  // True once the client closed or reset its side of the connection.
  virtual bool client_gone() const = 0;
};

// The client's side of a request being handled (handle() polls it while it waits).
class ClientState {
 public:
  virtual ~ClientState() = default;
  virtual bool client_gone() const = 0;
};

struct LogField {
  std::string name;
  std::variant<std::string, int64_t, double> value;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;
  std::string content_type = "application/json";
  std::string body;
  // Set for a streamed (chunked) body; called once, on the worker thread, with this response's
  // log_fields to add to.
  std::function<void(ResponseStream&, std::vector<LogField>&)> stream;
  // For the access log: fields the handler learned (tokens, time to first token, key label).
  std::vector<LogField> log_fields;

  void set_header(std::string name, std::string value);
  void set_content(std::string body_text, std::string type) {
    body = std::move(body_text);
    content_type = std::move(type);
  }
};

}  // namespace kvasir::server
