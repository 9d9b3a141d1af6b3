// HttpListener (http_listener.h): Boost.Beast connections on an Asio io_context, one strand per
// connection, complete requests handed to a pool of worker threads.
//
// A connection's life: [TLS handshake] → read head (deadline, size limit) → screen → [100
// Continue] → read body (deadline, size limit) → queue for a worker → the worker handles it and
// writes the answer through the strand (whole: one async write; streamed: head, then each chunk
// under its own write deadline, then the last chunk) → next request (kept alive) or close.
// Everything that touches the socket runs on the connection's strand; a worker only posts to it
// and waits for the completion it asked for. While a request is handled, the strand waits for the
// socket to become readable and peeks: end of stream or an error means the client is gone.
#include "kvasir/server/http_listener.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvasir/server/worker_pool.h"
#include "kvasir/util/error.h"
#include "kvasir/util/timer.h"

namespace kvasir::server {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

bool header_name_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (header_name_equal(k, name)) return std::string_view(v);
  return std::nullopt;
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& [k, v] : headers)
    if (header_name_equal(k, name)) {
      v = std::move(value);
      return;
    }
  headers.emplace_back(std::move(name), std::move(value));
}

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// A client's X-Request-Id is kept when it is 1..128 characters of [A-Za-z0-9._:-]; otherwise
// (or without one) the server makes one.
bool good_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string new_request_id() {
  thread_local std::mt19937_64 rng{
      std::random_device{}() ^
      static_cast<uint64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()))};
  return fmt::format("req-{:016x}", rng());
}

}  // namespace

// ---- connections ----

class ConnBase : public std::enable_shared_from_this<ConnBase>,
                 public ResponseStream,
                 public ClientState {
 public:
  ~ConnBase() override = default;
  virtual void start() = 0;
  // Closes the socket (from any thread).
  virtual void close_now() = 0;
  // True while a request is being read or handled (stop_accepting() spares these).
  bool busy() const { return busy_.load(); }
  bool client_gone() const override { return gone_.load(); }

 protected:
  std::atomic<bool> busy_{false};
  std::atomic<bool> gone_{false};
};

struct HttpListener::Impl {
  ListenerOptions opt;
  HttpHandler& handler;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<ssl::context> tls;
  std::vector<std::thread> io_threads;
  WorkerPool workers;
  std::atomic<bool> accepting{false};
  std::atomic<bool> stopped{false};
  bool started = false;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  mutable std::mutex conns_mu;
  std::unordered_map<ConnBase*, std::weak_ptr<ConnBase>> conns;
  std::unordered_map<std::string, int> per_client;

  Impl(ListenerOptions o, HttpHandler& h)
      : opt(std::move(o)), handler(h), workers(opt.worker_threads) {}

  void do_accept();
  void on_accept(error_code ec, tcp::socket socket);
  void forget(ConnBase* c, const std::string& client) {
    std::lock_guard lk(conns_mu);
    conns.erase(c);
    auto it = per_client.find(client);
    if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
  }
  std::vector<std::shared_ptr<ConnBase>> live() const {
    std::vector<std::shared_ptr<ConnBase>> out;
    std::lock_guard lk(conns_mu);
    for (auto& [p, w] : conns)
      if (auto s = w.lock()) out.push_back(std::move(s));
    return out;
  }
};

namespace {

template <class Stream>
constexpr bool kIsTls = !std::is_same_v<Stream, tcp::socket>;

template <class Stream>
class Conn final : public ConnBase {
 public:
  template <class... A>
  Conn(HttpListener::Impl& L, std::string client, int port, A&&... stream_args)
      : L_(L),
        stream_(std::forward<A>(stream_args)...),
        deadline_(stream_.get_executor()),
        write_timer_(stream_.get_executor()),
        client_(std::move(client)),
        client_port_(port) {}

  ~Conn() override { L_.forget(this, client_); }

  void start() override {
    auto self = shared();
    if constexpr (kIsTls<Stream>) {
      arm(L_.opt.limits.header_timeout_s);
      stream_.async_handshake(ssl::stream_base::server, [self](error_code ec) {
        if (ec) return self->close_socket();
        self->read_head(true);
      });
    } else {
      read_head(true);
    }
  }

  void close_now() override {
    auto self = shared();
    net::post(stream_.get_executor(), [self] { self->close_socket(); });
  }

