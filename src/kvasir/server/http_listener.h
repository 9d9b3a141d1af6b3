// HttpListener: the server's HTTP/1.1 transport (Boost.Beast over Asio; TLS through OpenSSL),
// built to keep serving whatever the clients do.
//
// Why not cpp-httplib: Debian ships it as a compiled library with its limits fixed at build time
// (no total header deadline, no header count limit, chunked bodies past the payload limit, one
// thread held per connection, SO_REUSEPORT on), so slow or hostile clients could pin it. Here:
//  - Sockets: SO_REUSEADDR only (a restarted server binds at once); SO_REUSEPORT only when asked
//    (a second server on a taken port fails at bind, naming it); TCP_NODELAY on every connection.
//  - Reading is asynchronous on a few I/O threads, so idle and slow connections hold no thread.
//    The whole head must arrive within header_timeout_s (slowloris) and fit max_header_bytes
//    (431 otherwise); the body within body_timeout_s and max_body_bytes, for Content-Length and
//    chunked bodies alike (413, refused as soon as a declared length says so). A kept-alive
//    connection waits idle_timeout_s for its next request. Pipelined requests are answered in
//    order.
//  - The head goes to HttpHandler::screen() before the body is read (auth before upload); a
//    request that passes is read whole and handed to a worker thread (handle()), at most
//    max_pending of them waiting for a worker (503 beyond).
//  - Connections are capped in total and per client address (503 and close beyond).
//  - Writes: whole responses are written asynchronously; a streamed body's chunks are written one
//    at a time, each within write_timeout_s, so a client that stops reading is cut off (its
//    producer sees the failed write) with at most the socket buffers (send_buffer_bytes) queued.
//  - While a request is handled the connection watches the socket: a client that closes or resets
//    it is reported through ClientState::client_gone() (a half-closed client still gets its
//    answer written).
//  - Shutdown: stop_accepting() closes the listening socket and idle connections;
//    close_connections() closes every socket now (writes in progress fail at once).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "kvasir/server/http_types.h"

namespace kvasir::server {

// What the transport allows a client (ServerConfig::transport is passed on as it is).
struct TransportLimits {
  bool reuse_port = false;  // SO_REUSEPORT: several servers share the port (opt-in only)
  size_t max_header_bytes = size_t{64} << 10;
  size_t max_body_bytes = size_t{32} << 20;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double idle_timeout_s = 30;
  double write_timeout_s = 30;
  int max_connections = 4096;
  int max_connections_per_client = 1024;
  int send_buffer_bytes = 0;  // SO_SNDBUF of each connection; 0: the kernel's default
  std::string tls_cert_file;  // both set: HTTPS
  std::string tls_key_file;
};

struct ListenerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int io_threads = 2;
  int worker_threads = 64;  // requests handled at once (a stream holds one for its length)
  int max_pending = 256;    // complete requests waiting for a worker
  TransportLimits limits;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // On an I/O thread, with the head only (body empty): an answer now (the body is then not
  // read and the connection closes after it), or nullopt to read the body and handle(). Must not
  // block.
  virtual std::optional<HttpResponse> screen(const HttpRequest& head) = 0;
  // On a worker thread, with the whole request. Must not throw.
  virtual void handle(const HttpRequest& req, HttpResponse& res, const ClientState& client) = 0;
  // After a response was written (or abandoned): the access log's moment. Duration from the
  // moment the head was read; completed: the whole response went out.
  virtual void on_complete(const HttpRequest& req, const HttpResponse& res, double duration_s,
                           bool completed) = 0;
  // The answer the transport sends on its own (400 malformed, 413, 431, 503 busy, 500).
  virtual HttpResponse transport_error(int status, std::string message) = 0;
};

class HttpListener {
 public:
  // Throws kvasir::Error for unreadable TLS files.
  HttpListener(ListenerOptions options, HttpHandler& handler);
  ~HttpListener();  // stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and listens; returns the port. Throws kvasir::Error naming host:port (e.g. "address
  // already in use").
  int bind();
  // Throws as bind() would when host:port cannot be bound now (taken, no such address); binds
  // nothing. For failing before slow work (loading a model); bind() can still fail afterwards.
  static void check_bindable(const std::string& host, int port, bool reuse_port);
  // Starts the I/O and worker threads; returns at once.
  void start();
  // Stops accepting and closes connections that are not handling a request.
  void stop_accepting();
  // Closes every connection now.
  void close_connections();
  // Everything above, then joins all threads. Idempotent.
  void stop();

  int n_connections() const;
  const ListenerOptions& options() const;

  struct Impl;  // defined in the .cc (its connections use it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvasir::server
