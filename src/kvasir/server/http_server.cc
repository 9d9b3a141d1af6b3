// HttpServer's lifecycle: the httplib::Server's settings (socket options, limits, timeouts, the
// worker threads, the per-response logger), binding and listening, and shutdown. What it serves
// is elsewhere: the route table in routes.cc, the generation routes in completion_routes.cc,
// auth in api_key_auth.cc, validation in request_validation.cc, submission in job.cc, the two
// kinds of answer in sse_stream.cc and full_response.cc, shared state in route_context.h.
#include "kvasir/server/http_server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "kvasir/server/route_context.h"
#include "kvasir/server/routes.h"
#include "kvasir/util/error.h"

namespace kvasir::server {

struct HttpServer::Impl {
  RouteContext ctx;  // declared first: the handlers on svr refer to it
  httplib::Server svr;
  std::thread thread;
  std::atomic<bool> stopped{false};
  std::atomic<bool> listen_returned{false};
  std::atomic<int> listen_fd{-1};

  Impl(Engine& e, const Tokenizer& t, ServerConfig c) : ctx(e, t, std::move(c)) {
    install_routes(svr, ctx);
    configure();
  }

  void configure() {
    const ServerConfig& cfg = ctx.cfg;
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      ctx.metrics.record_http(res.status);
      if (ctx.cfg.log_requests)
        std::fprintf(stderr, "kvasir serve: %s %s %s -> %d\n", req.remote_addr.c_str(),
                     req.method.c_str(), req.path.c_str(), res.status);
    });
    // cpp-httplib 0.11.4 listens with a backlog of 5: remember the socket so bind() can raise it
    // (64 clients connecting at once would otherwise overflow the accept queue).
    svr.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = static_cast<int>(sock);
    });
    svr.set_payload_max_length(cfg.max_body_bytes);
    svr.set_keep_alive_max_count(1000);
    svr.set_read_timeout(30);
    svr.set_write_timeout(30);
    int threads = cfg.http_threads;
    if (threads <= 0) threads = ctx.engine.config().max_seqs + std::max(cfg.max_queue, 0) + 16;
    threads = std::clamp(threads, 4, 4096);
    svr.new_task_queue = [threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };
  }

  void abort_all() {
    std::vector<std::shared_ptr<Generation>> gens;
    {
      std::lock_guard<std::mutex> lock(ctx.live_mu);
      for (auto& [p, g] : ctx.live) gens.push_back(g);
    }
    for (auto& g : gens) g->abort(ctx.engine);
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, ServerConfig config) {
  ::signal(SIGPIPE, SIG_IGN);
  impl_ = std::make_unique<Impl>(engine, tokenizer, std::move(config));
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind(const std::string& host, int port) {
  if (port == 0) {
    port = impl_->svr.bind_to_any_port(host);
    if (port <= 0) fail("cannot listen on {} (any port)", host);
  } else if (!impl_->svr.bind_to_port(host, port)) {
    fail("cannot listen on {}:{}", host, port);
  }
  // Listening again on a listening socket only changes its backlog.
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, SOMAXCONN);
  return port;
}

void HttpServer::start() {
  impl_->thread = std::thread([this] { run(); });
  while (!impl_->svr.is_running() && !impl_->listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::run() {
  impl_->svr.listen_after_bind();
  impl_->listen_returned = true;
}

void HttpServer::begin_shutdown() {
  impl_->ctx.shutting_down = true;
}

bool HttpServer::wait_idle(double timeout_s) {
  std::unique_lock<std::mutex> lock(impl_->ctx.live_mu);
  return impl_->ctx.live_cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                     [&] { return impl_->ctx.live.empty(); });
}

void HttpServer::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  impl_->ctx.shutting_down = true;
  impl_->abort_all();
  if (impl_->svr.is_running()) {
    impl_->svr.stop();
    // The listener joins its workers before it returns; keep aborting what a handler may still
    // have submitted meanwhile so none of them waits for a long generation.
    while (!impl_->listen_returned) {
      impl_->abort_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

int HttpServer::in_flight() const {
  std::lock_guard<std::mutex> lock(impl_->ctx.live_mu);
  return static_cast<int>(impl_->ctx.live.size());
}

const ServerConfig& HttpServer::config() const {
  return impl_->ctx.cfg;
}
ServingMetrics& HttpServer::metrics() {
  return impl_->ctx.metrics;
}
std::string HttpServer::metrics_text() {
  return impl_->ctx.expose();
}

}  // namespace kvasir::server