  // ResponseStream: one chunk, from the worker thread.
  bool write(std::string_view data) override {
    if (gone_) return false;
    if (data.empty()) return true;
    return blocking([this, data](std::function<void(bool)> done) {
      write_with_deadline(http::make_chunk(net::buffer(data.data(), data.size())), std::move(done));
    });
  }

 private:
  std::shared_ptr<Conn> shared() { return std::static_pointer_cast<Conn>(shared_from_this()); }
  auto& socket() { return beast::get_lowest_layer(stream_); }

  // Runs `op` on the strand and waits for it to report; `op` gets the callback to call once.
  template <class Op>
  bool blocking(Op op) {
    auto done = std::make_shared<std::promise<bool>>();
    std::future<bool> f = done->get_future();
    auto self = shared();
    net::post(stream_.get_executor(), [self, op = std::move(op), done]() mutable {
      if (self->closed_) return done->set_value(false);
      op([done](bool ok) { done->set_value(ok); });
    });
    return f.get();
  }

  template <class Buffers>
  void write_with_deadline(Buffers buffers, std::function<void(bool)> done) {
    auto self = shared();
    write_timer_.expires_after(seconds(L_.opt.limits.write_timeout_s));
    write_timer_.async_wait([self](error_code ec) {
      if (!ec) self->close_socket();  // the client did not take the bytes in time
    });
    net::async_write(stream_, std::move(buffers),
                     [self, done = std::move(done)](error_code ec, size_t) {
                       self->write_timer_.cancel();
                       if (ec) self->gone_ = true;
                       done(!ec);
                     });
  }

  void arm(double s) {
    auto self = shared();
    deadline_.expires_after(seconds(s));
    deadline_.async_wait([self](error_code ec) {
      if (!ec) self->close_socket();
    });
  }

  void close_socket() {
    if (closed_) return;
    closed_ = true;
    gone_ = true;
    error_code ec;
    deadline_.cancel();
    write_timer_.cancel();
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
  }

