// HttpServer's lifecycle: the transport (http_listener.h) configured from ServerConfig, the
// router (routes.h) on the shared RouteContext, binding, and shutdown. What it serves is
// elsewhere: the route table in routes.cc, the generation routes in completion_routes.cc,
// tokenization in tokenize_routes.cc, auth in api_key_auth.cc, validation in
// request_validation.cc, submission in job.cc, the two kinds of answer in sse_stream.cc and
// full_response.cc, shared state in route_context.h.
#include "kvasir/server/http_server.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "kvasir/server/http_listener.h"
#include "kvasir/server/route_context.h"
#include "kvasir/server/routes.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace {

ListenerOptions listener_options(const RouteContext& ctx) {
  const ServerConfig& cfg = ctx.cfg;
  ListenerOptions o;
  int threads = cfg.http_threads;
  if (threads <= 0) {
    threads = std::max(cfg.max_queue, 0) + 16;
    for (const auto& m : ctx.models) threads += m->engine.config().max_seqs;
  }
  o.worker_threads = std::clamp(threads, 4, 4096);
  o.max_pending = std::max(64, 2 * o.worker_threads);
  o.limits = cfg.transport;
  return o;
}

}  // namespace

struct HttpServer::Impl {
  RouteContext ctx;  // declared first: the router and the listener refer to it
  Router router;
  std::unique_ptr<HttpListener> listener;
  std::atomic<bool> stopped{false};

  Impl(std::vector<ServedModel> m, ServerConfig c) : ctx(std::move(m), std::move(c)), router(ctx) {}

  void abort_all() {
    std::vector<RouteContext::Live> gens;
    {
      std::lock_guard<std::mutex> lock(ctx.live_mu);
      for (auto& [p, g] : ctx.live) gens.push_back(g);
    }
    for (auto& g : gens) g.gen->abort(*g.engine);
  }
};

namespace {

ServedModel single_model(Engine& engine, const Tokenizer& tokenizer, const ServerConfig& c) {
  ServedModel m;
  m.name = c.model_name;
  m.engine = &engine;
  m.tokenizer = &tokenizer;
  m.chat_template = c.chat_template;
  m.tool_call_parser = c.tool_call_parser;
  m.prices = c.prices;
  m.info = c.model_info;
  m.embedding_pooling = c.embedding_pooling;
  return m;
}

}  // namespace

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, ServerConfig config) {
  ::signal(SIGPIPE, SIG_IGN);  // writes to closed sockets must fail, not kill the process
  std::vector<ServedModel> models{single_model(engine, tokenizer, config)};
  impl_ = std::make_unique<Impl>(std::move(models), std::move(config));
}

HttpServer::HttpServer(std::vector<ServedModel> models, ServerConfig config) {
  ::signal(SIGPIPE, SIG_IGN);  // writes to closed sockets must fail, not kill the process
  impl_ = std::make_unique<Impl>(std::move(models), std::move(config));
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind(const std::string& host, int port) {
  ListenerOptions o = listener_options(impl_->ctx);
  o.host = host;
  o.port = port;
  impl_->listener = std::make_unique<HttpListener>(std::move(o), impl_->router);
  return impl_->listener->bind();
}

void HttpServer::check_bindable(const std::string& host, int port, bool reuse_port) {
  HttpListener::check_bindable(host, port, reuse_port);
}

void HttpServer::start() {
  if (!impl_->listener) fail("HttpServer::start: bind() first");
  impl_->listener->start();
}

void HttpServer::begin_shutdown() {
  impl_->ctx.shutting_down = true;
}

bool HttpServer::wait_idle(double timeout_s) {
  std::unique_lock<std::mutex> lock(impl_->ctx.live_mu);
  return impl_->ctx.live_cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                     [&] { return impl_->ctx.live.empty(); });
}

void HttpServer::stop(double drain_s) {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  impl_->ctx.shutting_down = true;
  impl_->abort_all();
  // Streams send their final events to clients that read them; then every socket closes.
  const double until = now_seconds() + drain_s;
  while (in_flight() > 0 && now_seconds() < until) {
    impl_->abort_all();  // what a handler may have submitted meanwhile
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (impl_->listener) impl_->listener->stop();
  // The engine delivers the last aborted outputs on its own thread: wait (briefly) for every
  // generation to leave the live set before the context they report to goes away.
  wait_idle(2.0);
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