  // ---- reading ----
  void read_head(bool first) {
    busy_ = false;
    if (closed_) return;
    if (!L_.accepting && !first) return close_socket();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(L_.opt.limits.max_header_bytes));
    parser_->body_limit(L_.opt.limits.max_body_bytes);
    arm(first ? L_.opt.limits.header_timeout_s
              : L_.opt.limits.idle_timeout_s + L_.opt.limits.header_timeout_s);
    auto self = shared();
    http::async_read_header(stream_, buf_, *parser_,
                            [self](error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(error_code ec) {
    busy_ = true;
    started_ = now_seconds();
    if (ec) {
      if (ec == http::error::end_of_stream || ec == net::error::eof ||
          ec == net::error::operation_aborted || ec == net::error::connection_reset)
        return close_socket();
      if (ec == http::error::header_limit)
        return reply_and_close(431, fmt::format("The request head is larger than the {} bytes "
                                                "allowed.",
                                                L_.opt.limits.max_header_bytes));
      if (ec == http::error::body_limit) return too_large();
      return reply_and_close(400, fmt::format("Malformed HTTP request: {}.", ec.message()));
    }
    const auto& msg = parser_->get();
    req_ = HttpRequest{};
    req_.method = std::string(msg.method_string());
    req_.target = std::string(msg.target());
    const size_t q = req_.target.find('?');
    req_.path = req_.target.substr(0, q);
    if (q != std::string::npos) req_.query = req_.target.substr(q + 1);
    for (const auto& f : msg)
      req_.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req_.remote_addr = client_;
    req_.remote_port = client_port_;
    req_.tls = kIsTls<Stream>;
    auto rid = req_.header("X-Request-Id");
    req_.request_id = rid && good_request_id(*rid) ? std::string(*rid) : new_request_id();
    keep_alive_ = msg.keep_alive() && L_.accepting;

    std::optional<HttpResponse> early;
    try {
      early = L_.handler.screen(req_);
    } catch (...) {
      early = L_.handler.transport_error(500, "internal error");
    }
    if (early) {
      // The body (if any) is not read: the connection cannot carry another request.
      if (!parser_->is_done()) keep_alive_ = false;
      return write_whole(std::move(*early), /*then_close=*/!keep_alive_);
    }
    if (parser_->is_done()) return on_body({});
    auto self = shared();
    arm(L_.opt.limits.body_timeout_s);
    if (beast::iequals(msg[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     msg.version());
      http::async_write(stream_, *cont, [self, cont](error_code e, size_t) {
        if (e) return self->close_socket();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    auto self = shared();
    http::async_read(stream_, buf_, *parser_, [self](error_code ec, size_t) { self->on_body(ec); });
  }

  void too_large() {
    reply_and_close(413, fmt::format("The request body is larger than the {} bytes allowed.",
                                     L_.opt.limits.max_body_bytes));
  }

  void on_body(error_code ec) {
    if (ec) {
      if (ec == http::error::body_limit) return too_large();
      if (ec == net::error::operation_aborted || ec == net::error::eof ||
          ec == http::error::end_of_stream || ec == net::error::connection_reset)
        return close_socket();
      return reply_and_close(400, fmt::format("Malformed HTTP request body: {}.", ec.message()));
    }
    deadline_.cancel();
    req_.body = std::move(parser_->get().body());
    watch();
    auto self = shared();
    const bool queued = L_.workers.post([self] { self->handle(); },
                                         static_cast<size_t>(std::max(0, L_.opt.max_pending)));
    if (!queued) {
      keep_alive_ = false;
      write_whole(L_.handler.transport_error(503, "The server is busy; retry later."), true);
    }
  }

  // While the request is handled: is the client still there? (Readable with nothing to read is
  // the end of its stream; pipelined bytes stop the watch: they belong to the next request.)
  void watch() {
    auto self = shared();
    watching_ = true;
    socket().async_wait(tcp::socket::wait_read, [self](error_code ec) {
      self->watching_ = false;
      if (ec == net::error::operation_aborted) return;
      if (ec) {
        self->gone_ = true;
        return;
      }
      char c;
      const ssize_t n = ::recv(self->socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) self->gone_ = true;
    });
  }

  void stop_watching() {
    if (!watching_) return;
    error_code ec;
    socket().cancel(ec);  // only the wait is pending now
  }

  // ---- handling (worker thread) ----
  void handle() {
    HttpResponse res;
    try {
      L_.handler.handle(req_, res, *this);
    } catch (...) {
      res = L_.handler.transport_error(500, "internal error");
    }
    if (!res.stream) {
      auto self = shared();
      auto r = std::make_shared<HttpResponse>(std::move(res));
      net::post(stream_.get_executor(),
                [self, r] { self->write_whole(std::move(*r), !self->keep_alive_); });
      return;
    }
    // Streamed: the head, the producer's chunks, the last chunk.
    bool ok = blocking([this, &res](std::function<void(bool)> done) {
      stop_watching();
      stream_head_.emplace(static_cast<http::status>(res.status), 11);
      fill_head(*stream_head_, res);
      stream_head_->chunked(true);
      stream_head_->keep_alive(keep_alive_);
      head_sr_.emplace(*stream_head_);
      auto self = shared();
      http::async_write_header(stream_, *head_sr_, [self, done](error_code ec, size_t) {
        if (ec) self->gone_ = true;
        done(!ec);
      });
    });
    if (ok) {
      try {
        res.stream(*this, res.log_fields);
      } catch (...) {
        ok = false;
      }
    }
    // A producer that stopped because the client left (or was too slow) returns normally.
    if (gone_) ok = false;
    if (ok) {
      ok = blocking([this](std::function<void(bool)> done) {
        write_with_deadline(http::make_chunk_last(), std::move(done));
      });
    }
    const double dur = now_seconds() - started_;
    L_.handler.on_complete(req_, res, dur, ok);
    auto self = shared();
    net::post(stream_.get_executor(), [self, ok] {
      if (!ok || !self->keep_alive_) return self->close_gracefully();
      self->read_head(false);
    });
  }

  // ---- writing ----
  template <class Msg>
  void fill_head(Msg& m, const HttpResponse& r) {
    m.set(http::field::server, "kvasir");
    if (!r.content_type.empty()) m.set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) m.set(k, v);
    m.set("X-Request-Id", req_.request_id);
  }

  void write_whole(HttpResponse r, bool then_close) {
    stop_watching();
    auto msg = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), 11);
    fill_head(*msg, r);
    msg->keep_alive(!then_close);
    const bool head_only = req_.method == "HEAD";
    const size_t n = r.body.size();
    if (!head_only) msg->body() = std::move(r.body);
    msg->content_length(n);
    auto self = shared();
    auto resp = std::make_shared<HttpResponse>(std::move(r));
    write_timer_.expires_after(seconds(L_.opt.limits.write_timeout_s));
    write_timer_.async_wait([self](error_code ec) {
      if (!ec) self->close_socket();
    });
    http::async_write(stream_, *msg, [self, msg, resp, then_close](error_code ec, size_t) {
      self->write_timer_.cancel();
      const double dur = now_seconds() - self->started_;
      self->L_.handler.on_complete(self->req_, *resp, dur, !ec);
      if (ec || then_close) return self->close_gracefully();
      self->read_head(false);
    });
  }

  // An answer from the transport itself (the request was not screened or not read).
  void reply_and_close(int status, std::string message) {
    keep_alive_ = false;
    if (req_.method.empty()) {
      req_.method = "-";
      req_.target = req_.path = "-";
      req_.remote_addr = client_;
      req_.request_id = new_request_id();
    }
    write_whole(L_.handler.transport_error(status, std::move(message)), true);
  }

  // Sends our FIN, then reads and drops what the client still sends for a moment before the
  // close: closing with unread bytes would reset the connection, and the client could lose the
  // answer it has not read yet (a refused upload, say).
  void close_gracefully() {
    if (closed_) return;
    auto self = shared();
    if constexpr (kIsTls<Stream>) {
      arm(2.0);
      stream_.async_shutdown([self](error_code) { self->close_socket(); });
    } else {
      error_code ec;
      socket().shutdown(tcp::socket::shutdown_send, ec);
      arm(kLingerSeconds);
      drained_ = 0;
      drain();
    }
  }

  void drain() {
    auto self = shared();
    socket().async_read_some(net::buffer(scratch_), [self](error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > kLingerBytes) return self->close_socket();
      self->drain();
    });
  }

  static constexpr double kLingerSeconds = 1.0;
  static constexpr size_t kLingerBytes = size_t{4} << 20;

  HttpListener::Impl& L_;
  Stream stream_;
  net::steady_timer deadline_;
  net::steady_timer write_timer_;
  std::string client_;
  int client_port_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest req_;
  bool keep_alive_ = true;
  bool closed_ = false;  // strand only
  bool watching_ = false;
  double started_ = 0;
  char scratch_[16384];
  size_t drained_ = 0;
  std::optional<http::response<http::empty_body>> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> head_sr_;
};

// A canned refusal for a connection over the limits (no request was read).
void refuse_connection(tcp::socket& s) {
  static const char kMsg[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: "
      "close\r\nContent-Length: 96\r\n\r\n"
      "{\"error\":{\"message\":\"Too many connections; retry later.\",\"type\":\"server_error\","
      "\"code\":null}}    ";
  ::send(s.native_handle(), kMsg, sizeof(kMsg) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  error_code ec;
  s.close(ec);
}

}  // namespace

void HttpListener::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc),
                        [this](error_code ec, tcp::socket s) { on_accept(ec, std::move(s)); });
}

void HttpListener::Impl::on_accept(error_code ec, tcp::socket socket) {
  if (ec) {
    if (ec == net::error::operation_aborted || !accepting) return;
    // EMFILE and the like: keep accepting after a short pause rather than spinning.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return do_accept();
  }
  if (!accepting) {
    error_code e;
    socket.close(e);
    return;
  }
  error_code e;
  socket.set_option(tcp::no_delay(true), e);
  if (opt.limits.send_buffer_bytes > 0)
    socket.set_option(net::socket_base::send_buffer_size(opt.limits.send_buffer_bytes), e);
  const auto ep = socket.remote_endpoint(e);
  const std::string client = e ? std::string("?") : ep.address().to_string();
  const int port = e ? 0 : ep.port();
  std::shared_ptr<ConnBase> conn;
  {
    std::lock_guard lk(conns_mu);
    int& n = per_client[client];
    if (static_cast<int>(conns.size()) >= opt.limits.max_connections ||
        n >= opt.limits.max_connections_per_client) {
      if (n == 0) per_client.erase(client);
      refuse_connection(socket);
      return do_accept();
    }
    ++n;
    if (tls) {
      conn = std::make_shared<Conn<ssl::stream<tcp::socket>>>(*this, client, port,
                                                              std::move(socket), *tls);
    } else {
      conn = std::make_shared<Conn<tcp::socket>>(*this, client, port, std::move(socket));
    }
    conns.emplace(conn.get(), conn);
  }
  conn->start();
  do_accept();
}

HttpListener::HttpListener(ListenerOptions options, HttpHandler& handler)
    : impl_(std::make_unique<Impl>(std::move(options), handler)) {
  const ListenerOptions& o = impl_->opt;
  if (o.limits.tls_cert_file.empty() != o.limits.tls_key_file.empty())
    fail("TLS needs both a certificate (--ssl-cert-file) and a key (--ssl-key-file)");
  if (!o.limits.tls_cert_file.empty()) {
    impl_->tls.emplace(ssl::context::tls_server);
    ssl::context& c = *impl_->tls;
    c.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                  ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                  ssl::context::single_dh_use);
    error_code ec;
    c.use_certificate_chain_file(o.limits.tls_cert_file, ec);
    if (ec)
      fail("{}: cannot use it as a TLS certificate chain: {}", o.limits.tls_cert_file,
           ec.message());
    c.use_private_key_file(o.limits.tls_key_file, ssl::context::pem, ec);
    if (ec)
      fail("{}: cannot use it as the TLS private key: {}", o.limits.tls_key_file, ec.message());
  }
}

HttpListener::~HttpListener() {
  stop();
}

namespace {

// Opens `acceptor` and binds it to host:port with the server's socket options; throws naming
// host:port.
void bind_acceptor(net::io_context& ioc, tcp::acceptor& acceptor, const std::string& host, int port,
                   bool reuse_port) {
  error_code ec;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) fail("cannot listen on {}:{}: {}", host, port, ec.message());
  const tcp::endpoint ep = results.begin()->endpoint();
  acceptor.open(ep.protocol(), ec);
  if (ec) fail("cannot listen on {}:{}: {}", host, port, ec.message());
  acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (reuse_port) {
    using reuse_port_option = net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;
    acceptor.set_option(reuse_port_option(true), ec);
  }
  acceptor.bind(ep, ec);
  if (ec) {
    error_code e;
    acceptor.close(e);
    fail("cannot listen on {}:{}: {}", host, port, ec.message());
  }
}

}  // namespace

void HttpListener::check_bindable(const std::string& host, int port, bool reuse_port) {
  net::io_context ioc;
  tcp::acceptor acceptor(ioc);
  bind_acceptor(ioc, acceptor, host, port, reuse_port);
}

int HttpListener::bind() {
  Impl& I = *impl_;
  const ListenerOptions& o = I.opt;
  error_code ec;
  bind_acceptor(I.ioc, I.acceptor, o.host, o.port, o.limits.reuse_port);
  I.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on {}:{}: {}", o.host, o.port, ec.message());
  return I.acceptor.local_endpoint().port();
}

void HttpListener::start() {
  Impl& I = *impl_;
  if (I.started) return;
  I.started = true;
  I.accepting = true;
  I.work.emplace(net::make_work_guard(I.ioc));
  I.do_accept();
  for (int i = 0; i < std::max(1, I.opt.io_threads); ++i)
    I.io_threads.emplace_back([&I] { I.ioc.run(); });
}

void HttpListener::stop_accepting() {
  Impl& I = *impl_;
  if (!I.accepting.exchange(false)) return;
  net::post(I.ioc, [&I] {
    error_code ec;
    I.acceptor.close(ec);
  });
  for (auto& c : I.live())
    if (!c->busy()) c->close_now();
}

void HttpListener::close_connections() {
  for (auto& c : impl_->live()) c->close_now();
}

void HttpListener::stop() {
  Impl& I = *impl_;
  if (I.stopped.exchange(true)) return;
  if (!I.started) return;
  stop_accepting();
  // Responses whose last bytes are being written (a stream's final events and its terminating
  // chunk, queued just before stop) get a bounded moment to reach the socket; a client that does
  // not read holds its connection busy and is cut when the moment ends.
  const auto flush_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  for (;;) {
    bool busy = false;
    for (auto& c : I.live()) busy = busy || c->busy();
    if (!busy || std::chrono::steady_clock::now() >= flush_until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  close_connections();
  // Workers finish what they hold (their writes fail on the closed sockets) while the I/O threads
  // still run the completions they wait for.
  I.workers.stop();
  close_connections();
  I.work.reset();
  I.ioc.stop();
  for (auto& t : I.io_threads)
    if (t.joinable()) t.join();
}

int HttpListener::n_connections() const {
  std::lock_guard lk(impl_->conns_mu);
  return static_cast<int>(impl_->conns.size());
}

const ListenerOptions& HttpListener::options() const {
  return impl_->opt;
}

}  // namespace kvasir::server
